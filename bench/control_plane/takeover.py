"""Standby takeover time: kill -9 the active scheduler, time until the standby holds the lease.

    .venv/bin/python bench/control_plane/takeover.py [--kills 20] [--ttl-ms 15000]

Two scheduler processes (the control loop on the in-process runtime, as
``tests/orchestrator/test_standby.py`` runs them) on one namespace of a real Redis
(``REDIS_URL``, default ``redis://127.0.0.1:6379/0``): each round kills the active one with
SIGKILL, measures the time until the standby holds the lease, and starts a new standby. Two
cases: ``same host`` (the standby sees that the holder's process is gone and takes over on its
next try, a third of the TTL at most) and ``other host`` (the holder looks remote, so the
lease must expire: up to a TTL plus a third). Prints p50/p95 per case and writes
``bench/control_plane/results/takeover.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.store import JobStore  # noqa: E402

RESULTS = Path(__file__).parent / "results"

_SCHEDULER = textwrap.dedent(
    """
    import socket, sys, threading, uuid
    from pathlib import Path
    from orchestrator.config import Settings
    from orchestrator.control.loop import ControlLoop
    from orchestrator.runtime.local import LocalRuntime
    from orchestrator.services import make_policy
    from orchestrator.store import JobStore

    url, ns, data, ttl, remote = sys.argv[1:6]
    if remote == "1":  # each on a host of its own: no same-host fast path
        host = "elsewhere-" + uuid.uuid4().hex[:6]
        socket.gethostname = lambda: host
    settings = Settings(redis_url=url, namespace=ns, data_dir=Path(data), standby=True,
                        lease_ttl_ms=int(ttl), scheduler_interval_s=0.1)
    store = JobStore.from_url(url, ns)
    loop = ControlLoop(settings, store, LocalRuntime([("n0", 2)]), make_policy("shared"))
    stop = threading.Event()
    print("waiting", flush=True)
    if loop.acquire(standby=stop):
        print("active", loop.owner, flush=True)
        loop.serve(stop)
    """
)


def _start(url: str, ns: str, ttl_ms: int, remote: bool) -> subprocess.Popen[str]:
    data = tempfile.mkdtemp(prefix="takeover-")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCHEDULER, url, ns, data, str(ttl_ms), "1" if remote else "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "waiting"
    return proc


def _case(url: str, kills: int, ttl_ms: int, remote: bool) -> list[float]:
    ns = f"takeover-{uuid.uuid4().hex[:6]}"
    store = JobStore.from_url(url, ns)
    active = _start(url, ns, ttl_ms, remote)
    assert active.stdout is not None
    active.stdout.readline()  # "active <owner>"
    times = []
    try:
        for _ in range(kills):
            standby = _start(url, ns, ttl_ms, remote)
            time.sleep(0.5)
            holder = store.lease_holder()
            t0 = time.monotonic()
            active.send_signal(signal.SIGKILL)
            active.wait(10)
            while store.lease_holder() in (None, holder):
                time.sleep(0.005)
            times.append(time.monotonic() - t0)
            active = standby
    finally:
        active.kill()
        store.delete_namespace()
    return times


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def main() -> int:
    """Measure both cases; print and write the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--ttl-ms", type=int, default=15_000)
    args = ap.parse_args()
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    out = {
        "meta": {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "ttl_ms": args.ttl_ms,
            "kills": args.kills,
        }
    }
    for name, remote in (("same host", False), ("other host", True)):
        times = _case(url, args.kills, args.ttl_ms, remote)
        out[name] = {
            "p50_s": statistics.median(times),
            "p95_s": _pct(times, 0.95),
            "max_s": max(times),
            "all_s": times,
        }
        print(
            f"{name:10s} takeover p50 {out[name]['p50_s']:.2f} s  p95 {out[name]['p95_s']:.2f} s"
            f"  max {out[name]['max_s']:.2f} s  (TTL {args.ttl_ms / 1000:g} s, {args.kills} kills)"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "takeover.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
