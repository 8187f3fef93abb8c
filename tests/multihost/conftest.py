"""Several hosts on one machine: a head and two GPU workers, each in its own network namespace.

``cluster`` (session-scoped: building it takes a while, so the tests share it) makes:

* ``head``: the orchestrator as a real process (``orch up``) with its embedded Redis bound to
  the head's address (``ORCH_REDIS_BIND``, password-protected) and the Ray head (no GPU);
* ``w1``, ``w2``: one virtual GPU each (``ray start --address head:port --num-gpus 1``).

The hosts talk only over the bridge: Ray's control traffic, the gloo collectives of a job
whose ranks sit on both workers, and the workers' metrics and logs going to Redis on the head.
The test process, in the root namespace, reads and writes the store over the bridge too.
Everything is torn down at the end, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store import JobStore
from orchestrator.store.records import JobRecord
from orchestrator.store.states import JobState
from tests.multihost.hosts import HOST_IFACE, Host, Lan, netns_unavailable

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RAY_PORT = 6379
# Ray's object store floor is 75 MiB; the jobs pass no large objects.
RAY_COMMON = ("--num-cpus", "1", "--object-store-memory", str(80 * 2**20), "--disable-usage-stats")
# The head notices a dead worker host in about 3 s instead of Ray's default of about 30.
HEALTH_CHECK = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on namespace hosts are multi-process end-to-end tests: mark them ``slow``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents and "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


RAY_TOKEN = secrets.token_hex(32)
"""The cluster's Ray auth token. Ray enables token authentication on its own once a token file
exists (``~/.ray/auth_token``, written by any local ``ray.init``), and a node without the token
cannot join: every process of the cluster gets this one, as a cluster with Ray's token
authentication would (docs/operator-guide.md)."""


def _env(**extra: str) -> dict[str, str]:
    """The environment of a process on a host: ours, minus what would point it elsewhere,
    with the cluster's Ray token."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAY_", "ORCH_")) and k != "REDIS_URL"
    }
    ray_auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": RAY_TOKEN}
    return {**env, "PYTHONPATH": str(ROOT), **ray_auth, **extra}


