"""What the GPU benchmark's sections share: the sizes, one measured harness run, the FLOP count
of the GPT workload, the device's peak, and two workload wrappers (DDP on a joined process
group; a slowdown after some seconds) that the harness loads as entry points.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from workers.config import HarnessConfig
from workers.harness import Harness
from workers.workloads.base import Batch, Workload
from workers.workloads.registry import build_workload

# Dense (no sparsity) bf16/fp16 tensor-core peaks from NVIDIA's data sheets, FLOP/s, matched on
# the CUDA device name, most specific first.
PEAKS: tuple[tuple[str, float], ...] = (
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM: "NVIDIA H100 80GB HBM3"
    ("A100", 312e12),
)

KNOBS = ("micro_batch", "grad_accum", "precision", "activation_checkpointing", "compile")

FLOPS_FORMULA = (
    "per token 6 N + 12 L T d (PaLM, Chowdhery et al. 2022, app. B): N the parameters of the "
    "matmuls (every parameter but the token and position embeddings, so the LM head counts), "
    "L layers, T the sequence length, d the model width; attention scores over the full T x T "
    "(the causal mask not halved); activation-checkpointing recompute not counted (MFU, not HFU)"
)


@dataclass(frozen=True)
class Profile:
    """The sizes of one benchmark run: on the GPU, or tiny on the CPU (``--cpu-smoke``).

    Attributes:
        name: ``gpu`` or ``cpu-smoke``.
        device: ``cuda:0`` or ``cpu``.
        gpt: the GPT workload's arguments.
        micro_batch: the micro-batch of every section's fixed config.
        warmup: steps excluded at the start of each run.
        steps: measured steps of each run.
        repeats: runs of each variant, alternated.
        matmul_n: the square matmul side for the practical ceiling.
        tune_micro_batches: the tuner's micro-batch ladder.
        tune_trials, tune_seconds: the tuner's budget (trials, profiling seconds).
        tune_steps: a trial's (warm-up, measured) steps.
        compile_repeats: compiled runs (each compiles again; the first with cold caches).
        compile_backend: ``torch.compile``'s backend (``None``: inductor, the default).
        guard_seconds, guard_slow_after, guard_warm: the guard run's length, when it slows
            down, and the seconds at the start not judged (the window fills).
        guard_slow_frac, guard_slow_ms: the slowdown per step, as a fraction of the step
            interval measured before it plus a fixed cost.
        nominal_peak: FLOP/s for MFU where :data:`PEAKS` does not know the device.
        threads: torch CPU threads for the whole run (``None``: torch's default).
        serve_rates, serve_seconds: the ``serve`` section's offered loads (requests/s) and
            the length of each seeded Poisson stream.
    """

    name: str
    device: str
    gpt: dict[str, int]
    micro_batch: int
    warmup: int
    steps: int
    repeats: int
    matmul_n: int
    tune_micro_batches: tuple[int, ...]
    tune_trials: int
    tune_seconds: float
    tune_steps: tuple[int, int]
    compile_repeats: int
    compile_backend: str | None
    guard_seconds: float
    guard_slow_after: float
    guard_warm: float
    guard_slow_frac: float
    guard_slow_ms: float
    nominal_peak: float | None = None
    threads: int | None = None
    serve_rates: tuple[float, ...] = (100.0, 400.0, 1600.0)
    serve_seconds: float = 2.0


def device_name(device: str) -> str:
    """The GPU's name, or ``cpu``."""
    return torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"


def nvml_facts() -> dict[str, Any] | None:
    """What NVML says of GPU 0 (name, memory, compute capability, clocks, power limit): the
    facts a pool's GPU kind would be read from. ``None`` without NVML or a GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: nothing to read
        return None
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        facts: dict[str, Any] = {
            "name": pynvml.nvmlDeviceGetName(h),
            "memory_total_mib": pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20,
            "driver": pynvml.nvmlSystemGetDriverVersion(),
        }
        readers = {
            "compute_capability": pynvml.nvmlDeviceGetCudaComputeCapability,
            "max_sm_clock_mhz": lambda d: pynvml.nvmlDeviceGetMaxClockInfo(d, pynvml.NVML_CLOCK_SM),
            "max_mem_clock_mhz": lambda d: pynvml.nvmlDeviceGetMaxClockInfo(
                d, pynvml.NVML_CLOCK_MEM
            ),
            "power_limit_w": lambda d: pynvml.nvmlDeviceGetPowerManagementLimit(d) / 1000.0,
            "memory_bus_width_bits": pynvml.nvmlDeviceGetMemoryBusWidth,
            "pcie_gen_max": pynvml.nvmlDeviceGetMaxPcieLinkGeneration,
            "multiprocessors": lambda d: torch.cuda.get_device_properties(0).multi_processor_count,
        }
        for key, read in readers.items():
            try:
                facts[key] = read(h)
            except Exception as err:  # one unsupported query must not cost the rest
                facts[key] = f"unavailable: {type(err).__name__}"
        return facts
    finally:
        pynvml.nvmlShutdown()


def peak_flops(name: str, nominal: float | None) -> tuple[float | None, str]:
    """The dense bf16 peak of the device called ``name`` and where it comes from."""
    for key, flops in PEAKS:
        if key in name:
            return flops, f"data sheet ({key}, dense bf16)"
    if nominal is not None:
        return nominal, "nominal (not a real peak: plumbing only)"
    return None, "unknown device: no peak"


def gpt_flops_per_token(args: dict[str, Any]) -> dict[str, Any]:
    """The training FLOPs per token of the GPT workload with ``args`` (see
    :data:`FLOPS_FORMULA`), counted on a model built on the meta device."""
    from workers.workloads.gpt import DEFAULTS, GPT

    a = {**DEFAULTS, **args}
    with torch.device("meta"):
        model = GPT(a["n_layer"], a["d_model"], a["n_head"], a["seq_len"], a["vocab"])
    total = sum(p.numel() for p in model.parameters())
    matmul = total - model.tok.weight.numel() - model.pos.weight.numel()
    attention = 12 * a["n_layer"] * a["seq_len"] * a["d_model"]
    return {
        "params": total,
        "matmul_params": matmul,
        "flops_per_token": 6 * matmul + attention,
        "formula": FLOPS_FORMULA,
    }


def matmul_rate(device: str, n: int, repeats: int = 5, iters: int = 20) -> dict[str, Any]:
    """FLOP/s of an ``n x n x n`` matmul (bf16 on CUDA, timed with CUDA events after 3
    warm-up calls; fp32 on the CPU): median and min-max over ``repeats`` timings."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    rates = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                a @ b
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1000.0
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                a @ b
            seconds = time.perf_counter() - t0
        rates.append(2 * n**3 * iters / seconds)
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), **spread(rates)}


