"""Worker-harness overhead benchmark (issue 5): ``Harness.run()`` against a bare PyTorch loop
doing the same work, in one process, alternating.

    .venv/bin/python bench/control_plane/overhead.py            # the figures in BENCHMARKS.md
    .venv/bin/python bench/control_plane/overhead.py --smoke    # a tiny run (seconds)

For each workload (built-in sizes), with the same micro-batch, precision, optimizer (AdamW,
lr 1e-3), seed and number of steps:

- the harness: ``Harness(config).run()`` with no checkpoints and a no-op report sink called
  every ``report_every_s`` (1 s, the worker actor's default; the Redis write a real sink makes
  is not counted), timed over ``run()``: its per-step timing, stop polling, reports and
  result (parameter fingerprint, percentiles) included;
- the bare loop: the same workload builder and seed, the same batches (``make_batch`` of the
  same sample indices, moved to the device), forward under the same autocast, backward,
  optimizer step, and nothing else, timed from its first step to its last (synchronised
  once at the end on CUDA, where the harness synchronises around every step to time it).

Both are built before the clock starts, and both must end with bit-identical parameters (so
the bare loop did exactly the harness's work). Pairs alternate their order (harness first,
then bare first) so drift cancels; an unmeasured pair per workload comes first. Reported:
harness time / bare time per pair, median with min-max over the pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers.config import HarnessConfig
from workers.harness import Harness
from workers.workloads.base import Batch
from workers.workloads.registry import build_workload

RESULTS = Path(__file__).parent / "results"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

# The smoke run's models are small so it takes seconds; the full run uses the built-in sizes.
SMOKE_ARGS: dict[str, dict[str, Any]] = {
    "mlp": {"in_features": 16, "hidden": 32},
    "cnn": {"channels": 4, "image_size": 16},
    "gpt": {"d_model": 32, "n_head": 2, "seq_len": 16, "vocab": 64},
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _fingerprint(model: torch.nn.Module) -> float:
    # The harness's own check value (RunResult.param_fingerprint).
    with torch.no_grad():
        return sum(float(p.double().abs().sum()) for p in model.parameters())


def _to_device(batch: Batch, device: torch.device) -> Batch:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    return type(batch)(_to_device(b, device) for b in batch)


def run_harness(config: HarnessConfig, device: torch.device) -> tuple[float, float]:
    """Seconds ``Harness.run()`` took, and the parameters' fingerprint."""
    harness = Harness(config, device=str(device), report=lambda _: None, report_every_s=1.0)
    _sync(device)
    t0 = time.perf_counter()
    result = harness.run()
    return time.perf_counter() - t0, result.param_fingerprint


def run_bare(config: HarnessConfig, device: torch.device) -> tuple[float, float]:
    """Seconds the bare loop took for the same work, and the parameters' fingerprint."""
    random.seed(config.seed)  # seeded as the harness seeds: the same initial weights
    torch.manual_seed(config.seed)
    workload = build_workload(config.workload, config.workload_args, config.seed)
    model = workload.model.to(device)
    model.train(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    autocast: Callable[[], Any] = (
        contextlib.nullcontext
        if config.precision == "fp32"
        else functools.partial(torch.autocast, device.type, DTYPES[config.precision])
    )
    scaler = (
        torch.amp.GradScaler("cuda")
        if config.precision == "fp16" and device.type == "cuda"
        else None
    )
    mb, steps = config.micro_batch, config.steps or 0
    _sync(device)
    t0 = time.perf_counter()
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        batch = _to_device(workload.make_batch(step * mb, mb), device)
        with autocast():
            loss = workload.loss(model, batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
    _sync(device)
    return time.perf_counter() - t0, _fingerprint(model)


def compare(config: HarnessConfig, device: torch.device, repeats: int) -> dict[str, Any]:
    """``repeats`` alternating pairs (after one unmeasured pair) for one configuration."""
    run_harness(config, device)
    run_bare(config, device)
    harness_s, bare_s, same = [], [], True
    for i in range(repeats):
        if i % 2 == 0:
            h, h_fp = run_harness(config, device)
            b, b_fp = run_bare(config, device)
        else:
            b, b_fp = run_bare(config, device)
            h, h_fp = run_harness(config, device)
        harness_s.append(h)
        bare_s.append(b)
        same = same and h_fp == b_fp
    ratios = [h / b for h, b in zip(harness_s, bare_s, strict=True)]
    steps = config.steps or 1
    return {
        "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "harness_step_ms": 1000 * statistics.median(harness_s) / steps,
        "bare_step_ms": 1000 * statistics.median(bare_s) / steps,
        "same_params": same,
        "harness_s": harness_s,
        "bare_s": bare_s,
    }


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, write the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (for the test suite)")
    ap.add_argument("--workloads", default="mlp,cnn,gpt", help="comma-separated built-ins")
    ap.add_argument("--steps", type=int, help="optimizer steps per run (default 300; smoke 10)")
    ap.add_argument("--repeats", type=int, help="measured pairs (default 10; smoke 2)")
    ap.add_argument("--micro-batch", type=int, default=32)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when present)")
    args = ap.parse_args(argv)
    steps = args.steps or (10 if args.smoke else 300)
    repeats = args.repeats or (2 if args.smoke else 10)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.set_num_threads(args.threads)

    results: dict[str, Any] = {}
    print(
        f"harness / bare loop, {steps} steps, micro-batch {args.micro_batch}, {args.precision}, "
        f"{device}, {args.threads} thread(s), {repeats} pairs: median (min-max)"
    )
    print(f"  {'workload':8s} {'ratio':>20s} {'harness ms/step':>16s} {'bare ms/step':>13s}")
    for name in args.workloads.split(","):
        config = HarnessConfig(
            workload=name,
            workload_args=SMOKE_ARGS[name] if args.smoke else {},
            micro_batch=args.micro_batch,
            precision=args.precision,
            steps=steps,
            checkpoint_every=0,
        )
        r = results[name] = compare(config, device, repeats)
        ratio = r["ratio"]
        span = f"{ratio['median']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f})"
        print(
            f"  {name:8s} {span:>20s} {r['harness_step_ms']:16.3f} {r['bare_step_ms']:13.3f}"
            + ("" if r["same_params"] else "  PARAMETERS DIFFER")
        )
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "device": device_name,
        "torch": torch.__version__,
        "threads": args.threads,
        "steps": steps,
        "repeats": repeats,
        "micro_batch": args.micro_batch,
        "precision": args.precision,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "overhead-smoke.json" if args.smoke else "overhead.json"
    (RESULTS / name).write_text(json.dumps({"meta": meta, "workloads": results}, indent=1))
    return 0 if all(r["same_params"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
