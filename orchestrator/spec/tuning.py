"""The auto-tuner's part of a job (``tuning:``): whether it runs, its budget, and the bounds of
its search space."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from orchestrator.spec.base import MAX_SECONDS, LRScaling, Precision, Sharding, SpecModel


class IntRange(SpecModel):
    """An inclusive integer range for a tuning bound."""

    min: int = Field(ge=1, le=65536)
    max: int = Field(ge=1, le=65536)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class PlanBounds(SpecModel):
    """The parallel plans the tuner may try (``tuning.bounds.plan``): every combination of
    these tensor and pipeline degrees and ZeRO stages that fits a GPU count (see
    docs/parallel-plans.md); without it the tuner tries data parallelism (``sharding``)."""

    tp: list[Annotated[int, Field(ge=1, le=64)]] = Field(default=[1], min_length=1, max_length=8)
    pp: list[Annotated[int, Field(ge=1, le=64)]] = Field(default=[1], min_length=1, max_length=8)
    zero: list[Annotated[int, Field(ge=0, le=3)]] = Field(
        default=[0, 3], min_length=1, max_length=4
    )


class TuningBounds(SpecModel):
    """Narrow or pin the tuner's search space; an absent bound means the tuner's default."""

    micro_batch: IntRange | None = None
    grad_accum: IntRange | None = None
    gpus: IntRange | None = None
    precision: list[Precision] | None = Field(default=None, min_length=1, max_length=3)
    activation_checkpointing: list[bool] | None = Field(default=None, min_length=1, max_length=2)
    compile: list[bool] | None = Field(default=None, min_length=1, max_length=2)
    sharding: list[Sharding] | None = Field(default=None, min_length=1, max_length=2)
    plan: PlanBounds | None = None
    # The global batch (micro-batch x accumulation x GPUs) is the job's: the tuner keeps it
    # unless a range is allowed here, and then only with a learning-rate rule (lr_scaling):
    # linear (lr x G/G0), sqrt (lr x sqrt(G/G0)), none (the lr is kept as it is) or script
    # (the workload's own scale_lr gets the global batch).
    global_batch: IntRange | None = None
    lr_scaling: LRScaling | None = None
    # a service's batcher window (ms) and quantization (orchestrator.tuner.serving)
    max_delay_ms: list[Annotated[float, Field(ge=0, le=60_000)]] | None = Field(
        default=None, min_length=1, max_length=16
    )
    quantize: list[Literal["none", "int8"]] | None = Field(default=None, min_length=1, max_length=2)

    @model_validator(mode="after")
    def _batch_rule(self) -> Self:
        gb = self.global_batch
        if gb is not None and gb.min < gb.max and self.lr_scaling is None:
            raise ValueError(
                "a global_batch range changes what the job learns: declare how its learning "
                "rate follows with lr_scaling (linear, sqrt, none or script)"
            )
        if self.lr_scaling is not None and gb is None:
            raise ValueError("lr_scaling goes with a global_batch range (the batch is fixed)")
        return self


class TuningBudget(SpecModel):
    """How much profiling the tuner may spend (whichever runs out first)."""

    trials: int | None = Field(default=None, ge=1, le=10000)
    seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS)


class Tuning(SpecModel):
    """Reserved for the auto-tuner: off by default, the run settings are used as given."""

    enabled: bool = False
    budget: TuningBudget = Field(default_factory=TuningBudget)
    bounds: TuningBounds = Field(default_factory=TuningBounds)
    best_effort: bool = False
    objective: Literal["gpu_seconds", "energy"] = Field(
        default="gpu_seconds",
        description="what a throughput SLA's tuning minimises per sample: GPU-seconds, or "
        "energy (joules, from NVML: GPUs only)",
    )
