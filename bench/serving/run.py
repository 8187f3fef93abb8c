"""Benchmark (issue 24): requests/s one server sustains within a p99 ceiling, by batching policy.

    .venv/bin/python bench/serving/run.py            # mlp and gpt inference, about 9 minutes
    .venv/bin/python bench/serving/run.py --smoke    # one model, a short search

For each built-in inference model (``infer`` with ``model: mlp`` / ``model: gpt``), on this
machine's device, and a p99 ceiling per model, it finds the highest Poisson offered load whose
request p99 (arrival to answer: queueing included) stays within the ceiling, for:

* ``no batching``: one request per forward pass;
* ``fixed batch B``: batches of exactly B (a batch waits until full), the best B of 4..32;
* ``dynamic``: batches up to ``max_batch`` leaving when full or when the oldest request has
  waited ``max_delay``, the best of max_batch 8, 16, 32 x max_delay 1, 2, 5 ms.

Every load is served by :func:`workers.serve_run.load_test`: the shipped batcher, with each
batch a real forward pass of the model, timed (the clock is virtual between arrivals; see
:mod:`workers.serving`). The highest load is found by bisection on the rate (a rate where p99
holds below one where it does not), to 5%, each load 4 s of seeded Poisson traffic (at most
20,000 requests); torch on one thread. Also prints the request p99 against offered load
for the best dynamic setting and for no batching (the tail-against-load curve). Writes
``bench/serving/results/serving[-smoke].json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from workers.arrivals import poisson_arrivals
from workers.serve_run import load_test
from workers.workloads.base import Workload
from workers.workloads.registry import build_workload

MODELS = {"mlp": ({"model": "mlp"}, 5.0), "gpt": ({"model": "gpt"}, 60.0)}  # args, p99 ceiling ms


def p99_at(workload: Workload, rate: float, seconds: float, **batcher: Any) -> float:
    """Request p99 (ms) at ``rate``: ``seconds`` of traffic, or 20,000 requests if fewer."""
    arrivals = poisson_arrivals(rate, min(seconds, 20_000 / rate), seed=0)
    s = load_test(workload, arrivals, **batcher).summary()
    p99 = s["request_p99_ms"]
    return float("inf") if p99 is None else float(p99)


def max_rate(ok: Callable[[float], bool], start: float, cap: float = 204_800.0) -> float:
    """The highest rate with ``ok``: up a doubling ladder from ``start`` until a rate holds and
    the next does not (a fixed batch holds only once the load fills it fast enough, so low
    rates may fail first), then bisection between the two, to 5%; 0 when none up to ``cap``
    holds."""
    rate, best = start, 0.0
    while rate <= cap:
        if ok(rate):
            best = rate
        elif best:
            break
        rate *= 2
    if not best:
        return 0.0
    lo, hi = best, best * 2
    while hi - lo > 0.05 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def bench_model(name: str, smoke: bool) -> dict:
    args, ceiling = MODELS[name]
    workload = build_workload("infer", args, 0)
    seconds = 2.0 if smoke else 4.0
    policies: dict[str, dict] = {"no batching": {"max_batch": 1, "max_delay_s": 0.0}}
    for b in (2, 4) if smoke else (4, 8, 16, 32):
        policies[f"fixed batch {b}"] = {"max_batch": b, "max_delay_s": None}
    grid = [(8, 0.001)] if smoke else [(b, d) for b in (8, 16, 32) for d in (0.001, 0.002, 0.005)]
    for b, d in grid:
        policies[f"dynamic {b} / {d * 1000:g} ms"] = {"max_batch": b, "max_delay_s": d}
    found = {}
    for label, batcher in policies.items():
        rate = max_rate(lambda r, b=batcher: p99_at(workload, r, seconds, **b) <= ceiling, 50.0)
        found[label] = {"rps": round(rate, 1), **batcher}
        print(f"  {name} {label:24s} {rate:10.1f} req/s within p99 {ceiling:g} ms", flush=True)
    fixed = max((v for k, v in found.items() if k.startswith("fixed")), key=lambda v: v["rps"])
    dynamic = max((v for k, v in found.items() if k.startswith("dynamic")), key=lambda v: v["rps"])
    none = found["no batching"]
    curve = []
    top = max(dynamic["rps"], none["rps"], 1.0)
    for share in (0.1, 0.3, 0.5, 0.7, 0.9, 1.0):
        rate = share * top
        curve.append(
            {
                "rps": round(rate, 1),
                "dynamic_p99_ms": round(p99_at(workload, rate, seconds, **_b(dynamic)), 3),
                "no_batching_p99_ms": round(p99_at(workload, rate, seconds, **_b(none)), 3),
            }
        )
    return {
        "p99_ceiling_ms": ceiling,
        "policies": found,
        "best": {"no batching": none, "fixed": fixed, "dynamic": dynamic},
        "tail_against_load": curve,
    }


def _b(entry: dict) -> dict:
    return {"max_batch": entry["max_batch"], "max_delay_s": entry["max_delay_s"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="one model, a short search")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one core per server: the other serves the clock and the OS
    started = time.perf_counter()
    models = ["mlp"] if a.smoke else list(MODELS)
    out = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread, CPU"
        if not torch.cuda.is_available()
        else torch.cuda.get_device_name(0),
        "models": {m: bench_model(m, a.smoke) for m in models},
    }
    out["wall_s"] = round(time.perf_counter() - started, 1)
    for m, r in out["models"].items():
        best = r["best"]
        print(
            f"{m}: p99 <= {r['p99_ceiling_ms']:g} ms: "
            f"no batching {best['no batching']['rps']:.0f}, "
            f"best fixed {best['fixed']['rps']:.0f} (batch {best['fixed']['max_batch']}), "
            f"dynamic {best['dynamic']['rps']:.0f} req/s "
            f"(max batch {best['dynamic']['max_batch']}, delay "
            f"{best['dynamic']['max_delay_s'] * 1000:g} ms)"
        )
    name = "serving-smoke.json" if a.smoke else "serving.json"
    path = Path(__file__).parent / "results" / name
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path} in {out['wall_s']} s")


if __name__ == "__main__":
    main()
