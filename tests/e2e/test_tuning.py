"""Tuning as part of a job's life: tuned on a pool GPU slot, then run with the tuned settings,
or stopped as SLA-infeasible with the closest config and why (real Ray, Redis, torch, Optuna)."""

from __future__ import annotations

import json

from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store.states import JobState
from orchestrator.tuner.profile import load_profile
from tests.e2e.conftest import Orch


def tuned_job(name: str, max_ms: float) -> JobSpec:
    return parse_spec(
        {
            "name": name,
            "team": "e2e",
            "class": "interactive",
            "workload": "mlp",
            "sla": {"latency": {"percentile": 95, "max_ms": max_ms}},
            "run": {"micro_batch": 4, "steps": 20, "warmup_steps": 2},
            "tuning": {
                "enabled": True,
                "budget": {"trials": 6},
                "bounds": {"micro_batch": {"min": 4, "max": 64}, "precision": ["fp32"]},
            },
        }
    )


def test_a_tuned_job_runs_with_the_settings_the_tuner_chose(orch: Orch) -> None:
    job_id = orch.store.submit(tuned_job("tuned", max_ms=1000)).id
    rec = orch.wait(job_id, {JobState.FINISHED, JobState.FAILED}, timeout_s=300)
    assert rec.state is JobState.FINISHED, rec.message
    tuned = json.loads(rec.fields["tuned"])
    events = orch.store.events(job_id)
    assert any(e["message"].startswith("tuned (") for e in events), events
    # The run used the tuned micro-batch (the spec said 4; a loose ceiling favours larger).
    assert rec.result is not None
    assert rec.result["global_batch"] == tuned["micro_batch"] * tuned["grad_accum"]
    assert tuned["micro_batch"] > 4
    # The measured run is compared with the tuner's prediction, kept in the job's profile.
    assert "tuner prediction error: samples per s" in rec.message, rec.message
    profile = load_profile(orch.store.client, orch.store.namespace, job_id)
    assert profile is not None
    assert set(profile["outcome"]["error"]) == {"samples_per_s", "latency_ms"}
    show = orch.cli("show", job_id)
    assert show.returncode == 0 and "tuning: feasible" in show.stdout, show.stdout


def test_an_infeasible_sla_is_reported_with_the_closest_config_and_not_run(orch: Orch) -> None:
    job_id = orch.store.submit(tuned_job("hopeless", max_ms=0.001)).id
    rec = orch.wait(job_id, {JobState.FINISHED, JobState.FAILED}, timeout_s=300)
    assert rec.state is JobState.FAILED
    assert rec.message.startswith("sla-infeasible: p95 "), rec.message
    assert "closest: micro-batch" in rec.message and "best_effort" in rec.message
    assert "running" not in [e["event"] for e in orch.store.events(job_id)]