def spread(values: list[float]) -> dict[str, float]:
    """Median and min-max of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(
    config: HarnessConfig,
    device: str,
    *,
    flops_per_token: float | None = None,
    peak: float | None = None,
    report_every_s: float = 1.0,
    keep: Callable[[Harness, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """One harness run of ``config`` on ``device``: its result, the seconds from ``run()`` to
    the first step's end (compilation included), the losses reported, and MFU.

    Args:
        flops_per_token, peak: for MFU (``tokens_per_s * flops_per_token / peak``).
        report_every_s: how often the harness reports (0: every step; reports are outside the
            timed step).
        keep: called with the harness and the result dict once the run ended.
    """
    _release()  # the harness restarts its peak memory per run (``peak_mem_mb``)
    losses: list[float] = []
    first: list[float] = []

    def on_report(report: dict[str, Any]) -> None:
        if not first and report.get("step", 0) >= 1:
            first.append(time.perf_counter())
        if report.get("loss") is not None:
            losses.append(float(report["loss"]))

    harness = Harness(config, device=device, report=on_report, report_every_s=report_every_s)
    t0 = time.perf_counter()
    result = harness.run()
    out: dict[str, Any] = {
        "config": {k: getattr(config, k) for k in KNOBS},
        **{
            k: getattr(result, k)
            for k in (
                "samples_per_s",
                "tokens_per_s",
                "p50_ms",
                "p95_ms",
                "p99_ms",
                "peak_mem_mb",
                "peak_mem_scope",
                "data_wait_ms",
                "compute_ms",
                "data_wait_share",
                "gpu_busy_share",
                "energy_per_sample_j",
                "loss",
                "measured_steps",
                "warmup_steps",
                "elapsed_s",
            )
        },
        "first_step_s": first[0] - t0 if first else None,
        "losses_finite": all(math.isfinite(x) for x in losses),
        "losses_reported": len(losses),
    }
    tps = result.tokens_per_s
    out["mfu"] = tps * flops_per_token / peak if tps and flops_per_token and peak else None
    if keep is not None:
        keep(harness, out)
    del harness
    _release()
    return out


def alternate(variants: Mapping[str, Callable[[], dict[str, Any]]], repeats: int) -> dict[str, Any]:
    """Run each variant ``repeats`` times, interleaved (the order rotates every round, so no
    variant always runs first), and summarise: per variant its runs, the median and min-max
    samples/s and the median p50/p95; per variant after the first, the median and min-max of
    its per-round ratio of samples/s to the first variant's."""
    names = list(variants)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(variants[name]())
    out: dict[str, Any] = {}
    base = names[0]
    for name in names:
        rs = runs[name]
        out[name] = {
            "samples_per_s": spread([x["samples_per_s"] for x in rs]),
            "p50_ms": statistics.median(x["p50_ms"] for x in rs),
            "p95_ms": statistics.median(x["p95_ms"] for x in rs),
            "mfu": _median_or_none([x["mfu"] for x in rs]),
            **{
                k: _median_or_none([x.get(k) for x in rs])
                for k in ("peak_mem_mb", "data_wait_share", "gpu_busy_share", "energy_per_sample_j")
            },
            "runs": rs,
        }
        if name != base:
            ratios = [
                x["samples_per_s"] / b["samples_per_s"] for x, b in zip(rs, runs[base], strict=True)
            ]
            out[name][f"ratio_to_{base}"] = spread(ratios)
    return out


