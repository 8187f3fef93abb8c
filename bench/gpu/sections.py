"""The GPU benchmark's sections: each measures one thing issue 15 asks for and returns its
figures as JSON data (``bench/gpu/run.py`` runs them, each isolated from the others' failures).
"""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import torch

from bench.gpu.measure import (
    Profile,
    alternate,
    device_name,
    gpt_flops_per_token,
    matmul_rate,
    measure,
    peak_flops,
)
from workers.config import HarnessConfig
from workers.harness import Harness

Section = Callable[[Profile], dict[str, Any]]


class _Ctx:
    """What every section of one profile needs: the device's peak, the GPT's FLOPs per token,
    and a measured run of a config."""

    def __init__(self, p: Profile) -> None:
        self.p = p
        self.name = device_name(p.device)
        self.peak, self.peak_source = peak_flops(self.name, p.nominal_peak)
        self.flops = gpt_flops_per_token(p.gpt)

    def config(self, **knobs: Any) -> HarnessConfig:
        """The GPT at the profile's size, micro-batch and run length, with ``knobs`` over."""
        p = self.p
        base: dict[str, Any] = {
            "workload": "gpt",
            "workload_args": dict(p.gpt),
            "micro_batch": p.micro_batch,
            "steps": p.warmup + p.steps,
            "warmup_steps": p.warmup,
        }
        return HarnessConfig.from_dict({**base, **knobs})

    def run(self, config: HarnessConfig, **kw: Any) -> dict[str, Any]:
        """One measured run of ``config`` with MFU against the device's peak."""
        return measure(
            config,
            self.p.device,
            flops_per_token=self.flops["flops_per_token"],
            peak=self.peak,
            **kw,
        )


def _fast(p: Profile) -> str:
    """The precision of the fixed configs: bf16 on a GPU, fp32 on the CPU (no tensor cores)."""
    return "bf16" if p.device.startswith("cuda") else "fp32"


def mfu(p: Profile) -> dict[str, Any]:
    """Model FLOPs utilisation of the GPT in bf16 (eager), against the data-sheet peak and
    against a measured square matmul (the practical ceiling)."""
    ctx = _Ctx(p)
    ceiling = matmul_rate(p.device, p.matmul_n)
    runs = alternate({"bf16": lambda: ctx.run(ctx.config(precision="bf16"))}, p.repeats)["bf16"]
    achieved = statistics.median(
        r["tokens_per_s"] * ctx.flops["flops_per_token"] for r in runs["runs"]
    )
    return {
        "device": ctx.name,
        "peak_flops": ctx.peak,
        "peak_source": ctx.peak_source,
        "matmul": ceiling,
        **ctx.flops,
        "achieved_flops": achieved,
        "mfu": achieved / ctx.peak if ctx.peak else None,
        "mfu_of_matmul": achieved / ceiling["median"],
        "matmul_of_peak": ceiling["median"] / ctx.peak if ctx.peak else None,
        "run": runs,
    }


