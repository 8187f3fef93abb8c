"""`orch show` shows what a job runs with: the tuned settings, the submitted ones beside."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from orchestrator.views import show_job


def _render(store: JobStore, job_id: str) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(show_job(store, store.get(job_id)))
    return out.getvalue()


def test_show_gives_the_tuned_settings_and_the_submitted_ones_beside(store: JobStore) -> None:
    spec = parse_spec(
        {
            "name": "tuned",
            "team": "t",
            "class": "interactive",
            "workload": "mlp",
            "sla": {"latency": {"max_ms": 50}},
            "run": {"steps": 10, "micro_batch": 4},
            "tuning": {"enabled": True},
        }
    )
    job_id = store.submit(spec).id
    before = _render(store, job_id)
    assert "micro-batch 4," in before
    assert not [line for line in before.splitlines() if "submitted" in line and "micro" in line]
    store.transition(job_id, JobState.PLACED)
    store.transition(job_id, JobState.TUNING)
    config = {"micro_batch": 32, "grad_accum": 2, "precision": "bf16", "gpus": 1}
    store.transition(job_id, JobState.QUEUED, fields={"tuned": config})
    text = _render(store, job_id)
    settings = next(line for line in text.splitlines() if "settings" in line)
    submitted = next(ln for ln in text.splitlines() if "submitted" in ln and "micro" in ln)
    assert "micro-batch 32, grad-accum 2, bf16" in settings
    assert "micro-batch 4, grad-accum 1, fp32" in submitted
