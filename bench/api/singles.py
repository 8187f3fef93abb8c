"""Single API submissions per second (issue 27): ``POST /v1/jobs``, one job per request, from
many concurrent keep-alive connections, with a member token; optionally beside a baseline tree.

    .venv/bin/python bench/api/singles.py                       # this tree only
    .venv/bin/python bench/api/singles.py --baseline /tmp/base  # alternating with another tree
    .venv/bin/python bench/api/singles.py --smoke               # seconds

Redis is ``REDIS_URL`` (default the local server, ``redis://127.0.0.1:6379/0``); each server
gets a fresh namespace, deleted at the end. Each tree is served by ``orch serve``
(``--workers`` uvicorn processes, default 1) started from that tree (``PYTHONPATH`` set to
it), so the same Python environment serves both and only the code differs. The clients are
one separate process running ``--clients`` connections on asyncio with a minimal HTTP/1.1
writer and reader (an HTTP library would cost more CPU than the server on a 2-core machine).
Trees are measured in turn, ``--rounds`` times each for ``--seconds`` each (alternating, so a
neighbour's load falls on both alike); the figures are the median round's rate and the latency
percentiles over all of a tree's requests, with the CPU time per submission of the server (its
process and workers, from ``/proc``: the figure that a neighbour's load disturbs least), of
Redis (``INFO cpu``, which counts the neighbours' commands too) and of the clients. Every
answer must be 201: anything else stops the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.api import operations  # noqa: E402
from orchestrator.api.identity import Principal  # noqa: E402
from orchestrator.spec import load_spec  # noqa: E402
from orchestrator.store import JobStore  # noqa: E402
from orchestrator.store.tokens import Role  # noqa: E402

RESULTS = Path(__file__).parent / "results"
EXAMPLE = ROOT / "examples" / "interactive-mlp.yaml"
TEAM = "vision"


def body() -> bytes:
    """The example interactive job of team vision, as a request body."""
    data = load_spec(EXAMPLE).model_dump(mode="json", by_alias=True, exclude_unset=True)
    return json.dumps({**data, "team": TEAM}).encode()


@contextmanager
def served(
    tree: Path, url: str, namespace: str, site: Path | None = None, workers: int = 1
) -> Iterator[tuple[str, int]]:
    """``orch serve`` of the code in ``tree`` (and the packages in ``site``, if given) on a
    free loopback port; yields its URL and process id."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(p) for p in (tree, site) if p is not None),
        "REDIS_URL": url,
        "ORCH_NAMESPACE": namespace,
        "ORCH_API_ADDRESS": "127.0.0.1:0",
    }
    serve = ["serve", "--workers", str(workers)]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from orchestrator.cli import main; main()", *serve],
        cwd=tree,
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
            raise SystemExit(f"orch serve did not start in {tree}: {line}{proc.stdout.read()}")
        yield found.group(0), proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


