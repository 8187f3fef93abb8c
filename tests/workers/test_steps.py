"""A command script's step messages, measured as the harness measures its own steps."""

from __future__ import annotations

import math

from workers.result import REPORT_KEYS
from workers.steps import CommandSteps


def _steps(state: dict[str, object] | None = None) -> CommandSteps:
    return CommandSteps(warmup_steps=2, global_batch=8, total_steps=10, state=state)


def test_warm_up_is_left_out_and_throughput_is_samples_over_step_time() -> None:
    s = _steps()
    for step, seconds in enumerate([5.0, 5.0, 0.1, 0.2, 0.1, 0.2], start=1):
        assert s.add({"step": step, "s": seconds, "samples": 8, "tokens": 80, "loss": 1.0 / step})
    m = s.metrics()
    assert m["measured_steps"] == 4 and math.isclose(m["samples_per_s"], 32 / 0.6)
    assert math.isclose(m["tokens_per_s"], 320 / 0.6)
    assert math.isclose(m["p50_ms"], 150.0) and m["p99_ms"] <= 200.0
    report = s.report("running", 1.0)
    assert set(REPORT_KEYS) <= set(report)
    assert report["step"] == 6 and math.isclose(report["loss"], 1 / 6)


def test_malformed_messages_are_ignored() -> None:
    s = _steps()
    for bad in [{}, {"step": 1, "s": "x", "samples": 1}, {"step": 1, "s": -1.0, "samples": 1}]:
        assert not s.add(bad)
    assert not s.add({"step": 1, "s": float("nan"), "samples": 1})
    assert s.add({"step": 1, "s": 0.1, "samples": 1, "loss": float("inf")})
    assert s.loss is None  # a diverged loss is unknown, not a number
    s.checkpointed("7")
    s.checkpointed(True)
    assert s.state() is None  # never a real checkpoint


def test_a_resumed_run_continues_from_the_checkpointed_state() -> None:
    first = _steps()
    for step in range(1, 6):
        first.add({"step": step, "s": 0.1, "samples": 8, "tokens": None, "loss": 0.5})
    first.checkpointed(5)
    state = first.state()
    assert state is not None and state["checkpoint_step"] == 5
    again = _steps(state)
    assert again.step == 5 and again.resumed_from == 5
    for step in range(6, 11):
        again.add({"step": step, "s": 0.1, "samples": 8, "tokens": None, "loss": 0.25})
    result = again.result("finished", 1.0, "/ckpt")
    assert result.steps_done == 10 and result.resumed_from_step == 5
    assert result.measured_steps == 3 + 3  # each run's 2 warm-up steps left out
    assert result.checkpoint_path == "/ckpt" and result.loss == 0.25


def test_a_scripts_waits_in_job_loader_are_reported_apart_from_its_steps() -> None:
    """As the harness times a step after its batch is made: the step's own time is what the
    percentiles and samples/s cover, the wait is its own figure, and the report says it is
    the job's loading (``reads_dataset``: a throughput SLA is judged at the wall clock)."""
    s = _steps()
    waits = [0.5, 0.5, 0.04, 0.04, 0.06, 0.06]
    for step, wait in enumerate(waits, start=1):
        assert s.add({"step": step, "s": 0.1, "samples": 8, "wait_s": wait})
    assert not s.add({"step": 7, "s": 0.1, "samples": 8, "wait_s": -1.0})
    m = s.metrics()
    assert m["measured_steps"] == 4 and math.isclose(m["samples_per_s"], 32 / 0.2)
    assert math.isclose(m["p50_ms"], 50.0, rel_tol=0.02)  # the steps' 60 and 40 ms
    assert math.isclose(m["data_wait_ms"], 50.0) and math.isclose(m["compute_ms"], 50.0)
    assert math.isclose(m["data_wait_share"], 0.5) and m["reads_dataset"] is True
    result = s.result("finished", 1.0, None)
    assert result.dataset and math.isclose(result.data_wait_share or 0.0, 0.5)
    assert result.peak_mem_scope == "run"


def test_without_job_loader_the_wait_is_unknown_and_the_step_holds_the_loading() -> None:
    s = _steps()
    for step in range(1, 5):
        s.add({"step": step, "s": 0.1, "samples": 8, "wait_s": None})
    report = s.report("running", 1.0)
    assert report["data_wait_share"] is None and report["reads_dataset"] is False
    assert math.isclose(report["p50_ms"], 100.0, rel_tol=0.02)
