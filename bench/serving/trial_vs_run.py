"""A service's tuning trial against its run, at the same offered load (issue 36, item 4).

    PYTHONPATH=$PWD .venv/bin/python bench/serving/trial_vs_run.py             # about 5 minutes
    PYTHONPATH=$PWD .venv/bin/python bench/serving/trial_vs_run.py --smoke     # plumbing only

Real parts: Redis (``REDIS_URL``, default ``redis://127.0.0.1:6379``), a Ray cluster (a head
with no GPU and one node of one virtual GPU slot), the control loop, the API server on a
loopback port, and an ``infer`` MLP service with ``serve.endpoint: true`` on one replica (max
batch 8, a 1 ms window, fp32), no tuning. At each ``--rates`` rate, ``--repeats`` times,
alternating:

- **trial**: the tuner's trial of the same config (``ServeEvaluator.evaluate``: a replica
  answering from a trial-scoped ingress stream, loaded by ``orch load``'s engine entering at the
  ingress's producer side), one seeded Poisson stream of ``--seconds``;
- **run**: the running service loaded over HTTP by ``orch load --rate R --duration S --seed K
  --connections 64`` in a process of its own, with the same seeded stream.

Both measure each request from its intended send time to its answer. Beside them, the trial as
it was before (``virtual trial``: ``workers.serve_run.load_test``, the same seeded arrivals
through the batcher in this process on the virtual clock, no ingress, no client). Printed: p50
and p99 of each, and each trial's p99 over the run's (the factor the tuner's prediction is off
by); the medians with min-max over repeats. The API server and the control loop run in this
process (as ``bench/serving/ingress.py``'s), and so does the trial's replica: the figures are
this machine's, a GPU's would differ. Writes ``bench/serving/results/trial-vs-run.json``
(``--out``).
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

MAX_BATCH = 8
MAX_DELAY_MS = 1.0


def measure(args: argparse.Namespace, ray_address: str) -> list[dict[str, Any]]:
    """Every (rate, repeat)'s trial and run figures."""
    import httpx

    from orchestrator.tuner.evaluators.serve import ServeEvaluator
    from orchestrator.tuner.space import Config, DeviceCaps

    settings = Settings(
        redis_url=args.redis_url,
        ray_address=ray_address,
        data_dir=Path(tempfile.mkdtemp(prefix="bench-trial-run-")),
        namespace=f"bench-trial-run-{uuid.uuid4().hex[:8]}",
        scheduler_interval_s=0.2,
        warm_workers=0,
    )
    running = serve_in_background(settings)
    store = running.scheduler.store
    server = None
    rows: list[dict[str, Any]] = []
    try:
        store.put_teams(TeamConfig(teams=[TeamSpec(name="web")]))
        spec = parse_spec(
            {
                "name": "scorer",
                "team": "web",
                "class": "interactive",
                "workload": {"name": "infer", "args": {"model": "mlp"}},
                "sla": {"latency": {"percentile": 99, "max_ms": 100}},
                "run": {"micro_batch": MAX_BATCH, "duration_s": 3600},
                "serve": {"rate_rps": 100, "max_delay_ms": MAX_DELAY_MS, "endpoint": True},
            }
        )
        assert spec.serve is not None
        job_id = store.submit(spec).id
        token = operations.create_token(
            store, Principal.local("bench"), name="bench", role=Role.MEMBER, team="web"
        )[0]
        server = start(store, "127.0.0.1:0")
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as c:
            deadline = time.monotonic() + 300
            while True:
                info = c.get(f"/v1/services/{job_id}").json()
                if info.get("ready_replicas"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the service never had a ready replica")
                time.sleep(0.3)
        config = Config(micro_batch=MAX_BATCH, gpus=1, max_delay_ms=MAX_DELAY_MS)
        for rate in args.rates:
            for k in range(args.repeats):
                seed = 100 + k
                evaluator = ServeEvaluator(
                    "infer",
                    {"model": "mlp"},
                    {**spec.serve.harness(), "rate_rps": rate},
                    redis_url=args.redis_url,
                    namespace=settings.namespace,
                    trial_s=args.seconds,
                    streams=1,
                    caps=DeviceCaps(precisions=("fp32",)),
                    seed=seed,
                )
                before = _virtual_trial(rate, args.seconds, seed)
                trial = evaluator.evaluate(config)
                run = _run(server.url, token, job_id, rate, args.seconds, seed)
                lat = run["latency_ms"] or {}
                row = {
                    "rate_rps": rate,
                    "seed": seed,
                    "trial": {
                        "p50_ms": trial.p50_ms,
                        "p99_ms": trial.p99_ms,
                        "offered": trial.offered,
                        "dropped": trial.dropped,
                        "samples_per_s": trial.samples_per_s,
                        "cost_s": trial.cost_s,
                    },
                    "virtual_trial": before,
                    "run": {
                        "p50_ms": lat.get("p50"),
                        "p99_ms": lat.get("p99"),
                        "statuses": run["statuses"],
                        "achieved_rps": run["achieved_rps"],
                        "send_lag_p99_ms": (run["send_lag_ms"] or {}).get("p99"),
                    },
                    "load_1m": os.getloadavg()[0],
                }
                ratio = _ratio(row)
                row["trial_over_run_p99"] = ratio
                old = before["p99_ms"] / lat["p99"] if lat.get("p99") else None
                row["virtual_trial_over_run_p99"] = old
                rows.append(row)
                print(
                    f"{rate:6g} req/s seed {seed}: trial p50 {_ms(trial.p50_ms)} p99 "
                    f"{_ms(trial.p99_ms)} (dropped {trial.dropped}) | run p50 "
                    f"{_ms(lat.get('p50'))} p99 {_ms(lat.get('p99'))} {run['statuses']} | "
                    f"trial/run p99 {ratio if ratio is None else round(ratio, 2)} | "
                    f"virtual trial p99 {_ms(before['p99_ms'])}, /run "
                    f"{old if old is None else round(old, 2)} | "
                    f"load {row['load_1m']:.1f}",
                    flush=True,
                )
        return rows
    finally:
        if server is not None:
            server.stop()
        running.shutdown()
        store.delete_namespace()


def _run(
    url: str, token: str, job_id: str, rate: float, seconds: float, seed: int
) -> dict[str, Any]:
    """The running service loaded over HTTP by ``orch load`` in a process of its own (as a
    client would run it; its JSON report)."""
    env = {**os.environ, "ORCH_API_URL": url, "ORCH_TOKEN": token, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-c",
        "import sys; from orchestrator.cli import main; sys.exit(main())",
        "load",
        job_id,
        "--rate",
        str(rate),
        "--duration",
        str(seconds),
        "--seed",
        str(seed),
        "--connections",
        "64",
        "-o",
        "json",
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _virtual_trial(rate: float, seconds: float, seed: int) -> dict[str, Any]:
    """The trial as it was before issue 36's item 4 (``workers.serve_run.load_test``): the same
    seeded arrivals through the batcher in this process on the virtual clock, each batch a
    real timed forward pass, latency from arrival to answer."""
    from workers.serve_run import load_test, serve_arrivals
    from workers.workloads.registry import build_workload

    trace = load_test(
        build_workload("infer", {"model": "mlp"}, 0),
        serve_arrivals({"rate_rps": rate}, seconds, seed),
        max_batch=MAX_BATCH,
        max_delay_s=MAX_DELAY_MS / 1000.0,
    ).summary()
    return {"p50_ms": trace["request_p50_ms"], "p99_ms": trace["request_p99_ms"]}


def _ratio(row: dict[str, Any]) -> float | None:
    t, r = row["trial"]["p99_ms"], row["run"]["p99_ms"]
    return None if t is None or not r else t / r


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:7.2f}"


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rate: medians (min-max) of each p99 and of the ratio."""
    out = []
    for rate in sorted({r["rate_rps"] for r in rows}):
        at = [r for r in rows if r["rate_rps"] == rate]

        def spread(values: list[float | None]) -> dict[str, float] | None:
            got = [v for v in values if v is not None]
            if not got:
                return None
            return {"median": statistics.median(got), "min": min(got), "max": max(got)}

        out.append(
            {
                "rate_rps": rate,
                "repeats": len(at),
                "trial_p50_ms": spread([r["trial"]["p50_ms"] for r in at]),
                "run_p50_ms": spread([r["run"]["p50_ms"] for r in at]),
                "trial_p99_ms": spread([r["trial"]["p99_ms"] for r in at]),
                "run_p99_ms": spread([r["run"]["p99_ms"] for r in at]),
                "trial_over_run_p99": spread([r["trial_over_run_p99"] for r in at]),
                "virtual_trial_p99_ms": spread([r["virtual_trial"]["p99_ms"] for r in at]),
                "virtual_trial_over_run_p99": spread([r["virtual_trial_over_run_p99"] for r in at]),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure, print and write the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    ap.add_argument("--rates", default="25,100", help="offered loads, req/s")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of load per measure")
    ap.add_argument("--smoke", action="store_true", help="one short repeat: the plumbing only")
    ap.add_argument("--out", default="trial-vs-run", help="results file name, no .json")
    args = ap.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    if args.smoke:
        args.rates, args.repeats, args.seconds = [25.0], 1, 2.0
        args.out = f"{args.out}-smoke"
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        rows = measure(args, cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()
    summary = summarize(rows)
    print(
        "\nrate     trial p99 ms (min-max)     run p99 ms (min-max)      trial/run p99"
        "         virtual trial p99 ms       virtual/run p99"
    )
    for s in summary:

        def fmt(d: dict[str, float] | None, digits: int = 1) -> str:
            if d is None:
                return "-"
            m, lo, hi = d["median"], d["min"], d["max"]
            return f"{m:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"

        print(
            f"{s['rate_rps']:<8g} {fmt(s['trial_p99_ms']):<26} {fmt(s['run_p99_ms']):<26} "
            f"{fmt(s['trial_over_run_p99'], 2):<21} {fmt(s['virtual_trial_p99_ms']):<26} "
            f"{fmt(s['virtual_trial_over_run_p99'], 2)}"
        )
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
    out.write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
