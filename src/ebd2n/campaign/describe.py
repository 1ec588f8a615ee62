"""What `ebd2n campaign check` and `ebd2n campaign prepare` say and do for a checked campaign file."""

from __future__ import annotations

from ebd2n.campaign.file import Campaign
from ebd2n.campaign.horizons import parent_base
from ebd2n.campaign.plans import campaign_plans
from ebd2n.campaign.resources import scope_name
from ebd2n.campaign.runs import split_base


def describe_campaign(campaign: Campaign) -> str:
    """A few lines saying what the campaign will train."""
    grid = campaign.grid
    runs = grid.runs()
    lines = [f"campaign {campaign.name}: {len(runs)} runs -> {campaign.directory}"]
    for base, plan in campaign_plans(campaign).items():
        epochs, slices = plan.epochs, len(plan.ends)
        for mode in grid.modes:
            count = sum(1 for run in runs if run.base == base and run.mode == mode)
            resources = campaign.job_resources(base, mode)
            scope, horizon = split_base(base)
            at = f" at {horizon:g} tokens/param" if horizon is not None else ""
            lines.append(
                f"  {scope_name(scope, mode)}{at}: {count} runs x {slices} slice(s) of "
                f"<= {campaign.slice_epochs(base)} of {epochs} epochs; per job {resources.gpus_text}, "
                f"{resources.minutes} min, {resources.mem_mb} MB, {resources.cpus} CPU(s)"
            )
        if plan.branch is not None:
            lines.append(
                f"  {base}: each run starts at epoch {plan.branch} from its point's run at "
                f"{parent_base(grid, base)} (that run's pre-decay checkpoint: the trunk is trained once)"
            )
        if grid.search.halving:
            lines.append(
                f"  successive halving: at epochs {list(grid.search.rung_epochs(plan))} each preset x mode keeps "
                f"{grid.search.keep:g} of its points (at least one); the others stop at that rung"
            )
    return "\n".join(lines)


def prepare_campaign_cache(campaign: Campaign, progress: bool = False) -> str:
    """Build (or reuse) the campaign's data cache, defined by its base recipe's data section."""
    from ebd2n.data import prepare_cache

    recipe = next(iter(campaign.current_bases.values()))
    cache = prepare_cache(
        recipe.data, recipe.model.vocab_size, progress=progress, context_length=recipe.model.context_length
    )
    return "\n".join([f"cache {cache.directory}  identity {cache.identity}", *cache.record_counts()])
