"""A study written by the tuner opens in the standard optuna-dashboard as `orch tune` prints:
the printed command runs as pasted, the objective is named, and a trial that missed the SLA is
infeasible there (and in Optuna itself)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.store import JobStore

pytest.importorskip("optuna_dashboard", reason="optuna-dashboard reads what the study must hold")

OOM_JOB = """\
name: tune-oom
team: t
class: interactive
workload: {entry: "tests.tuner.oom_workload:build", args: {cap: 8}}
sla: {latency: {max_ms: 5000}}
run: {steps: 5}
tuning:
  enabled: true
  budget: {trials: 6}
  bounds:
    micro_batch: {min: 4, max: 32}
    grad_accum: {min: 1, max: 8}
    precision: [fp32]
    activation_checkpointing: [false]
"""


def _tune(job: Path, env: dict[str, str]) -> str:
    """``orch tune`` through typer, as a user runs it; its output."""
    import typer
    from typer.testing import CliRunner

    from orchestrator.cli.tune import tune_command

    app = typer.Typer()
    app.command(name="tune")(tune_command)
    app.command(name="noop")(lambda: None)
    result = CliRunner().invoke(app, ["tune", str(job)], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, deadline: float) -> Any:
    while True:
        try:
            reply = httpx.get(url, timeout=5)
            if reply.status_code == 200:
                return reply.json()
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"optuna-dashboard never answered {url}")
        time.sleep(0.3)


def test_the_printed_dashboard_command_shows_named_metrics_and_infeasible_trials(
    redis_url: str, store: JobStore, tmp_path: Path
) -> None:
    job = tmp_path / "oom.yaml"
    job.write_text(OOM_JOB)
    env = {"REDIS_URL": redis_url, "ORCH_NAMESPACE": store.namespace, "COLUMNS": "40"}
    output = _tune(job, env)
    (line,) = [x for x in output.splitlines() if "optuna_dashboard" in x]
    command = line.split(": ", 1)[1]  # "study tune-...: <command>", one line however narrow
    install = "python -m pip install optuna-dashboard && "
    assert command.startswith(install)
    # Run what follows the install (done here already), on a free port instead of 8080, with
    # this environment's python first on the PATH (as in an activated virtualenv).
    port = _free_port()
    runnable = command.removeprefix(install)
    runnable = runnable.replace("port=8080", f"port={port}")
    server = subprocess.Popen(
        ["bash", "-c", runnable],
        env={
            # the shell that ran `orch tune`: the command reads the URL of an external Redis
            # from $REDIS_URL (the embedded server's password from its file)
            **os.environ,
            "REDIS_URL": redis_url,
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        studies = _get(f"http://127.0.0.1:{port}/api/studies", deadline)["study_summaries"]
        (study,) = [s for s in studies if s["study_name"] == "tune-tune-oom"]
        detail = _get(f"http://127.0.0.1:{port}/api/studies/{study['study_id']}", deadline)
    finally:
        server.terminate()
        err, _ = server.communicate(timeout=10)
        print(runnable, err[-3000:], sep="\n")  # shown when the test fails
    assert detail["objective_names"] == ["samples_per_s"]
    trials = detail["trials"]
    infeasible = [t for t in trials if any(c > 0 for c in t["constraints"])]
    feasible = [t for t in trials if t["constraints"] and all(c <= 0 for c in t["constraints"])]
    assert infeasible and feasible
    for t in infeasible:  # the trials that ran out of memory (micro-batch above the cap of 8)
        # the job's global batch (32) kept: the micro-batch is a parameter per GPU count and
        # global batch, here micro_batch_1gpu_32
        params = {p["name"]: p["param_external_value"] for p in t["params"]}
        assert params["global_batch_1gpu"] == "32", json.dumps(t)[:500]
        assert int(params["micro_batch_1gpu_32"]) > 8, json.dumps(t)[:500]


def test_optuna_itself_reads_the_named_constraints(redis_url: str, store: JobStore) -> None:
    import optuna

    from orchestrator.tuner.study import open_study, record_constraints

    journal = store.study_journal(redis_url)
    study = open_study(journal, "tune-x", "minimize", metric_name="gpu_s_per_sample")
    trial = study.ask()
    trial.suggest_int("micro_batch", 1, 8)
    record_constraints(trial, {"throughput": 0.5, "runs": -1.0})
    study.tell(trial, 2.0)
    again = optuna.load_study(study_name="tune-x", storage=journal.storage())
    (frozen,) = again.trials
    assert again.metric_names == ["gpu_s_per_sample"]
    assert frozen.system_attrs["constraints"] == [-1.0, 0.5]  # optuna-dashboard's list
    assert {k: frozen.constraints[k] for k in ("runs", "throughput")} == {
        "runs": -1.0,
        "throughput": 0.5,
    }
    with pytest.raises(ValueError, match="No feasible trials"):
        again.best_trial  # noqa: B018  (Optuna sees it infeasible)
