"""What an invocation costs once checkpoints weigh GBs: the audit against one SHA-256 pass.

Builds two campaigns of the same shape in one run (MODES x RUNS learning rates x one seed):
`big` on the 20M preset at its real checkpoint size (weights and both AdamW moments: about 245 MB
per synchronous final.pt, 0.98 GB packed-4, 1.96 GB packed-8), trained two one-step epochs on CPU;
`tiny` on the demo model (about 1.6 MB a run). `--modes synchronous packed-4 packed-8` gives the
reference sweep's mix of checkpoint sizes. Each is
trained, validated, collected, audited and reported as the workflow would, then settled and audited
once more (the hash memory written on this host), and measured REPEATS times, medians reported:

- hash: SHA-256 of every file of the campaign once (the reference any content audit is held to);
- no-op: the audit every invocation runs (rule `all`) with nothing changed; goal: big minus tiny
  at most 10 % of big's hash pass;
- one changed run: one final.pt replaced by a byte-identical copy (new inode), then the audit;
  goal: its extra cost over the no-op about that file's hash;
- --full: every file hashed by content, the report rebuilt; goal: at most 1.3x the hash pass;
- verify: `ebd2n verify` of the signed campaign (every signed file hashed by content).

    PYTHONPATH=src python benchmarks/audit_scale.py [--runs 8] [--modes synchronous ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from audit_speed import build_campaign, hash_every_file

REPEATS = 3
HUB_KEYS = ("dataset", "dataset_config", "revision", "tokenizer", "tokenizer_revision")
"""The 20M preset's corpus and tokenizer on the Hub, cleared: the synthetic corpus trains its own."""
MEASURES = ("hash", "no-op", "changed", "changed-file", "full", "verify")
SHAPES = {
    "big": (
        "20m",
        {
            "training.batch_tokens": 8192,  # 8 sequences: one for each model of packed-8
            "training.micro_batch_size": 8,
            "training.max_tokens": 16384,
            "training.epoch_tokens": 8192,
            "evaluation.subset_blocks": 4,
            "evaluation.batch_size": 4,
            "runtime.compile": False,
            "runtime.amp": False,
            "runtime.device": "cpu",
        },
    ),
    "tiny": ("demo", {"training.max_tokens": 2048, "training.epoch_tokens": 1024, "evaluation.subset_blocks": 8}),
}


def campaign_file(directory: Path, shape: str, runs: int, modes: list[str]) -> Path:
    recipe, overrides = SHAPES[shape]
    hub = dict.fromkeys(HUB_KEYS) if recipe == "20m" else {}
    raw = {
        "campaign": f"scale-{shape}",
        "recipe": recipe,
        "data": {
            "source": "synthetic",
            "cache_dir": f"results/caches/scale-{shape}",
            "synthetic_train_bytes": 300000,
            "synthetic_validation_bytes": 30000,
            **hub,
        },
        "overrides": overrides,
        "grid": {
            "modes": modes,
            "learning_rates": {mode: [round(0.001 * (i + 1), 4) for i in range(runs)] for mode in modes},
            "beta2": [0.95],
        },
        "seeds": [42],
        "epochs_per_slice": 2,
        "resources": {"default": {"gpus": 0, "minutes": 30, "mem_mb": 8000, "cpus": 2}},
    }
    path = directory / f"scale-{shape}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def passing(campaign: Path, **options) -> dict:
    from ebd2n.audit import audit_campaign, violations

    record = audit_campaign(campaign, **options)
    if not record["passed"]:
        sys.exit(f"{campaign.name}: audit failed:\n" + "\n".join(violations(record)))
    return record


def replace_by_copy(path: Path) -> None:
    """The same bytes under a new inode: what a restore or `cp` over the file leaves."""
    copy = path.with_name(f"{path.name}.copy")
    shutil.copyfile(path, copy)
    os.replace(copy, path)


def settle(campaign: Path) -> None:
    """Wait out the hash memory's racy window (a file changed just before it was hashed is not
    remembered), then audit once: the memory holds every file as it is."""
    from ebd2n.fileidentity import RACY_NS

    time.sleep(RACY_NS / 1e9 + 0.1)
    passing(campaign)


