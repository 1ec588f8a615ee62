"""`python -m ebd2n` runs the command line, in this process (the warm-start launcher is
`python -m ebd2n.warm`, which the local workflow's training and validation jobs call)."""

import sys

from ebd2n.cli import main

sys.exit(main())
