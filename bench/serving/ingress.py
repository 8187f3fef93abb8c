"""What a service's endpoint adds to a request: through the API's ingress against calling the
model in-process (issue 36).

    PYTHONPATH=$PWD .venv/bin/python bench/serving/ingress.py            # about 1 minute
    PYTHONPATH=$PWD .venv/bin/python bench/serving/ingress.py --smoke    # seconds: plumbing

Real parts: Redis (``REDIS_URL``, default ``redis://127.0.0.1:6379``), a Ray cluster (a head
with no GPU and one node of one virtual GPU slot), the control loop, the API server on a
loopback port, and an ``infer`` MLP service with ``serve.endpoint: true`` and no batching
(micro-batch 1, no window): each request is one forward pass of one sample. A client sends
``--requests`` requests one after another (closed loop: each request's latency is its own, no
queueing behind another), JSON bodies over one keep-alive HTTP connection, and records each
answer's time as the client saw it and the replica's own forward time (``timing.model_ms``).
In-process: the same model, built here, called on one sample the same number of times.

Reported: p50 and p99 of the client's latency, of the in-process forward, and of what the
endpoint adds to each request (client latency minus that request's forward time at the
replica: HTTP, authentication, checks, the store's round trips, the replica's pickup).
Writes ``bench/serving/results/ingress.json`` (``--out``).

``--open-rates 50,200`` then loads the same service open loop at each rate for
``--open-seconds``, with the shipped client (``orchestrator.load``, ``orch load``'s engine:
seeded Poisson arrivals, each request timed from its intended send time, 64 connections),
as ``bench/serving/ray_serve.py`` loads Ray Serve: the latencies and what was answered, per
rate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
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

from orchestrator.api import operations  # noqa: E402
from orchestrator.api.identity import Principal  # noqa: E402
from orchestrator.api.server import start  # noqa: E402
from orchestrator.config import Settings  # noqa: E402
from orchestrator.services import serve_in_background  # noqa: E402
from orchestrator.spec import parse_spec  # noqa: E402
from orchestrator.store.tokens import Role  # noqa: E402
from orchestrator.teams import TeamConfig, TeamSpec  # noqa: E402


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank)."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(q * len(s)) - 1))]


def in_process(n: int) -> list[float]:
    """Milliseconds of ``n`` forward passes of one sample of the service's model, here."""
    import torch

    from workers.workloads.registry import build_workload

    torch.set_num_threads(1)  # as the worker runs it on a virtual slot
    w = build_workload("infer", {"model": "mlp"}, seed=0)
    x, _ = w.make_batch(0, 1)
    model = w.model.eval()
    out = []
    with torch.inference_mode():
        for _ in range(20):
            model(x)
        for _ in range(n):
            t0 = time.perf_counter()
            model(x)
            out.append((time.perf_counter() - t0) * 1000.0)
    return out


