"""The verdict of a confirmation (ebd2n.campaign.confirmation): does the winner hold on fresh seeds?

Per preset x mode of the newest selection: the winner's loss as selected (its grid seeds, which
chose it) and as confirmed (the fresh seeds), the optimism (selected minus confirmed, by Welch's
test over the two sets of seeds: negative when the seeds that chose the winner read it low, the
winner's curse), the runner-up against the winner on the fresh
seeds alone, the probability that the winner is the best of the confirmed points (a bootstrap of
each point's fresh seeds), and one word:

- `confirmed`: on fresh seeds the winner beats the runner-up, the difference's 95 % interval above 0
  (with no runner-up confirmed: the fresh seeds do not read it worse than the selection did, the
  optimism's interval not below 0);
- `not confirmed`: the runner-up beats the winner on fresh seeds, its interval below 0 (with no
  runner-up: the optimism's interval below 0, the fresh seeds reading it worse);
- `inside noise`: neither, the fresh seeds cannot tell the two apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ebd2n.campaign.confirmation import read_selection
from ebd2n.campaign.welch import welch
from ebd2n.layout import CONFIRM

RESAMPLES = 2000
RESAMPLING_SEED = 20261207
"""The bootstrap's fixed seed: the same runs give the same probability."""
CONFIRMED, NOT_CONFIRMED, INSIDE_NOISE = "confirmed", "not confirmed", "inside noise"


def confirmation_verdict(directory: Path, losses: dict[str, float]) -> dict[str, Any] | None:
    """The verdict of the newest selection under `directory`/confirm (None without one); `losses`:
    each complete run's finite full-validation loss by run id. A point whose fresh seeds are not all
    validated yet has no verdict (`verdict` None) but what is measured so far."""
    selections = sorted((Path(directory) / CONFIRM).glob("selection-*.json"))
    read = [(selection, path) for path in selections if (selection := read_selection(path)) is not None]
    if not read:
        return None
    read.sort(key=lambda pair: (str(pair[0].get("made")), pair[1].name))
    selection, path = read[-1]
    return {
        "selection": f"{CONFIRM}/{path.name}",
        "earlier": [f"{CONFIRM}/{earlier.name}" for _, earlier in read[:-1]],
        "seeds": selection["seeds"],
        "groups": [_group(group, losses) for group in selection["groups"]],
    }


def _group(group: dict[str, Any], losses: dict[str, float]) -> dict[str, Any]:
    points = group["points"]
    fresh = [[losses[run] for run in point["confirmation"] if run in losses] for point in points]
    done = all(len(values) == len(point["confirmation"]) for values, point in zip(fresh, points, strict=True))
    out: dict[str, Any] = {"scope": group["scope"], "mode": group["mode"], "verdict": None}
    if not points:
        return out | {"reason": "no eligible point to confirm"}
    winner, selected = points[0], list(points[0]["losses"].values())
    out |= {
        "winner": winner["point"],
        "selected": _summary(selected),
        "confirmed": _summary(fresh[0]),
        "optimism": welch(fresh[0], selected),  # mean selected - mean confirmed
        "runner_up": None,
        "p_best": _p_best(fresh) if done and len(points) > 1 else None,
    }
    if len(points) > 1:
        test = welch(fresh[0], fresh[1])  # mean runner-up - mean winner, on the fresh seeds alone
        out["runner_up"] = {"point": points[1]["point"], "confirmed": _summary(fresh[1]), "comparison": test}
    if done:
        out["verdict"] = _word(out)
    return out


def _summary(values: list[float]) -> dict[str, Any]:
    return {
        "mean": float(np.mean(values)) if values else None,
        "sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
        "seeds": len(values),
    }


def _p_best(fresh: list[list[float]]) -> float:
    """How often the winner's mean is the lowest when every point's fresh seeds are resampled."""
    generator = np.random.default_rng(RESAMPLING_SEED)
    means = np.stack([generator.choice(values, (RESAMPLES, len(values))).mean(axis=1) for values in fresh])
    return float(np.mean(np.argmin(means, axis=0) == 0))


def _word(out: dict[str, Any]) -> str:
    if out["runner_up"] is not None:
        test = out["runner_up"]["comparison"]
        if test is None:
            return INSIDE_NOISE
        return CONFIRMED if test["low"] > 0 else NOT_CONFIRMED if test["high"] < 0 else INSIDE_NOISE
    optimism = out["optimism"]
    if optimism is None:
        return INSIDE_NOISE
    return NOT_CONFIRMED if optimism["high"] < 0 else CONFIRMED
