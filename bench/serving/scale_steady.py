"""Live: a service scaled 1 -> 2 -> 1 replicas, several times, under a steady client load; the
p99 of the requests due during each scale against the steady p99 (issue 36: "a scale up and a
scale down under steady load with no failed request and a p99 during the scale within 2x the
steady p99").

    PYTHONPATH=$PWD .venv/bin/python bench/serving/scale_steady.py   # about 3 minutes

Real parts as ``mixed_pool_endpoint.py``: Redis at ``REDIS_URL``, a Ray cluster of a GPU-less
head and one node of 4 virtual GPU slots, the control loop with ``shared``, the API server on a
loopback port, and ``orch load``'s engine (``orchestrator.load.run_load``: open loop, each
latency from its request's intended send time) sending a seeded Poisson stream at ``--rate``
req/s to the paced ``infer`` MLP (25 ms per request: one replica carries 40 req/s). The scales
are asked for as the guard asks (its ``want``; its own hold is an hour, so it asks nothing
itself): a scale-up lasts from the ask to the endpoint having two ready replicas and the run
placed on two; a scale-down from the ask to one of each. Only the load is steady, so what a
scale costs the requests is apart from what a changing load costs them
(``mixed_pool_endpoint.py`` measures the scales a changing load causes).

Reported: requests sent and lost (any answer but 200), the steady p99 (the requests due outside
every scale, the first ``--settle`` seconds left out; also apart on 1 and on 2 replicas), and
per scale its length, the p99 of the requests due during it, and that over the steady p99 and
over the steady p99 of the replica count the scale leaves. Writes
``bench/serving/results/scale-steady.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
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

from orchestrator.api import operations  # noqa: E402
from orchestrator.api.identity import Principal  # noqa: E402
from orchestrator.api.server import start  # noqa: E402
from orchestrator.client import Client  # noqa: E402
from orchestrator.config import Settings  # noqa: E402
from orchestrator.load import ServiceInput, make_bodies, poisson_schedule, run_load  # noqa: E402
from orchestrator.services import serve_in_background  # noqa: E402
from orchestrator.spec import parse_spec  # noqa: E402
from orchestrator.store.tokens import Role  # noqa: E402
from orchestrator.teams import TeamConfig, TeamSpec  # noqa: E402


def service_spec(rate: float) -> Any:
    return parse_spec(
        {
            "name": "svc",
            "team": "web",
            "class": "interactive",
            "workload": {
                "entry": "tests.e2e.paced_service:build",
                "args": {"request_ms": 25.0, "hidden": 16, "n_layer": 1},
            },
            "sla": {"latency": {"percentile": 99, "max_ms": 1000}},
            "resources": {"gpus": {"min": 1, "max": 3}},
            "run": {"micro_batch": 1, "duration_s": 3600},
            "serve": {"rate_rps": rate, "max_delay_ms": 0, "endpoint": True},
        }
    )


def p99(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    return statistics.quantiles(values, n=100, method="inclusive")[98] * 1000.0


def spans_p99(
    answers: list[tuple[float, float]], spans: list[tuple[str, float, float]], settle_s: float
) -> dict[str, Any]:
    """The p99 (ms) of the answers due in each scale's span, and of those due outside every
    span (after ``settle_s``), all together and by the replica count they were served on
    (1 before a scale-up and after a scale-down, 2 between): ``answers`` are ``(due_s,
    latency_s)``, spans ``(kind, from, to)`` in order, "up" then "down"."""

    def inside(a: float, b: float) -> list[float]:
        return [lat for due, lat in answers if a <= due <= b]

    bounds = [settle_s, *[t for _, a, b in spans for t in (a, b)], float("inf")]
    by_count: dict[int, list[float]] = {1: [], 2: []}
    for k in range(0, len(bounds), 2):  # the steady stretches: 1, 2, 1, 2, ... replicas
        by_count[1 + (k // 2) % 2] += inside(bounds[k], bounds[k + 1])
    steady = by_count[1] + by_count[2]
    mid, on = p99(steady), {n: p99(v) for n, v in by_count.items()}
    rows = []
    for kind, a, b in spans:
        got = p99(inside(a, b))
        before = on[1 if kind == "up" else 2]  # the count the scale leaves
        rows.append(
            {
                "kind": kind,
                "at_s": round(a, 2),
                "length_s": round(b - a, 2),
                "requests": len(inside(a, b)),
                "p99_ms": got,
                "over_steady": None if not mid or got is None else got / mid,
                "over_steady_before": None if not before or got is None else got / before,
            }
        )
    return {
        "steady_p99_ms": mid,
        "steady_requests": len(steady),
        "steady_p99_ms_by_replicas": on,
        "scales": rows,
    }


def run(args: argparse.Namespace, ray_address: str) -> dict[str, Any]:
    settings = Settings(
        redis_url=args.redis_url,
        ray_address=ray_address,
        data_dir=Path(tempfile.mkdtemp(prefix="scale-steady-")),
        namespace=f"bench-scale-{uuid.uuid4().hex[:8]}",
        scheduler_interval_s=0.2,
        policy="shared",
        guard_hold_s=3600.0,  # the guard asks nothing of its own: the bench asks
        warm_workers=args.warm_workers,
    )
    running = serve_in_background(settings)
    loop = running.scheduler
    store = loop.store
    server = start(store, "127.0.0.1:0")
    try:
        store.put_teams(TeamConfig(teams=[TeamSpec(name="web")], entry_modules=["tests"]))
        svc = store.submit(service_spec(args.rate)).id
        token = operations.create_token(
            store, Principal.local("bench"), name="bench", role=Role.MEMBER, team="web"
        )[0]
        client = Client(server.url, token)

        def ready() -> int:
            return int(client.service(svc)["ready_replicas"])

        def placed() -> int:
            r = loop.runs.get(svc)
            return -1 if r is None or r.resize_to is not None else len(r.nodes)

        def until(n: int) -> None:
            deadline = time.monotonic() + args.timeout
            while not (ready() == n and placed() == n):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{svc} never had {n} ready replicas")
                time.sleep(0.1)

        until(1)
        info = client.service(svc)
        length = args.settle + args.cycles * 2 * args.hold + args.cycles * 10 + args.hold
        schedule = poisson_schedule(args.rate, length, seed=args.seed)
        bodies = make_bodies(ServiceInput.advertised(info), 16, seed=0)
        answers: list[tuple[float, float]] = []
        report: list[Any] = []

        def client_side() -> None:
            report.append(
                asyncio.run(
                    run_load(
                        client,
                        f"/v1/services/{svc}/infer",
                        schedule,
                        bodies,
                        timeout_s=30.0,
                        connections=100,
                        on_answer=lambda _i, due, lat: answers.append((due, lat)),
                    )
                )
            )

        began = time.monotonic()
        sender = threading.Thread(target=client_side)
        sender.start()
        spans: list[tuple[str, float, float]] = []
        time.sleep(args.settle + args.hold)
        for _ in range(args.cycles):
            for kind, n in (("up", 2), ("down", 1)):
                at = time.monotonic() - began
                loop.sla_guard.want[svc] = n
                until(n)
                spans.append((kind, at, time.monotonic() - began))
                time.sleep(args.hold)
        sender.join()
        got = report[0]
        return {
            "rate_rps": args.rate,
            "requests": got.requests,
            "statuses": got.statuses,
            "lost": got.requests - got.statuses.get("200", 0),
            "client_p99_ms": None if got.latency is None else got.latency.p99,
            **spans_p99(answers, spans, args.settle),
        }
    finally:
        store.cancel(svc)
        server.stop()
        running.shutdown()
        store.delete_namespace()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    ap.add_argument("--rate", type=float, default=20.0, help="req/s (one replica carries 40)")
    ap.add_argument("--cycles", type=int, default=3, help="scale-ups and downs, each")
    ap.add_argument("--hold", type=float, default=15.0, help="seconds between scales")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds left out at the start")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm-workers", type=int, default=Settings().warm_workers)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", default="scale-steady", help="results file name, no .json")
    args = ap.parse_args(argv)
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=4)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        row = run(args, cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(
        f"{row['rate_rps']} req/s: lost {row['lost']} of {row['requests']}, steady p99 "
        f"{row['steady_p99_ms']:.1f} ms over {row['steady_requests']} requests (on 1 replica "
        f"{row['steady_p99_ms_by_replicas'][1]:.1f} ms, on 2 "
        f"{row['steady_p99_ms_by_replicas'][2]:.1f} ms)"
    )
    for sc in row["scales"]:
        ratio = sc["over_steady"]
        print(
            f"  scale-{sc['kind']:<4} at {sc['at_s']:6.1f} s, {sc['length_s']:5.2f} s long, "
            f"{sc['requests']} requests, p99 {sc['p99_ms'] or 0:.1f} ms "
            f"({'-' if ratio is None else f'{ratio:.2f}'}x steady, "
            f"{sc['over_steady_before'] or 0:.2f}x the steady before it)"
        )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, virtual GPU slots",
        "commit": commit,
        "args": vars(args),
    }
    out = ROOT / f"bench/serving/results/{args.out}.json"
    out.write_text(json.dumps({"meta": meta, "row": row}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
