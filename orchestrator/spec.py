"""The job file: pydantic models validated once, at the edge.

A job file (YAML or JSON) becomes a :class:`JobSpec`, or a :class:`SpecError` listing every
problem with the field's dotted path and what is allowed. Inside the orchestrator the spec is
trusted. See README.md ("Job file") for the format.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.errors import SpecError
from workers.workloads.registry import BUILTIN_WORKLOADS

JobClass = Literal["bulk", "interactive"]
Precision = Literal["fp32", "bf16", "fp16"]
Sharding = Literal["ddp", "fsdp"]
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
ENTRY_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class _Model(BaseModel):
    """Strict base: unknown fields are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class WorkloadRef(_Model):
    """What to run: a built-in workload by ``name`` or a user ``entry`` point, with ``args``."""

    name: str | None = None
    entry: str | None = Field(default=None, pattern=ENTRY_PATTERN)
    args: dict[str, Any] = Field(default_factory=dict)

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

    min_samples_per_s: float | None = Field(default=None, gt=0)
    min_tokens_per_s: float | None = Field(default=None, gt=0)
    work_samples: int | None = Field(default=None, gt=0)
    work_tokens: int | None = Field(default=None, gt=0)
    deadline_s: float | None = Field(default=None, gt=0, description="seconds after submission")

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

    max_ms: float = Field(gt=0)
    percentile: Literal[50, 95, 99] = 95
    start_within_s: float = Field(
        default=60.0, gt=0, description="seconds after submission it should start by"
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
    # Recorded and shown; not yet used by placement (virtual slots have no memory to check).
    gpu_memory_gb: float | None = Field(default=None, gt=0)

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
    steps: int | None = Field(default=None, ge=1)
    duration_s: float | None = Field(default=None, gt=0)
    warmup_steps: int = Field(default=3, ge=0)
    checkpoint_every: int = Field(default=50, ge=0)
    seed: int = Field(default=0, ge=0, lt=2**63)


class IntRange(_Model):
    """An inclusive integer range for a tuning bound."""

    min: int = Field(ge=1)
    max: int = Field(ge=1)

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
    precision: list[Precision] | None = Field(default=None, min_length=1)
    activation_checkpointing: list[bool] | None = Field(default=None, min_length=1)
    compile: list[bool] | None = Field(default=None, min_length=1)
    sharding: list[Sharding] | None = Field(default=None, min_length=1)


class TuningBudget(_Model):
    """How much profiling the tuner may spend (whichever runs out first)."""

    trials: int | None = Field(default=None, ge=1, le=10000)
    seconds: float | None = Field(default=None, gt=0)


class Tuning(_Model):
    """Reserved for the auto-tuner: off by default, the run settings are used as given."""

    enabled: bool = False
    budget: TuningBudget = Field(default_factory=TuningBudget)
    bounds: TuningBounds = Field(default_factory=TuningBounds)
    best_effort: bool = False


class JobSpec(_Model):
    """A validated job: who, what, which SLA, how many GPUs, and how to run it."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    team: Annotated[str, Field(pattern=NAME_PATTERN)]
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


# ---- turning pydantic's errors into one line per problem -------------------------------------

_TEMPLATES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "string_pattern_mismatch": "must match {pattern}",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "list_type": "must be a list",
    "too_short": "must have at least {min_length} item(s)",
}


_PATTERN_WORDS = {
    NAME_PATTERN: "must be 1-63 lowercase letters, digits, '.', '_' or '-', starting with a "
    "letter or digit",
    ENTRY_PATTERN: "must be an entry point 'package.module:function'",
}


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that holds the field at ``loc[-1]``, to list its allowed fields."""
    model: type[BaseModel] = JobSpec
    for part in loc[:-1]:
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None:
            return None
        nested = [a for a in _flat_types(field.annotation) if isinstance(a, type)]
        sub = next((a for a in nested if issubclass(a, BaseModel)), None)
        if sub is None:
            return None
        model = sub
    return model


def _flat_types(tp: Any) -> list[Any]:
    args = getattr(tp, "__args__", None)
    if not args:
        return [tp]
    return [x for a in args for x in _flat_types(a)]


def _describe(err: Any) -> str:
    loc: tuple[int | str, ...] = tuple(err["loc"])
    where = ".".join(str(p) for p in loc)
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        model = _model_at(loc)
        allowed = ""
        if model is not None:
            names = [f.alias or n for n, f in model.model_fields.items()]
            allowed = f"; allowed: {', '.join(names)}"
        return f"{where}: unknown field{allowed}"
    if kind == "literal_error":
        return f"{where} must be one of {ctx.get('expected', '?')}, got {got!r}"
    if kind == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        return "\n".join(f"{where}: {m}" if where else m for m in msg.splitlines())
    if kind == "string_pattern_mismatch" and ctx.get("pattern") in _PATTERN_WORDS:
        return f"{where} {_PATTERN_WORDS[ctx['pattern']]}, got {got!r}"
    if kind in _TEMPLATES:
        try:
            text = _TEMPLATES[kind].format(**ctx)
        except (KeyError, IndexError):
            text = err["msg"]
        return f"{where} {text}, got {got!r}"
    return f"{where}: {err['msg']}, got {got!r}" if where else str(err["msg"])


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
        problems: list[str] = []
        for e in err.errors():
            for part in _describe(e).splitlines():
                if part not in problems:
                    problems.append(part)
        raise SpecError(source, problems) from None


def load_spec(path: str | Path) -> JobSpec:
    """Read a YAML (``.yaml``/``.yml``) or JSON (``.json``) job file and validate it.

    Raises:
        SpecError: the file is missing, unreadable, not YAML/JSON, or fails validation.
    """
    p = Path(path)
    source = str(p)
    if p.suffix.lower() not in {".yaml", ".yml", ".json"}:
        raise SpecError(
            source, [f"job files end in .yaml, .yml or .json, got {p.suffix or 'none'!r}"]
        )
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(source, ["file not found"]) from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(source, [f"cannot read the file: {err}"]) from None
    try:
        data = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        first = str(err).strip().splitlines()
        raise SpecError(source, [f"not valid {p.suffix[1:].upper()}: {' '.join(first)}"]) from None
    return parse_spec(data, source)
