"""What every model of the job file shares: the strict base model, the value types several
sections use, and the upper bounds on numbers."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

JobClass = Literal["bulk", "interactive"]
Precision = Literal["fp32", "bf16", "fp16"]
Sharding = Literal["ddp", "fsdp"]


def _checkpointing(value: object) -> bool | float:
    """``true`` (every block), ``false`` (none), or the share of the blocks whose activations
    are recomputed (a number in [0, 1]; 0 and 1 are ``false`` and ``true``): one error for
    anything else, not one per branch of the union."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(
            "must be true (every block), false (none), or the share of the blocks to "
            f"recompute, a number within [0, 1]; got {value!r}"
        )
    return False if value == 0 else True if value == 1 else float(value)


Checkpointing = Annotated[bool | float, BeforeValidator(_checkpointing)]
"""Activation checkpointing: all, none, or selective (a share of the workload's blocks)."""
LRScaling = Literal["linear", "sqrt", "none", "script"]

# Upper bounds: generous for any real job, small enough that arithmetic on them stays exact and
# finite (a deadline of 1e308 seconds, or 1e30 steps, is a typo or an attack, not a job).
MAX_SECONDS = 10 * 365 * 86400  # ten years
MAX_STEPS = 10**9
MAX_RATE = 1e12  # samples or tokens per second
MAX_WORK = 10**15  # samples or tokens


class SpecModel(BaseModel):
    """Strict base: unknown fields are errors (a typo must not be silently ignored), types are
    not coerced (``true`` is not 1, ``"5"`` is not 5), and numbers are finite."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, strict=True, allow_inf_nan=False
    )
