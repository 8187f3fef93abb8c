"""The `orch` command as a user runs it: real executable, real Redis, exit codes, messages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.store import JobStore
from orchestrator.store.states import JobState

ROOT = Path(__file__).resolve().parents[2]
BAD = Path(__file__).parent / "bad_jobs"
GOOD = ROOT / "examples" / "interactive-mlp.yaml"


def orch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "orch"
    return subprocess.run(
        [str(exe), *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def env(redis_url: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    return {"REDIS_URL": redis_url, "ORCH_NAMESPACE": namespace, "ORCH_DATA_DIR": str(tmp_path)}


def _keys(store: JobStore) -> list[str]:
    return list(store.client.scan_iter(match=store.keys.pattern))


def test_help_lists_the_commands(env: dict[str, str]) -> None:
    out = orch("--help", env=env)
    assert out.returncode == 0
    for command in ("up", "submit", "list", "show", "cancel", "pool", "demo"):
        assert command in out.stdout


def test_a_bad_file_exits_2_with_one_line_per_problem_and_writes_nothing(
    env: dict[str, str], store: JobStore
) -> None:
    out = orch("submit", str(GOOD), str(BAD / "wrong-class.yaml"), env=env)
    assert out.returncode == 2
    assert "class must be one of 'bulk' or 'interactive', got 'batch'" in out.stderr
    assert "Traceback" not in out.stderr
    assert _keys(store) == []  # the good file was not submitted either


def test_submit_show_cancel_list(env: dict[str, str], store: JobStore) -> None:
    out = orch("submit", str(GOOD), "--by", "alice", env=env)
    assert out.returncode == 0, out.stderr
    (rec,) = store.list()
    assert rec.state is JobState.QUEUED and rec.by == "alice"
    shown = orch("show", "mlp-eval", env=env)  # by unique name
    assert shown.returncode == 0 and rec.id in shown.stdout and "p95 <= 100 ms" in shown.stdout
    assert orch("cancel", rec.id, env=env).returncode == 0
    assert store.get(rec.id).state is JobState.CANCELLED
    listed = orch("list", "--state", "cancelled", env=env)
    assert listed.returncode == 0 and rec.id in listed.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("show", "no-such-job"), 2, "no job matches 'no-such-job'"),
        (("cancel", "no-such-job"), 2, "no job matches 'no-such-job'"),
        (("list", "--state", "done"), 2, "allowed: submitted, queued"),
        (("pool",), 1, "no scheduler is running for this namespace"),
        (("frobnicate",), 2, "No such command"),
        (("submit", "missing.yaml"), 2, "missing.yaml: 1 problem"),
    ],
)
def test_user_mistakes_get_one_clear_line(
    env: dict[str, str], args: tuple[str, ...], code: int, message: str
) -> None:
    out = orch(*args, env=env)
    assert out.returncode == code, (out.stdout, out.stderr)
    assert message in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


def test_bad_settings_name_the_variable(env: dict[str, str]) -> None:
    out = orch("list", env={**env, "ORCH_NAMESPACE": "has spaces"})
    assert out.returncode == 2 and "ORCH_NAMESPACE" in out.stderr
    out = orch("list", env={**env, "REDIS_URL": "redis://127.0.0.1:1/0"})
    assert out.returncode == 1 and "cannot reach Redis at redis://127.0.0.1:1/0" in out.stderr


def test_debug_shows_the_traceback(env: dict[str, str]) -> None:
    out = orch("show", "no-such-job", "--debug", env=env)
    assert out.returncode != 0 and "Traceback" in out.stderr
