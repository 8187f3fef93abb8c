"""One point of a job's search space (:class:`Config`: how the harness would run the job), and
the ways a number of GPUs may share the model (its layouts: a data-parallel sharding, or a
parallel plan). The space itself is :mod:`orchestrator.tuner.space`.

Below the runtime and the tuner, which both read it: the tuner proposes configs, the runtime
turns a job spec with its tuned config into the harness's settings
(``orchestrator.runtime.harness_config``), so neither imports the other for the type."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workers.loader_settings import DEFAULT_TOKEN, LoaderSettings

__all__ = ["Config", "layout_key", "layouts_of", "plan_fits", "settings_key"]


@dataclass(frozen=True, order=True)
class Config:
    """One point of the search space: how the harness would run the job.

    ``sharding`` is meaningful only with more than one GPU; with one GPU it is always ``ddp``
    (there is nothing to shard), so equal runs have equal configs.

    ``tp``, ``pp`` and ``zero`` make a parallel plan (``workers.parallel.Plan``): the ``gpus``
    are ``replicas x tp x pp`` and the global batch counts replicas. ``zero`` (0-3) says what
    the replicas shard; left at 0 on a data-parallel-only config, ``sharding`` says it as
    before (``fsdp`` is ZeRO 3). One replica has nothing to shard: ``zero`` is then 0.

    ``loader`` is the data loader's settings as one token
    (``workers.loader_settings.LoaderSettings.token``).

    A service's config (``orchestrator.tuner.serving``) also sets its batcher: ``micro_batch``
    is the largest batch, ``max_delay_ms`` the longest its oldest request waits for it to fill
    (``None``: not a service), ``quantize`` the model's quantization (``none`` or ``int8``),
    and ``gpus`` its replicas (one per GPU).
    ``settings`` is a command job's own script settings (``workload.settings``): ``(name,
    value)`` pairs by name, each value as JSON text (so configs compare and hash whatever the
    values' types); :meth:`script_settings` gives them back as values. Empty for a workload
    the harness runs.
    """

    micro_batch: int
    grad_accum: int = 1
    gpus: int = 1
    sharding: str = "ddp"
    precision: str = "fp32"
    activation_checkpointing: bool | float = False
    compile: bool = False
    tp: int = 1
    pp: int = 1
    zero: int = 0
    loader: str = DEFAULT_TOKEN
    max_delay_ms: float | None = None
    quantize: str = "none"
    settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.replicas <= 1:
            object.__setattr__(self, "sharding", "ddp")
            object.__setattr__(self, "zero", 0)
        elif self.sharding == "fsdp":
            object.__setattr__(self, "zero", 3)
        elif self.zero == 3:
            object.__setattr__(self, "sharding", "fsdp")

    @property
    def replicas(self) -> int:
        """Data-parallel replicas: the GPUs over the plan's tensor and pipeline degrees."""
        return max(1, self.gpus // (self.tp * self.pp))

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over all replicas: what the job learns with."""
        return self.micro_batch * self.grad_accum * self.replicas

    @property
    def planned(self) -> bool:
        """Whether the config needs a parallel plan (tensor or pipeline parallelism, or ZeRO
        1 or 2), not only the ``sharding`` of data parallelism."""
        return self.tp > 1 or self.pp > 1 or self.zero in (1, 2)

    def plan(self) -> dict[str, Any] | None:
        """The harness's ``plan`` (``workers.parallel.Plan`` as a dict), or ``None`` when
        ``sharding`` says it all."""
        if not self.planned:
            return None
        return {
            "dp": self.replicas,
            "tp": self.tp,
            "pp": self.pp,
            "zero": self.zero,
            "offload": False,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the inverse of :meth:`from_dict`); the plan's fields only
        when it has one, the loader only when not at its defaults (so configs of data
        parallelism alone keep their old form)."""
        out = dataclasses.asdict(self)
        if not self.planned:
            del out["tp"], out["pp"], out["zero"]
        if self.loader == DEFAULT_TOKEN:  # likewise the loader's, at its defaults
            del out["loader"]
        if self.max_delay_ms is None:  # and a service's batcher, on a config of none
            del out["max_delay_ms"]
        if self.quantize == "none":
            del out["quantize"]
        del out["settings"]
        if self.settings:  # a command job's script settings, as values
            out["settings"] = self.script_settings()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        """Build a config from :meth:`to_dict` output (unknown keys are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in data.items() if k in names}
        if isinstance(kept.get("settings"), dict):
            kept["settings"] = settings_key(kept["settings"])
        return cls(**kept)

    def script_settings(self) -> dict[str, Any]:
        """The script's settings of a command job, as values (empty for other workloads)."""
        return {name: json.loads(text) for name, text in self.settings}

    def describe(self) -> str:
        """A short human form: ``mb 32 x2 acc, 4 GPU ddp, bf16, ckpt, compile``."""
        parts = [f"micro-batch {self.micro_batch}"]
        if self.grad_accum > 1:
            parts.append(f"accum {self.grad_accum}")
        if self.planned:
            axes = [f"dp {self.replicas}"]
            axes += [f"{n} {getattr(self, n)}" for n in ("tp", "pp") if getattr(self, n) > 1]
            axes += [f"zero {self.zero}"] if self.replicas > 1 else []
            parts.append(f"{self.gpus} GPU " + " ".join(axes))
        else:
            parts.append(f"{self.gpus} GPU" + (f" {self.sharding}" if self.gpus > 1 else ""))
        parts.append(self.precision)
        if self.activation_checkpointing is True:
            parts.append("ckpt")
        elif self.activation_checkpointing:  # selective: a share of the blocks
            parts.append(f"ckpt {float(self.activation_checkpointing):.0%}")
        if self.compile:
            parts.append("compile")
        if self.loader != DEFAULT_TOKEN:
            parts.append(LoaderSettings.from_token(self.loader).describe())
        if self.max_delay_ms is not None:
            parts[0] = f"max batch {self.micro_batch}, max delay {self.max_delay_ms:g} ms"
            parts[1] = f"{self.gpus} replica" + ("s" if self.gpus > 1 else "")
        if self.quantize != "none":
            parts.append(self.quantize)
        parts += [f"{name} {text}" for name, text in self.settings]
        return ", ".join(parts)


def settings_key(values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A script's settings as :attr:`Config.settings` holds them: by name, values as JSON."""
    return tuple(sorted((str(k), json.dumps(v)) for k, v in values.items()))


def plan_fits(gpus: int, tp: int, pp: int, zero: int) -> bool:
    """Whether the plan ``(tp, pp, zero)`` is one for ``gpus`` GPUs: ``tp x pp`` divides them
    and the plan is valid (``workers.parallel.Plan.on``: ZeRO 0 and 1 on a 1-D plan only; a
    plan with one replica has ZeRO 0 only, nothing to shard)."""
    from workers.parallel.plan import Plan

    return Plan.on(gpus, tp, pp, zero) is not None


def layout_key(config: Config) -> tuple[int, int, int, int]:
    """How a config shares its GPUs: ``(gpus, tp, pp, zero)`` (ZeRO 3 is FSDP's sharding)."""
    return (config.gpus, config.tp, config.pp, config.zero)


def layouts_of(
    gpus: int,
    plans: Sequence[tuple[int, int, int]] | None,
    shardings: Sequence[str],
    excluded: frozenset[tuple[int, int, int, int]] = frozenset(),
) -> list[Config]:
    """The layouts of ``gpus`` GPUs as configs at micro-batch 1 (see
    :meth:`SearchSpace.layouts`): the shardings, or with ``plans`` (more than one GPU) the
    plans that fit; those of ``excluded`` left out."""
    if plans is None or gpus == 1:
        found = [Config(1, gpus=gpus, sharding=s) for s in shardings]
    else:
        found = [
            Config(1, gpus=gpus, tp=tp, pp=pp, zero=z)
            for tp, pp, z in plans
            if plan_fits(gpus, tp, pp, z)
        ]
    return [c for c in dict.fromkeys(found) if layout_key(c) not in excluded]
