"""API submission benchmark (issue 13): submissions per second through the HTTP API with
authentication, beside direct store submissions, in one run; and the latency `show` adds.

    .venv/bin/python bench/api/submit.py            # the figures (run on a quiet machine)
    .venv/bin/python bench/api/submit.py --smoke    # a tiny run (seconds)

Redis is ``REDIS_URL`` (else an embedded server in a temporary directory, stopped at the end);
every job lands in a fresh namespace, deleted at the end. The API is `orch serve` in its own
process (``--workers`` uvicorn processes, default 1), as a team would reach it, with an admin
token made beforehand; the clients are separate processes, so client and server never share an
interpreter.

Rows (each submits the example interactive job, validated the same way):

- ``direct, one by one``: ``JobStore.submit`` in a loop (what `orch submit` does per file).
- ``direct, submit_many``: ``JobStore.submit_many`` (pipelined batches of 500).
- ``API, 1 client``: ``POST /v1/jobs``, one at a time, one keep-alive connection.
- ``API, batch endpoint``: ``POST /v1/jobs/batch`` with ``--batch`` jobs per request.
- ``API, 8 clients``: ``POST /v1/jobs`` from 8 processes at once.

Then ``show`` of one job: ``JobStore.get`` beside ``GET /v1/jobs/{id}`` (which also reads the
job's metrics, events and tuning report), p50 and p99 over ``--shows`` calls. The target of
the issue is at least 2,000 submissions per second through the API.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.api import operations  # noqa: E402
from orchestrator.api.identity import Principal  # noqa: E402
from orchestrator.spec import load_spec  # noqa: E402
from orchestrator.store import EmbeddedRedis, JobStore  # noqa: E402
from orchestrator.store.tokens import Role  # noqa: E402
from workers.telemetry import percentile  # noqa: E402

RESULTS = Path(__file__).parent / "results"
EXAMPLE = ROOT / "examples" / "interactive-mlp.yaml"
BODY = load_spec(EXAMPLE).model_dump(mode="json", by_alias=True, exclude_unset=True)
CLIENTS = 8


@contextmanager
def redis_url() -> Iterator[str]:
    """``REDIS_URL``, or an embedded server for the run."""
    url = os.environ.get("REDIS_URL", "").strip()
    if url:
        yield url
        return
    data = Path(tempfile.mkdtemp(prefix="bench-api-"))
    server = EmbeddedRedis(data)
    try:
        yield server.ensure_running()
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def api_server(url: str, namespace: str, workers: int) -> Iterator[str]:
    """`orch serve` on a free loopback port in its own process(es); yields its URL."""
    env = {**os.environ, "REDIS_URL": url, "ORCH_NAMESPACE": namespace}
    env["ORCH_API_ADDRESS"] = "127.0.0.1:0"
    exe = Path(sys.executable).parent / "orch"
    proc = subprocess.Popen(
        [str(exe), "serve", "--workers", str(workers)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://[\d.]+:\d+", line)
        if found is None:
            raise SystemExit(f"orch serve did not start: {line}{proc.stdout.read()}")
        base = found.group(0)
        _ready(base)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def _ready(base: str, timeout_s: float = 120.0) -> None:
    """Wait until every worker could answer (worker processes start after the bind)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if all(httpx.get(f"{base}/healthz", timeout=30).is_success for _ in range(20)):
                return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise SystemExit(f"the API at {base} did not answer within {timeout_s:.0f} s")


def _rate(count: int, run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return count / (time.perf_counter() - start)


def _post_singles(base: str, token: str, count: int) -> int:
    """One client: ``count`` single submissions over one keep-alive connection."""
    import httpx

    with httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        for _ in range(count):
            http.post("/v1/jobs", json=BODY).raise_for_status()
    return count


def _post_batches(base: str, token: str, count: int, batch: int) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
        for start in range(0, count, batch):
            jobs = [BODY] * min(batch, count - start)
            http.post("/v1/jobs/batch", json={"jobs": jobs}).raise_for_status()
    return count


def submissions(store: JobStore, base: str, token: str, n: int, batch: int) -> dict[str, float]:
    """Submissions per second of each row (see the module's docstring)."""
    spec = load_spec(EXAMPLE)
    with ProcessPoolExecutor(CLIENTS) as pool:
        list(pool.map(_post_singles, [base] * CLIENTS, [token] * CLIENTS, [2] * CLIENTS))  # warm
        rates = {
            "direct, one by one": _rate(n, lambda: [store.submit(spec) for _ in range(n)]),
            "direct, submit_many": _rate(n, lambda: store.submit_many([spec] * n)),
            "API, 1 client": _rate(n, lambda: pool.submit(_post_singles, base, token, n).result()),
            "API, batch endpoint": _rate(
                n, lambda: pool.submit(_post_batches, base, token, n, batch).result()
            ),
            f"API, {CLIENTS} clients": _rate(
                n,
                lambda: list(
                    pool.map(
                        _post_singles,
                        [base] * CLIENTS,
                        [token] * CLIENTS,
                        [n // CLIENTS] * CLIENTS,
                    )
                ),
            ),
        }
    return rates


def show_latency(store: JobStore, base: str, token: str, calls: int) -> dict[str, float]:
    """p50 and p99 in milliseconds of one job's ``show``, direct and through the API."""
    import httpx

    job_id = store.submit(load_spec(EXAMPLE)).id
    direct, api = [], []
    with httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        for _ in range(calls):
            start = time.perf_counter()
            store.get(job_id)
            direct.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            http.get(f"/v1/jobs/{job_id}").raise_for_status()
            api.append((time.perf_counter() - start) * 1000)
    return {
        "direct p50 ms": percentile(direct, 50),
        "direct p99 ms": percentile(direct, 99),
        "API p50 ms": percentile(api, 50),
        "API p99 ms": percentile(api, 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8000, help="submissions per row")
    parser.add_argument("--batch", type=int, default=500, help="jobs per batch request")
    parser.add_argument("--shows", type=int, default=2000, help="show calls timed")
    parser.add_argument("--workers", type=int, default=1, help="API server processes")
    parser.add_argument("--smoke", action="store_true", help="a tiny run")
    args = parser.parse_args()
    n, shows = (80, 50) if args.smoke else (args.jobs, args.shows)
    namespace = f"bench-api-{uuid.uuid4().hex[:8]}"
    with redis_url() as url:
        store = JobStore.from_url(url, namespace)
        try:
            token, _ = operations.create_token(
                store, Principal.local("bench"), name="bench", role=Role.ADMIN, team=None
            )
            with api_server(url, namespace, args.workers) as base:
                rates = submissions(store, base, token, n, args.batch)
                shown = show_latency(store, base, token, shows)
        finally:
            store.delete_namespace()
    print(f"{'row':<24} {'submissions/s':>14}")
    for row, rate in rates.items():
        print(f"{row:<24} {rate:>14,.0f}")
    print("show: " + ", ".join(f"{k} {v:.2f}" for k, v in shown.items()))
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        out: dict[str, Any] = {
            "jobs": n,
            "batch": args.batch,
            "workers": args.workers,
            "rates": rates,
            "show": shown,
        }
        (RESULTS / f"submit-{args.workers}w.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
