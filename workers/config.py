"""The harness configuration: the knobs the tuner turns, as one immutable value.

No torch here: the control plane builds these from a job spec and a tuned trial, and ships them
to worker actors as plain dicts (:meth:`HarnessConfig.to_dict` / :meth:`HarnessConfig.from_dict`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from workers.errors import HarnessConfigError
from workers.loader_settings import LoaderSettings

__all__ = ["LR_SCALINGS", "OPTIMIZERS", "PRECISIONS", "SHARDINGS", "HarnessConfig"]

PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")
SHARDINGS: tuple[str, ...] = ("ddp", "fsdp")
LR_SCALINGS: tuple[str, ...] = ("none", "linear", "sqrt", "script")


@dataclass(frozen=True)
class HarnessConfig:
    """How to run one workload: batch geometry, precision, memory/speed options, length.

    Attributes:
        workload: a built-in workload name or a user entry point ``"package.module:function"``.
        workload_args: arguments passed to the workload builder.
        micro_batch: samples per forward/backward pass on one rank.
        grad_accum: micro-batches per optimizer step (must be 1 for inference workloads).
        precision: ``fp32``, ``bf16`` or ``fp16`` (autocast; fp16 uses a GradScaler on CUDA).
        activation_checkpointing: recompute the workload's ``blocks`` in backward: ``True``
            every block, or a share of them (a number in (0, 1): the first ``ceil(share x
            blocks)``; see ``workers.optimizations.checkpointed_blocks``).
        compile: run the model through ``torch.compile``.
        sharding: how more than one rank train, ``ddp`` (replicated model, all-reduced
            gradients) or ``fsdp`` (parameters, gradients and optimizer state sharded over the
            ranks); one rank, or an inference workload, runs unsharded either way. Checkpoints
            are the same for both. Shorthand for a ``plan`` of ``dp`` = the ranks and
            ZeRO 0 (``ddp``) or 3 (``fsdp``); ignored when ``plan`` is set.
        plan: the parallel plan, :class:`workers.parallel.Plan` as a dict (``dp``, ``tp``,
            ``pp``, ``zero``, ``offload``); its degrees multiply to the ranks. The global batch
            is ``micro_batch x grad_accum x dp``.
        steps: optimizer steps in total, counting those done before a resume.
        duration_s: wall-clock seconds the job trains for, counted over its runs: each from
            the start of its step loop (after building the model, the process group and the
            resume; ``torch.compile``'s compilation, which happens in the first steps, counts),
            a resumed run getting what its checkpoint says is left (``run_time_s``).
        work_tokens: tokens to train on in total; the harness turns it into steps from the
            workload's tokens per sample and the global batch. Exactly one of ``steps``,
            ``duration_s`` and ``work_tokens`` is set.
        warmup_steps: steps at the start of this run excluded from latency and throughput.
        checkpoint_every: write a checkpoint every this many optimizer steps (0 = never; a
            checkpoint is still written when the run is stopped).
        seed: seeds model initialisation, the data stream and the RNGs.
        lr: learning rate at ``base_global_batch``.
        optimizer: ``adamw`` or ``sgd`` (momentum 0.9).
        lr_scaling: how the learning rate follows a global batch ``G`` (micro-batch x
            accumulation x ranks) other than ``base_global_batch`` ``G0``: ``none`` (kept),
            ``linear`` (``lr x G/G0``, Goyal et al. 2017), ``sqrt`` (``lr x sqrt(G/G0)``,
            Krizhevsky 2014; Hoffer et al. 2017) or ``script`` (the workload's ``scale_lr``).
        serve: a live service instead of a training or inference loop (see
            :class:`workers.serve_run.ServeRun`): its arrivals (``rate_rps`` or ``trace``) and
            batcher (``max_delay_s``, ``timeout_s``), ``quantize`` (``none``/``int8``) and
            ``quant_tolerance``, ``start_at`` (the stream's time 0 on the wall clock: a
            resized service goes on where its stream is) and ``stopped_at`` (when the run
            before stopped serving: what was due since counts as dropped); ``micro_batch``
            is its largest batch.
        base_global_batch: the global batch ``lr`` is set for (``None``: this run's own).
        loader: the data loader's knobs for a workload that gives a dataset
            (:class:`workers.loader_settings.LoaderSettings` as a dict; empty: its defaults);
            ignored for a ``make_batch`` workload.
        command: for a command-mode job (``workload`` is then its command line, for display):
            ``{"argv": [...], "settings": {name: value}, "first_report_s": s,
            "working_dir": digest}``; the script applies the knobs (see :mod:`workers.job`).
        network: whether a team's code (sandboxed) keeps the host's network; without it, it
            runs in a network namespace of its own (a gang of more than one rank always
            keeps it: its ranks meet over TCP). See :mod:`workers.contain`.
        memory_gb: host memory a team's code may use per rank (GB of 10^9 bytes); ``None``:
            the operator's default (``ORCH_SANDBOX_MEMORY``).
    """

    workload: str
    workload_args: dict[str, Any] = field(default_factory=dict)
    micro_batch: int = 8
    grad_accum: int = 1
    precision: str = "fp32"
    activation_checkpointing: bool | float = False
    compile: bool = False
    sharding: str = "ddp"
    plan: dict[str, Any] | None = None
    steps: int | None = None
    duration_s: float | None = None
    work_tokens: int | None = None
    warmup_steps: int = 3
    checkpoint_every: int = 0
    seed: int = 0
    lr: float = 1e-3
    optimizer: str = "adamw"
    lr_scaling: str = "none"
    base_global_batch: int | None = None
    serve: dict[str, Any] | None = None
    command: dict[str, Any] | None = None
    loader: dict[str, Any] = field(default_factory=dict)
    network: bool = False
    memory_gb: float | None = None

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise HarnessConfigError("invalid harness config: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        p: list[str] = []
        if self.serve is not None:
            p += _serve_problems(self.serve, self.duration_s)
        if not self.workload:
            p.append("workload must be a built-in name or 'package.module:function'")
        for name in ("micro_batch", "grad_accum"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                p.append(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("warmup_steps", "checkpoint_every", "seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                p.append(f"{name} must be an integer >= 0, got {value!r}")
        ckpt = self.activation_checkpointing
        if not isinstance(ckpt, bool) and not (isinstance(ckpt, float) and 0.0 < ckpt < 1.0):
            p.append(
                "activation_checkpointing must be true, false or a share of the blocks in "
                f"(0, 1), got {ckpt!r}"
            )
        if self.precision not in PRECISIONS:
            p.append(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.sharding not in SHARDINGS:
            p.append(f"sharding must be one of {', '.join(SHARDINGS)}, got {self.sharding!r}")
        if self.plan is not None:
            p += _plan_problems(self.plan)
        if self.lr_scaling not in LR_SCALINGS:
            p.append(f"lr_scaling must be one of {', '.join(LR_SCALINGS)}, got {self.lr_scaling!r}")
        base = self.base_global_batch
        if base is not None and (not isinstance(base, int) or isinstance(base, bool) or base < 1):
            p.append(f"base_global_batch must be an integer >= 1, got {base!r}")
        if self.optimizer not in OPTIMIZERS:
            p.append(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.command is not None and not (
            isinstance(self.command.get("argv"), list) and self.command["argv"]
        ):
            p.append("command must hold argv, a non-empty list")
        try:
            LoaderSettings.from_dict(self.loader)
        except HarnessConfigError as err:
            p.append(str(err))
        lengths = (self.steps, self.duration_s, self.work_tokens)
        if sum(x is not None for x in lengths) != 1:
            p.append("exactly one of steps, duration_s and work_tokens must be set")
        if self.work_tokens is not None and (
            not isinstance(self.work_tokens, int) or self.work_tokens < 1
        ):
            p.append(f"work_tokens must be an integer >= 1, got {self.work_tokens!r}")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            p.append(f"steps must be an integer >= 1, got {self.steps!r}")
        if self.duration_s is not None and not (
            isinstance(self.duration_s, int | float) and self.duration_s > 0
        ):
            p.append(f"duration_s must be > 0, got {self.duration_s!r}")
        mem = self.memory_gb
        finite = isinstance(mem, int | float) and math.isfinite(mem)
        if mem is not None and not (finite and mem > 0):
            p.append(f"memory_gb must be a number > 0, got {mem!r}")
        if not (isinstance(self.lr, int | float) and math.isfinite(self.lr) and self.lr > 0):
            p.append(f"lr must be a finite number > 0, got {self.lr!r}")
        return p

    @property
    def samples_per_rank_step(self) -> int:
        """Samples one rank processes per optimizer step."""
        return self.micro_batch * self.grad_accum

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict that :meth:`from_dict` turns back into this config."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HarnessConfig:
        """Build a config from a dict, refusing unknown keys.

        Raises:
            HarnessConfigError: an unknown key, a missing ``workload`` or an invalid value.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HarnessConfigError(
                f"unknown harness config keys {unknown}; allowed: {', '.join(sorted(known))}"
            )
        if "workload" not in data:
            raise HarnessConfigError("harness config needs 'workload'")
        return cls(**data)


def _plan_problems(plan: Any) -> list[str]:
    """What is wrong with a plan dict on its own (the ranks are checked by the harness)."""
    from workers.parallel.plan import Plan

    if not isinstance(plan, dict):
        return [f"plan must be a mapping of dp, tp, pp, zero, offload, got {plan!r}"]
    try:
        return Plan.from_dict(plan).problems()
    except (TypeError, ValueError) as exc:
        return [f"plan: {exc}"]


def _serve_problems(serve: dict[str, Any], duration_s: float | None) -> list[str]:
    """What is wrong with a service's settings (``HarnessConfig.serve``): ``rate_rps`` (> 0)
    or ``trace`` (arrival times), ``max_delay_s`` (>= 0, or ``None``: a fixed batch),
    ``timeout_s`` (> 0 or ``None``); a service runs for ``duration_s``."""
    p: list[str] = []
    known = {
        "rate_rps",
        "trace",
        "max_delay_s",
        "timeout_s",
        "quantize",
        "quant_tolerance",
        "start_at",
        "stopped_at",
        "endpoint",
        "weights",
    }
    unknown = sorted(set(serve) - known)
    if unknown:
        p.append(f"serve: unknown keys {unknown}")
    if (serve.get("rate_rps") is None) == (serve.get("trace") is None):
        p.append("serve needs exactly one of rate_rps and trace")
    rate = serve.get("rate_rps")
    if rate is not None and not (
        isinstance(rate, int | float) and math.isfinite(rate) and rate > 0
    ):
        p.append(f"serve.rate_rps must be a finite number > 0, got {rate!r}")
    for key in ("max_delay_s", "timeout_s"):
        v = serve.get(key)
        if v is not None and not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            p.append(f"serve.{key} must be a finite number >= 0, got {v!r}")
    weights = serve.get("weights")
    if weights is not None and not (
        isinstance(weights, dict) and {"location", "workload", "workload_args"} <= set(weights)
    ):
        p.append("serve.weights must name a checkpoint's location, workload and workload_args")
    if not isinstance(serve.get("endpoint", False), bool):
        p.append(f"serve.endpoint must be true or false, got {serve.get('endpoint')!r}")
    if serve.get("quantize", "none") not in ("none", "int8", None):
        p.append(f"serve.quantize must be none or int8, got {serve.get('quantize')!r}")
    for key in ("start_at", "stopped_at"):
        at = serve.get(key)
        if at is not None and not (isinstance(at, int | float) and math.isfinite(at) and at > 0):
            p.append(f"serve.{key} must be a wall-clock time in seconds > 0, got {at!r}")
    tol = serve.get("quant_tolerance")
    if tol is not None and not (isinstance(tol, int | float) and math.isfinite(tol) and tol > 0):
        p.append(f"serve.quant_tolerance must be a finite number > 0, got {tol!r}")
    if duration_s is None:
        p.append("a service runs for duration_s (not steps or work_tokens)")
    return p
