"""The search space of one job: which settings the tuner may turn, and to which values.

The space is built once from the job spec (its ``tuning.bounds`` pin or narrow any dimension,
``resources.gpus`` bounds the data-parallel degree) and the device's capabilities (bf16 needs a
CPU or an Ampere-or-newer GPU, fp16 needs CUDA): ``tuner/job_space.py`` builds it
(:func:`~orchestrator.tuner.job_space.space_for`). A :class:`Config` is one point of it
(:mod:`orchestrator.run_config`, with the layouts of a GPU count).

The global batch (micro-batch x accumulation x GPUs) is what the job learns with, so a
training job's space keeps it (rule 3): by default every config has the job's own global batch,
and the tuner trades micro-batch, accumulation and GPU count only among its splits; a job may
allow a range (``tuning.bounds.global_batch``, with a learning-rate rule). Accumulation is then
not an independent dimension: on ``g`` GPUs at micro-batch ``m`` it is ``G / (m g)``. A
forward-only workload learns nothing: its space has accumulation 1 and any micro-batch.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import TuneError
from orchestrator.run_config import Config, layout_key, layouts_of, plan_fits
from workers.loader_settings import DEFAULT_TOKEN

if TYPE_CHECKING:
    import optuna


__all__ = [
    "DIMENSIONS",
    "Config",
    "DeviceCaps",
    "SearchSpace",
    "power_ladder",
]

DIMENSIONS: tuple[str, ...] = (
    "micro_batches",
    "grad_accums",
    "gpus",
    "shardings",
    "precisions",
    "activation_checkpointing",
    "compile",
    "loaders",
)


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
        memory_bytes: each GPU's memory, as the probe read it (``None``: unknown, as on CPU
            slots): layouts whose model state per rank exceeds it are left out of the space.
    """

    name: str = "cpu"
    kind: str = "cpu"
    precisions: tuple[str, ...] = ("fp32", "bf16")
    shardings: tuple[str, ...] = ("ddp",)
    max_gpus: int = 1
    compile: bool = False
    max_micro_batch: int = 256
    gpus_per_node: int = 8
    memory_bytes: float | None = None

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
            memory_bytes=float(facts["memory_bytes"]) if facts.get("memory_bytes") else None,
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
    ``global_batches``: when set, a config is a point of the space only if its global batch is
    one of them (see the module doc); ``None`` leaves the batch dimensions independent (a
    forward-only workload, or a benchmark table). A *line* is the configs that differ only in
    micro-batch: with a global batch, accumulation is re-derived along it (:meth:`on_line`).
    ``gpus_per_node`` is not a dimension: it tells the performance model where gradient sync
    starts crossing nodes. ``plans``: when set, the ``(tp, pp, zero)`` choices of a config on
    more than one GPU (each where ``tp x pp`` divides the GPUs and the plan is valid: see
    :func:`plan_fits`), in place of ``shardings``; the batch splits then count replicas.
    ``excluded``: layouts (:func:`layout_key`) that cannot run, left out on every GPU count
    (their model state does not fit the GPU: :mod:`orchestrator.tuner.plan_space`);
    ``dropped``: why each plan or layout the bounds allow was left out (for the report).
    ``max_delays`` and ``quantizations``: a service's batcher window and quantization
    (``orchestrator.tuner.serving``); ``(None,)`` and ``("none",)`` for any other job, which
    then suggests neither (its studies and cache entries keep their form).
    ``settings``: a command job's script settings, each ``(name, values)`` with the values as
    JSON text (:attr:`Config.settings`); every config holds one value of each.
    """

    micro_batches: tuple[int, ...]
    grad_accums: tuple[int, ...] = (1,)
    gpus: tuple[int, ...] = (1,)
    shardings: tuple[str, ...] = ("ddp",)
    precisions: tuple[str, ...] = ("fp32",)
    activation_checkpointing: tuple[bool | float, ...] = (False,)
    compile: tuple[bool, ...] = (False,)
    loaders: tuple[str, ...] = (DEFAULT_TOKEN,)
    gpus_per_node: int = 8
    global_batches: tuple[int, ...] | None = None
    plans: tuple[tuple[int, int, int], ...] | None = None
    excluded: frozenset[tuple[int, int, int, int]] = frozenset()
    dropped: tuple[str, ...] = ()
    max_delays: tuple[float | None, ...] = (None,)
    quantizations: tuple[str, ...] = ("none",)

    @property
    def serving(self) -> bool:
        """Whether this is a service's space (its configs set a batcher window)."""
        return self.max_delays != (None,)

    settings: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        for name in (*DIMENSIONS, "max_delays", "quantizations"):
            if not getattr(self, name):
                raise TuneError(f"the search space has no value left for {name}")
        for name, values in self.settings:
            if not values:
                raise TuneError(f"the search space has no value left for workload.settings.{name}")
        if list(self.micro_batches) != sorted(set(self.micro_batches)):
            raise TuneError("micro_batches must be strictly increasing")
        if self.global_batches is not None and not any(
            self.splits(c.replicas) for g in self.gpus for c in self.layouts(g)
        ):
            raise TuneError(
                f"no micro-batch x accumulation x GPUs of the space makes a global batch of "
                f"{list(self.global_batches)}"
            )

    def splits(self, gpus: int, global_batch: int | None = None) -> tuple[tuple[int, int], ...]:
        """The ``(micro_batch, grad_accum)`` pairs of the space on ``gpus`` GPUs (with
        ``global_batch``: only those making it), by micro-batch."""
        return tuple(
            (m, a)
            for m in self.micro_batches
            for a in self.grad_accums
            if self.keeps_batch(m * a * gpus)
            and (global_batch is None or m * a * gpus == global_batch)
        )

    def keeps_batch(self, global_batch: int) -> bool:
        """Whether a config with this global batch is allowed (always, without a constraint)."""
        return self.global_batches is None or global_batch in self.global_batches

    def layouts(self, gpus: int) -> list[Config]:
        """How ``gpus`` GPUs may share the model, as configs at micro-batch 1 (the sharding,
        or with ``plans`` the plans that fit), one per distinct layout, less ``excluded``."""
        return layouts_of(gpus, self.plans, self.shardings, self.excluded)

    def configs(self) -> Iterator[Config]:
        """Every distinct config of the space (sharding varies only with more than one GPU),
        in one fixed order: listed once per space and kept (a space is immutable, and a
        strategy reads the list at every decision)."""
        return iter(self._configs)

    @functools.cached_property
    def _configs(self) -> tuple[Config, ...]:
        """The configs of :meth:`configs`, built once."""
        seen: set[Config] = set()
        out: list[Config] = []
        for g, p, c, comp, ld, q, d, st, a, m in itertools.product(
            self.gpus,
            self.precisions,
            self.activation_checkpointing,
            self.compile,
            self.loaders,
            self.quantizations,
            self.max_delays,
            self.setting_choices(),
            self.grad_accums,
            self.micro_batches,
        ):
            for lay in self.layouts(g):
                cfg = dataclasses.replace(
                    lay,
                    micro_batch=m,
                    grad_accum=a,
                    precision=p,
                    activation_checkpointing=c,
                    compile=comp,
                    loader=ld,
                    quantize=q,
                    max_delay_ms=d,
                    settings=st,
                )
                if cfg not in seen and self.keeps_batch(cfg.global_batch):
                    seen.add(cfg)
                    out.append(cfg)
        return tuple(out)

    def setting_choices(self) -> list[tuple[tuple[str, str], ...]]:
        """Every combination of the script's settings (one empty one without settings)."""
        names = [name for name, _ in self.settings]
        return [
            tuple(zip(names, combo, strict=True))
            for combo in itertools.product(*(v for _, v in self.settings))
        ]

    @property
    def size(self) -> int:
        """How many distinct configs the space holds."""
        return len(self._configs)

    def contains(self, config: Config) -> bool:
        """Whether ``config`` is a point of this space."""
        return (
            config.micro_batch in self.micro_batches
            and config.grad_accum in self.grad_accums
            and config.gpus in self.gpus
            and self._lays_out(config)
            and config.precision in self.precisions
            and config.activation_checkpointing in self.activation_checkpointing
            and config.compile in self.compile
            and config.loader in self.loaders
            and config.max_delay_ms in self.max_delays
            and config.quantize in self.quantizations
            and self._holds_settings(config)
            and self.keeps_batch(config.global_batch)
        )

    def _holds_settings(self, config: Config) -> bool:
        """Whether ``config`` gives each script setting of the space one of its values."""
        if [name for name, _ in config.settings] != [name for name, _ in self.settings]:
            return False
        return all(
            text in values
            for (_, text), (_, values) in zip(config.settings, self.settings, strict=True)
        )

    def _lays_out(self, config: Config) -> bool:
        """Whether the space shares ``config``'s GPUs as it does (sharding, or plan)."""
        if layout_key(config) in self.excluded:
            return False
        if config.gpus == 1:
            return not config.planned
        if self.plans is None:
            return not config.planned and config.sharding in self.shardings
        return (config.tp, config.pp, config.zero) in self.plans and plan_fits(
            config.gpus, config.tp, config.pp, config.zero
        )

    def index(self, micro_batch: int) -> int:
        """The position of ``micro_batch`` on the ladder."""
        return self.micro_batches.index(micro_batch)

    def on_line(self, config: Config, micro_batch: int) -> Config | None:
        """``config`` at another micro-batch, the rest of its line kept: its global batch (the
        accumulation re-derived) when the space keeps one, else its accumulation; ``None``
        when that is no point of the space."""
        accum = config.grad_accum
        if self.global_batches is not None:
            per_step = micro_batch * config.replicas
            if config.global_batch % per_step:
                return None
            accum = config.global_batch // per_step
        moved = dataclasses.replace(config, micro_batch=micro_batch, grad_accum=accum)
        return moved if self.contains(moved) else None

    def line(self, config: Config) -> list[Config]:
        """Every point of ``config``'s line (see :meth:`on_line`), by micro-batch."""
        return [c for m in self.micro_batches if (c := self.on_line(config, m)) is not None]

    def snap(self, config: Config, index: int) -> Config | None:
        """The point of ``config``'s line with the largest micro-batch at or below ladder
        ``index`` (the one a ladder walk that wanted ``index`` may take), or ``None``."""
        below = [c for c in self.line(config) if self.index(c.micro_batch) <= index]
        return below[-1] if below else None

    # ---- the Optuna view: every trial suggests the same parameters ---------------------------

    def suggest(self, trial: optuna.trial.Trial) -> Config:
        """Let Optuna's sampler (or an enqueued trial) choose a config.

        ``gpus`` is an integer range so TPE sees its order; the others are categorical.
        ``sharding`` is suggested only with more than one GPU (define-by-run). With a global
        batch to keep, the micro-batch is suggested among the splits of the GPU count (and the
        global batch, when a range is allowed), each such choice a parameter of its own
        (Optuna's way to a conditional space: no sampler can propose a config that breaks the
        batch), and the accumulation follows from it.
        """
        g_lo, g_hi = min(self.gpus), max(self.gpus)
        if list(self.gpus) == list(range(g_lo, g_hi + 1)):
            gpus = trial.suggest_int("gpus", g_lo, g_hi)
        else:
            gpus = int(trial.suggest_categorical("gpus", list(self.gpus)))
        lay = Config(1, gpus=gpus)
        if gpus > 1 and not self._per_count:
            lay = Config(
                1,
                gpus=gpus,
                sharding=str(trial.suggest_categorical("sharding", list(self.shardings))),
            )
        elif gpus > 1:
            # the plans (or shardings) that fit this GPU count, a parameter per count (its
            # choices differ)
            layouts = {_plan_label(c): c for c in self.layouts(gpus)}
            lay = layouts[str(trial.suggest_categorical(_plan_param(gpus), list(layouts)))]
        r = lay.replicas  # the batch splits over the replicas
        if self.global_batches is None:
            micro = int(trial.suggest_categorical("micro_batch", list(self.micro_batches)))
            accum = int(trial.suggest_categorical("grad_accum", list(self.grad_accums)))
        else:
            batches = sorted({m * a * r for m, a in self.splits(r)})
            batch = int(trial.suggest_categorical(_batch_param(r), batches))
            micros = [m for m, _ in self.splits(r, batch)]
            micro = int(trial.suggest_categorical(_micro_param(r, batch), micros))
            accum = batch // (micro * r)
        return dataclasses.replace(
            lay,
            micro_batch=micro,
            grad_accum=accum,
            precision=str(trial.suggest_categorical("precision", list(self.precisions))),
            # a bool, or a share of the blocks (selective checkpointing): kept as chosen
            activation_checkpointing=trial.suggest_categorical(
                "activation_checkpointing", list(self.activation_checkpointing)
            ),
            compile=bool(trial.suggest_categorical("compile", list(self.compile))),
            loader=str(trial.suggest_categorical("loader", list(self.loaders))),
            **self._suggest_serving(trial),
            settings=tuple(
                (name, str(trial.suggest_categorical(_setting_param(name), list(values))))
                for name, values in self.settings
            ),
        )

    @property
    def _per_count(self) -> bool:
        """Whether the layouts differ by GPU count (plans, or shardings some counts lose to
        memory), so Optuna gets one layout parameter per count."""
        return self.plans is not None or bool(self.excluded)

    def _suggest_serving(self, trial: optuna.trial.Trial) -> dict[str, Any]:
        """A service's batcher window and quantization (nothing for any other job)."""
        if not self.serving:
            return {}
        delay = trial.suggest_categorical("max_delay_ms", list(self.max_delays))
        return {
            "max_delay_ms": float(delay) if delay is not None else None,
            "quantize": str(trial.suggest_categorical("quantize", list(self.quantizations))),
        }

    def params(self, config: Config) -> dict[str, Any]:
        """The Optuna parameters of ``config`` (for ``study.enqueue_trial``)."""
        p = config.to_dict()
        for name in ("tp", "pp", "zero"):
            p.pop(name, None)
        p["loader"] = config.loader  # suggested on every trial
        if self.serving:
            p["max_delay_ms"] = config.max_delay_ms
            p["quantize"] = config.quantize
        p.pop("settings", None)
        p.update({_setting_param(name): text for name, text in config.settings})
        if config.gpus == 1:
            del p["sharding"]
        elif self._per_count:
            del p["sharding"]
            p[_plan_param(config.gpus)] = _plan_label(config)
        if self.global_batches is not None:
            r = config.replicas
            del p["micro_batch"], p["grad_accum"]
            p[_batch_param(r)] = config.global_batch
            p[_micro_param(r, config.global_batch)] = config.micro_batch
        return p

    def to_dict(self) -> dict[str, Any]:
        """The space as JSON data (stored with the study and part of the cache fingerprint)."""
        out: dict[str, Any] = {name: list(getattr(self, name)) for name in DIMENSIONS}
        if self.global_batches is not None:
            out["global_batches"] = list(self.global_batches)
        if self.plans is not None:
            out["plans"] = [list(p) for p in self.plans]
        if self.excluded:
            out["excluded"] = sorted(list(k) for k in self.excluded)
        if self.serving:
            out["max_delays"] = list(self.max_delays)
            out["quantizations"] = list(self.quantizations)
        if self.settings:
            out["settings"] = {
                name: [json.loads(v) for v in values] for name, values in self.settings
            }
        return out


def _plan_label(config: Config) -> str:
    return f"tp{config.tp}-pp{config.pp}-zero{config.zero}"


def _plan_param(gpus: int) -> str:
    return f"plan_{gpus}gpu"


def _setting_param(name: str) -> str:
    return f"setting_{name}"


def _batch_param(gpus: int) -> str:
    return f"global_batch_{gpus}gpu"


def _micro_param(gpus: int, global_batch: int) -> str:
    return f"micro_batch_{gpus}gpu_{global_batch}"
