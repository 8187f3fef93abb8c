"""Live: a service answering a real client's requests in a pool shared with bulk jobs, against
the service on dedicated GPUs (issue 36; the endpoint counterpart of ``mixed_pool_live.py``).

    PYTHONPATH=$PWD .venv/bin/python bench/serving/mixed_pool_endpoint.py   # about 5 minutes

Real parts as ``mixed_pool_live.py`` (Redis at ``REDIS_URL``, a Ray cluster of a GPU-less head
and one node of 4 virtual GPU slots, the control loop with ``shared`` and the SLA guard), plus
the API server on a loopback port. The service is the same paced ``infer`` MLP (25 ms per
request: a replica carries 40 req/s) with ``serve.endpoint: true``: it answers only what a
client sends. The client is ``orch load``'s engine (``orchestrator.load.run_load``: open loop,
each latency from its request's intended send time) sending the same seeded Poisson phases:
16 req/s for 10 s, 32 req/s until 45 s, 8 req/s until 75 s. **shared**: the service may run
1-3 replicas, scaled in place by the guard; ``--bulk`` 1-GPU MLP jobs take the rest.
**dedicated**: the service fixed at 2 replicas, the bulk team capped at the other 2 GPUs.

Reported per setup: the requests lost (any answer but 200, timeouts included), the client's
p50/p99, the service's SLA attainment over the ingress's 10 s windows and its whole-life p99
(as ``GET /v1/services/{job}`` gives them), the replica counts seen, each scale's time from
the guard's decision (its ``scaling N -> M replicas`` event) to the endpoint having that many
ready replicas, and the bulk jobs' mean JCT. Writes
``bench/serving/results/mixed-pool-endpoint.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.serving.mixed_pool_live import PHASES, arrivals, bulk_spec  # noqa: E402
from orchestrator.api import operations  # noqa: E402
from orchestrator.api.identity import Principal  # noqa: E402
from orchestrator.api.server import start  # noqa: E402
from orchestrator.client import Client  # noqa: E402
from orchestrator.config import Settings  # noqa: E402
from orchestrator.errors import JobEnded  # noqa: E402
from orchestrator.load import Schedule, ServiceInput, make_bodies, run_load  # noqa: E402
from orchestrator.services import serve_in_background  # noqa: E402
from orchestrator.spec import parse_spec  # noqa: E402
from orchestrator.store.ingress import (  # noqa: E402
    WINDOW_S,
    service_keys,
    window_percentiles,
)
from orchestrator.store.states import JobState  # noqa: E402
from orchestrator.store.tokens import Role  # noqa: E402
from orchestrator.teams import TeamConfig, TeamSpec  # noqa: E402

DONE = {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED}


def service_spec(gpus: dict[str, int], ceiling_ms: float, smoke: bool) -> Any:
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
            # longer than the load: the client decides when requests come; cancelled after
            "run": {"micro_batch": 1, "duration_s": 30 if smoke else PHASES[-1][0] + 120},
            "serve": {"trace": arrivals(), "max_delay_ms": 0, "endpoint": True},
        }
    )


def scale_windows(
    store: Any, svc: str, began: float, scales: list[dict[str, Any]], ceiling_ms: float
) -> dict[str, Any]:
    """The ingress's 10 s windows (p99 each), those a scale-up overlaps (from its decision to
    its new replica serving) set beside the steady ones: the issue's "p99 during the scale
    within 2x the steady p99"."""
    keys = service_keys(store.keys.namespace, svc)
    rows = window_percentiles(store.client, keys, 0.99)
    spans = [
        (began + sc["at_s"], began + sc["at_s"] + (sc["to_serving_s"] or 0.0))
        for i, sc in enumerate(scales)
        if i == 0 or sc["to"] > scales[i - 1]["to"]  # the scale-ups (the first is one)
    ]
    during: list[float] = []
    steady: list[float] = []
    for at, p99, n in rows:
        if p99 is None or not n:
            continue
        hit = any(a < at + WINDOW_S and b >= at for a, b in spans)
        (during if hit else steady).append(p99)
    mid = statistics.median(steady) if steady else None
    worst = max(during) if during else None
    return {
        "window_p99_ms": [
            (round(at - began, 1), None if p is None else round(p, 1), n) for at, p, n in rows
        ],
        "scale_window_p99_ms": worst,
        "steady_window_p99_ms": mid,
        "scale_over_steady": None if worst is None or not mid else round(worst / mid, 2),
    }


def one(setup: str, args: argparse.Namespace, ray_address: str) -> dict[str, Any]:
    """One setup on the live pool; its figures."""
    shared = setup == "shared"
    settings = Settings(
        redis_url=args.redis_url,
        ray_address=ray_address,
        data_dir=Path(tempfile.mkdtemp(prefix=f"mixed-endpoint-{setup}-")),
        namespace=f"bench-endpoint-{uuid.uuid4().hex[:8]}",
        scheduler_interval_s=0.2,
        policy="shared",
        guard_hold_s=1.0,
        warm_workers=args.warm_workers,
    )
    running = serve_in_background(settings)
    store = running.scheduler.store
    server = start(store, "127.0.0.1:0")
    ids: list[str] = []
    try:
        ml = TeamSpec(name="ml") if shared else TeamSpec(name="ml", max_gpus=2)
        store.put_teams(TeamConfig(teams=[TeamSpec(name="web"), ml], entry_modules=["tests"]))
        gpus = {"min": 1, "max": 3} if shared else {"min": 2, "max": 2}
        svc = store.submit(service_spec(gpus, args.ceiling_ms, args.smoke)).id
        bulk = [store.submit(bulk_spec(i, args.bulk_s)).id for i in range(args.bulk)]
        ids += [svc, *bulk]
        token = operations.create_token(
            store, Principal.local("bench"), name="bench", role=Role.MEMBER, team="web"
        )[0]
        client = Client(server.url, token)
        deadline = time.monotonic() + args.timeout
        info = client.service(svc)
        while not info["ready_replicas"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{svc} never had a ready replica")
            time.sleep(0.3)
            info = client.service(svc)
        ready_seen: list[tuple[float, int]] = []
        stop = threading.Event()

        def watch() -> None:  # the endpoint's ready replicas, twice a second
            while not stop.wait(0.5):
                try:
                    ready_seen.append((time.time(), int(client.service(svc)["ready_replicas"])))
                except Exception:  # a slow answer under load: the next sample will do
                    continue

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        times = arrivals() if not args.smoke else [t for t in arrivals() if t < 5.0]
        schedule = Schedule(times, times[-1])
        bodies = make_bodies(ServiceInput.model_validate(info["input"]), 16, seed=0)
        began = time.time()
        report = asyncio.run(
            run_load(
                client,
                f"/v1/services/{svc}/infer",
                schedule,
                bodies,
                timeout_s=30.0,
                connections=200,
            )
        )
        stop.set()
        watcher.join(timeout=5)
        figures = client.service(svc)["figures"]
        store.cancel(svc)
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
        scales = []  # each guard decision, and when the endpoint had that many ready
        for e in store.events(svc):
            found = re.search(r"scaling \d+ -> (\d+) replicas", str(e.get("message", "")))
            if e.get("event") == "guard" and found:
                want, at = int(found.group(1)), float(e["ts"])
                served = next((t for t, n in ready_seen if t >= at and n == want), None)
                scales.append(
                    {
                        "at_s": round(at - began, 2),
                        "to": want,
                        "to_serving_s": None if served is None else round(served - at, 2),
                    }
                )
        windows = scale_windows(store, svc, began, scales, args.ceiling_ms)
        lat = report.latency
        return {
            "setup": setup,
            "requests": report.requests,
            "statuses": report.statuses,
            "lost": report.requests - report.statuses.get("200", 0),
            "client_p50_ms": None if lat is None else lat.p50,
            "client_p99_ms": None if lat is None else lat.p99,
            "attainment": figures["attainment"],
            "windows": figures["windows"],
            "ingress_p99_ms": figures["p99_ms"],
            "replicas_seen": sorted({n for _, n in ready_seen}),
            "scales": scales,
            **windows,
            "bulk_finished": len(jcts),
            "bulk_mean_jct_s": sum(jcts) / len(jcts) if jcts else None,
            "bulk_jcts_s": jcts,
        }
    finally:
        for job_id in ids:
            if store.get(job_id).state not in DONE:
                with contextlib.suppress(JobEnded):  # being cancelled already
                    store.cancel(job_id)
        server.stop()
        running.shutdown()
        store.delete_namespace()


def main(argv: list[str] | None = None) -> int:
    """Both setups on one Ray cluster; print and write their figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    ap.add_argument("--ceiling-ms", type=float, default=1000.0)
    ap.add_argument("--bulk", type=int, default=4)
    ap.add_argument(
        "--warm-workers",
        type=int,
        default=Settings().warm_workers,
        help="warm workers per node (default: the product's; 0: every replica a new "
        "process, as the figures before 2026-11-29 ran)",
    )
    ap.add_argument("--bulk-s", type=float, default=30.0)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--setups", default="shared,dedicated")
    ap.add_argument("--smoke", action="store_true", help="5 s of load, 1 bulk job: plumbing")
    ap.add_argument("--out", default="mixed-pool-endpoint", help="results file name, no .json")
    args = ap.parse_args(argv)
    if args.smoke:
        args.bulk, args.bulk_s, args.out = 1, 5.0, f"{args.out}-smoke"
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
                f"{setup:<10} lost {row['lost']} of {row['requests']}, client p99 "
                f"{row['client_p99_ms']:.0f} ms, SLA windows {row['attainment']} of "
                f"{row['windows']}, replicas {row['replicas_seen']}, scales {row['scales']}, "
                f"p99 in a scale-up's windows {row['scale_window_p99_ms']} ms against "
                f"{row['steady_window_p99_ms']} ms steady ({row['scale_over_steady']}x), "
                f"bulk mean JCT {row['bulk_mean_jct_s']} s ({row['bulk_finished']} finished), "
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