async def _connection(
    host: str, port: int, request: bytes, until: float, latencies: list[float]
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < until:
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head[9:12]
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            answer = await reader.readexactly(int(length.group(1)) if length else 0)
            if status != b"201":
                raise SystemExit(f"answer {status.decode()}: {answer[:300]!r}")
            latencies.append(time.perf_counter() - start)
    finally:
        writer.close()


def clients(
    base: str, token: str, payload: bytes, connections: int, seconds: float
) -> tuple[list[float], float]:
    """``connections`` clients posting one job per request for ``seconds``: the latency of
    each request and the CPU seconds the clients used (run in its own process)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    request = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload
    latencies: list[float] = []

    async def run() -> None:
        until = time.perf_counter() + seconds
        await asyncio.gather(
            *(_connection(host, int(port), request, until, latencies) for _ in range(connections))
        )

    used = time.process_time()
    asyncio.run(run())
    return latencies, time.process_time() - used


def _ready(base: str, token: str, payload: bytes) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            clients(base, token, payload, 1, 0.2)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def cpu_s(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its children (the workers of
    ``--workers N``), from ``/proc`` (0 where there is none)."""
    total = 0.0
    for each in (pid, *_children(pid)):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def redis_cpu_s(store: JobStore) -> float:
    """CPU seconds the Redis server has used (``INFO cpu``: every client's work, so a
    neighbour's too)."""
    info = store.client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another tree, measured alternately")
    parser.add_argument("--clients", type=int, default=16, help="concurrent connections")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per tree")
    parser.add_argument(
        "--this-site",
        type=Path,
        help="packages for this tree only (pip install --target DIR): the server extra's "
        "httptools and uvloop when the environment lacks them and the baseline predates them",
    )
    parser.add_argument(
        "--baseline-site", type=Path, help="packages for the baseline only (as --this-site)"
    )
    parser.add_argument("--workers", type=int, default=1, help="server processes of each tree")
    parser.add_argument("--smoke", action="store_true", help="a tiny run")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.rounds = 1.0, 1
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    trees = {"this": ROOT}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    payload = body()
    stores: list[JobStore] = []
    rates: dict[str, list[float]] = {name: [] for name in trees}
    latencies: dict[str, list[float]] = {name: [] for name in trees}
    cpu: dict[str, dict[str, float]] = {
        name: {"server": 0.0, "redis": 0.0, "clients": 0.0} for name in trees
    }
    ctx = multiprocessing.get_context("spawn")
    with ExitStack() as stack, ctx.Pool(1) as pool:
        stack.callback(lambda: [s.delete_namespace() for s in stores])
        bases: dict[str, tuple[str, str, int]] = {}
        for name, tree in trees.items():
            store = JobStore.from_url(url, f"bench-singles-{uuid.uuid4().hex[:8]}")
            stores.append(store)
            token, _ = operations.create_token(
                store, Principal.local("bench"), name="bench", role=Role.MEMBER, team=TEAM
            )
            site = args.this_site if name == "this" else args.baseline_site
            base, pid = stack.enter_context(served(tree, url, store.namespace, site, args.workers))
            _ready(base, token, payload)
            bases[name] = (base, token, pid)
        for _ in range(args.rounds):
            for name, (base, token, pid) in bases.items():
                used, redis_used = cpu_s(pid), redis_cpu_s(stores[0])
                found, client_s = pool.apply(
                    clients, (base, token, payload, args.clients, args.seconds)
                )
                cpu[name]["server"] += cpu_s(pid) - used
                cpu[name]["redis"] += redis_cpu_s(stores[0]) - redis_used
                cpu[name]["clients"] += client_s
                rates[name].append(len(found) / args.seconds)
                latencies[name] += found
    figures: dict[str, Any] = {
        "clients": args.clients,
        "seconds": args.seconds,
        "workers": args.workers,
        "trees": {},
    }
    for name in trees:
        figures["trees"][name] = {
            "rate": statistics.median(rates[name]),
            "rates": [round(r) for r in rates[name]],
            "p50_ms": _pct(latencies[name], 50),
            "p99_ms": _pct(latencies[name], 99),
            **{f"{k}_cpu_us": v / len(latencies[name]) * 1e6 for k, v in cpu[name].items()},
        }
        shown = figures["trees"][name]
        print(
            f"{name:<9} {shown['rate']:>8,.0f} submissions/s (rounds {shown['rates']}), "
            f"p50 {shown['p50_ms']:.2f} ms, p99 {shown['p99_ms']:.2f} ms, "
            f"CPU per submission: server {shown['server_cpu_us']:.0f} us, Redis "
            f"{shown['redis_cpu_us']:.0f} us, clients {shown['clients_cpu_us']:.0f} us"
        )
    if "baseline" in trees:
        figures["ratio"] = figures["trees"]["this"]["rate"] / figures["trees"]["baseline"]["rate"]
        print(f"ratio this/baseline: {figures['ratio']:.2f}")
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
