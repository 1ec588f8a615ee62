"""Training horizons: one grid point trained to several budgets, the longer continuing the shorter's trunk.

`grid.horizons` lists budgets in tokens per parameter. Each horizon is its own base recipe (the scope's
at that budget: `20m-tpp80.0`) and its own runs; a run at a longer horizon starts from the run of
the next shorter one (same point, same seed) at that run's pre-decay checkpoint (ebd2n.train.branch).
So the stable phase is trained once, up to the longest horizon's decay, and each horizon adds only
its decay; a horizon added later, longer than all, continues the trunk and retrains nothing.
"""

from __future__ import annotations

from dataclasses import replace

from ebd2n.campaign.grid import Grid
from ebd2n.campaign.resolve import run_recipe
from ebd2n.campaign.runs import Run, base_name, split_base
from ebd2n.config import Recipe
from ebd2n.errors import UserError
from ebd2n.train.trunk import branch_epoch


def horizon_overrides(base: str) -> list[tuple[str, object]]:
    """The recipe keys a base recipe's horizon sets (none without one): its budget, and its runs keep
    their pre-decay checkpoints (a longer horizon, now or added later, branches there)."""
    _scope, horizon = split_base(base)
    if horizon is None:
        return []
    return [
        ("training.tokens_per_parameter", horizon),
        ("training.max_tokens", None),
        ("training.keep_pre_decay", True),
    ]


def parent_base(grid: Grid, base: str) -> str | None:
    """The base recipe of the next shorter horizon, whose runs' trunks this base's runs continue."""
    scope, horizon = split_base(base)
    shorter = [h for h in grid.horizons or () if horizon is not None and h < horizon]
    return base_name(scope, max(shorter)) if shorter else None


def parent_run(grid: Grid, run: Run) -> Run | None:
    """The run whose trunk `run` continues: its point and seed at the next shorter horizon."""
    parent = parent_base(grid, run.base)
    return None if parent is None else replace(run, horizon=split_base(parent)[1])


def check_horizons(grid: Grid, bases: dict[str, Recipe], policy: str, where: str) -> None:
    """What a campaign with horizons needs: wsd with a decay, a warm-up that does not scale with the
    budget, no adaptive consensus (it spans the whole budget), the final checkpoint policy and the
    full grid (successive halving across horizons is not planned yet)."""
    if not grid.horizons:
        return
    if grid.search.halving:
        raise UserError(
            f"{where}: grid.horizons: successive halving over horizons is not supported; search the full grid"
        )
    if policy != "final":
        raise UserError(
            f"{where}: grid.horizons: checkpoint_policy {policy}: horizons keep the final policy (each run also "
            "keeps its pre-decay checkpoint, where the next horizon branches)"
        )
    for base, recipe in bases.items():
        optimizer = recipe.optimizer
        if optimizer.schedule != "wsd" or optimizer.decay_fraction == 0:
            raise UserError(
                f"{where}: grid.horizons: base recipe {base} has no wsd decay; set optimizer.schedule: wsd "
                "(horizons share the stable phase and branch before the decay)"
            )
        if optimizer.warmup_tokens is None and optimizer.warmup_fraction > 0:
            raise UserError(
                f"{where}: grid.horizons: base recipe {base} warms up over a share of its budget; set "
                "optimizer.warmup_tokens (tiny-llm's warmup_steps x batch_tokens) so every horizon warms up alike"
            )
        if recipe.decentralized is not None and recipe.decentralized.adaptive_consensus is not None:
            raise UserError(
                f"{where}: grid.horizons: adaptive consensus depends on the whole budget, so horizons cannot "
                "share a trunk; drop decentralized.adaptive_consensus"
            )


def check_branch_in_mode(grid: Grid, bases: dict[str, Recipe], probe: Run, probed: Recipe, where: str) -> None:
    """The branch epoch the plan takes from the base recipes is the one the runs of `probe`'s mode
    find (packed-K rounds its budgets to whole blocks per model, which can move a trunk's end)."""
    parent = parent_run(grid, probe)
    if parent is None:
        return
    planned = branch_epoch(bases[parent.base], bases[probe.base])
    found = branch_epoch(run_recipe(bases[parent.base], parent, probed.runtime.output_dir), probed)
    if planned != found:
        raise UserError(
            f"grid.horizons: in mode {probe.mode} the trunk of {parent.id} ends at epoch {found}, not the plan's "
            f"{planned}; choose other horizons, or a training.epoch_tokens that ends the trunk alike in every mode"
        )


def check_horizons_growth(frozen: list[float], now: list[float], where: str) -> None:
    """A started campaign (`frozen`: the horizons it started with and those of its frozen base
    recipes) gains only horizons longer than its longest, and leaves out only its longest: either
    way a shorter one would change the trunk of runs already trained."""
    added = [h for h in now if h not in frozen]
    if frozen and added and min(added) < max(frozen):
        raise UserError(
            f"{where}: grid.horizons: {min(added):g} is shorter than the started campaign's longest horizon "
            f"{max(frozen):g}; only longer horizons can be added (they continue the trunk)"
        )
    gone = [h for h in frozen if h not in now and now and h < max(now)]
    if gone:
        raise UserError(
            f"{where}: grid.horizons: {min(gone):g} is gone, but the longer {max(now):g} continues its trunk; "
            "keep it (only the longest horizons can be left out)"
        )
