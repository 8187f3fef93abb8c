"""The `orch` command as a user runs it: real executable, real Redis, exit codes, messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.store import JobStore
from orchestrator.store.states import JobState

ROOT = Path(__file__).resolve().parents[2]
BAD = Path(__file__).parent / "bad_jobs"
GOOD = ROOT / "examples" / "interactive-mlp.yaml"


def orch(
    *args: str, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "orch"
    return subprocess.run(
        [str(exe), *args],
        env={**os.environ, **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
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


LONG = "a" * 100_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("submit", str(GOOD), "--by", LONG), "--by must be 1-63 lowercase letters"),
        (("cancel", "x", "--by", "Bob Smith"), "--by must be 1-63 lowercase letters"),
        (("list", "--limit", "9" * 20), "--limit must be from 1 to 100,000, got 9999"),
        (("list", "--limit", "0"), "--limit must be from 1 to 100,000, got 0"),
        (("list", "--team", "Vision Team"), "--team must be 1-63 lowercase letters"),
        (("show", "x" * 201), "JOB must be a job id or name of 1 to 200 characters"),
        (("logs", "x", "--rank", "4096"), "--rank must be from 0 to 4,095, got 4096"),
        (("logs", "x", "--tail", "0"), "--tail must be from 1 to 4,000, got 0"),
        (("tokens", "create", "--role", "viewer", "--name", "Carol!"), "--name must be 1-63"),
        (("tokens", "create", "--role", "member", "--team", "t" * 60), "--name must be 1-63"),
        (("tokens", "create"), "--role is needed: admin, member or viewer (or --service JOB)"),
        (("tokens", "create", "--service", "x" * 201), "--service must be a job id or name"),
        (("tokens", "revoke", "not-an-id"), "TOKEN_ID must be a token's id: 8 lowercase hex"),
        (("audit", "--action", "a" * 65), "--action must be at most 64 characters"),
    ],
    ids=[
        "by-long",
        "by-spaces",
        "limit-huge",
        "limit-zero",
        "team",
        "job-ref",
        "rank",
        "tail",
        "token-name",
        "token-default-name",
        "token-no-role",
        "token-service-ref",
        "token-id",
        "audit-action",
    ],
)
def test_what_the_api_refuses_the_cli_refuses_in_one_line(
    env: dict[str, str], store: JobStore, args: tuple[str, ...], message: str
) -> None:
    out = orch(*args, env=env)
    assert out.returncode == 2, (out.stdout, out.stderr)
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line, line
    assert len(line) < 300  # a 100,000-character value is not printed back whole
    assert _keys(store) == []


def test_guarantees_past_the_pool_are_refused_by_teams_apply(
    env: dict[str, str], store: JobStore, tmp_path: Path
) -> None:
    file = tmp_path / "teams.yaml"
    file.write_text(
        "teams:\n" + "".join(f"  - {{name: t{i}, guaranteed_gpus: 1000000}}\n" for i in range(5))
    )
    out = orch("teams", "apply", str(file), env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "add up to 5,000,000; at most 1,000,000 in all while the pool's size is" in out.stderr
    store.pool_view.publish({"nodes": [{"node_id": "n1", "gpus": 4}]}, 60_000)
    out = orch("teams", "apply", str(file), env=env)
    assert out.returncode == 2 and "more than the pool's 4 GPUs" in out.stderr
    assert store.teams() is None


SHORT_JOB = """\
name: short
team: vision
class: interactive
workload: mlp
sla: {latency: {max_ms: 100}}
run: {steps: 1}
"""
"""A job of one step, under the default 3 warm-up steps (``run.warmup_steps`` not given)."""
SHORT_PROBLEM = (
    "run.steps (1) must be greater than run.warmup_steps (3): warm-up steps are not measured "
    "(raise run.steps or lower run.warmup_steps)"
)


def test_steps_within_the_warm_up_are_refused_at_submit(
    env: dict[str, str], store: JobStore, tmp_path: Path
) -> None:
    """Refused naming both fields, on one line of its own, and nothing written (it was
    accepted, then failed at placement)."""
    job = tmp_path / "short.yaml"
    job.write_text(SHORT_JOB)
    out = orch("submit", str(job), env=env)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.strip().splitlines() == [
        f"error: {job}: 1 problem:",
        f"  - {SHORT_PROBLEM}",
    ]
    assert _keys(store) == []


def odd_jobs(store: JobStore) -> tuple[str, str]:
    """Two jobs ``orch show`` once crashed on, as a scheduler leaves them: one stored with
    ``run.steps: 1`` (accepted before it was refused at submit: its spec no longer validates)
    and tuned settings, and one whose tuned settings its spec cannot take (4 GPUs for a job
    of 1)."""
    from orchestrator.spec import parse_spec

    spec = parse_spec({**yaml.safe_load(SHORT_JOB), "run": {"steps": 4}})
    short, wide = store.submit(spec).id, store.submit(spec).id
    key = store.keys.job(short)
    data = json.loads(store.client.hget(key, "spec"))
    data["run"] = {"steps": 1}  # as an older version stored it
    tuned = json.dumps({"micro_batch": 8, "gpus": 1})
    store.client.hset(key, mapping={"spec": json.dumps(data), "tuned": tuned})
    store.client.hset(store.keys.job(wide), "tuned", json.dumps({"micro_batch": 8, "gpus": 4}))
    return short, wide


def test_show_never_prints_a_traceback_for_an_odd_job(env: dict[str, str], store: JobStore) -> None:
    short, wide = odd_jobs(store)
    out = orch("show", short, env=env)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert short in out.stdout and "unreadable as stored" in out.stdout
    assert "run.steps (1) must be greater than run.warmup_steps (3)" in " ".join(out.stdout.split())
    out = orch("show", wide, env=env)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert "not applicable" in out.stdout and "data_parallel" in out.stdout
    assert orch("list", env=env).returncode == 0
