"""What `ebd2n campaign check` and `ebd2n campaign prepare` say and do for a checked campaign file."""

from __future__ import annotations

from ebd2n.campaign.file import Campaign
from ebd2n.campaign.horizons import parent_base
from ebd2n.campaign.packs import Packing
from ebd2n.campaign.plans import campaign_plans, grid_search
from ebd2n.campaign.resources import scope_name
from ebd2n.campaign.runs import SYNCHRONOUS, split_base


def describe_campaign(campaign: Campaign) -> str:
    """A few lines saying what the campaign will train."""
    grid = campaign.grid
    runs = grid.runs()
    lines = [f"campaign {campaign.name}: {len(runs)} runs -> {campaign.directory}"]
    plans = campaign_plans(campaign)
    packing = (
        Packing(campaign.paths, grid, plans, grid_search(campaign.paths, grid, plans), campaign.pack)
        if campaign.pack > 1 and SYNCHRONOUS in grid.modes
        else None
    )
    for base, plan in plans.items():
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
        if packing is not None:
            lines.append(_packs_line(campaign, packing, base, plan.ends[0]))
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


def _packs_line(campaign: Campaign, packing: Packing, base: str, epoch: int) -> str:
    """How `execution.pack` packs a base recipe's synchronous runs, as its first slice forms them
    (ebd2n.campaign.packs: a run that trained the slice alone before the campaign packed joins none;
    a rung re-forms them; a campaign with horizons does not pack)."""
    packs = packing.packs(base, epoch)
    runs = sum(1 for run in campaign.grid.runs() if run.base == base and run.mode == SYNCHRONOUS)
    packed = sum(len(pack.members) for pack in packs)
    sizes = " + ".join(str(len(pack.members)) for pack in packs) or "0"
    scope = scope_name(split_base(base)[0], SYNCHRONOUS)
    return (
        f"  {scope}: execution.pack {campaign.pack} trains {packed} of its {runs} runs "
        f"as {len(packs)} pack(s) per slice ({sizes} runs)"
        + ("; a rung re-forms them" if campaign.grid.search.halving else "")
    )


def prepare_campaign_cache(campaign: Campaign, progress: bool = False) -> str:
    """Build (or reuse) the campaign's data cache, defined by its base recipe's data section."""
    from ebd2n.data import prepare_cache

    recipe = next(iter(campaign.current_bases.values()))
    cache = prepare_cache(
        recipe.data, recipe.model.vocab_size, progress=progress, context_length=recipe.model.context_length
    )
    return "\n".join([f"cache {cache.directory}  identity {cache.identity}", *cache.record_counts()])
