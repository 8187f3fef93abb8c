"""The auto-tuner's part of a job (``tuning:``): whether it runs, its budget, and the bounds of
its search space."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from orchestrator.spec.base import (
    MAX_SECONDS,
    Checkpointing,
    LRScaling,
    Precision,
    Sharding,
    SpecModel,
)


class IntRange(SpecModel):
    """An inclusive integer range for a tuning bound."""

    min: int = Field(ge=1, le=65536, description="the lowest value")
    max: int = Field(ge=1, le=65536, description="the highest value")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class PlanBounds(SpecModel):
    """The parallel plans the tuner may try (``tuning.bounds.plan``): every combination of
    these tensor and pipeline degrees and ZeRO stages that fits a GPU count (see
    docs/parallel-plans.md); without it the tuner tries data parallelism (``sharding``)."""

    tp: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default=[1], min_length=1, max_length=8, description="tensor-parallel degrees to try"
    )
    pp: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default=[1], min_length=1, max_length=8, description="pipeline-parallel degrees to try"
    )
    zero: list[Annotated[int, Field(ge=0, le=3)]] = Field(
        default=[0, 3], min_length=1, max_length=4, description="ZeRO stages to try"
    )


class TuningBounds(SpecModel):
    """Narrow or pin the tuner's search space; an absent bound means the tuner's default."""

    micro_batch: IntRange | None = Field(
        default=None, description="micro-batches it may try (a service's: its largest batch)"
    )
    grad_accum: IntRange | None = Field(default=None, description="accumulations it may try")
    gpus: IntRange | None = Field(
        default=None, description="GPU counts it may try, within resources.gpus"
    )
    precision: list[Precision] | None = Field(
        default=None, min_length=1, max_length=3, description="precisions it may try"
    )
    activation_checkpointing: list[Checkpointing] | None = Field(
        default=None,
        min_length=1,
        max_length=6,
        description="activation checkpointing to try: off, on, and shares of the blocks "
        "(e.g. [false, 0.5, true]: none, half, all)",
    )
    compile: list[bool] | None = Field(
        default=None,
        min_length=1,
        max_length=2,
        description="torch.compile off, on, or both to try",
    )
    sharding: list[Sharding] | None = Field(
        default=None, min_length=1, max_length=2, description="shardings it may try"
    )
    plan: PlanBounds | None = Field(
        default=None,
        description="parallel plans it may try (unset: data parallelism only, by sharding)",
    )
    # The global batch (micro-batch x accumulation x GPUs) is the job's: the tuner keeps it
    # unless a range is allowed here, and then only with a learning-rate rule (lr_scaling):
    # linear (lr x G/G0), sqrt (lr x sqrt(G/G0)), none (the lr is kept as it is) or script
    # (the workload's own scale_lr gets the global batch).
    global_batch: IntRange | None = None
    lr_scaling: LRScaling | None = Field(
        default=None,
        description="how the learning rate follows a global batch other than the job's (needed "
        "with a global_batch range): linear, sqrt, none or script",
    )
    max_delay_ms: list[Annotated[float, Field(ge=0, le=60_000)]] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="a service's batcher windows (ms) to try (orchestrator.tuner.serving; "
        "unset: 0-50 ms below its ceiling)",
    )
    quantize: list[Literal["none", "int8"]] | None = Field(
        default=None,
        min_length=1,
        max_length=2,
        description="a service's quantizations to try (int8: CPU only)",
    )

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

    trials: int | None = Field(
        default=None,
        ge=1,
        le=10000,
        description="the most trials (unset: four per point of the search space)",
    )
    seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="the most seconds of trials (unset: no limit)",
    )


class Tuning(SpecModel):
    """The auto-tuner's part: off by default, the run settings are used as given."""

    enabled: bool = Field(
        default=False,
        description="tune the run settings against the SLA before the job runs, by short trials",
    )
    budget: TuningBudget = Field(
        default_factory=TuningBudget, description="how much the trials may spend"
    )
    bounds: TuningBounds = Field(
        default_factory=TuningBounds, description="the search space, narrowed or pinned"
    )
    best_effort: bool = Field(
        default=False,
        description="run the closest config when no config meets the SLA (false: the job fails "
        "sla-infeasible)",
    )
    objective: Literal["gpu_seconds", "energy"] = Field(
        default="gpu_seconds",
        description="what a throughput SLA's tuning minimises per sample: GPU-seconds, or "
        "energy (joules, from NVML: GPUs only)",
    )
