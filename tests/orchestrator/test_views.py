"""`orch show` shows what a job runs with: the tuned settings, the submitted ones beside."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.api.operations import job_detail
from orchestrator.cli.views import job_panel
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState


def render_show(store: JobStore, job_id: str, width: int = 200) -> str:
    """The job's panel as ``orch show`` prints it (``cli/jobs.show``, direct mode)."""
    detail = job_detail(store, store.get(job_id))
    view = detail.job
    panel = job_panel(
        view.record(), view.verdict.verdict(), detail.metrics, detail.events, detail.profile
    )
    out = io.StringIO()
    Console(file=out, width=width).print(panel)
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
    before = render_show(store, job_id)
    assert "micro-batch 4," in before
    assert not [line for line in before.splitlines() if "submitted" in line and "micro" in line]
    store.transition(job_id, JobState.PLACED)
    store.transition(job_id, JobState.TUNING)
    config = {"micro_batch": 2, "grad_accum": 2, "precision": "bf16", "gpus": 1}
    store.transition(job_id, JobState.QUEUED, fields={"tuned": config})
    text = render_show(store, job_id)
    settings = next(line for line in text.splitlines() if "settings" in line)
    submitted = next(ln for ln in text.splitlines() if "submitted" in ln and "micro" in ln)
    assert "micro-batch 2, grad-accum 2, bf16" in settings
    assert "micro-batch 4, grad-accum 1, fp32" in submitted
    assert "global batch 4," in settings and "global batch 4," in submitted  # the job's, kept


def test_show_lists_the_runs_measurements_and_absent_ones_as_a_dash(store: JobStore) -> None:
    spec = parse_spec(
        {
            "name": "measured",
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 5}},
            "run": {"steps": 10},
        }
    )
    job_id = store.submit(spec).id
    store.put_metrics(
        job_id,
        {
            "data_wait_share": 0.25,
            "compute_ms": 3.5,
            "peak_mem_mb": 412.0,
            "peak_mem_scope": "run",
            "gpu_busy_share": None,
            "energy_per_sample_j": None,
        },
    )
    rows = {
        cells[0]: cells[1]
        for line in render_show(store, job_id).splitlines()
        if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) == 2
    }
    assert rows["data_wait_share"] == "0.250" and rows["compute_ms"] == "3.500"
    assert rows["peak_mem_scope"] == "run"
    assert rows["gpu_busy_share"] == "-" and rows["energy_per_sample_j"] == "-"


def test_show_gives_the_plan_a_resize_runs(store: JobStore) -> None:
    """An elastic job under dp 2 x tp 2 placed on 2 of its 4 GPUs: `orch show` gives the plan
    its profile picks there (pp 2, as the control loop runs it), with the global batch kept."""
    plan = {"dp": 2, "tp": 2, "zero": 3}
    spec = parse_spec(
        {
            "name": "planned",
            "team": "t",
            "class": "bulk",
            "workload": {"name": "gpt", "args": {"n_layer": 2, "d_model": 32, "n_head": 4}},
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": {"min": 2, "max": 4}},
            "run": {
                "steps": 10,
                "micro_batch": 2,
                "grad_accum": 2,
                "data_parallel": 4,
                "plan": plan,
            },
        }
    )
    job_id = store.submit(spec).id
    trial = {"gpus": 2, "micro_batch": 2, "grad_accum": 4, "precision": "fp32", "status": "ok"}
    curves = [
        {**trial, "tp": 2, "samples_per_s": 10.0, "p95_ms": 900.0},
        {**trial, "pp": 2, "samples_per_s": 30.0, "p95_ms": 300.0},
    ]
    store.profiles.save(job_id, {"curves": {"fp32": curves}})
    store.tune_reports.save(job_id, {"job": job_id})  # with its profile, as the tuner does
    placement = {"nodes": ["n0", "n0"], "strategy": "pack"}
    store.transition(job_id, JobState.PLACED, fields={"placement": placement})
    text = render_show(store, job_id)
    settings = next(line for line in text.splitlines() if "settings" in line)
    submitted = next(ln for ln in text.splitlines() if "submitted" in ln and "micro" in ln)
    assert "micro-batch 2, grad-accum 4" in settings and "GPUs 2 (plan pp 2)" in settings
    assert "GPUs 4 (plan dp 2 x tp 2, zero 3)" in submitted
    assert "global batch 8," in settings and "global batch 8," in submitted
