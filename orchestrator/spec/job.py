"""The whole job (:class:`JobSpec`): its sections, and the checks that span them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Self

from pydantic import Field, field_validator, model_validator

from orchestrator.inputs import Name
from orchestrator.spec.base import JobClass, SpecModel
from orchestrator.spec.run import Resources, RunSettings
from orchestrator.spec.serving import MAX_SERVE_BATCH, ServeSpec
from orchestrator.spec.sla import SLA
from orchestrator.spec.tuning import Tuning
from orchestrator.spec.workload import WorkloadRef

if TYPE_CHECKING:
    from workers.parallel.plan import ModelShape


class JobSpec(SpecModel):
    """A validated job: who, what, which SLA, how many GPUs, and how to run it."""

    name: Name = Field(
        description="the job's name, shown beside its id; depends_on and the commands that take "
        "a job may name it by it"
    )
    team: Name = Field(
        description="the team it runs for: its guarantee, quota and fair share of GPUs (the team "
        "config), and who may see and cancel it"
    )
    job_class: JobClass = Field(
        alias="class",
        description="bulk: throughput or work by a deadline, may wait, be resized or be "
        "preempted; interactive: a latency ceiling, starts at once and is never preempted",
    )
    workload: WorkloadRef = Field(
        description="what to run; `workload: cnn` is short for `{name: cnn}` and "
        "`workload: pkg.mod:fn` for `{entry: pkg.mod:fn}`"
    )
    sla: SLA = Field(description="what the job needs")
    resources: Resources = Field(
        default_factory=Resources,
        description="the GPUs it may use and, for a team's own code, its host memory and network",
    )
    run: RunSettings = Field(
        default_factory=RunSettings,
        description="how the harness runs it: batch, precision, parallelism, length, checkpoints",
    )
    tuning: Tuning = Field(
        default_factory=Tuning,
        description="whether the auto-tuner chooses the run settings against the SLA first, "
        "within what budget and bounds",
    )
    serve: ServeSpec | None = Field(
        default=None,
        description="makes the job a service (class interactive, with run.duration_s): requests "
        "at an offered load, answered by its replicas",
    )
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
        steps, warmup = self.run.steps, self.run.warmup_steps
        # whether warmup_steps was given or is the default: a check that depended on it
        # passed at submission and failed once the spec was written out whole (tuned settings
        # at placement, `orch show`)
        if steps is not None and steps <= warmup:
            problems.append(
                f"run.steps ({steps}) must be greater than run.warmup_steps ({warmup}): "
                "warm-up steps are not measured (raise run.steps or lower run.warmup_steps)"
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
        """What the tuner cannot search for a command job: a parallel plan (the script builds
        its own model; ``job.prepare`` applies data parallelism, by DDP or FSDP, and the
        checkpointing and compile its bounds name, so those may be searched when the bounds
        ask for them), a global batch range (the script owns its learning rate) and an energy
        cost (its steps carry no energy figure)."""
        if self.workload.command is None or not self.tuning.enabled:
            return []
        b = self.tuning.bounds
        problems = []
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
