"""`python -m ebd2n` runs the command line (the workflow uses it to run the frozen trainer)."""

import sys

from ebd2n.cli import main

sys.exit(main())
