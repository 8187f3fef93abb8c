"""Tuning a service against its SLA: the search space of a job with ``serve:``.

A service is judged on request latency at its offered load, so its trials are short load tests
of its own model (``evaluators.serve.ServeEvaluator``) and its space is the batcher's and the
model's settings, not a training run's:

* ``micro_batch``: the batcher's largest batch (powers of two; ``tuning.bounds.micro_batch``,
  else 1 to 64 on a CPU, 512 on a GPU).
* ``max_delay_ms``: how long the oldest queued request waits for its batch to fill
  (``tuning.bounds.max_delay_ms``, else 0, 1, 2, 5, 10, 20 and 50 ms below the latency
  ceiling: a window as long as the ceiling spends all of it waiting).
* ``precision``: what the device supports (``tuning.bounds.precision``).
* ``quantize``: ``none`` and ``int8`` on a CPU (``tuning.bounds.quantize``); dynamic int8
  kernels are CPU kernels, so a GPU's space has ``none`` only.
* ``compile``: on a GPU only (``DeviceCaps.compile``): on a CPU ``torch.compile`` needs a C++
  toolchain and its compile time dwarfs a load test of seconds.
* ``gpus``: the replicas, one per GPU, within ``resources.gpus`` and ``tuning.bounds.gpus``.
  A load test times one replica's forward passes and serves with ``gpus`` such servers, so
  replica counts beyond the GPUs at hand can be tried.

The search starts (``Tuner(warm_start=...)``, :func:`service_warm_start`) from the config of
most capacity per replica count, fewest replicas first: the largest batch with the shortest
window above none, at the space's first precision, unquantized. At a fixed load the cost is
mostly the replica count, so this finds the cheapest feasible replica count in a few trials;
Optuna's sampler then searches the rest.

The goal (``Goal.from_spec``, ``serving``) is the fewest GPU-seconds per request among configs
whose request percentile meets the ceiling, that drop nothing and whose quantization is within
the tolerance; the study, its constraints and the strategies are the tuner's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.errors import TuneError
from orchestrator.tuner.job_space import allowed
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace, power_ladder

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

__all__ = ["DEFAULT_DELAYS_MS", "service_space", "service_warm_start"]

DEFAULT_DELAYS_MS: tuple[float, ...] = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
"""The batcher windows tried when ``tuning.bounds.max_delay_ms`` is not given (those below the
latency ceiling; 0 always)."""

CPU_MAX_BATCH = 64
"""The default top of the max-batch ladder on a CPU (a load test warms every batch size up)."""


def service_space(spec: JobSpec, caps: DeviceCaps) -> SearchSpace:
    """The search space of a service (see the module doc).

    Raises:
        TuneError: the bounds leave no value for a dimension (int8 on a GPU, only fp16 on a
            CPU, no GPU count).
    """
    if spec.serve is None or spec.sla.latency is None:
        raise TuneError("service_space is for a job with serve: and sla.latency")
    b = spec.tuning.bounds
    lo, hi = spec.resources.gpus.min, spec.resources.gpus.upper
    if b.gpus is not None:
        lo, hi = max(lo, b.gpus.min), min(hi, b.gpus.max)
    if lo > hi:
        raise TuneError(
            f"tuning.bounds.gpus [{b.gpus.min if b.gpus else lo}, {b.gpus.max if b.gpus else hi}]"
            f" leaves no replica count within resources.gpus"
        )
    mb = b.micro_batch
    top = CPU_MAX_BATCH if caps.kind == "cpu" else 512
    micro = power_ladder(mb.min, mb.max) if mb else power_ladder(1, top)
    ceiling = spec.sla.latency.max_ms
    delays = (
        tuple(sorted(set(b.max_delay_ms)))
        if b.max_delay_ms is not None
        else tuple(d for d in DEFAULT_DELAYS_MS if d == 0 or d < ceiling)
    )
    quant_ok = ("none", "int8") if caps.kind == "cpu" else ("none",)
    return SearchSpace(
        micro_batches=micro,
        gpus=tuple(range(lo, hi + 1)),
        precisions=allowed("precision", b.precision, caps.precisions, caps.precisions),
        compile=allowed(
            "compile", b.compile, (False, True) if caps.compile else (False,), (False, True)
        ),
        max_delays=delays,
        quantizations=allowed("quantize", b.quantize, quant_ok, quant_ok),
        gpus_per_node=caps.gpus_per_node,
    )


def service_warm_start(space: SearchSpace) -> list[Config]:
    """The first trials of a service's search (see the module doc), fewest replicas first."""
    windows = [d for d in space.max_delays if d]
    delay = min(windows) if windows else space.max_delays[0]
    return [
        Config(
            max(space.micro_batches),
            gpus=g,
            precision=space.precisions[0],
            compile=space.compile[0],
            max_delay_ms=delay,
            quantize=space.quantizations[0],
        )
        for g in sorted(space.gpus)
    ]