def tuned(p: Profile) -> dict[str, Any]:
    """The shipped tuner (``sla`` strategy, throughput goal, in-process harness trials) on the
    GPT, then its best config against the settings a job runs untuned, alternated."""
    from orchestrator.runtime.harness_config import harness_config
    from orchestrator.spec import RunSettings
    from orchestrator.tuner import Goal, SearchSpace
    from orchestrator.tuner.evaluators import HarnessEvaluator
    from orchestrator.tuner.space import Config, DeviceCaps
    from orchestrator.tuner.strategies import STRATEGIES
    from orchestrator.tuner.tuner import Tuner, summary

    ctx = _Ctx(p)
    caps = DeviceCaps.detect(max_gpus=1)
    space = SearchSpace(micro_batches=p.tune_micro_batches, precisions=caps.precisions)
    warm, measured = p.tune_steps
    evaluator = HarnessEvaluator(
        "gpt", p.gpt, caps=caps, warmup_steps=warm, measured_steps=measured, num_threads=None
    )
    result = Tuner(
        space,
        Goal("throughput"),
        evaluator,
        STRATEGIES.create("sla"),
        max_trials=p.tune_trials,
        max_seconds=p.tune_seconds,
    ).run()
    if result.chosen is None:
        raise RuntimeError(f"the tuner found nothing to run: {result.reason}")
    best: Config = result.chosen.config
    default = RunSettings()

    def job(knobs: Any) -> dict[str, Any]:
        hc = harness_config(
            "gpt", p.gpt, knobs, steps=p.warmup + p.steps, warmup_steps=p.warmup, seed=0
        )
        return ctx.run(HarnessConfig.from_dict(hc))

    compared = alternate({"default": lambda: job(default), "tuned": lambda: job(best)}, p.repeats)
    return {
        "space": space.to_dict(),
        "goal": "throughput (min GPU-s per sample, one GPU: max samples/s)",
        "tuner": summary(result),
        "trials": [
            {
                "config": r.config.describe(),
                "source": r.source,
                "status": r.measurement.status,
                "samples_per_s": r.measurement.samples_per_s,
                "p95_ms": r.measurement.p95_ms,
                "cost_s": r.measurement.cost_s,
            }
            for r in result.history.records
        ],
        "default_config": {k: getattr(default, k) for k in ("micro_batch", "precision")},
        **compared,
    }


def precision(p: Profile) -> dict[str, Any]:
    """fp32, bf16 and fp16 (with the harness's GradScaler on CUDA) at one micro-batch: samples/s
    and p95, the loss at every step finite, and the scaler's final scale."""

    def keep_scale(h: Harness, out: dict[str, Any]) -> None:
        # The harness reports no scale: read its scaler (private) for the benchmark.
        scaler = getattr(h, "_scaler", None)
        out["scaler"] = scaler is not None
        if scaler is not None:
            scale = float(scaler.get_scale())
            out["scale"] = scale
            # growth every 2000 clean steps: fewer steps only back off (halve) on inf/NaN
            out["scale_backoffs"] = round(math.log2(65536.0 / scale)) if scale > 0 else None

    ctx = _Ctx(p)
    variants = {}
    for prec in ("fp32", "bf16", "fp16"):
        variants[prec] = functools.partial(
            ctx.run, ctx.config(precision=prec), report_every_s=0.0, keep=keep_scale
        )
    out = alternate(variants, p.repeats)
    fp16 = out["fp16"]["runs"]
    out["fp16_finite"] = all(r["losses_finite"] and r["loss"] is not None for r in fp16)
    return out


def ddp(p: Profile) -> dict[str, Any]:
    """A one-rank process group (NCCL on CUDA, Gloo on the CPU) at ``tcp://127.0.0.1``, the
    model in DDP and the harness's per-step collectives on it, against the plain run: the
    overhead of the distributed path on one device."""
    import torch.distributed as dist

    from workers import distributed

    ctx = _Ctx(p)
    prec = _fast(p)
    backends: list[str] = []

    def on_group() -> dict[str, Any]:
        port = distributed.find_free_port()
        distributed.init_group(torch.device(p.device), f"tcp://127.0.0.1:{port}", 0, 1)
        try:
            backends.append(str(dist.get_backend()))
            args = {"workload": "gpt", "args": dict(p.gpt), "device": p.device}
            hc = ctx.config(workload="bench.gpu.measure:ddp", workload_args=args, precision=prec)
            return ctx.run(hc)
        finally:
            distributed.shutdown_group()  # the harness leaves it at the end; a failure may not

    plain = ctx.config(precision=prec)
    out = alternate({"plain": lambda: ctx.run(plain), "ddp": on_group}, p.repeats)
    out["backend"] = sorted(set(backends))
    out["world_size"] = 1
    return out


@contextlib.contextmanager
def _compile_backend(backend: str | None) -> Iterator[None]:
    """``torch.compile`` with ``backend`` while inside (the harness calls ``torch.compile``)."""
    if backend is None:
        yield
        return
    original = torch.compile
    torch.compile = functools.partial(original, backend=backend)
    try:
        yield
    finally:
        torch.compile = original


