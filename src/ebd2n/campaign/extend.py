"""Extend a campaign's grid past the edges its winners sit on, so the optimum ends up bracketed.

`extend_campaign` reads the finished runs, asks the selection which modes' winners lie at an end
of their LR range (`winner_notes`: edge and next LRs, on the grid's own geometric step), and
writes the next revision of the campaign file: the same campaign name, so Snakemake reuses every
run and trains only the new LRs. Only the learning-rate lists change; comments and the rest of
the file stay as written. The revision before is kept in `results/<campaign>/extensions/`, and
`extensions/history.json` records what each extension added, when and why (the report shows it).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ebd2n.atomic import atomic_write_text
from ebd2n.campaign.analysis import group_runs, point_name, select, winner_notes
from ebd2n.campaign.check import campaign_from_dict, load_campaign
from ebd2n.campaign.file import Campaign
from ebd2n.campaign.locate import find_campaign_file
from ebd2n.campaign.results import read_results
from ebd2n.errors import UserError
from ebd2n.jsonio import read_json
from ebd2n.layout import CampaignPaths
from ebd2n.provenance import timestamp
from ebd2n.yamlio import compose_yaml, load_yaml, read_text


@dataclass(frozen=True)
class Extension:
    """One extension written: its number, the LRs added per mode, why, and the file's diff."""

    number: int
    added: dict[str, list[float]]
    why: dict[str, str]
    diff: str

    def summary(self) -> str:
        """One line per extended mode: what was added and why."""
        return "\n".join(
            f"extension {self.number}: {mode} + {', '.join(f'{lr:g}' for lr in lrs)} ({self.why[mode]})"
            for mode, lrs in self.added.items()
        )


def extend_campaign(campaign_dir: Path, campaign_file: Path | None = None) -> Extension | None:
    """Write the next revision of the campaign file with LRs beyond each edge winner; None when
    every mode's winner lies inside its grid (bracketed) and nothing needs adding."""
    paths = CampaignPaths(Path(campaign_dir))
    campaign_file = Path(campaign_file) if campaign_file is not None else find_campaign_file(paths.name)
    campaign = load_campaign(campaign_file)
    if campaign.name != paths.name:
        raise UserError(f"{campaign_file}: names campaign {campaign.name}, not {paths.name} ({paths.directory})")
    if campaign.grid.presets or campaign.grid.horizons:
        raise UserError(
            f"{campaign_file}: a scaling campaign (grid.presets or grid.horizons); extend its learning rates by hand"
        )
    proposals = edge_proposals(paths.directory, campaign)
    if not proposals:
        return None
    old = read_text(campaign_file, "campaign file")
    lrs = {mode: sorted({*campaign.grid.learning_rates[mode], *added}) for mode, (added, _) in proposals.items()}
    new = _with_learning_rates(old, lrs, campaign_file)
    campaign_from_dict(load_yaml(new), source=str(campaign_file))  # the new revision must load, frozen settings intact
    history = read_json(paths.extension_history) or []
    number = len(history) + 1
    atomic_write_text(paths.campaign_revision(number), old)
    history.append(
        {
            "extension": number,
            "time": timestamp(),
            "campaign_file": campaign_file.as_posix(),
            "previous_revision": paths.campaign_revision(number).relative_to(paths.directory).as_posix(),
            "added": {mode: added for mode, (added, _) in proposals.items()},
            "why": {mode: why for mode, (_, why) in proposals.items()},
        }
    )
    atomic_write_text(paths.extension_history, json.dumps(history, indent=2) + "\n")
    atomic_write_text(campaign_file, new)
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(True),
            new.splitlines(True),
            f"{campaign_file} (revision {number - 1})",
            f"{campaign_file} (revision {number})",
        )
    )
    return Extension(number, history[-1]["added"], history[-1]["why"], diff)


def edge_proposals(campaign_dir: Path, campaign: Campaign) -> dict[str, tuple[list[float], str]]:
    """Mode -> (LRs to add, why) for every mode whose winner is at an edge of its tested LRs;
    LRs the campaign file already lists (proposed, not yet run) are not proposed again."""
    results = read_results(campaign_dir)
    groups = group_runs(results.runs, results.seeds, results.axes)
    winners = select(groups)
    proposals = {}
    for mode, notes in winner_notes(groups, results.runs, results.seeds).items():
        added = [lr for lr in notes["next_lrs"] if lr not in campaign.grid.learning_rates.get(mode, ())]
        if notes["edge"] and added:
            winner = winners[mode]
            proposals[mode] = (
                added,
                f"winner {point_name(winner, results.axes)} is the {notes['edge']} "
                f"edge of the tested LRs; continued the grid's step there",
            )
    return proposals


def extension_history(paths: CampaignPaths) -> list[dict[str, Any]]:
    """Every extension made so far, oldest first ([] for a campaign never extended)."""
    return read_json(paths.extension_history) or []


def _with_learning_rates(text: str, lrs: dict[str, list[float]], source: Path) -> str:
    """`text` with the lists under grid.learning_rates.<mode> replaced by flow lists of `lrs`; a
    block list becomes a flow list on its key's line (whatever its indentation was)."""
    root = compose_yaml(text)
    spans = []
    for mode, values in lrs.items():
        key, node = _child(_child(_child((None, root), "grid", source), "learning_rates", source), mode, source)
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            raise UserError(f"{source}: grid.learning_rates.{mode}: expected a list of learning rates")
        flow = "[" + ", ".join(repr(float(lr)) for lr in values) + "]"
        if node.flow_style:
            spans.append((node.start_mark.index, node.end_mark.index, flow))
        else:
            spans.append((key.end_mark.index, node.value[-1].end_mark.index, f": {flow}"))
    for start, end, replacement in sorted(spans, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _child(parent: tuple[yaml.Node | None, yaml.Node | None], key: str, source: Path) -> tuple[yaml.Node, yaml.Node]:
    """(key node, value node) of `key` in the mapping that is `parent`'s value."""
    node = parent[1]
    if isinstance(node, yaml.MappingNode):
        for name, value in node.value:
            if isinstance(name, yaml.ScalarNode) and name.value == key:
                return name, value
    raise UserError(f"{source}: no key {key} where the grid's learning rates should be")
