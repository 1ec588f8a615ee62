"""The strict base every recipe section shares: unknown keys, wrong types, non-finite numbers and
integers beyond int64 are refused with the key named."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

INT_RANGE = (-(2**63), 2**63 - 1)
"""What the trainer can hold in an integer (torch and numpy keep them as int64): every integer
field of a recipe lies in it, so a seed of 2**64 is refused here, not by torch mid-training."""


class Section(BaseModel):
    """Base of every recipe section: strict types, unknown keys, non-finite numbers and integers
    beyond int64 refused, assignments checked."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, frozen=False, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _int64(cls, value: Any, info: ValidationInfo) -> Any:
        """The one integer-range check of every field."""
        low, high = INT_RANGE
        if isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
            raise ValueError(f"{value} is outside the integers the trainer can use ({low} .. {high}, int64)")
        return value