def compile_(p: Profile) -> dict[str, Any]:
    """``torch.compile`` against eager at one config (bf16 on CUDA): samples/s, p95, and the
    compilation's time (the first step's time over eager's first step)."""
    ctx = _Ctx(p)
    prec = _fast(p)
    warmup = max(p.warmup, 5)  # compile may specialise again in the first steps
    knobs = {"precision": prec, "warmup_steps": warmup, "steps": warmup + p.steps}
    with _compile_backend(p.compile_backend):
        out = alternate(
            {
                "eager": lambda: ctx.run(ctx.config(**knobs)),
                "compile": lambda: ctx.run(ctx.config(compile=True, **knobs)),
            },
            p.compile_repeats,
        )
    eager_first = min(r["first_step_s"] for r in out["eager"]["runs"])
    firsts = [r["first_step_s"] for r in out["compile"]["runs"]]
    out["compile_s"] = [f - eager_first for f in firsts]  # the first: cold caches
    out["backend"] = p.compile_backend or "inductor"
    out["warmup_steps"] = warmup
    return out


# (name, max batch, batching window in s): no batching, then two fixed batchers
SERVE_BATCHERS: tuple[tuple[str, int, float], ...] = (
    ("unbatched", 1, 0.0),
    ("batch-8", 8, 0.002),
    ("batch-32", 32, 0.005),
)


def serve(p: Profile) -> dict[str, Any]:
    """The shipped service load test on the device: the ``infer`` GPT at the profile's size,
    seeded Poisson arrivals at each of ``serve_rates`` on the virtual clock, each batch a real
    timed forward pass; requests waiting over a second are dropped. Unbatched against two fixed
    batchers, fp32 against the fast precision."""
    from workers.serve_run import load_test, serve_arrivals
    from workers.workloads.registry import build_workload

    device = torch.device(p.device)
    workload = build_workload("infer", {"model": "gpt", **p.gpt}, seed=0)
    rows = []
    for precision in sorted({"fp32", _fast(p)}):
        for name, max_batch, delay in SERVE_BATCHERS:
            for rate in p.serve_rates:
                arrivals = serve_arrivals({"rate_rps": rate}, p.serve_seconds, seed=0)
                trace = load_test(
                    workload,
                    arrivals,
                    max_batch=max_batch,
                    max_delay_s=delay,
                    timeout_s=1.0,
                    device=device,
                    precision=precision,
                )
                rows.append(
                    {
                        "precision": precision,
                        "batcher": name,
                        "max_batch": max_batch,
                        "max_delay_s": delay,
                        "rate_rps": rate,
                        **trace.summary(),
                    }
                )
    return {
        "model": {"workload": "infer", "model": "gpt", **p.gpt},
        "seconds": p.serve_seconds,
        "timeout_s": 1.0,
        "rows": rows,
    }


def guard(p: Profile) -> dict[str, Any]:
    """The SLA guard on a real run of the GPT (bf16 on CUDA), reporting every second with the
    shipped window, slowed after ``guard_slow_after`` s, replayed through
    ``orchestrator.control.guard`` as ``bench/guard/noise.py`` does."""
    from bench.guard.noise import analyse, record

    floor_frac = 0.9
    reports = record(
        p.guard_seconds,
        p.guard_slow_after,
        p.guard_slow_ms,
        device=p.device,
        workload="bench.gpu.measure:slowed",
        workload_args={"workload": "gpt", "args": dict(p.gpt), "slow_frac": p.guard_slow_frac},
        micro_batch=p.micro_batch,
        precision=_fast(p),
        num_threads=None,
    )
    out = analyse(reports, p.guard_slow_after, floor_frac, p.guard_warm)
    return {
        **out,
        "seconds": p.guard_seconds,
        "slow_after_s": p.guard_slow_after,
        "slow_frac": p.guard_slow_frac,
        "slow_ms": p.guard_slow_ms,
        "warm_s": p.guard_warm,
        "floor_frac": floor_frac,
        "device": device_name(p.device),
    }


SECTIONS: dict[str, Section] = {
    "mfu": mfu,
    "tuned": tuned,
    "precision": precision,
    "ddp": ddp,
    "compile": compile_,
    "serve": serve,
    "guard": guard,
}
