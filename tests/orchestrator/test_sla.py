"""SLA verdicts from measured metrics."""

from __future__ import annotations

from typing import Any

from orchestrator.sla import describe_sla, evaluate_sla
from orchestrator.spec import JobSpec, parse_spec


def spec(sla: dict[str, Any], cls: str = "bulk", run: dict[str, Any] | None = None) -> JobSpec:
    return parse_spec(
        {
            "name": "a",
            "team": "t",
            "class": cls,
            "workload": "mlp",
            "sla": sla,
            "run": run if run is not None else {"steps": 10},
        }
    )


def test_throughput_floor() -> None:
    s = spec({"throughput": {"min_samples_per_s": 100}})
    assert evaluate_sla(s, {"samples_per_s": 150.0}).met is True
    low = evaluate_sla(s, {"samples_per_s": 99.0})
    assert low.met is False and low.measured == "99.0 samples/s"
    assert evaluate_sla(s, {}).met is None
    assert describe_sla(s) == ">= 100 samples/s"


def test_a_job_reading_its_own_data_is_judged_at_the_wall_clock() -> None:
    """Its steps run at 150 samples/s but it waits on its loader 40% of the time: 90/s."""
    s = spec({"throughput": {"min_samples_per_s": 100}})
    loader_bound = {"samples_per_s": 150.0, "data_wait_share": 0.4, "reads_dataset": True}
    v = evaluate_sla(s, loader_bound)
    assert v.met is False
    assert v.measured == "90.0 samples/s at the wall clock (40% waiting for data)"
    # the batches the harness generates for a workload without a dataset are not the job's
    assert evaluate_sla(s, {**loader_bound, "reads_dataset": False}).met is True
    # a command job reports no share: its step times already hold its loading
    assert evaluate_sla(s, {"samples_per_s": 150.0, "data_wait_share": None}).met is True


def test_tokens_floor() -> None:
    s = spec({"throughput": {"min_tokens_per_s": 1000}})
    assert evaluate_sla(s, {"tokens_per_s": "1500"}).met is True
    assert evaluate_sla(s, {"samples_per_s": 10}).met is None


def test_latency_ceiling_uses_the_chosen_percentile() -> None:
    s = spec({"latency": {"max_ms": 25, "percentile": 99}}, cls="interactive")
    v = evaluate_sla(s, {"p95_ms": 10.0, "p99_ms": 38.0})
    assert v.met is False and v.measured == "p99 38.0 ms" and v.target == "p99 <= 25 ms"
    assert evaluate_sla(s, {"p99_ms": 20.0}).met is True


def test_deadline() -> None:
    s = spec({"throughput": {"work_samples": 100, "deadline_s": 60}}, run={})
    assert evaluate_sla(s, {}, elapsed_s=30, finished=True).met is True
    assert evaluate_sla(s, {}, elapsed_s=90, finished=True).met is False
    assert evaluate_sla(s, {}, elapsed_s=30, finished=False).met is None
    assert evaluate_sla(s, {}, elapsed_s=90, finished=False).met is False


def test_every_stated_part_must_hold() -> None:
    s = spec({"throughput": {"min_samples_per_s": 10}, "latency": {"max_ms": 5}})
    assert evaluate_sla(s, {"samples_per_s": 20, "p95_ms": 4}).met is True
    assert evaluate_sla(s, {"samples_per_s": 20, "p95_ms": 6}).met is False
    assert evaluate_sla(s, {"samples_per_s": 20}).met is None


def test_a_cancelled_job_gets_no_verdict_and_a_failed_one_missed() -> None:
    s = spec({"throughput": {"min_samples_per_s": 100}})
    met = {"samples_per_s": 150.0}
    cancelled = evaluate_sla(s, met, ended="cancelled")
    assert cancelled.met is None and cancelled.measured == "150.0 samples/s, cancelled"
    failed = evaluate_sla(s, met, ended="failed")
    assert failed.met is False and failed.measured.endswith("failed")
    assert evaluate_sla(s, met).met is True
