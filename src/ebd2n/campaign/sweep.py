"""Run a campaign with Snakemake, and, until its optimum is bracketed, extend it and run again.

`ebd2n sweep FILE --until-bracketed -- ARGS` is `snakemake --configfile FILE ARGS` in a loop:
after each run, a mode whose winner sits at an end of its LR range gets the next LRs beyond it
(`extend.extend_campaign`); the loop ends when no winner is at an edge, or after `max_extensions`.
A diverged LR above a winner is a tested LR, so that winner is not at the upper edge: the sweep
never extends past a diverged LR (the grid is bracketed by divergence).
Snakemake's arguments pass through untouched (`--profile slurm`, `--cores 8`, ...).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ebd2n.campaign.check import load_campaign
from ebd2n.campaign.extend import edge_proposals, extend_campaign
from ebd2n.errors import RunFailed, UserError


def sweep(campaign_file: Path, snakemake_args: Sequence[str], until_bracketed: bool, max_extensions: int) -> int:
    """Run the campaign (and extend it) as the command line asked, saying each extension and its
    diff on stdout; return the number of extensions made."""
    if any(arg == "--configfile" or arg.startswith("--configfile=") for arg in snakemake_args):
        raise UserError("give the campaign file as CAMPAIGN_FILE, not as --configfile after --")
    if max_extensions < 0:
        raise UserError(f"--max-extensions {max_extensions}: give 0 or more")
    directory = load_campaign(campaign_file).directory
    extensions = 0
    while True:
        _snakemake(campaign_file, snakemake_args)
        if not until_bracketed:
            return extensions
        if extensions == max_extensions and edge_proposals(directory, load_campaign(campaign_file)):
            raise RunFailed(
                f"{campaign_file}: not bracketed after {extensions} extension(s) (--max-extensions "
                f"{max_extensions}); run ebd2n sweep again to go on"
            )
        extension = extend_campaign(directory, campaign_file) if extensions < max_extensions else None
        if extension is None:
            print(f"bracketed: no mode's winner lies at an edge of its LR range ({extensions} extension(s))")
            return extensions
        extensions += 1
        print(extension.diff, end="")
        print(extension.summary())


def _snakemake(campaign_file: Path, args: Sequence[str]) -> None:
    command = [sys.executable, "-m", "snakemake", "--configfile", str(campaign_file), *args]
    status = subprocess.run(command).returncode
    if status:
        raise RunFailed(f"snakemake exited with status {status}: {' '.join(command)}")
