"""Secrets: the embedded Redis needs its password, kept 0600; no printed command holds it."""

from __future__ import annotations

import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orchestrator.store import EmbeddedRedis, find_redis_server
from orchestrator.store.connection import redact
from orchestrator.store.tuning import StudyJournal
from orchestrator.tuner.study import dashboard_command


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    made = EmbeddedRedis(tmp_path / "data")
    yield made
    made.stop()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_embedded_server_requires_its_password(server: EmbeddedRedis) -> None:
    url = server.ensure_running()
    password = server.password_file.read_text().strip()
    assert len(password) >= 32 and f":{password}@" in url
    assert _mode(server.password_file) == 0o600 and _mode(server.conf_file) == 0o600
    assert _mode(server.dir) == 0o700
    port = int(server.port_file.read_text())
    with (
        redis.Redis(host="127.0.0.1", port=port) as anonymous,
        pytest.raises(redis.AuthenticationError),
    ):
        anonymous.hset("orch:job:x", "state", "finished")
    with redis.Redis.from_url(url) as client:
        assert client.ping()
    # `ps` shows a command line to every user: the password is not on it.
    pid = int(server.pid_file.read_text())
    assert password not in Path(f"/proc/{pid}/cmdline").read_text()
    assert server.url() == url and server.ensure_running() == url  # the same password again


def test_a_server_started_without_a_password_is_restarted_with_one(
    server: EmbeddedRedis,
) -> None:
    # As the embedded server ran before passwords: same folder, same files, no requirepass.
    with redis.Redis.from_url(server.ensure_running()) as client:  # pick a port, then retire
        port = int(server.port_file.read_text())
        client.set("orch:kept", "yes")
    server.stop()
    server.password_file.unlink()
    subprocess.run(
        [
            str(find_redis_server()),
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--daemonize",
            "yes",
            "--dir",
            str(server.dir),
            "--pidfile",
            str(server.pid_file),
            "--appendonly",
            "yes",
            "--save",
            "",
        ],
        check=True,
        capture_output=True,
    )
    with redis.Redis(host="127.0.0.1", port=port) as open_client:
        deadline = time.monotonic() + 10
        while True:  # daemonized: it answers a moment later
            try:
                assert open_client.get("orch:kept") == b"yes"
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
    url = server.ensure_running()
    assert server.password_file.exists() and ":***@" in redact(url)
    with redis.Redis.from_url(url) as client:
        assert client.get("orch:kept") == b"yes"  # the same append-only file
    with (
        redis.Redis(host="127.0.0.1", port=int(server.port_file.read_text())) as anonymous,
        pytest.raises(redis.AuthenticationError),
    ):
        anonymous.get("orch:kept")


def test_printed_commands_hold_no_password(tmp_path: Path) -> None:
    url = "redis://:s3cret-pw@127.0.0.1:6400/0"
    assert "s3cret" not in redact(url) and redact(url).endswith("@127.0.0.1:6400/0")
    journal = StudyJournal(url, "orch:optuna")
    secret_file = tmp_path / "redis" / "redis.password"
    embedded = dashboard_command(journal, secret_file)
    assert "s3cret" not in embedded
    assert f'REDIS_URL="redis://:$(cat {secret_file})@127.0.0.1:6400/0"' in embedded
    assert "os.environ['REDIS_URL']" in embedded and "\n" not in embedded
    external = dashboard_command(journal)  # REDIS_URL is set in the user's environment
    assert "s3cret" not in external and "REDIS_URL=" not in external
    plain = dashboard_command(StudyJournal("redis://127.0.0.1:6379/0", "orch:optuna"))
    assert "REDIS_URL=redis://127.0.0.1:6379/0 python -c" in plain


def test_checkpoint_folders_and_files_are_private(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from workers.checkpoint import CHECKPOINT_FILE, Checkpoint, save_checkpoint

    target = tmp_path / "data" / "checkpoints" / "orch" / "job-1"
    ckpt = Checkpoint(step=1, samples_seen=8, workload="mlp", workload_args={})
    step_dir = Path(save_checkpoint(target, ckpt, {"model": {"w": torch.zeros(1)}}))
    assert _mode(target / CHECKPOINT_FILE) == 0o600
    # the shards are written with DCP's own modes, inside a step folder made private first
    for folder in (step_dir, target, target.parent, target.parent.parent, tmp_path / "data"):
        assert _mode(folder) == 0o700, folder