@dataclass
class Cluster:
    """The hosts, the orchestrator's store (reached over the bridge), and helpers."""

    lan: Lan
    head: Host
    workers: list[Host]
    store: JobStore
    redis_url: str
    data_dir: Path
    orch_log: Path
    nodes: dict[str, Host]
    """Ray node id -> its worker host (as the scheduler saw them at the start)."""

    def wait(self, job_id: str, states: set[JobState], timeout_s: float = 120) -> JobRecord:
        """Poll the store until the job is in one of ``states``; fail the test on timeout."""
        deadline = time.monotonic() + timeout_s
        rec = self.store.get(job_id)
        while rec.state not in states:
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{job_id} stayed {rec.state.value} ({rec.message}); wanted "
                    f"{sorted(s.value for s in states)}; end of orch log:\n{self.log_tail()}"
                )
            time.sleep(0.2)
            rec = self.store.get(job_id)
        return rec

    def hosts_of(self, job_id: str) -> tuple[str, ...]:
        """The worker hosts of the job's placement now, one name per GPU (rank order); empty
        when it is not placed."""
        placement = self.store.get(job_id).placement or {}
        return tuple(self.nodes[n].name for n in placement.get("nodes", ()))

    @contextlib.contextmanager
    def placements(self, job_id: str) -> Iterator[list[tuple[str, ...]]]:
        """Record each placement of the job while the block runs (the store clears a job's
        placement when a run ends, so the test watches): the list of ``hosts_of``, in order."""
        seen: list[tuple[str, ...]] = []
        done = threading.Event()

        def watch() -> None:
            last: tuple[str, ...] = ()
            while not done.wait(0.05):
                with contextlib.suppress(Exception):  # a read racing a transition
                    now = self.hosts_of(job_id)
                    if now and now != last:
                        seen.append(now)
                    last = now

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            yield seen
        finally:
            done.set()
            thread.join()

    def log_tail(self, lines: int = 40) -> str:
        """The end of the orchestrator's output (for failure messages)."""
        text = self.orch_log.read_text(errors="replace") if self.orch_log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _wait_for(what: str, check: Any, timeout_s: float, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except Exception:  # not up yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise TimeoutError(f"{what} within {timeout_s:g} s\n{tail}")
        time.sleep(0.25)


def _start_ray_head(lan: Lan, head: Host) -> None:
    head.run(
        str(BIN / "ray"), "start", "--head",
        "--node-ip-address", head.ip,
        "--port", str(RAY_PORT),
        "--num-gpus", "0",
        "--include-dashboard", "false",
        "--temp-dir", str(head.dir / "ray"),
        *RAY_COMMON,
        env=_env(**HEALTH_CHECK),
        timeout=180,
    )  # fmt: skip
    lan.wait_reachable(head, RAY_PORT)


def _start_ray_worker(head: Host, worker: Host) -> subprocess.Popen[bytes]:
    """``ray start`` joining the head from ``worker`` (returns once the node is up)."""
    return worker.spawn(
        str(BIN / "ray"), "start",
        "--address", f"{head.ip}:{RAY_PORT}",
        "--node-ip-address", worker.ip,
        "--num-gpus", "1",
        "--temp-dir", str(worker.dir / "ray"),  # its own sockets, logs and session
        *RAY_COMMON,
        # gloo picks its interface by the hostname, which resolves to loopback here
        env=_env(GLOO_SOCKET_IFNAME=HOST_IFACE),
        log=worker.dir / "ray-start.log",
    )  # fmt: skip


def _start_orch(head: Host, data_dir: Path, namespace: str) -> Path:
    """``orch up`` on the head, its embedded Redis bound to the head's address; its log."""
    log = head.dir / "orch.log"
    head.spawn(
        str(BIN / "orch"),
        "up",
        env=_env(
            RAY_ADDRESS=f"{head.ip}:{RAY_PORT}",
            ORCH_REDIS_BIND=head.ip,
            ORCH_DATA_DIR=str(data_dir),
            ORCH_NAMESPACE=namespace,
            ORCH_SCHEDULER_INTERVAL_S="0.2",
            ORCH_STOP_GRACE_S="20",
            COLUMNS="200",
        ),
        log=log,
    )
    return log


def _redis_url(head: Host, data_dir: Path) -> str | None:
    """The head's embedded Redis as the other hosts reach it (from its files, once written)."""
    port = (data_dir / "redis" / "redis.port").read_text().strip()
    password = (data_dir / "redis" / "redis.password").read_text().strip()
    return f"redis://:{password}@{head.ip}:{port}/0" if port and password else None


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The head and two worker hosts with the orchestrator up (see the module doc)."""
    why = netns_unavailable()
    if why is not None:
        pytest.skip(f"cannot make hosts from network namespaces: {why}")
    # short: Ray's socket paths under it must stay within AF_UNIX's 107 bytes, which pytest's
    # tmp folders (longer under xdist: .../popen-gw1/mh0/...) do not leave room for
    root = Path(tempfile.mkdtemp(prefix="orch-mh-"))

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # a CI timeout's SIGTERM still runs the teardown below

    previous = signal.signal(signal.SIGTERM, interrupt)
    lan = Lan(root)
    try:
        head = lan.add("head")
        workers = [lan.add("w1"), lan.add("w2")]
        _start_ray_head(lan, head)
        # The worker hosts join while the orchestrator starts: it sees them as they come.
        joining = [_start_ray_worker(head, w) for w in workers]
        data_dir = root / "data"  # the shared filesystem: checkpoints, the Redis files
        namespace = f"mh-{lan.suffix}"
        orch_log = _start_orch(head, data_dir, namespace)
        for w, proc in zip(workers, joining, strict=True):
            if proc.wait(180) != 0:
                log = (w.dir / "ray-start.log").read_text(errors="replace")
                raise RuntimeError(f"ray start on {w.name} failed:\n{log[-3000:]}")
        redis_url = _wait_for(
            "the embedded Redis on the head", lambda: _redis_url(head, data_dir), 120, orch_log
        )
        store = _wait_for(
            "Redis reachable from the root namespace",
            lambda: JobStore.from_url(redis_url, namespace),
            30,
            orch_log,
        )
        view = _wait_for(
            "the scheduler seeing both worker hosts",
            lambda: (v := store.pool_view.read()) and len(v["nodes"]) == len(workers) and v,
            120,
            orch_log,
        )
        by_ip = {w.ip: w for w in workers}
        nodes = {n["node_id"]: by_ip[n["address"]] for n in view["nodes"]}
        yield Cluster(lan, head, workers, store, redis_url, data_dir, orch_log, nodes)
    finally:
        lan.teardown()
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(root, ignore_errors=True)
