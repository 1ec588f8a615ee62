"""Which runs may train as one pack (ebd2n.train.trial_engine): asked by the trainer and, before any
job starts, by the campaign check, so it imports nothing heavy."""

from __future__ import annotations

from collections.abc import Sequence

from ebd2n.config import Recipe

MEMBER_FIELDS = {
    "optimizer": {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip", "warmup_fraction", "min_lr_ratio"},
    "runtime": {"seed", "output_dir", "purpose"},
}
"""What may differ between the members of a pack: per-member optimizer settings and the run's own
seed and directory. Everything else (model, data, budget, schedule shape, runtime) is shared."""


def pack_refusal(recipes: Sequence[Recipe]) -> str | None:
    """Why these recipes cannot train as one pack, or None when they can."""
    first = recipes[0]
    if first.decentralized is not None or first.model.source == "huggingface":
        return "only synchronous runs of a model trained from scratch pack"
    if first.training.init_from or first.parallel.lora is not None or first.parallel.freeze_prefix:
        return "runs that start from other weights or train adapters do not pack"
    if first.parallel.pipeline_stages > 1 or first.parallel.data_parallel > 1:
        return "runs over several devices (parallel.pipeline_stages, parallel.data_parallel) do not pack"
    if first.optimizer.accum_iter != 1:
        return "optimizer.accum_iter above 1 does not pack"
    shared = _shared(first)
    for recipe in recipes[1:]:
        other = _shared(recipe)
        differing = sorted(key for key in shared.keys() | other.keys() if shared.get(key) != other.get(key))
        if differing:
            return f"{recipe.runtime.output_dir} differs from {first.runtime.output_dir} in {', '.join(differing)}"
    return None


def _shared(recipe: Recipe) -> dict[str, object]:
    """Every setting of the recipe by its dotted key (a section left out as None is one key), but
    those MEMBER_FIELDS lets differ."""
    flat = {}
    for section, values in recipe.model_dump().items():
        if not isinstance(values, dict):
            flat[section] = values
            continue
        for key, value in values.items():
            if key not in MEMBER_FIELDS.get(section, ()):
                flat[f"{section}.{key}"] = value
    return flat
