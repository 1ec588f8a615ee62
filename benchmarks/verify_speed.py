"""Time `ebd2n verify` of a signed 324-run campaign against hashing every file once (goal: <= 1.5x).

Builds the audit benchmark's tree (benchmarks/audit_speed.py: the reference sweep's grid on the
demo model), audits and signs it with a fresh key (kept outside results/), then alternates the two
measures REPEATS times, so both read a warm page cache: SHA-256 of every file of the campaign once,
and a full verification (every statement's signature and link, every signed file re-hashed, the
tree walked for added files). Prints the medians and their ratio.

    PYTHONPATH=src python benchmarks/verify_speed.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from audit_speed import build_campaign, hash_every_file

REPEATS = 5
GOAL_RATIO = 1.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--keep", type=Path, help="build the campaign here and keep it (default: a temporary directory)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = (args.keep or Path(scratch)).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        os.chdir(directory)
        started = time.perf_counter()
        campaign = build_campaign(directory)
        from ebd2n.audit import audit_campaign, violations
        from ebd2n.audit.sign import sign_audit
        from ebd2n.signing.keys import load_private, load_public, new_key_pair
        from ebd2n.signing.statement import verify_campaign

        record = audit_campaign(campaign)
        if not record["passed"]:
            sys.exit("audit failed:\n" + "\n".join(violations(record)))
        private, public = new_key_pair(directory / "keys")
        sign_audit(campaign, load_private(private), record)
        print(
            f"campaign: {len(list((campaign / 'runs').iterdir()))} runs, built, audited and signed in "
            f"{time.perf_counter() - started:.0f} s"
        )
        key = load_public(public)
        hashing, verifying = [], []
        for _ in range(REPEATS):
            hashing.append(hash_every_file(campaign))
            started = time.perf_counter()
            result = verify_campaign(campaign, key)
            verifying.append(time.perf_counter() - started)
            if result.problems:
                sys.exit("verify failed:\n" + "\n".join(result.problems))
        floor, median = statistics.median(hashing), statistics.median(verifying)
        print(f"hash every file: {', '.join(f'{t:.2f}' for t in hashing)} s; median {floor:.2f} s")
        print(
            f"verify ({result.files:,} signed files): {', '.join(f'{t:.2f}' for t in verifying)} s; "
            f"median {median:.2f} s; "
            f"{median / floor:.2f}x the hashing alone (goal <= {GOAL_RATIO}x)"
        )
        if median > GOAL_RATIO * floor:
            sys.exit(f"verify takes {median / floor:.2f}x the hashing, over the {GOAL_RATIO}x goal")


if __name__ == "__main__":
    main()
