"""Time `ebd2n train` into a finished run (goal: under 1.5 s) against the trainer's own check.

Prepares the demo cache and trains one demo run in a temporary directory, then alternates, REPEATS
times, two commands that both end "done already (nothing trained)": the same `ebd2n train` again
(recognised from the run's records, without importing torch), and the same command with `--resume`
naming its final.pt (which sends it through the trainer: torch imported, final.pt loaded and
checked). Each is a fresh process, as a user or a workflow job starts it. Prints the medians.

    PYTHONPATH=src python benchmarks/noop_train.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 5
GOAL_S = 1.5


def ebd2n(*args: str, cwd: Path) -> tuple[float, str]:
    """Seconds a fresh `ebd2n` process took, and its last line of output."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ebd2n", *args], cwd=cwd, capture_output=True, text=True, check=True, env=os.environ
    )
    return time.perf_counter() - started, done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args()
    source = Path(__file__).resolve().parents[1] / "src"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as scratch:
        here = Path(scratch)
        run = ["train", "--config", "demo", "--set", "runtime.output_dir=runs/whole", "--quiet"]
        ebd2n("prepare", "demo", "--quiet", cwd=here)
        seconds, line = ebd2n(*run, cwd=here)
        print(f"trained the demo run in {seconds:.1f} s: {line}")
        fast, trainer = [], []
        for _ in range(args.repeats):
            for times, extra in ((fast, []), (trainer, ["--resume", "runs/whole/final.pt"])):
                seconds, line = ebd2n(*run, *extra, cwd=here)
                if not line.startswith("done already (nothing trained)"):
                    sys.exit(f"expected a no-op, got: {line}")
                times.append(seconds)
    fast_s, trainer_s = statistics.median(fast), statistics.median(trainer)
    print(f"{'path':<44}{'median s':>10}   runs")
    for name, times, median in (
        ("ebd2n train, finished run (its records)", fast, fast_s),
        ("ebd2n train --resume final.pt (the trainer)", trainer, trainer_s),
    ):
        print(f"{name:<44}{median:>10.2f}   {' / '.join(f'{t:.2f}' for t in times)}")
    verdict = "met" if fast_s < GOAL_S else "NOT met"
    print(f"ratio {fast_s / trainer_s:.2f} of the trainer's check; goal < {GOAL_S} s: {verdict}")


if __name__ == "__main__":
    main()
