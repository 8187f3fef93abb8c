"""Live: one service and bulk jobs in one pool, against the service on dedicated GPUs (issue 24).

    PYTHONPATH=$PWD .venv/bin/python bench/serving/mixed_pool_live.py   # about 5 minutes

The live counterpart of ``bench/scheduler/mixed_pool.py``, small: real Redis
(``REDIS_URL``, default ``redis://127.0.0.1:6379``), a real Ray cluster (a head with no GPU and
one node of 4 virtual GPU slots, as the e2e tests' cluster) and the real control loop with
``shared`` and the SLA guard (hold 1 s up, 2 s down, as ``tests/e2e/test_service_scaling.py``).

* **Service**: the paced ``infer`` MLP of ``tests/e2e/paced_service.py`` (25 ms per request:
  a replica carries 40 req/s), an arrival trace of seeded Poisson phases: 16 req/s for 10 s,
  32 req/s until 45 s, 8 req/s until 75 s; no batching window; p99 ceiling ``--ceiling-ms``.
* **Bulk**: ``--bulk`` MLP training jobs of 1 GPU and ``--bulk-s`` seconds each, submitted with
  the service.
* **shared**: the service may run 1-3 replicas, scaled by the guard; bulk takes the rest.
  **dedicated**: the service fixed at 2 replicas (its peak, 32 req/s, at 60% busy: 2); the
  bulk team capped at the other 2 GPUs (``max_gpus``: its partition).

Service SLA attainment: the share of half-second samples, from the service's first report to
the end of its stream, in which the service ran and its latest report's window p99 met the
ceiling (a relaunch, or a report of an earlier run, counts as a miss). Bulk JCT: finish minus
submission, mean over the bulk jobs. Writes ``bench/serving/results/mixed-pool-live.json``
(``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.config import Settings  # noqa: E402
from orchestrator.services import serve_in_background  # noqa: E402
from orchestrator.spec import parse_spec  # noqa: E402
from orchestrator.store.states import JobState  # noqa: E402
from orchestrator.teams import TeamConfig, TeamSpec  # noqa: E402

PHASES = ((10.0, 16.0), (45.0, 32.0), (75.0, 8.0))  # (until, req/s) in stream time
DONE = {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}


def arrivals() -> list[float]:
    """Seeded Poisson arrivals at each phase's rate."""
    rng, out, start = random.Random(0), [], 0.0
    for until, rate in PHASES:
        t = start + rng.expovariate(rate)
        while t < until:
            out.append(round(t, 4))
            t += rng.expovariate(rate)
        start = until
    return out


def service_spec(gpus: dict[str, int], ceiling_ms: float) -> Any:
    return parse_spec(
        {
            "name": "svc",
            "team": "web",
            "class": "interactive",
            "workload": {
                "entry": "tests.e2e.paced_service:build",
                "args": {"request_ms": 25.0, "hidden": 16, "n_layer": 1},
            },
            "sla": {"latency": {"percentile": 99, "max_ms": ceiling_ms}},
            "resources": {"gpus": gpus},
            "run": {"micro_batch": 1, "duration_s": PHASES[-1][0]},
            "serve": {"trace": arrivals(), "max_delay_ms": 0, "endpoint": False},
        }
    )


def bulk_spec(i: int, seconds: float) -> Any:
    return parse_spec(
        {
            "name": f"bulk-{i}",
            "team": "ml",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": 1},
            "run": {"micro_batch": 8, "warmup_steps": 1, "duration_s": seconds},
        }
    )