def through_endpoint(args: argparse.Namespace, ray_address: str) -> dict[str, Any]:
    """The client's latencies and the replica's forward times, through the endpoint."""
    import httpx

    settings = Settings(
        redis_url=args.redis_url,
        ray_address=ray_address,
        data_dir=Path(tempfile.mkdtemp(prefix="bench-ingress-")),
        namespace=f"bench-ingress-{uuid.uuid4().hex[:8]}",
        scheduler_interval_s=0.2,
        warm_workers=0,
    )
    running = serve_in_background(settings)
    store = running.scheduler.store
    server = None
    try:
        store.put_teams(TeamConfig(teams=[TeamSpec(name="web")]))
        spec = parse_spec(
            {
                "name": "scorer",
                "team": "web",
                "class": "interactive",
                "workload": {"name": "infer", "args": {"model": "mlp"}},
                "sla": {"latency": {"percentile": 99, "max_ms": 100}},
                "run": {"micro_batch": 1, "duration_s": 600},
                "serve": {"rate_rps": 100, "max_delay_ms": 0, "endpoint": True},
            }
        )
        job_id = store.submit(spec).id
        token = operations.create_token(
            store, Principal.local("bench"), name="bench", role=Role.MEMBER, team="web"
        )[0]
        server = start(store, "127.0.0.1:0")
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as c:
            deadline = time.monotonic() + 180
            info: dict[str, Any] = {}
            while time.monotonic() < deadline:
                info = c.get(f"/v1/services/{job_id}").json()
                if info.get("ready_replicas"):
                    break
                time.sleep(0.3)
            else:
                raise RuntimeError("the service never had a ready replica")
            body = {"input": [0.5] * info["input"]["shape"][0]}
            for _ in range(args.warmup):
                c.post(f"/v1/services/{job_id}/infer", json=body).raise_for_status()
            client, model = [], []
            for _ in range(args.requests):
                t0 = time.perf_counter()
                r = c.post(f"/v1/services/{job_id}/infer", json=body)
                took = (time.perf_counter() - t0) * 1000.0
                r.raise_for_status()
                client.append(took)
                model.append(float(r.json()["timing"]["model_ms"]))
            figures = c.get(f"/v1/services/{job_id}").json()["figures"]
        open_loop = [_open_loop(server.url, token, job_id, info, rate, args) for rate in args.rates]
        return {
            "client_ms": client,
            "model_ms": model,
            "ingress_figures": figures,
            "open_loop": open_loop,
        }
    finally:
        if server is not None:
            server.stop()
        running.shutdown()
        store.delete_namespace()


def _open_loop(
    url: str, token: str, job_id: str, info: dict[str, Any], rate: float, args: Any
) -> dict[str, Any]:
    """The service loaded open loop at ``rate`` req/s by ``orch load``'s engine."""
    import asyncio

    from orchestrator.client import Client
    from orchestrator.load import ServiceInput, make_bodies, poisson_schedule, run_load

    schedule = poisson_schedule(rate, args.open_seconds, seed=0)
    bodies = make_bodies(ServiceInput.advertised(info), len(schedule.offsets), seed=0)
    path = f"/v1/services/{job_id}/infer"
    with Client(url, token) as client:
        report = asyncio.run(
            run_load(client, path, schedule, bodies, timeout_s=30.0, connections=64)
        )
    got = report.data()
    lat = got["latency_ms"] or {}
    print(
        f"open loop {rate:g} req/s: answered {got['statuses']}, achieved "
        f"{got['achieved_rps'] or 0:.1f} req/s, p50 {lat.get('p50', float('nan')):.2f} ms, "
        f"p99 {lat.get('p99', float('nan')):.2f} ms"
    )
    return {"rate_rps": rate, **got}


def main(argv: list[str] | None = None) -> int:
    """Measure both ways; print and write the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="a few requests: the plumbing only")
    ap.add_argument("--out", default="ingress", help="results file name, no .json")
    ap.add_argument("--open-rates", default="", help="open-loop rates after: 50,200 (req/s)")
    ap.add_argument("--open-seconds", type=float, default=20.0, help="seconds per rate")
    args = ap.parse_args(argv)
    args.rates = [float(r) for r in args.open_rates.split(",") if r.strip()]
    if args.smoke:
        args.requests, args.warmup, args.out = 20, 2, f"{args.out}-smoke"
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        got = through_endpoint(args, cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()
    local = in_process(args.requests)
    added = [c - m for c, m in zip(got["client_ms"], got["model_ms"], strict=True)]
    rows = {
        "client": got["client_ms"],
        "in_process": local,
        "replica_forward": got["model_ms"],
        "added": added,
    }
    summary = {
        k: {"p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99), "mean_ms": statistics.fmean(v)}
        for k, v in rows.items()
    }
    for k, s in summary.items():
        print(f"{k:<16} p50 {s['p50_ms']:7.2f} ms   p99 {s['p99_ms']:7.2f} ms")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, virtual GPU slot",
        "commit": commit,
        "args": vars(args),
    }
    out = ROOT / f"bench/serving/results/{args.out}.json"
    out.write_text(
        json.dumps(
            {
                "meta": meta,
                "summary": summary,
                "ingress": got["ingress_figures"],
                "open_loop": got["open_loop"],
            },
            indent=1,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