def _median_or_none(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- workload wrappers, loaded by the harness as entry points ("bench.gpu.measure:ddp") ----


def ddp(args: dict[str, Any], seed: int) -> Workload:
    """``args["workload"]`` (a built-in, with ``args["args"]``) with its model on
    ``args["device"]`` in DistributedDataParallel over the process group this process has joined
    (``workers.distributed.init_group``), as the harness wraps a rank of a multi-GPU DDP job
    (``workers.parallel.data_parallel.apply_ddp``). The harness itself takes that path only above
    one rank; this puts a one-rank job on it."""
    from workers.parallel import data_parallel

    inner = build_workload(args["workload"], dict(args.get("args", {})), seed)
    device = torch.device(args["device"])
    model = data_parallel.apply_ddp(inner.model.to(device), device)
    return dataclasses.replace(inner, model=model)


def slowed(args: dict[str, Any], seed: int) -> Workload:
    """``args["workload"]`` (a built-in, with ``args["args"]``) slowed on purpose
    ``slow_after_s`` seconds after it was built: from then on every micro-batch's forward costs
    ``slow_ms`` plus ``slow_frac`` of the median interval between micro-batches before (about
    a step), as ``tests/e2e/slowed_workload.py`` slows the MLP by a fixed cost (in the timed
    step: the harness makes the data before its clock starts)."""
    inner = build_workload(args["workload"], dict(args.get("args", {})), seed)
    at = time.monotonic() + float(args["slow_after_s"])
    ms, frac = float(args.get("slow_ms", 0.0)), float(args.get("slow_frac", 0.0))
    gaps: deque[float] = deque(maxlen=256)
    last: float | None = None
    pause: float | None = None
    loss = inner.loss

    def slowed_loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        nonlocal last, pause
        now = time.monotonic()
        if now < at:
            if last is not None:
                gaps.append(now - last)
            last = now
        else:
            if pause is None:
                pause = ms / 1000.0 + frac * (statistics.median(gaps) if gaps else 0.0)
            time.sleep(pause)
        return loss(model, batch)

    inner.loss = slowed_loss
    return inner