def one(setup: str, args: argparse.Namespace, ray_address: str) -> dict[str, Any]:
    """One setup on the live pool; its figures."""
    shared = setup == "shared"
    settings = Settings(
        redis_url=args.redis_url,
        ray_address=ray_address,
        data_dir=Path(tempfile.mkdtemp(prefix=f"mixed-live-{setup}-")),
        namespace=f"bench-mixed-{uuid.uuid4().hex[:8]}",
        scheduler_interval_s=0.2,
        policy="shared",
        guard_hold_s=1.0,
        warm_workers=0,
    )
    running = serve_in_background(settings)
    store = running.scheduler.store
    ids: list[str] = []
    try:
        ml = TeamSpec(name="ml") if shared else TeamSpec(name="ml", max_gpus=2)
        store.put_teams(TeamConfig(teams=[TeamSpec(name="web"), ml], entry_modules=["tests"]))
        gpus = {"min": 1, "max": 3} if shared else {"min": 2, "max": 2}
        svc = store.submit(service_spec(gpus, args.ceiling_ms)).id
        bulk = [store.submit(bulk_spec(i, args.bulk_s)).id for i in range(args.bulk)]
        ids += [svc, *bulk]
        samples: list[tuple[float, int, float | None, bool]] = []
        first: float | None = None
        stream_end: float | None = None  # wall clock: where its arrivals end
        end = time.monotonic() + args.timeout
        while time.monotonic() < end:
            if running.errors:
                raise running.errors[0]
            rec = store.get(svc)
            if rec.state in DONE:
                break
            nodes = len((rec.placement or {}).get("nodes", []))
            started = float(rec.fields.get("started_at") or 0)
            got = store.latest_metrics(
                [svc], ("first_step_at", "window_p99_ms", "stream_started_at")
            ).get(svc, {})
            began = got.get("stream_started_at")
            if stream_end is None and isinstance(began, int | float):
                stream_end = float(began) + PHASES[-1][0]
            fresh = rec.state is JobState.RUNNING and float(got.get("first_step_at") or 0) >= (
                started - 1
            )
            p99 = got.get("window_p99_ms")
            if first is None and fresh and p99 is not None:
                first = time.monotonic()
            if first is not None and time.time() < (stream_end or float("inf")):
                ok = fresh and p99 is not None and float(p99) <= args.ceiling_ms
                samples.append((time.monotonic() - first, nodes, p99, ok))
            time.sleep(0.5)
        for b in bulk:
            t = time.monotonic() + args.timeout
            while store.get(b).state not in DONE and time.monotonic() < t:
                time.sleep(0.5)
        jcts = []
        for b in bulk:
            rec = store.get(b)
            fin = rec.fields.get("finished_at")
            if rec.state is JobState.FINISHED and fin:
                jcts.append(float(fin) - rec.submitted_at)
        events = [e["message"] for e in store.events(svc) if e["event"] == "guard"]
        t0 = store.get(svc).submitted_at
        timeline = {  # every job's state changes and guard notes, seconds from submission
            job_id: [
                [round(e["ts"] - t0, 2), e["event"], e.get("from", ""), e["message"][:120]]
                for e in store.events(job_id)
            ]
            for job_id in ids
        }
        reports = [  # when each of the service's reports came, and of which run
            [round(float(m["ts"]) - t0, 2), round(float(m.get("first_step_at") or t0) - t0, 2)]
            for m in store.metrics_history(svc, count=1000)
        ]
        met = sum(s[3] for s in samples)
        return {
            "setup": setup,
            "service_attainment": met / len(samples) if samples else None,
            "samples": len(samples),
            "replicas_seen": sorted({s[1] for s in samples}),
            "bulk_finished": len(jcts),
            "bulk_mean_jct_s": sum(jcts) / len(jcts) if jcts else None,
            "bulk_jcts_s": jcts,
            "guard_events": events,
            "trace": samples,
            "timeline": timeline,
            "service_reports": reports,
        }
    finally:
        for job_id in ids:  # a job still running at a timeout
            if store.get(job_id).state not in DONE:
                store.cancel(job_id)
        running.shutdown()
        store.delete_namespace()


def main(argv: list[str] | None = None) -> int:
    """Both setups on one Ray cluster; print and write their figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    ap.add_argument("--ceiling-ms", type=float, default=1000.0)
    ap.add_argument("--bulk", type=int, default=4)
    ap.add_argument("--bulk-s", type=float, default=30.0)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--setups", default="shared,dedicated")
    ap.add_argument("--out", default="mixed-pool-live", help="results file name, no .json")
    args = ap.parse_args(argv)
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=4)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    rows = []
    try:
        for setup in args.setups.split(","):
            t0 = time.perf_counter()
            row = one(setup, args, cluster.address)
            row["wall_s"] = time.perf_counter() - t0
            rows.append(row)
            print(
                f"{setup:<10} service SLA {row['service_attainment']} over {row['samples']} "
                f"samples, replicas {row['replicas_seen']}, bulk mean JCT "
                f"{row['bulk_mean_jct_s']} s ({row['bulk_finished']} finished), "
                f"{row['wall_s']:.0f} s",
                flush=True,
            )
    finally:
        ray.shutdown()
        cluster.shutdown()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    out = ROOT / f"bench/serving/results/{args.out}.json"
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, CPU, virtual GPU slots",
        "commit": commit,
        "args": vars(args),
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
