"""Control-plane benchmark (issue 5): submissions per second, and scheduling-round time, against
the live Redis store.

    .venv/bin/python bench/control_plane/run.py            # the figures in BENCHMARKS.md
    .venv/bin/python bench/control_plane/run.py --smoke    # a tiny run (the test suite's)

Redis: ``REDIS_URL`` if set, else the embedded server (``ORCH_DATA_DIR``). Each measurement uses
a fresh namespace, deleted afterwards.

- Submissions: N jobs through ``JobStore.submit`` one at a time, through ``submit_many``
  (pipelined), and from 8 client processes at once (each pipelined, own connection).
- Round time: ``ControlLoop.round()`` (snapshot from Redis, policy, decisions, pool view) with Q
  jobs queued on a full pool: 64 GPUs on 8 nodes held by 64 running interactive jobs (never
  preempted), so every queued job waits. Ray is not involved (the in-process runtime,
  ``runtime.local``, runs the 64): this is the cost the control plane adds per round. Round 1
  (which writes each job's wait reason once) is excluded; p50/p99 over the rest.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy, open_store
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore, open_url

RESULTS = Path(__file__).parent / "results"


def _spec(cls: str = "bulk") -> JobSpec:
    sla = {"throughput": {"min_samples_per_s": 1}} if cls == "bulk" else {"latency": {"max_ms": 50}}
    return parse_spec(
        {
            "name": "bench",
            "team": "t",
            "class": cls,
            "workload": "mlp",
            "sla": sla,
            "run": {"steps": 100},
        }
    )


def _store(url: str) -> JobStore:
    return JobStore(open_url(url), f"bench-{uuid.uuid4().hex[:8]}")


def _pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _client(url: str, namespace: str, n: int, start: Any, out: Any) -> None:
    store = JobStore(open_url(url), namespace)
    specs = [_spec() for _ in range(n)]
    start.wait()  # every client connected and ready, and the parent's clock started
    t0 = time.perf_counter()
    store.submit_many(specs)
    out.put(time.perf_counter() - t0)


def submissions(url: str, n: int, repeats: int) -> dict[str, Any]:
    """Jobs per second: one at a time, pipelined, and 8 pipelined clients at once."""
    rates: dict[str, list[float]] = {"single": [], "pipelined": [], "8 clients": []}
    for _ in range(repeats):
        store = _store(url)
        specs = [_spec() for _ in range(n)]
        t0 = time.perf_counter()
        for spec in specs[: n // 4]:
            store.submit(spec)
        rates["single"].append((n // 4) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        store.submit_many(specs)
        rates["pipelined"].append(n / (time.perf_counter() - t0))
        store.delete_namespace()

        store = _store(url)
        ctx = mp.get_context("spawn")
        start, out = ctx.Barrier(9), ctx.Queue()
        procs = [
            ctx.Process(target=_client, args=(url, store.namespace, n // 8, start, out))
            for _ in range(8)
        ]
        for p in procs:
            p.start()
        start.wait()
        t0 = time.perf_counter()
        for p in procs:
            p.join()
        wall = time.perf_counter() - t0
        rates["8 clients"].append(8 * (n // 8) / wall)
        assert len(store.queued("bulk")) == 8 * (n // 8)
        store.delete_namespace()
    return {k: _summary(v) for k, v in rates.items()}


def _summary(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def round_times(url: str, queued: int, rounds: int, policy: str) -> dict[str, float]:
    """Seconds per scheduling round with ``queued`` jobs waiting on a full pool."""
    store = _store(url)
    try:
        # 64 interactive jobs hold the pool (never preempted), so every queued job waits
        runtime = LocalRuntime([(f"node-{i}", 8) for i in range(8)])
        settings = Settings(redis_url=url, namespace=store.namespace)
        sched = ControlLoop(settings, store, runtime, make_policy(policy))
        sched.acquire()  # as `orch up` does: the lease, reconcile, and the start-up freeze
        held = store.submit_many([_spec("interactive") for _ in range(64)])
        sched.round()  # starts the 64
        sched.round()  # records them running
        assert len(sched.runs) == 64 and len(runtime.alive()) == 64
        store.submit_many([_spec("bulk" if i % 4 else "interactive") for i in range(queued)])
        del held
        sched.round()  # first round: writes each job's wait reason once
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            sched.round()
            times.append(time.perf_counter() - t0)
        sched.lease.release()
        return {
            "p50_ms": 1000 * _pct(times, 50),
            "p99_ms": 1000 * _pct(times, 99),
            "rounds": rounds,
        }
    finally:
        store.delete_namespace()


def main(argv: list[str] | None = None) -> int:
    """Run, print the tables, write the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (for the test suite)")
    args = ap.parse_args(argv)
    store, url = open_store(Settings.from_env())
    store.client.close()
    n, repeats = (400, 1) if args.smoke else (20_000, 3)
    sizes = (10, 100) if args.smoke else (100, 1_000, 10_000)
    subs = submissions(url, n, repeats)
    print(f"submissions per second ({n} jobs, {repeats} repeats): median (min-max)")
    for k, v in subs.items():
        print(f"  {k:10s} {v['median']:10,.0f}  ({v['min']:,.0f}-{v['max']:,.0f})")
    rounds: dict[str, dict[str, dict[str, float]]] = {}
    print("scheduling round on a full pool (ms): queued -> p50 / p99")
    for policy in ("gang", "shared"):
        rounds[policy] = {}
        for q in sizes:
            r = round_times(url, q, 5 if args.smoke else (50 if q < 10_000 else 20), policy)
            rounds[policy][str(q)] = r
            print(f"  {policy:7s} {q:>7,d}  {r['p50_ms']:8.2f} / {r['p99_ms']:8.2f}")
    RESULTS.mkdir(exist_ok=True)
    name = "control_plane-smoke.json" if args.smoke else "control_plane.json"
    (RESULTS / name).write_text(
        json.dumps(
            {
                "meta": {"date": time.strftime("%Y-%m-%d"), "redis": url.split("@")[-1]},
                "submissions_per_s": subs,
                "round": rounds,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
