"""The search space of one job: which settings the tuner may turn, and to which values.

The space is built once from the job spec (its ``tuning.bounds`` pin or narrow any dimension,
``resources.gpus`` bounds the data-parallel degree) and the device's capabilities (bf16 needs a
CPU or an Ampere-or-newer GPU, fp16 needs CUDA). A :class:`Config` is one point of it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import TuneError

if TYPE_CHECKING:
    import optuna

    from orchestrator.spec import JobSpec

__all__ = ["DIMENSIONS", "Config", "DeviceCaps", "SearchSpace", "power_ladder", "space_for"]

DIMENSIONS: tuple[str, ...] = (
    "micro_batches",
    "grad_accums",
    "gpus",
    "shardings",
    "precisions",
    "activation_checkpointing",
    "compile",
)


@dataclass(frozen=True, order=True)
class Config:
    """One point of the search space: how the harness would run the job.

    ``sharding`` is meaningful only with more than one GPU; with one GPU it is always ``ddp``
    (there is nothing to shard), so equal runs have equal configs.
    """

    micro_batch: int
    grad_accum: int = 1
    gpus: int = 1
    sharding: str = "ddp"
    precision: str = "fp32"
    activation_checkpointing: bool = False
    compile: bool = False

    def __post_init__(self) -> None:
        if self.gpus == 1 and self.sharding != "ddp":
            object.__setattr__(self, "sharding", "ddp")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the inverse of :meth:`from_dict`)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        """Build a config from :meth:`to_dict` output (unknown keys are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def describe(self) -> str:
        """A short human form: ``mb 32 x2 acc, 4 GPU ddp, bf16, ckpt, compile``."""
        parts = [f"micro-batch {self.micro_batch}"]
        if self.grad_accum > 1:
            parts.append(f"accum {self.grad_accum}")
        parts.append(f"{self.gpus} GPU" + (f" {self.sharding}" if self.gpus > 1 else ""))
        parts.append(self.precision)
        if self.activation_checkpointing:
            parts.append("ckpt")
        if self.compile:
            parts.append("compile")
        return ", ".join(parts)


@dataclass(frozen=True)
class DeviceCaps:
    """What the device can run, so the space never holds a config that cannot start.

    Attributes:
        name: ``"cpu"`` or the GPU model (part of the tuning cache's fingerprint).
        kind: ``"cpu"`` or ``"cuda"``.
        precisions: precisions autocast supports there.
        shardings: data-parallel modes the evaluator can run with more than one GPU.
        max_gpus: the most GPUs one trial may use.
        compile: whether ``torch.compile`` is worth searching (off on CPU by default: it
            needs a C++ toolchain and its compile time dwarfs a short profiling run).
        max_micro_batch: the default upper end of the micro-batch ladder.
        gpus_per_node: GPUs of one node (gradient sync is slower across nodes).
    """

    name: str = "cpu"
    kind: str = "cpu"
    precisions: tuple[str, ...] = ("fp32", "bf16")
    shardings: tuple[str, ...] = ("ddp",)
    max_gpus: int = 1
    compile: bool = False
    max_micro_batch: int = 256
    gpus_per_node: int = 8

    @classmethod
    def detect(cls, *, max_gpus: int | None = None) -> DeviceCaps:
        """The capabilities of this machine's first CUDA device, or of its CPU (imports torch)."""
        from workers.devices import device_facts

        return cls.from_facts(device_facts(), max_gpus=max_gpus)

    @classmethod
    def from_facts(
        cls,
        facts: dict[str, Any],
        *,
        max_gpus: int | None = None,
        shardings: tuple[str, ...] = ("ddp",),
        gpus_per_node: int | None = None,
    ) -> DeviceCaps:
        """Capabilities from ``workers.devices.device_facts()`` as reported by a worker (so the
        control plane, which may see no GPU itself, shapes the space for the worker's device).

        Args:
            max_gpus: the most GPUs a trial may use (default: the devices the worker sees).
            shardings: what the evaluator can run on more than one GPU.
            gpus_per_node: where gradient sync starts crossing nodes.
        """
        count = int(facts.get("count", 0))
        if facts.get("kind") != "cuda":
            return cls(
                max_gpus=max_gpus or 1,
                shardings=shardings,
                gpus_per_node=gpus_per_node or cls.gpus_per_node,
            )
        major = int(facts.get("major", 0))
        precisions = ("fp32", "bf16", "fp16") if major >= 8 else ("fp32", "fp16")
        return cls(
            name=str(facts.get("name", "cuda")),
            kind="cuda",
            precisions=precisions,
            shardings=shardings,
            max_gpus=max_gpus or max(1, count),
            compile=True,
            max_micro_batch=1024,
            gpus_per_node=gpus_per_node or max(1, count),
        )


def power_ladder(lo: int, hi: int) -> tuple[int, ...]:
    """Powers of two within ``[lo, hi]``, plus both ends: ``power_ladder(3, 20)`` is
    ``(3, 4, 8, 16, 20)``. Doubling steps are what the OOM search and the line search walk."""
    values = {lo, hi}
    p = 1
    while p <= hi:
        if p >= lo:
            values.add(p)
        p *= 2
    return tuple(sorted(values))


@dataclass(frozen=True)
class SearchSpace:
    """The values each dimension may take (a dimension with one value is pinned).

    ``micro_batches`` is an increasing ladder: the strategies walk it by index.
    ``gpus_per_node`` is not a dimension: it tells the performance model where gradient sync
    starts crossing nodes.
    """

    micro_batches: tuple[int, ...]
    grad_accums: tuple[int, ...] = (1,)
    gpus: tuple[int, ...] = (1,)
    shardings: tuple[str, ...] = ("ddp",)
    precisions: tuple[str, ...] = ("fp32",)
    activation_checkpointing: tuple[bool, ...] = (False,)
    compile: tuple[bool, ...] = (False,)
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        for name in DIMENSIONS:
            if not getattr(self, name):
                raise TuneError(f"the search space has no value left for {name}")
        if list(self.micro_batches) != sorted(set(self.micro_batches)):
            raise TuneError("micro_batches must be strictly increasing")

    def configs(self) -> Iterator[Config]:
        """Every distinct config of the space (sharding varies only with more than one GPU)."""
        seen: set[Config] = set()
        for g, s, p, c, comp, a, m in itertools.product(
            self.gpus,
            self.shardings,
            self.precisions,
            self.activation_checkpointing,
            self.compile,
            self.grad_accums,
            self.micro_batches,
        ):
            cfg = Config(m, a, g, s, p, c, comp)
            if cfg not in seen:
                seen.add(cfg)
                yield cfg

    @property
    def size(self) -> int:
        """How many distinct configs the space holds."""
        return sum(1 for _ in self.configs())

    def contains(self, config: Config) -> bool:
        """Whether ``config`` is a point of this space."""
        return (
            config.micro_batch in self.micro_batches
            and config.grad_accum in self.grad_accums
            and config.gpus in self.gpus
            and (config.gpus == 1 or config.sharding in self.shardings)
            and config.precision in self.precisions
            and config.activation_checkpointing in self.activation_checkpointing
            and config.compile in self.compile
        )

    def index(self, micro_batch: int) -> int:
        """The position of ``micro_batch`` on the ladder."""
        return self.micro_batches.index(micro_batch)

    # ---- the Optuna view: every trial suggests the same parameters ---------------------------

    def suggest(self, trial: optuna.trial.Trial) -> Config:
        """Let Optuna's sampler (or an enqueued trial) choose a config.

        ``gpus`` is an integer range so TPE sees its order; the others are categorical.
        ``sharding`` is suggested only with more than one GPU (define-by-run).
        """
        g_lo, g_hi = min(self.gpus), max(self.gpus)
        if list(self.gpus) == list(range(g_lo, g_hi + 1)):
            gpus = trial.suggest_int("gpus", g_lo, g_hi)
        else:
            gpus = int(trial.suggest_categorical("gpus", list(self.gpus)))
        sharding = "ddp"
        if gpus > 1:
            sharding = str(trial.suggest_categorical("sharding", list(self.shardings)))
        return Config(
            micro_batch=int(trial.suggest_categorical("micro_batch", list(self.micro_batches))),
            grad_accum=int(trial.suggest_categorical("grad_accum", list(self.grad_accums))),
            gpus=gpus,
            sharding=sharding,
            precision=str(trial.suggest_categorical("precision", list(self.precisions))),
            activation_checkpointing=bool(
                trial.suggest_categorical(
                    "activation_checkpointing", list(self.activation_checkpointing)
                )
            ),
            compile=bool(trial.suggest_categorical("compile", list(self.compile))),
        )

    @staticmethod
    def params(config: Config) -> dict[str, Any]:
        """The Optuna parameters of ``config`` (for ``study.enqueue_trial``)."""
        p = config.to_dict()
        if config.gpus == 1:
            del p["sharding"]
        return p

    def to_dict(self) -> dict[str, list[Any]]:
        """The space as JSON data (stored with the study and part of the cache fingerprint)."""
        return {name: list(getattr(self, name)) for name in DIMENSIONS}


def _allowed(
    dim: str, wanted: Sequence[Any] | None, default: Sequence[Any], supported: Sequence[Any]
) -> tuple[Any, ...]:
    values = tuple(wanted) if wanted is not None else tuple(default)
    kept = tuple(v for v in values if v in supported)
    if not kept:
        raise TuneError(
            f"tuning.bounds.{dim}: none of {list(values)} is supported here "
            f"(supported: {list(supported)})"
        )
    return tuple(dict.fromkeys(kept))


def space_for(spec: JobSpec, caps: DeviceCaps) -> SearchSpace:
    """The search space of ``spec`` on a device with ``caps``.

    Defaults for a dimension the spec leaves open: micro-batch powers of two from 1 to
    ``caps.max_micro_batch``; gradient accumulation 1, 2, 4 (1 for inference workloads);
    GPUs ``resources.gpus``; every precision the device supports; checkpointing on and off;
    compile on and off where ``caps.compile``.

    Raises:
        TuneError: the bounds leave no value for a dimension (e.g. only fp16 on a CPU).
    """
    b = spec.tuning.bounds
    mb = b.micro_batch
    micro = power_ladder(mb.min, mb.max) if mb else power_ladder(1, caps.max_micro_batch)
    inference = spec.workload.name == "infer"
    ga = b.grad_accum
    accums = power_ladder(ga.min, ga.max) if ga else ((1,) if inference else (1, 2, 4))
    if inference and accums != (1,):
        raise TuneError("tuning.bounds.grad_accum must be 1 for an inference workload")
    lo, hi = spec.resources.gpus.min, spec.resources.gpus.upper
    if b.gpus is not None:
        lo, hi = max(lo, b.gpus.min), min(hi, b.gpus.max)
    hi = min(hi, caps.max_gpus)
    if lo > hi:
        raise TuneError(
            f"no GPU count fits: resources.gpus/tuning.bounds.gpus ask for at least {lo}, "
            f"but at most {hi} can be profiled here"
        )
    return SearchSpace(
        micro_batches=micro,
        grad_accums=accums,
        gpus=tuple(range(lo, hi + 1)),
        shardings=_allowed("sharding", b.sharding, ("ddp", "fsdp"), caps.shardings),
        precisions=_allowed("precision", b.precision, caps.precisions, caps.precisions),
        activation_checkpointing=_allowed(
            "activation_checkpointing", b.activation_checkpointing, (False, True), (False, True)
        ),
        compile=_allowed(
            "compile", b.compile, (False, True) if caps.compile else (False,), (False, True)
        ),
        gpus_per_node=caps.gpus_per_node,
    )
