"""How many GPUs a job may use (``resources:``) and how the harness runs it (``run:``, its
parallel plan included)."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from orchestrator.loader_spec import LoaderSpec
from orchestrator.spec.base import MAX_SECONDS, MAX_STEPS, Precision, Sharding, SpecModel


class GPURange(SpecModel):
    """How many GPUs the job may use (``max`` defaults to ``min``)."""

    min: int = Field(default=1, ge=1, le=1024)
    max: int | None = Field(default=None, ge=1, le=1024)

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

    gpus: GPURange = Field(default_factory=GPURange)
    # Placement puts the job only on nodes whose GPUs have this much (GB of 10^9 bytes; a
    # virtual slot has Settings.virtual_gpu_memory_gb); submission refuses it when no node does.
    gpu_memory_gb: float | None = Field(default=None, gt=0, le=1 << 20)
    # Host memory (GB) all processes of one rank of a team's code may hold; past it the kernel
    # kills one and the run fails "out of memory". Unset: the operator's ORCH_SANDBOX_MEMORY,
    # else the node's memory shared by its GPU slots (workers.contain).
    memory_gb: float | None = Field(default=None, gt=0, le=1 << 20)
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


class PlanSettings(SpecModel):
    """A parallel plan (``workers.parallel.Plan``): ``dp`` data-parallel replicas, each ``pp``
    pipeline stages of ``tp`` tensor-parallel ranks; ``zero`` what the replicas shard (0
    nothing, 1 optimizer state, 2 and gradients, 3 and parameters); ``offload`` the ZeRO-3
    shards to host memory (CUDA). ``dp x tp x pp`` is the job's GPU count and its global batch
    is ``run.micro_batch x run.grad_accum x dp``. See docs/parallel-plans.md."""

    dp: int = Field(default=1, ge=1, le=1024)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    zero: int = Field(default=0, ge=0, le=3)
    offload: bool = False


class RunSettings(SpecModel):
    """How the harness runs the workload (the tuner may later choose these).

    ``sharding`` says how more than one GPU share the model: ``ddp`` replicates it and
    all-reduces gradients, ``fsdp`` shards parameters, gradients and optimizer state (FSDP2).
    With one GPU it is accepted and the model runs unsharded. Checkpoints hold the full state
    either way, so a job resumes with either sharding on any GPU count. ``plan`` (when set,
    in place of ``sharding``) adds tensor and pipeline parallelism and ZeRO stages 1 and 2.
    """

    micro_batch: int = Field(default=32, ge=1, le=65536)
    grad_accum: int = Field(default=1, ge=1, le=4096)
    precision: Precision = "fp32"
    activation_checkpointing: bool = False
    compile: bool = False
    data_parallel: int | None = Field(default=None, ge=1, le=1024)
    sharding: Sharding = "ddp"
    plan: PlanSettings | None = None
    steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    warmup_steps: int = Field(default=3, ge=0, le=MAX_STEPS)
    checkpoint_every: int = Field(default=50, ge=0, le=MAX_STEPS)
    seed: int = Field(default=0, ge=0, lt=2**63)
    # The global batch the job's learning rate is set for (default: micro_batch x grad_accum x
    # GPUs as given). The tuner records it when it picks another global batch within
    # tuning.bounds.global_batch, so tuning.bounds.lr_scaling scales from the right base.
    base_global_batch: int | None = Field(default=None, ge=1, le=1 << 30)
    # the data loader's knobs, for a workload that gives a dataset (orchestrator.loader_spec)
    loader: LoaderSpec = Field(default_factory=LoaderSpec)
