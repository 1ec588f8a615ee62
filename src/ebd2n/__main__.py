"""`python -m ebd2n` runs the command line (the workflow uses it to run the frozen trainer).

With EBD2N_WARM=1 (local workflow runs; never in a SLURM job), `train` and `validate` run on a
warm-start server that has torch imported already (`ebd2n.warm`); otherwise, and whenever none
answers, right here.
"""

import sys

from ebd2n.warm import forwarded

code = forwarded(sys.argv[1:])
if code is None:
    from ebd2n.cli import main

    code = main()
sys.exit(code)
