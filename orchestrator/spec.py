"""The job file: pydantic models validated once, at the edge.

A job file (YAML or JSON) becomes a :class:`JobSpec`, or a :class:`SpecError` listing every
problem with the field's dotted path and what is allowed. Inside the orchestrator the spec is
trusted. See docs/user-guide.md ("Job file") for the format.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

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
from orchestrator.loader_spec import LoaderSpec
from workers.workloads.registry import BUILTIN_WORKLOADS

if TYPE_CHECKING:
    from workers.parallel.plan import ModelShape

JobClass = Literal["bulk", "interactive"]
Precision = Literal["fp32", "bf16", "fp16"]
Sharding = Literal["ddp", "fsdp"]
LRScaling = Literal["linear", "sqrt", "none", "script"]
ENTRY_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
PYTHONS = ("python", "python3")
SettingName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")]
_ENTRY_RULE = {
    ENTRY_PATTERN: "must be an entry point 'package.module:function'",
    DIGEST_PATTERN: "must be a stored working directory's digest 'sha256:<64 hex>' "
    "(orch submit --working-dir sets it)",
}

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


class ScriptSetting(_Model):
    """One of a command-mode script's own settings: its type, what it may be, the value
    ``orch`` hands the script (``default``) until the tuner chooses another, and whether the
    tuner may (``tune``)."""

    type: Literal["int", "float", "choice"]
    tune: bool = Field(
        default=True,
        description="whether the tuner may search it (judged by the SLA: speed and cost, "
        "never the loss); false: orch applies its default and the tuner leaves it alone "
        "(a learning rate)",
    )
    min: float | None = Field(default=None, allow_inf_nan=False)
    max: float | None = Field(default=None, allow_inf_nan=False)
    values: list[str | int | float | bool] | None = Field(default=None, min_length=1, max_length=64)
    default: str | int | float | bool

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.type == "choice":
            if self.values is None or self.min is not None or self.max is not None:
                raise ValueError("a choice setting gives values (a list), not min/max")
            if self.default not in self.values:
                raise ValueError(f"default {self.default!r} must be one of values {self.values}")
            return self
        if self.values is not None or self.min is None or self.max is None:
            raise ValueError(f"an {self.type} setting gives min and max, not values")
        if self.max < self.min:
            raise ValueError(f"max ({self.max:g}) must be >= min ({self.min:g})")
        number = isinstance(self.default, int | float) and not isinstance(self.default, bool)
        if self.type == "int" and not (isinstance(self.default, int) and number):
            raise ValueError(f"default must be an integer for an int setting, got {self.default!r}")
        if not number or not self.min <= float(self.default) <= self.max:
            raise ValueError(f"default must be a number in [{self.min:g}, {self.max:g}]")
        return self


class WorkloadRef(_Model):
    """What to run: a built-in workload by ``name``, a user ``entry`` point, or a ``command``
    (the team's own script, run in its working directory: see docs/user-guide.md, "Command mode").

    ``working_dir`` is the content digest (``sha256:...``) of the job's working directory as
    ``orch submit --working-dir`` stored it; ``settings`` are the script's own tunable
    settings; ``first_report_s`` is how long a command may run before its first step report
    (a script that never calls ``job.report()`` fails after it, instead of holding GPUs).
    """

    name: str | None = None
    entry: str | None = Field(default=None, pattern=ENTRY_PATTERN, max_length=256)
    command: list[Annotated[str, Field(min_length=1, max_length=1024)]] | None = Field(
        default=None, min_length=1, max_length=256
    )
    working_dir: str | None = Field(default=None, pattern=DIGEST_PATTERN)
    settings: dict[SettingName, ScriptSetting] = Field(default_factory=dict, max_length=64)
    first_report_s: float = Field(default=300.0, gt=0, le=MAX_SECONDS)
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
                "(or give entry: 'package.module:function', or command: [python, script.py])"
            )
        return v

    @field_validator("command")
    @classmethod
    def _in_working_dir(cls, v: list[str] | None) -> list[str] | None:
        # The allow-list for command mode: the worker's own Python, or a program of the job's
        # working directory (what the team shipped), never another program of the host.
        if v is not None and not command_program_allowed(v[0]):
            raise ValueError(
                f"the program {v[0]!r} is not allowed: give python (the worker's Python) or a "
                "relative path within the working directory (./run.sh, tools/train)"
            )
        return v

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if sum(x is not None for x in (self.name, self.entry, self.command)) != 1:
            raise ValueError(
                "give exactly one of name (a built-in), entry (module:function) or "
                "command (a list: [python, train.py, ...])"
            )
        if self.command is None and (self.working_dir or self.settings):
            raise ValueError("working_dir and settings go with command only")
        if self.command is not None and self.working_dir is None:
            raise ValueError(
                "a command needs its working directory: orch submit --working-dir DIR job.yaml"
            )
        return self

    @property
    def ref(self) -> str:
        """The name or entry point, as the worker registry resolves it; for a command, the
        command line (shown, never resolved)."""
        if self.command is not None:
            return " ".join(self.command)
        return self.name if self.name is not None else str(self.entry)


def command_program_allowed(program: str) -> bool:
    """Whether a command may start with ``program``: ``python``/``python3`` (the worker's
    interpreter, with torch and ``workers.job``) or a relative path inside the working
    directory (no ``..``, not absolute)."""
    if program in PYTHONS:
        return True
    parts = Path(program).parts
    return "/" in program and not program.startswith("/") and ".." not in parts


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


class PlanSettings(_Model):
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


class RunSettings(_Model):
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


MAX_SERVE_BATCH = 4096
MAX_TRACE = 100_000


class ServeSpec(_Model):
    """A service: requests arrive open-loop at an offered load and are answered by the job's
    replicas (one per GPU), each with a dynamic batcher (``workers.serving``): a batch leaves
    when it holds ``run.micro_batch`` requests or its oldest request has waited
    ``max_delay_ms`` (``null``: a fixed batch, which waits until full). ``sla.latency`` is then
    about requests, arrival to answer; the service runs for ``run.duration_s``.
    ``quantize: int8`` serves the model with int8 dynamic quantization of its linear layers
    (CPU kernels), once its outputs on seeded inputs are within ``quant_tolerance`` (relative
    L2 error) of fp32's: a model further off is refused, and the error is reported
    (``quant_error``).

    The offered load may change while the service runs: a ``trace`` is its arrival times, so
    a trace whose gaps halve then grow again is a load that doubles then falls (the trace
    repeats to cover ``run.duration_s``). With ``resources.gpus`` a range, the SLA guard scales
    the replicas within it as the load and the tail move (``policies.replicas``); a resize
    relaunches the service, and ``start_at`` (the wall-clock time, Unix seconds, of the
    stream's time 0; ``null``: when the run starts) lets the new run go on where the stream is:
    the scheduler sets it on a service it resizes. Requests due while it restarts are not
    offered to it; ``run.duration_s`` counts from the stream's start.
    """

    rate_rps: float | None = Field(default=None, gt=0, le=1e6)
    trace: list[float] | None = Field(default=None, min_length=1, max_length=MAX_TRACE)
    max_delay_ms: float | None = Field(default=2.0, ge=0, le=60_000)
    timeout_ms: float | None = Field(default=None, gt=0, le=3_600_000)
    quantize: Literal["none", "int8"] = "none"
    quant_tolerance: float = Field(default=0.05, gt=0, le=1)
    start_at: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.rate_rps is None) == (self.trace is None):
            raise ValueError(
                "give exactly one of serve.rate_rps (requests per second) and serve.trace "
                "(arrival times in seconds)"
            )
        last = 0.0
        for i, t in enumerate(self.trace or ()):
            if t < 0 or t < last:
                raise ValueError(f"trace[{i}] must be >= 0 and >= the time before it, got {t:g}")
            last = t
        return self

    def harness(self) -> dict[str, Any]:
        """The settings as the worker's ``HarnessConfig.serve`` takes them (seconds)."""
        return {
            "rate_rps": self.rate_rps,
            "trace": list(self.trace) if self.trace is not None else None,
            "max_delay_s": None if self.max_delay_ms is None else self.max_delay_ms / 1000.0,
            "timeout_s": None if self.timeout_ms is None else self.timeout_ms / 1000.0,
            "quantize": self.quantize,
            "quant_tolerance": self.quant_tolerance,
            "start_at": self.start_at,
        }


class IntRange(_Model):
    """An inclusive integer range for a tuning bound."""

    min: int = Field(ge=1, le=65536)
    max: int = Field(ge=1, le=65536)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class PlanBounds(_Model):
    """The parallel plans the tuner may try (``tuning.bounds.plan``): every combination of
    these tensor and pipeline degrees and ZeRO stages that fits a GPU count (see
    docs/parallel-plans.md); without it the tuner tries data parallelism (``sharding``)."""

    tp: list[Annotated[int, Field(ge=1, le=64)]] = Field(default=[1], min_length=1, max_length=8)
    pp: list[Annotated[int, Field(ge=1, le=64)]] = Field(default=[1], min_length=1, max_length=8)
    zero: list[Annotated[int, Field(ge=0, le=3)]] = Field(
        default=[0, 3], min_length=1, max_length=4
    )


class TuningBounds(_Model):
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
    objective: Literal["gpu_seconds", "energy"] = Field(
        default="gpu_seconds",
        description="what a throughput SLA's tuning minimises per sample: GPU-seconds, or "
        "energy (joules, from NVML: GPUs only)",
    )


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
    serve: ServeSpec | None = None
    depends_on: list[Name] = Field(
        default_factory=list,
        max_length=16,
        description="jobs this one starts after: each a job id, or the name of one job (an "
        "earlier job of the same submission, or a stored job of the same team); it waits "
        "queued until all have finished, and fails if one fails or is cancelled",
    )

    @field_validator("depends_on")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        twice = sorted({ref for ref in v if v.count(ref) > 1})
        if twice:
            raise ValueError(f"names {', '.join(twice)} more than once")
        return v

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
        tp = self.sla.throughput
        if self.workload.command is not None and tp is not None and tp.work_tokens is not None:
            problems.append(  # tokens become steps by a workload's tokens per sample: unknown
                "sla.throughput.work_tokens: a command job states its work in samples "
                "(work_samples), run.steps or run.duration_s"
            )
        problems += self._command_tuning_problems()
        if self.tuning.objective == "energy" and (
            self.sla.latency is not None or self.sla.throughput is None
        ):
            problems.append(
                "tuning.objective 'energy' needs a throughput SLA without a latency ceiling "
                "(under a ceiling the tuner maximises throughput)"
            )
        if lengths != 1:
            problems.append(
                "give exactly one run length: run.steps, run.duration_s, or "
                "sla.throughput.work_samples/work_tokens with deadline_s"
            )
        problems += self._batch_problems()
        problems += self._serve_problems()
        problems += self._service_bounds_problems()
        problems += self._plan_problems()
        problems += self._plan_bounds_problems()
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _command_tuning_problems(self) -> list[str]:
        """What the tuner cannot search for a command job: the settings the harness applies to
        a model it builds (the script builds its own and reads only micro-batch,
        accumulation, precision, its ranks and its declared settings), a global batch range
        (the script owns its learning rate) and an energy cost (its steps carry no energy
        figure)."""
        if self.workload.command is None or not self.tuning.enabled:
            return []
        b = self.tuning.bounds
        problems = [
            f"tuning.bounds.{name}: a command job's script builds its own model; the tuner "
            f"searches run.micro_batch, run.grad_accum, the GPU count, run.precision and "
            f"workload.settings (allowed here: {allowed})"
            for name, value, allowed in (
                ("activation_checkpointing", b.activation_checkpointing, [False]),
                ("compile", b.compile, [False]),
                ("sharding", b.sharding, ["ddp"]),
            )
            if value is not None and value != allowed
        ]
        if b.plan is not None:
            problems.append(
                "tuning.bounds.plan: a command job's script builds its own model and "
                "parallelism; the tuner searches only its data-parallel GPU count"
            )
        gb = b.global_batch
        if gb is not None and gb.min < gb.max:
            problems.append(
                "tuning.bounds.global_batch: a command job keeps its global batch (its script "
                "owns its learning rate); give a single value or leave it out"
            )
        if self.tuning.objective == "energy":
            problems.append(
                "tuning.objective 'energy': a command job's steps carry no energy figure; use "
                "gpu_seconds"
            )
        return problems

    def _serve_problems(self) -> list[str]:
        """A service is interactive work that runs for a duration, answering with forward
        passes, with a batch within bounds."""
        if self.serve is None:
            return []
        problems: list[str] = []
        if self.job_class != "interactive":
            problems.append("serve is for class interactive (a service answers requests now)")
        if self.run.duration_s is None:
            problems.append("serve needs run.duration_s (how long the service runs)")
        if self.workload.name is not None and self.workload.name != "infer":
            problems.append(
                f"workload.name: serve needs a forward-only workload: the built-in "
                f"{self.workload.name!r} trains (allowed: infer, or an entry: "
                "'package.module:function' whose Workload has train=False)"
            )
        if self.workload.command is not None:
            problems.append(
                "workload.command: serve needs a workload the worker batches for (name: infer, "
                "or an entry: whose Workload has train=False), not a command"
            )
        if self.run.micro_batch > MAX_SERVE_BATCH:
            problems.append(
                f"run.micro_batch is the service's largest batch: at most {MAX_SERVE_BATCH}, "
                f"got {self.run.micro_batch}"
            )
        if self.run.grad_accum != 1:
            problems.append("run.grad_accum must be 1 for a service")
        return problems

    def _service_bounds_problems(self) -> list[str]:
        """The serving bounds of ``tuning.bounds`` are a service's only."""
        b = self.tuning.bounds
        given = [n for n in ("max_delay_ms", "quantize") if getattr(b, n) is not None]
        if self.serve is not None or not given:
            return []
        return [f"tuning.bounds.{n} applies to a service (a job with serve:)" for n in given]

    def _plan_problems(self) -> list[str]:
        """A plan's degrees multiply to the GPU count; it is for a training workload the
        harness runs; and it splits a built-in model as the harness's rule allows
        (``workers.parallel.plan.split_problems``: what the harness refuses at start is
        refused here). A user workload's model is checked at start."""
        if self.run.plan is None:
            return []
        from workers.parallel.plan import Plan, split_problems

        plan = Plan(**self.run.plan.model_dump())
        problems = plan.problems(world=self.gpus, where="run.plan")
        if self.serve is not None or self.workload.command is not None:
            problems.append("run.plan applies to a training workload the harness runs")
        shape = self.model_shape()
        if shape is not None:
            problems += split_problems(
                plan, shape, where="run.plan", workload=f"{self.workload.name!r}"
            )
        return problems

    def _plan_bounds_problems(self) -> list[str]:
        """``tuning.bounds.plan`` must hold a plan that can run: one that splits the built-in
        model (the harness's rule) on a GPU count the job may be tuned on. Plans of it that
        cannot are left out of the search space, each with its reason
        (``orchestrator.tuner.space``)."""
        pb = self.tuning.bounds.plan
        lo, hi = self.tuning_gpus()
        if pb is None or hi <= 1 or lo > hi:
            return []  # one GPU runs no plan: the bound is moot
        reasons: list[str] = []
        for tp in sorted(set(pb.tp)):
            for pp in sorted(set(pb.pp)):
                p = self._bound_plan_problems(tp, pp, sorted(set(pb.zero)), lo, hi)
                if not p:
                    return []
                reasons += p
        return [f"no plan of tuning.bounds.plan can run: {r}" for r in dict.fromkeys(reasons)]

    def _bound_plan_problems(
        self, tp: int, pp: int, zeros: list[int], lo: int, hi: int
    ) -> list[str]:
        """Why no plan of ``tp x pp`` model ranks (ZeRO stage one of ``zeros``) can run the job
        on ``lo`` to ``hi`` GPUs (empty when one can)."""
        from workers.parallel.plan import Plan, split_problems

        shape = self.model_shape()
        if shape is not None:
            name = f"{self.workload.name!r}"
            p = split_problems(Plan(tp=tp, pp=pp), shape, where="tuning.bounds.plan", workload=name)
            if p:
                return p
        if any(Plan.on(g, tp, pp, z) for z in zeros for g in range(lo, hi + 1)):
            return []
        return [
            f"tuning.bounds.plan: tp {tp} x pp {pp} (zero {zeros}) is a plan for no GPU count "
            f"within [{lo}, {hi}] (resources.gpus, tuning.bounds.gpus)"
        ]

    def model_shape(self) -> ModelShape | None:
        """The shape of the job's built-in model (``None``: a user's, or arguments the worker
        will refuse)."""
        if self.workload.name is None:
            return None
        from workers.workloads.shapes import builtin_shape

        return builtin_shape(self.workload.name, self.workload.args)

    def tuning_gpus(self) -> tuple[int, int]:
        """The GPU counts the tuner may try: ``resources.gpus`` within ``tuning.bounds.gpus``
        (before the tuning gang's size narrows them)."""
        lo, hi = self.resources.gpus.min, self.resources.gpus.upper
        b = self.tuning.bounds.gpus
        if b is not None:
            lo, hi = max(lo, b.min), min(hi, b.max)
        return lo, hi

    def _batch_problems(self) -> list[str]:
        """The global batch range must hold the job's own batch; ``script`` needs the job's
        own code (a built-in workload has no ``scale_lr``)."""
        bounds = self.tuning.bounds
        gb = bounds.global_batch
        own = self.run.micro_batch * self.run.grad_accum * self.replicas
        problems: list[str] = []
        if gb is not None and not gb.min <= own <= gb.max:
            problems.append(
                f"tuning.bounds.global_batch [{gb.min}, {gb.max}] must hold the job's own global "
                f"batch {own} (run.micro_batch x run.grad_accum x data-parallel replicas)"
            )
        if bounds.lr_scaling == "script" and self.workload.entry is None:
            problems.append(
                "tuning.bounds.lr_scaling script needs a workload given by entry: whose "
                "Workload has scale_lr (built-ins use linear, sqrt or none)"
            )
        return problems

    @property
    def gpus(self) -> int:
        """GPUs (data-parallel degree) the job asks for when placed."""
        return self.run.data_parallel or self.resources.gpus.min

    @property
    def replicas(self) -> int:
        """Data-parallel replicas: ``run.plan.dp``, else every GPU (the global batch is the
        micro-batch x accumulation x replicas)."""
        return self.run.plan.dp if self.run.plan is not None else self.gpus

    def steps_for(self) -> int | None:
        """Optimizer steps the run lasts: ``run.steps``, or enough for ``work_samples``.

        ``None`` for a run stated in seconds, or in tokens (the harness turns tokens into steps,
        as only the workload knows its tokens per sample).
        """
        tp = self.sla.throughput
        if tp is None or tp.work_samples is None:
            return self.run.steps
        per_step = self.run.micro_batch * self.run.grad_accum * self.replicas
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


def load_spec(path: str | Path, *, working_dir: str | None = None) -> JobSpec:
    """Read a YAML (``.yaml``/``.yml``) or JSON (``.json``) job file and validate it.

    The file is read within the limits of :mod:`orchestrator.inputs` (a regular file, bounded
    size, no YAML aliases or duplicate keys, bounded nesting).

    Args:
        working_dir: the digest of the stored working directory (``orch submit
            --working-dir``): a command job's ``workload.working_dir`` becomes it.

    Raises:
        SpecError: the file is missing, not a regular file, too large, not YAML/JSON, or fails
            validation.
    """
    p = Path(path)
    if p.suffix.lower() not in {".yaml", ".yml", ".json"}:
        raise SpecError(
            str(p), [f"job files end in .yaml, .yml or .json, got {p.suffix or 'none'!r}"]
        )
    return spec_from_document(load_document(p), str(p), working_dir=working_dir)


def spec_from_document(data: Any, source: str, *, working_dir: str | None = None) -> JobSpec:
    """:func:`load_spec` of a document already read and parsed (``orch submit -``: stdin)."""
    workload = data.get("workload") if isinstance(data, dict) else None
    if working_dir is not None and isinstance(workload, dict) and "command" in workload:
        data["workload"] = {**workload, "working_dir": working_dir}
    return parse_spec(data, source)
