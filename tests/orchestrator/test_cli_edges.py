"""What a user meets at the edges of `orch`: times as ISO-8601 in tables and data, `--since` as a
duration or a date, `orch usage` counting only GPU time held in its window, piped output at a
width that fits, and one clear line for a cycle, an empty job (real executable, real Redis)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import yaml

from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from tests.orchestrator.test_cli import GOOD, env, orch

__all__ = ["env"]  # the fixture, shared with test_cli

FIRST_STEP = 1795875938.930512  # 2026-11-28T...Z, as a worker reports it


def _submit(env: dict[str, str]) -> str:
    out = orch("submit", str(GOOD), "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["ids"][0])


def _iso(seconds: float, timespec: str) -> str:
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


def test_show_and_data_print_times_as_iso(env: dict[str, str], store: JobStore) -> None:
    job_id = _submit(env)
    store.put_metrics(job_id, {"first_step_at": FIRST_STEP, "p95_ms": 12.5})
    shown = orch("show", job_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert _iso(FIRST_STEP, "milliseconds") in shown.stdout  # 2026-11-28T...:38.931Z
    assert "1,795,875,938" not in shown.stdout and "12.500" in shown.stdout

    data = json.loads(orch("show", job_id, "-o", "json", env=env).stdout)
    assert data["metrics"]["first_step_at"] == _iso(FIRST_STEP, "microseconds")
    assert data["metrics"]["p95_ms"] == 12.5  # a figure stays a number
    rec = store.get(job_id)
    assert data["job"]["submitted_at"] == _iso(rec.submitted_at, "microseconds")
    assert all(ev["ts"].endswith("Z") for ev in data["events"]) and data["events"]
    assert data["job"]["spec"]["name"] == "mlp-eval"  # the job file is kept as submitted
    listed = yaml.safe_load(orch("list", "-o", "yaml", env=env).stdout)
    assert str(listed[0]["updated_at"]).endswith("Z")


def test_since_takes_a_duration_or_an_iso_date_or_time(env: dict[str, str]) -> None:
    for given, start in (
        ("2026-11-28", "2026-11-28T00:00:00Z"),
        ("2026-11-28T10:00", "2026-11-28T10:00:00Z"),
        ("2026-11-28T10:00Z", "2026-11-28T10:00:00Z"),
        ("2026-11-28T12:00+02:00", "2026-11-28T10:00:00Z"),
    ):
        out = orch("usage", "--since", given, "-o", "json", env=env)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["since"] == start
    assert orch("usage", "--since", "12h", env=env).returncode == 0
    bad = orch("usage", "--since", "yesterday", env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    line = bad.stderr.strip()
    assert "\n" not in line and "--since" in line and "'yesterday'" in line
    assert "30d" in line and "2026-11-28T10:00" in line  # both forms named


def test_a_job_that_never_ran_is_in_no_usage_window(env: dict[str, str], store: JobStore) -> None:
    queued = _submit(env)
    ran = _submit(env)
    store.transition(ran, JobState.PLACED, fields={"placement": {"nodes": ["n0"]}})
    store.transition(ran, JobState.RUNNING, fields={"started_at": 1.0})  # long ago
    for since in ("1h", "2026-01-01"):
        report = json.loads(orch("usage", "--since", since, "-o", "json", env=env).stdout)
        assert [j["id"] for j in report["jobs"]] == [ran]  # the queued one held no GPU
        (row,) = report["jobs"]
        held = (
            dt.datetime.fromisoformat(report["at"]).timestamp()
            - dt.datetime.fromisoformat(report["since"]).timestamp()
        )
        assert abs(row["gpu_s"] - held) < 1.0  # one GPU, the window's time only
    assert queued not in orch("usage", "--since", "1h", "-o", "wide", env=env).stdout


def test_piped_output_fits_its_width_or_columns(env: dict[str, str], store: JobStore) -> None:
    job_id = _submit(env)
    store.put_metrics(job_id, {"first_step_at": FIRST_STEP})
    made = orch("tokens", "create", "--role", "member", "--team", "research", env=env)
    assert made.returncode == 0, made.stderr
    for args in (("show", job_id), ("list",), ("usage",), ("tokens", "list")):
        out = orch(*args, env=env)  # stdout is a pipe
        assert out.returncode == 0, out.stderr
        assert max(len(line) for line in out.stdout.splitlines()) <= 160, args
    shown = orch("show", job_id, env={**env, "COLUMNS": "72"})
    assert max(len(line) for line in shown.stdout.splitlines()) == 72  # the panel fills it
    wide = orch("list", "-o", "wide", env=env)  # asked for more columns: not folded
    assert "p95 <= 100 ms" in wide.stdout and "research" in wide.stdout


def test_a_dependency_cycle_is_named_as_one(env: dict[str, str], tmp_path: Path) -> None:
    job = yaml.safe_load(GOOD.read_text())
    for name, needs in (("prep", "train"), ("train", "prep")):
        (tmp_path / f"{name}.yaml").write_text(
            yaml.safe_dump({**job, "name": name, "depends_on": [needs]})
        )
    out = orch("submit", str(tmp_path / "prep.yaml"), str(tmp_path / "train.yaml"), env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "depends_on forms a cycle: prep -> train -> prep" in out.stderr
    assert "no job" not in out.stderr

    (tmp_path / "eval.yaml").write_text(yaml.safe_dump({**job, "name": "eval", "depends_on": []}))
    (tmp_path / "first.yaml").write_text(
        yaml.safe_dump({**job, "name": "first", "depends_on": ["eval"]})
    )
    order = orch("submit", str(tmp_path / "first.yaml"), str(tmp_path / "eval.yaml"), env=env)
    assert order.returncode == 2 and "'eval' comes later in this submission" in order.stderr


def test_an_empty_job_says_so(env: dict[str, str], tmp_path: Path) -> None:
    out = orch("submit", "-", env=env, stdin="# nothing yet\n")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "<stdin>" in out.stderr and "the job is empty" in out.stderr
    assert "NoneType" not in out.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    from_file = orch("submit", str(empty), env=env)
    assert from_file.returncode == 2 and "the file is empty" in from_file.stderr
