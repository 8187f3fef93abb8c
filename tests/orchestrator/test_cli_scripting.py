"""`orch` in scripts, as kubectl and Slurm users drive it: a job on stdin, data output, `orch wait`
with exit codes, the reason of a failure, a warning when no scheduler runs (real executable,
real Redis; the job states are set through the store, as the scheduler would)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from tests.orchestrator.test_cli import GOOD, env, orch

__all__ = ["env"]  # the fixture, shared with test_cli


def _run_to(store: JobStore, job_id: str, end: JobState, message: str = "") -> None:
    store.transition(job_id, JobState.PLACED)
    store.transition(job_id, JobState.RUNNING)
    store.transition(job_id, end, message=message)


def test_a_job_on_stdin_is_submitted_and_its_ids_printed_as_data(
    env: dict[str, str], store: JobStore
) -> None:
    out = orch("submit", "-", "-o", "json", env=env, stdin=GOOD.read_text())
    assert out.returncode == 0, out.stderr
    (rec,) = store.list()
    assert json.loads(out.stdout)["ids"] == [rec.id]
    assert "no scheduler is running" in out.stderr  # said, and the job stays queued
    assert rec.state is JobState.QUEUED

    twice = orch("submit", "-", "-", env=env, stdin=GOOD.read_text())
    assert twice.returncode == 2 and "standard input (-) once" in twice.stderr
    bad = orch("submit", "-", env=env, stdin="name: x\nclass: batch\n")
    assert bad.returncode == 2 and "<stdin>" in bad.stderr and "Traceback" not in bad.stderr
    assert len(store.list()) == 1  # nothing half-written


def test_every_read_prints_yaml_and_wide(env: dict[str, str], store: JobStore) -> None:
    out = orch("submit", str(GOOD), "-o", "yaml", env=env)
    job_id = yaml.safe_load(out.stdout)["ids"][0]
    listed = yaml.safe_load(orch("list", "-o", "yaml", env=env).stdout)
    assert [j["id"] for j in listed] == [job_id] and listed[0]["class"] == "interactive"
    shown = yaml.safe_load(orch("show", job_id, "-o", "yaml", env=env).stdout)
    assert shown["job"]["id"] == job_id and shown["job"]["state"] == "queued"
    wide = orch("list", "-o", "wide", env=env).stdout
    assert "p95 <= 100 ms" in wide and "reason" in wide
    narrow = orch("list", env=env).stdout
    assert "p95 <= 100 ms" not in narrow and "queued" in narrow and "age" in narrow


def test_wait_says_how_the_jobs_ended_with_its_exit_code(
    env: dict[str, str], store: JobStore
) -> None:
    ids = json.loads(orch("submit", str(GOOD), str(GOOD), "-o", "json", env=env).stdout)["ids"]
    first, second = ids
    _run_to(store, first, JobState.FINISHED)
    assert orch("wait", first, env=env).returncode == 0

    timed_out = orch("wait", first, second, "--timeout", "0.5", env=env)
    assert timed_out.returncode == 1 and f"still going: {second}" in timed_out.stderr

    _run_to(store, second, JobState.FAILED, message="CUDA out of memory at step 3")
    failed = orch("wait", first, second, "-o", "json", env=env)
    assert failed.returncode == 1
    assert [j["state"] for j in json.loads(failed.stdout)] == ["finished", "failed"]
    assert f"{second} failed: CUDA out of memory at step 3" in failed.stderr

    unknown = orch("wait", "no-such-job", env=env)
    assert unknown.returncode == 2 and "no job matches 'no-such-job'" in unknown.stderr


def test_whoami_says_who_acts(env: dict[str, str]) -> None:
    out = orch("whoami", "-o", "json", env=env)
    me = json.loads(out.stdout)
    assert out.returncode == 0 and me["role"] == "admin" and me["name"].endswith("@local")
    assert me["where"] == f"namespace {env['ORCH_NAMESPACE']}"


def test_a_missing_file_and_stdin_list_every_problem(env: dict[str, str], tmp_path: Path) -> None:
    out = orch("submit", str(tmp_path / "none.yaml"), "-", env=env, stdin="[1, 2]")
    assert out.returncode == 2
    assert "none.yaml: 1 problem" in out.stderr and "<stdin>: 1 problem" in out.stderr


def test_usage_reports_as_data_and_refuses_a_bad_window(env: dict[str, str]) -> None:
    report = orch("usage", "--since", "7d", "-o", "json", env=env)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["jobs"] == []
    bad = orch("usage", "--since", "a week", env=env)
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr
