"""The job file: pydantic models validated once, at the edge.

A job file (YAML or JSON) becomes a :class:`JobSpec`, or a :class:`SpecError` listing every
problem with the field's dotted path and what is allowed. Inside the orchestrator the spec is
trusted. See README.md ("Job file") for the format.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.errors import SpecError
from orchestrator.inputs import NAME_PATTERN as NAME_PATTERN  # for orchestrator.api, store.tokens
from orchestrator.inputs import Name, describe_errors, load_document
from workers.workloads.registry import BUILTIN_WORKLOADS

JobClass = Literal["bulk", "interactive"]
Precision = Literal["fp32", "bf16", "fp16"]
Sharding = Literal["ddp", "fsdp"]
ENTRY_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
_ENTRY_RULE = {ENTRY_PATTERN: "must be an entry point 'package.module:function'"}

# Upper bounds: generous for any real job, small enough that arithmetic on them stays exact and
# finite (a deadline of 1e308 seconds, or 1e30 steps, is a typo or an attack, not a job).
MAX_SECONDS = 10 * 365 * 86400  # ten years
MAX_STEPS = 10**9
MAX_RATE = 1e12  # samples or tokens per second
MAX_WORK = 10**15  # samples or tokens
MAX_ARGS_BYTES = 64 * 1024
_ARGS_DEPTH = 16


class _Model(BaseModel):
    """Strict base: unknown fields are errors (a typo must not be silently ignored), types are
    not coerced (``true`` is not 1, ``"5"`` is not 5), and numbers are finite."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, strict=True, allow_inf_nan=False
    )


class WorkloadRef(_Model):
    """What to run: a built-in workload by ``name`` or a user ``entry`` point, with ``args``."""

    name: str | None = None
    entry: str | None = Field(default=None, pattern=ENTRY_PATTERN, max_length=256)
    args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("args")
    @classmethod
    def _plain_args(cls, v: dict[str, Any]) -> dict[str, Any]:
        # The args travel as JSON (Redis, Ray, the worker): only what JSON holds exactly.
        problem = _json_problem(v, "", _ARGS_DEPTH)
        if problem:
            raise ValueError(problem)
        size = len(json.dumps(v))
        if size > MAX_ARGS_BYTES:
            raise ValueError(f"{size:,} bytes as JSON; at most {MAX_ARGS_BYTES:,} allowed")
        return v

    @field_validator("name")
    @classmethod
    def _known_name(cls, v: str | None) -> str | None:
        if v is not None and v not in BUILTIN_WORKLOADS:
            raise ValueError(
                f"unknown built-in workload {v!r}; built-ins: {', '.join(BUILTIN_WORKLOADS)} "
                "(or give entry: 'package.module:function')"
            )
        return v

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if (self.name is None) == (self.entry is None):
            raise ValueError("give exactly one of name (a built-in) or entry (module:function)")
        return self

    @property
    def ref(self) -> str:
        """The name or entry point, as the worker registry resolves it."""
        return self.name if self.name is not None else str(self.entry)


class ThroughputSLA(_Model):
    """A floor on throughput, or an amount of work to finish within a deadline."""

    min_samples_per_s: float | None = Field(default=None, gt=0, le=MAX_RATE)
    min_tokens_per_s: float | None = Field(default=None, gt=0, le=MAX_RATE)
    work_samples: int | None = Field(default=None, gt=0, le=MAX_WORK)
    work_tokens: int | None = Field(default=None, gt=0, le=MAX_WORK)
    deadline_s: float | None = Field(
        default=None, gt=0, le=MAX_SECONDS, description="seconds after submission"
    )

    @model_validator(mode="after")
    def _one_goal(self) -> Self:
        floors = [self.min_samples_per_s, self.min_tokens_per_s]
        works = [self.work_samples, self.work_tokens]
        n_floor = sum(v is not None for v in floors)
        n_work = sum(v is not None for v in works)
        if n_floor + n_work != 1:
            raise ValueError(
                "give exactly one of min_samples_per_s, min_tokens_per_s, "
                "work_samples (with deadline_s) or work_tokens (with deadline_s)"
            )
        if n_work and self.deadline_s is None:
            raise ValueError("deadline_s is required with work_samples/work_tokens")
        if n_floor and self.deadline_s is not None:
            raise ValueError("deadline_s goes with work_samples/work_tokens only")
        return self


