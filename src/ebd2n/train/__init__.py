"""Training runtime: budget, schedule, engines (single-process and distributed), validation over
blocks, checkpoints, logs and the slice trainer.

`train` loads on first use, so `ebd2n.train.budget` (used by the workflow to plan a campaign)
does not pay for importing torch.
"""

from typing import Any

__all__ = ["train"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ebd2n.train import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