def measure(campaign: Path, key: object) -> dict[str, list[float]]:
    from ebd2n.atomic import sha256_file
    from ebd2n.signing.statement import verify_campaign

    changed = sorted(campaign.glob("runs/*/final.pt"))[0]
    found: dict[str, list[float]] = {name: [] for name in MEASURES}
    settle(campaign)
    for _ in range(REPEATS):
        found["hash"].append(hash_every_file(campaign))
        found["no-op"].append(timed(lambda: passing(campaign)))
    for _ in range(REPEATS):
        replace_by_copy(changed)
        found["changed"].append(timed(lambda: passing(campaign)))
        found["changed-file"].append(timed(lambda: sha256_file(changed)))
        settle(campaign)
    for _ in range(REPEATS):
        found["full"].append(timed(lambda: passing(campaign, full=True)))
        found["verify"].append(timed(lambda: verify_campaign(campaign, key)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs per mode (default: %(default)s)")
    parser.add_argument("--modes", nargs="+", default=["synchronous"], help="training modes (default: %(default)s)")
    parser.add_argument("--keep", type=Path, help="build the campaigns here and keep them (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = (args.keep or Path(scratch)).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        os.chdir(directory)  # campaigns live in results/<name> under the working directory
        from ebd2n.audit.sign import sign_audit
        from ebd2n.signing.keys import PRIVATE_KEY, PUBLIC_KEY, load_private, load_public, new_key_pair

        keys = directory / "keys"  # made by the first invocation over a kept directory
        private, public = (keys / PRIVATE_KEY, keys / PUBLIC_KEY) if keys.is_dir() else new_key_pair(keys)
        results = {}
        for shape in SHAPES:
            started = time.perf_counter()
            campaign = directory / "results" / f"scale-{shape}"
            if not (campaign / "report" / "index.html").is_file():  # built by an earlier invocation: measured again
                campaign = build_campaign(directory, campaign_file(directory, shape, args.runs, args.modes))
            sign_audit(campaign, load_private(private), passing(campaign))
            size = sum(p.stat().st_size for p in campaign.rglob("*") if p.is_file())
            runs = len(list((campaign / "runs").iterdir()))
            print(f"{shape}: {runs} runs, {size / 1e9:.2f} GB, ready in {time.perf_counter() - started:.0f} s")
            results[shape] = (size, measure(campaign, load_public(public)))
        report(results)


def report(results: dict[str, tuple[int, dict[str, list[float]]]]) -> None:
    print("| measure | big (20M, real size) | tiny (demo) |")
    print("|---|---|---|")
    medians = {
        shape: {name: statistics.median(times) for name, times in found.items()}
        for shape, (_, found) in results.items()
    }
    for name in MEASURES:
        cells = [
            f"{medians[shape][name]:.2f} s ({', '.join(f'{t:.2f}' for t in found[name])})"
            for shape, (_, found) in results.items()
        ]
        print(f"| {name} | {' | '.join(cells)} |")
    big, tiny = medians["big"], medians["tiny"]
    print(
        f"no-op difference big - tiny: {big['no-op'] - tiny['no-op']:.2f} s = "
        f"{(big['no-op'] - tiny['no-op']) / big['hash']:.1%} of big's hash pass (goal <= 10 %)"
    )
    print(
        f"one changed run: {big['changed'] - big['no-op']:.2f} s over the no-op, hashing its final.pt "
        f"{big['changed-file']:.2f} s ({(big['changed'] - big['no-op']) / big['changed-file']:.2f}x)"
    )
    print(
        f"--full: {big['full'] / big['hash']:.2f}x big's hash pass (goal <= 1.3x); what grows with the bytes, "
        f"big minus tiny: {(big['full'] - tiny['full']) / big['hash']:.2f}x"
    )
    print(f"verify: {big['verify'] / big['hash']:.2f}x big's hash pass")


if __name__ == "__main__":
    main()
