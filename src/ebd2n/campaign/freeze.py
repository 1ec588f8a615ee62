"""Freeze a campaign: a snapshot of the trainer's source and the base recipes, written once.

Every run of a campaign, including runs added later by extending the grid, trains with the frozen
copy (`PYTHONPATH=results/<campaign>/frozen/src python -m ebd2n train ...`) from a frozen base
recipe, so editing the package or a preset after the campaign started changes none of its runs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ebd2n.atomic import atomic_write_text, serialized
from ebd2n.campaign.file import Campaign
from ebd2n.config import save_recipe
from ebd2n.errors import UserError
from ebd2n.provenance import PACKAGE_DIR, source_hash, timestamp


def freeze_trainer(campaign: Campaign) -> str:
    """Copy the package to frozen/src/ebd2n, record the campaign's fixed settings; return the source
    hash. A campaign freezes its trainer once: frozen already, it is left as it is (a freeze job
    run again after a crash changes nothing). Two freeze jobs at once (two controllers of one
    campaign) take turns: the second finds the first's freeze and returns its hash."""
    paths = campaign.paths
    paths.frozen.mkdir(parents=True, exist_ok=True)
    with serialized(paths.frozen):
        return _freeze_trainer(campaign)


def _freeze_trainer(campaign: Campaign) -> str:
    paths = campaign.paths
    marker = paths.source_hash
    if marker.exists():
        recorded = marker.read_text().strip()
        if source_hash(paths.frozen_package) != recorded:
            raise UserError(
                f"{paths.frozen_package}: its source hash is not the recorded {recorded} (edited after the freeze)"
            )
        return recorded
    target = paths.frozen_package
    staging = target.with_name(".ebd2n.partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(PACKAGE_DIR, staging, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    os.replace(staging, target)
    digest = source_hash(target)
    record = {
        "campaign": campaign.name,
        "created": timestamp(),
        "source_hash": digest,
        "copied_from": str(PACKAGE_DIR),
        "settings": campaign.settings(),
        "horizons": list(campaign.grid.horizons or ()),  # started with: only longer ones may be added
    }
    atomic_write_text(paths.freeze_record, json.dumps(record, indent=2) + "\n")
    atomic_write_text(marker, digest + "\n")  # last: its presence means the freeze is complete
    return digest


def freeze_base(campaign: Campaign, base: str) -> Path:
    """Write one base recipe (preset or file + data + overrides + policy) to frozen/recipes/<base>.yaml."""
    if base not in campaign.grid.bases:
        raise UserError(
            f"--base {base}: not a base recipe of campaign {campaign.name} ({', '.join(campaign.grid.bases)})"
        )
    path = campaign.paths.base_recipe(base)
    if not path.exists():  # written once, atomically: a freeze job run again leaves it as it is
        save_recipe(campaign.base_recipe(base), path)
    return path