class LatencySLA(_Model):
    """A ceiling in milliseconds on a percentile of step (request) time."""

    max_ms: float = Field(gt=0, le=1000 * MAX_SECONDS)
    percentile: Literal[50, 95, 99] = 95
    start_within_s: float = Field(
        default=60.0,
        gt=0,
        le=MAX_SECONDS,
        description="seconds after submission it should start by",
    )


class SLA(_Model):
    """What the job needs: bulk jobs state throughput, interactive jobs state latency."""

    throughput: ThroughputSLA | None = None
    latency: LatencySLA | None = None


class GPURange(_Model):
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


class Resources(_Model):
    """GPU count range and, optionally, the GPU memory each worker needs."""

    gpus: GPURange = Field(default_factory=GPURange)
    # Placement puts the job only on nodes whose GPUs have this much (GB of 10^9 bytes; a
    # virtual slot has Settings.virtual_gpu_memory_gb); submission refuses it when no node does.
    gpu_memory_gb: float | None = Field(default=None, gt=0, le=1 << 20)

    @field_validator("gpus", mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        # `gpus: 2` means exactly two.
        if isinstance(v, int) and not isinstance(v, bool):
            return {"min": v, "max": v}
        return v


class RunSettings(_Model):
    """How the harness runs the workload (the tuner may later choose these).

    ``sharding`` says how more than one GPU share the model: ``ddp`` replicates it and
    all-reduces gradients, ``fsdp`` shards parameters, gradients and optimizer state (FSDP2).
    With one GPU it is accepted and the model runs unsharded. Checkpoints hold the full state
    either way, so a job resumes with either sharding on any GPU count.
    """

    micro_batch: int = Field(default=32, ge=1, le=65536)
    grad_accum: int = Field(default=1, ge=1, le=4096)
    precision: Precision = "fp32"
    activation_checkpointing: bool = False
    compile: bool = False
    data_parallel: int | None = Field(default=None, ge=1, le=1024)
    sharding: Sharding = "ddp"
    steps: int | None = Field(default=None, ge=1, le=MAX_STEPS)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    warmup_steps: int = Field(default=3, ge=0, le=MAX_STEPS)
    checkpoint_every: int = Field(default=50, ge=0, le=MAX_STEPS)
    seed: int = Field(default=0, ge=0, lt=2**63)


class IntRange(_Model):
    """An inclusive integer range for a tuning bound."""

    min: int = Field(ge=1, le=65536)
    max: int = Field(ge=1, le=65536)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class TuningBounds(_Model):
    """Narrow or pin the tuner's search space; an absent bound means the tuner's default."""

    micro_batch: IntRange | None = None
    grad_accum: IntRange | None = None
    gpus: IntRange | None = None
    precision: list[Precision] | None = Field(default=None, min_length=1, max_length=3)
    activation_checkpointing: list[bool] | None = Field(default=None, min_length=1, max_length=2)
    compile: list[bool] | None = Field(default=None, min_length=1, max_length=2)
    sharding: list[Sharding] | None = Field(default=None, min_length=1, max_length=2)


class TuningBudget(_Model):
    """How much profiling the tuner may spend (whichever runs out first)."""

    trials: int | None = Field(default=None, ge=1, le=10000)
    seconds: float | None = Field(default=None, gt=0, le=MAX_SECONDS)


class Tuning(_Model):
    """Reserved for the auto-tuner: off by default, the run settings are used as given."""

    enabled: bool = False
    budget: TuningBudget = Field(default_factory=TuningBudget)
    bounds: TuningBounds = Field(default_factory=TuningBounds)
    best_effort: bool = False


class JobSpec(_Model):
    """A validated job: who, what, which SLA, how many GPUs, and how to run it."""

    name: Name
    team: Name
    job_class: JobClass = Field(alias="class")
    workload: WorkloadRef
    sla: SLA
    resources: Resources = Field(default_factory=Resources)
    run: RunSettings = Field(default_factory=RunSettings)
    tuning: Tuning = Field(default_factory=Tuning)

    @field_validator("workload", mode="before")
    @classmethod
    def _workload_shorthand(cls, v: Any) -> Any:
        # `workload: cnn` or `workload: pkg.mod:fn`.
        if isinstance(v, str):
            return {"entry": v} if ":" in v else {"name": v}
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        problems: list[str] = []
        if self.job_class == "bulk" and self.sla.throughput is None:
            problems.append("sla.throughput is required for class bulk")
        if self.job_class == "interactive" and self.sla.latency is None:
            problems.append("sla.latency is required for class interactive")
        lo, hi = self.resources.gpus.min, self.resources.gpus.upper
        dp = self.run.data_parallel
        if dp is not None and not lo <= dp <= hi:
            problems.append(
                f"run.data_parallel must be within resources.gpus [{lo}, {hi}], got {dp}"
            )
        has_work = self.sla.throughput is not None and self.sla.throughput.deadline_s is not None
        lengths = sum(x is not None for x in (self.run.steps, self.run.duration_s)) + has_work
        steps = self.run.steps
        explicit_warmup = "warmup_steps" in self.run.model_fields_set
        if steps is not None and explicit_warmup and self.run.warmup_steps >= steps:
            problems.append(
                f"run.warmup_steps ({self.run.warmup_steps}) must be < run.steps ({steps}), "
                "or nothing is measured"
            )
        if lengths != 1:
            problems.append(
                "give exactly one run length: run.steps, run.duration_s, or "
                "sla.throughput.work_samples/work_tokens with deadline_s"
            )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def gpus(self) -> int:
        """GPUs (data-parallel degree) the job asks for when placed."""
        return self.run.data_parallel or self.resources.gpus.min

    def steps_for(self) -> int | None:
        """Optimizer steps the run lasts: ``run.steps``, or enough for ``work_samples``.

        ``None`` for a run stated in seconds, or in tokens (the harness turns tokens into steps,
        as only the workload knows its tokens per sample).
        """
        tp = self.sla.throughput
        if tp is None or tp.work_samples is None:
            return self.run.steps
        per_step = self.run.micro_batch * self.run.grad_accum * self.gpus
        return max(1, math.ceil(tp.work_samples / per_step))


def _json_problem(value: Any, where: str, depth: int) -> str | None:
    """Why ``value`` is not plain JSON data (``None`` if it is), naming the place within."""
    at = where or "the value"
    if value is None or isinstance(value, (str, bool)):
        return None
    if isinstance(value, int):
        return None if abs(value) < 2**63 else f"{at}: integers must be below 2**63"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{at}: numbers must be finite, got {value}"
    if isinstance(value, (list, dict)):
        if depth <= 0:
            return f"{at}: nested more than {_ARGS_DEPTH} levels deep"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict) and not isinstance(key, str):
                return f"{at}: keys must be strings, got {key!r}"
            problem = _json_problem(item, f"{where}.{key}" if where else str(key), depth - 1)
            if problem:
                return problem
        return None
    return (
        f"{at}: {type(value).__name__} is not allowed (strings, numbers, booleans, lists, mappings)"
    )


def parse_spec(data: Any, source: str = "<input>") -> JobSpec:
    """Validate already-parsed data (a mapping) into a :class:`JobSpec`.

    Raises:
        SpecError: one message per problem.
    """
    if not isinstance(data, dict):
        raise SpecError(source, [f"the job must be a mapping of fields, got {type(data).__name__}"])
    try:
        return JobSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(source, describe_errors(err, JobSpec, _ENTRY_RULE)) from None


def load_spec(path: str | Path) -> JobSpec:
    """Read a YAML (``.yaml``/``.yml``) or JSON (``.json``) job file and validate it.

    The file is read within the limits of :mod:`orchestrator.inputs` (a regular file, bounded
    size, no YAML aliases or duplicate keys, bounded nesting).

    Raises:
        SpecError: the file is missing, not a regular file, too large, not YAML/JSON, or fails
            validation.
    """
    p = Path(path)
    if p.suffix.lower() not in {".yaml", ".yml", ".json"}:
        raise SpecError(
            str(p), [f"job files end in .yaml, .yml or .json, got {p.suffix or 'none'!r}"]
        )
    return parse_spec(load_document(p), str(p))
