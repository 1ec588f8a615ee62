"""The seed-noise rule of successive halving: a point outside a rung's kept share trains on unless
its seeds show it worse than the rung's best.

Losses of one point differ by seed; a ranking by mean alone drops a point that lost by less than
that noise (tiny-llm pruned LR 0.004 for losing by 0.000015 nats while two of its three seeds
preferred it). The test pairs each seed's loss with the best point's loss of the same seed.
"""

from __future__ import annotations

import math
from typing import Any


def within_noise(ranking: list[dict[str, Any]], by_rank: list[str], alpha: float) -> list[str]:
    """The points promoted by rank, then every other that the seeds do not show worse than the
    best (one-sided paired t-test over the seeds, p > alpha); each ranked entry gets the
    rule that decided it, the mean paired difference and the p-value."""
    from scipy import stats  # only a seed-noise decision pays for importing scipy

    best = ranking[0]
    promoted = list(by_rank)
    for entry in ranking:
        difference = p_value = None
        if entry["point"] in by_rank:
            rule = "kept: rank"
        elif entry["mean_loss"] is None or best["mean_loss"] is None:
            rule = "dropped: rank (a seed's loss is missing or not finite)"
        else:
            # both map their runs in the same seed order (Bracket.runs), so the n-th losses share a seed
            pairs = zip(entry["losses"].values(), best["losses"].values(), strict=True)
            differences = [loss - best_loss for loss, best_loss in pairs]
            difference = sum(differences) / len(differences)
            if len(differences) < 2:
                rule = "dropped: rank (one seed: no noise to test against)"
            else:
                spread = stats.tstd(differences)
                if spread > 0:
                    t = difference / (spread / math.sqrt(len(differences)))
                    p_value = float(stats.t.sf(t, len(differences) - 1))
                else:  # every seed the same difference: worse for certain, or not worse at all
                    p_value = 0.0 if difference > 0 else 1.0
                kept = p_value > alpha
                rule = f"{'kept' if kept else 'dropped'}: seed noise (paired t-test vs {best['point']})"
                if kept:
                    promoted.append(entry["point"])
        entry["seed_noise_rule"] = {"rule": rule, "difference": difference, "p_value": p_value}
    return promoted
