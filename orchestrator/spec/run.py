"""How many GPUs a job may use (``resources:``) and how the harness runs it (``run:``, its
parallel plan included)."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import Field, field_validator, model_validator

from orchestrator.kinds import KIND_NAME
from orchestrator.loader_spec import LoaderSpec
from orchestrator.spec.base import (
    MAX_SECONDS,
    MAX_STEPS,
    Checkpointing,
    Precision,
    Sharding,
    SpecModel,
)


class GPURange(SpecModel):
    """How many GPUs the job may use (``max`` defaults to ``min``)."""

    min: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="the fewest GPUs it runs on, and the count it asks for (unless "
        "run.data_parallel says more)",
    )
    max: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="the most it may use (unset: min); above min, a bulk job is elastic (the "
        "scheduler resizes it) and a service's replicas scale with its load",
    )

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    @property
    def upper(self) -> int:
        """The maximum, with the default applied."""
        return self.max if self.max is not None else self.min


class Resources(SpecModel):
    """GPU count range and, optionally, the GPU memory each worker needs; for a team's own
    code (an ``entry:`` module or a command), the host memory each rank may use and whether
    it may reach the network."""

    gpus: GPURange = Field(
        default_factory=GPURange,
        description="how many GPUs; `gpus: 2` is short for `{min: 2, max: 2}`",
    )
    # Placement puts the job only on nodes whose GPUs have this much (GB of 10^9 bytes; a
    # virtual slot has Settings.virtual_gpu_memory_gb); submission refuses it when no node does.
    gpu_memory_gb: float | None = Field(default=None, gt=0, le=1 << 20)
    # Host memory (GB) all processes of one rank of a team's code may hold; past it the kernel
    # kills one and the run fails "out of memory". Unset: the operator's ORCH_SANDBOX_MEMORY,
    # else the node's memory shared by its GPU slots (workers.contain).
    memory_gb: float | None = Field(default=None, gt=0, le=1 << 20)
    # GPU kinds (`orch pool` lists the pool's: "H100", "L4", "virtual"...): the job runs only
    # on one of `gpu_kinds` (empty: any) and never on `exclude_gpu_kinds`, each gang on one
    # kind; submission refuses a job no kind of the pool allows.
    gpu_kinds: list[Annotated[str, Field(pattern=KIND_NAME)]] = Field(
        default_factory=list, max_length=16
    )
    # GPU kinds the job must never run on (each also not in gpu_kinds).
    exclude_gpu_kinds: list[Annotated[str, Field(pattern=KIND_NAME)]] = Field(
        default_factory=list, max_length=16
    )
    # A team's code runs with no network (a namespace of its own) unless the job says so; the
    # ranks of a multi-GPU job always keep it, they meet over TCP.
    network: bool = False

    @field_validator("gpus", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        # `gpus: 2` means exactly two.
        if isinstance(v, int) and not isinstance(v, bool):
            return {"min": v, "max": v}
        return v

    @model_validator(mode="after")
    def _kinds_apart(self) -> Self:
        # (the error's location says "resources")
        for field, names in (
            ("gpu_kinds", self.gpu_kinds),
            ("exclude_gpu_kinds", self.exclude_gpu_kinds),
        ):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise ValueError(f"{field} names {', '.join(twice)} more than once")
        both = sorted(set(self.gpu_kinds) & set(self.exclude_gpu_kinds))
        if both:
            raise ValueError(f"gpu_kinds and exclude_gpu_kinds both name {', '.join(both)}")
        return self

    @property
    def restricted(self) -> bool:
        """Whether some GPUs of a pool may not take the job (memory or kinds)."""
        return self.gpu_memory_gb is not None or bool(self.gpu_kinds or self.exclude_gpu_kinds)


class PlanSettings(SpecModel):
    """A parallel plan (``workers.parallel.Plan``): ``dp x tp x pp`` is the job's GPU count and
    its global batch is ``run.micro_batch x run.grad_accum x dp``. See docs/parallel-plans.md.
    """

    dp: int = Field(default=1, ge=1, le=1024, description="data-parallel replicas")
    tp: int = Field(
        default=1, ge=1, le=1024, description="tensor-parallel ranks of each pipeline stage"
    )
    pp: int = Field(default=1, ge=1, le=1024, description="pipeline stages of each replica")
    zero: int = Field(
        default=0,
        ge=0,
        le=3,
        description="what the replicas shard (ZeRO stage): 0 nothing, 1 optimizer state, 2 and "
        "gradients, 3 and parameters",
    )
    offload: bool = Field(default=False, description="keep the ZeRO-3 shards in host memory (CUDA)")


class RunSettings(SpecModel):
    """How the harness runs the workload (the tuner may later choose these). A run's length is
    one of ``steps``, ``duration_s`` or the SLA's work by its deadline."""

    micro_batch: int = Field(
        default=32,
        ge=1,
        le=65536,
        description="samples per forward and backward pass on each replica (a service's: its "
        "largest batch)",
    )
    grad_accum: int = Field(
        default=1,
        ge=1,
        le=4096,
        description="micro-batches per optimizer step; the global batch is micro_batch x "
        "grad_accum x data-parallel replicas",
    )
    precision: Precision = Field(
        default="fp32",
        description="the precision of compute; fp16 is for CUDA (on a CPU it runs, slowly)",
    )
    activation_checkpointing: Checkpointing = Field(
        default=False,
        description="recompute activations in the backward pass instead of keeping them (less "
        "memory, more compute): true for every block, or a share of the blocks, the first ones "
        "(0.5: the first half)",
    )
    compile: bool = Field(default=False, description="compile the model with torch.compile")
    data_parallel: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="the GPUs it runs on, within resources.gpus (unset: resources.gpus.min)",
    )
    sharding: Sharding = Field(
        default="ddp",
        description="how more than one GPU share the model: ddp replicates it and all-reduces "
        "gradients, fsdp shards parameters, gradients and optimizer state (FSDP2); one GPU runs "
        "it unsharded. Checkpoints hold the full state either way, so a job resumes with either "
        "sharding on any GPU count",
    )
    plan: PlanSettings | None = Field(
        default=None,
        description="a parallel plan, in place of sharding: tensor and pipeline parallelism and "
        "ZeRO stages",
    )
    steps: int | None = Field(
        default=None, ge=1, le=MAX_STEPS, description="the run's length in optimizer steps"
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="the run's length in seconds (a service's: how long it serves)",
    )
    warmup_steps: int = Field(
        default=3,
        ge=0,
        le=MAX_STEPS,
        description="steps of each run left out of its latency and throughput (steps must be "
        "greater)",
    )
    checkpoint_every: int = Field(
        default=50,
        ge=0,
        le=MAX_STEPS,
        description="optimizer steps between checkpoints, which a resumed job starts from (0: no "
        "periodic checkpoints)",
    )
    seed: int = Field(
        default=0,
        ge=0,
        lt=2**63,
        description="seeds the model's initialisation, its data and a service's arrivals",
    )
    # The global batch the job's learning rate is set for (default: micro_batch x grad_accum x
    # GPUs as given). The tuner records it when it picks another global batch within
    # tuning.bounds.global_batch, so tuning.bounds.lr_scaling scales from the right base.
    base_global_batch: int | None = Field(default=None, ge=1, le=1 << 30)
    # the data loader's knobs, for a workload that gives a dataset (orchestrator.loader_spec)
    loader: LoaderSpec = Field(default_factory=LoaderSpec)
