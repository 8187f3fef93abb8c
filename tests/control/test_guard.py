"""The SLA guard's judgement (pure): checks, hysteresis, and the actions they call for."""

from __future__ import annotations

from orchestrator.control.guard import (
    Check,
    GuardConfig,
    Reading,
    Targets,
    Watch,
    actions,
    assess,
    reading_of,
)
from orchestrator.control.transitions import StopReason, run_ended, tuning_ended
from orchestrator.runtime.base import Outcome, OutcomeKind
from orchestrator.store.states import JobState

CFG = GuardConfig(min_steps=5, hold_s=10.0, band=0.05, prediction_margin=0.25, max_retunes=1)
FLOOR = Targets(floor=100.0)


def run(targets: Targets, rates: list[tuple[float, float]], **reading: float) -> list[tuple]:
    """Feed ``(time, samples/s)`` readings; returns ``(time, check, tripped)`` of findings."""
    watch, out = Watch(), []
    for at, rate in rates:
        watch, found = assess(targets, Reading(at, 50, samples_per_s=rate, **reading), watch, CFG)
        out += [(at, f.check, f.tripped) for f in found]
    return out


def test_floor_trips_after_hold_and_only_once() -> None:
    found = run(FLOOR, [(t, 80.0) for t in range(0, 30, 2)])
    assert found == [(10, Check.THROUGHPUT, True)]


def test_noise_shorter_than_hold_never_trips() -> None:
    # under the floor for 8 s, then above it, again and again
    rates = [(t, 90.0 if (t // 10) % 2 == 0 and t % 10 < 8 else 110.0) for t in range(0, 120)]
    assert run(FLOOR, [(float(t), r) for t, r in rates]) == []


def test_clears_only_back_inside_the_band_for_hold() -> None:
    low = [(float(t), 80.0) for t in range(0, 12)]
    # 102 is above the floor but inside the band (floor x 1.05): the trip stays
    between = [(float(t), 102.0) for t in range(12, 60)]
    assert run(FLOOR, low + between) == [(10.0, Check.THROUGHPUT, True)]
    back = [(float(t), 110.0) for t in range(60, 80)]
    assert run(FLOOR, low + between + back) == [
        (10.0, Check.THROUGHPUT, True),
        (70.0, Check.THROUGHPUT, False),
    ]


def test_too_few_steps_are_not_judged() -> None:
    watch = Watch()
    for t in range(0, 40):
        watch, found = assess(FLOOR, Reading(float(t), 4, samples_per_s=1.0), watch, CFG)
        assert found == []


def test_latency_over_its_ceiling_is_violated() -> None:
    t = Targets(percentile=95, max_ms=50.0)
    watch, found = Watch(), []
    for at in range(0, 12):
        watch, f = assess(t, Reading(float(at), 20, latency_ms=70.0), watch, CFG)
        found += f
    assert [(f.check, f.severity) for f in found] == [(Check.LATENCY, "violated")]
    assert found[0].describe() == "sla-violated: latency p95 70.0 ms (target p95 <= 50 ms)"


def test_deadline_at_risk_then_violated() -> None:
    t = Targets(deadline_at=100.0)
    # 1,000 samples left at 10/s: 100 s of work, due in 90 at t=10
    watch, found = Watch(), []
    for at in range(10, 25):
        watch, f = assess(
            t, Reading(float(at), 20, samples_per_s=10.0, remaining_samples=1000.0), watch, CFG
        )
        found += f
    assert [(f.check, f.severity) for f in found] == [(Check.DEADLINE, "at-risk")]
    # on time (30 s of work left, due in 80 s): nothing
    watch = Watch()
    for at in range(10, 40):
        watch, f = assess(
            t, Reading(float(at), 20, samples_per_s=10.0, remaining_samples=300.0), watch, CFG
        )
        assert f == []
    # past the deadline with work left: violated
    watch = Watch()
    for at in range(101, 115):
        watch, f = assess(
            t, Reading(float(at), 20, samples_per_s=10.0, remaining_samples=300.0), watch, CFG
        )
        if f:
            assert f[0].severity == "violated"


def test_profile_contradicted_with_the_sla_at_risk_calls_for_a_bounded_retune() -> None:
    t = Targets(floor=150.0, predicted_rate=200.0, tuned=True)
    watch = Watch()
    found = []
    for at in range(0, 12):
        watch, f = assess(t, Reading(float(at), 20, samples_per_s=140.0), watch, CFG)
        found += f
    assert {Check.PROFILE, Check.THROUGHPUT} <= watch.tripped
    drift = next(f for f in found if f.check is Check.PROFILE)
    assert drift.describe() == "profile-drift: 140.0 samples/s (profile: 200.0 predicted)"
    assert actions(t, watch, retunes=0, cfg=CFG).retune
    limited = actions(t, watch, retunes=1, cfg=CFG)
    assert not limited.retune and "re-tune" in limited.note
    untuned = actions(Targets(floor=150.0, predicted_rate=200.0), watch, retunes=0, cfg=CFG)
    assert not untuned.retune and "untuned" in untuned.note
    # 20% under the prediction is within the margin: no trip
    watch = Watch()
    for at in range(0, 30):
        watch, found = assess(t, Reading(float(at), 20, samples_per_s=160.0), watch, CFG)
        assert found == []


def test_a_job_meeting_its_sla_is_never_retuned_however_far_from_its_profile() -> None:
    """The issue's case: a 200 samples/s floor, 5,948 measured, 33,599 predicted."""
    t = Targets(floor=200.0, predicted_rate=33_599.0, tuned=True)
    watch = Watch()
    for at in range(0, 600):
        watch, _ = assess(t, Reading(float(at), 50, samples_per_s=5_948.0), watch, CFG)
        act = actions(t, watch, retunes=0, cfg=CFG)
        assert not act.retune
    assert watch.tripped == {Check.PROFILE}
    assert "meets its SLA" in actions(t, watch, retunes=0, cfg=CFG).note
    # a latency job under its ceiling likewise, with no floor at all
    lat = Targets(percentile=95, max_ms=100.0, predicted_ms=5.0, tuned=True)
    watch = Watch()
    for at in range(0, 60):
        watch, _ = assess(lat, Reading(float(at), 50, latency_ms=40.0), watch, CFG)
    assert watch.tripped == {Check.PROFILE}
    assert not actions(lat, watch, retunes=0, cfg=CFG).retune
    # once the SLA itself trips, the contradicted profile is worth a re-tune
    watch = Watch()
    for at in range(0, 30):
        watch, _ = assess(lat, Reading(float(at), 50, latency_ms=140.0), watch, CFG)
    assert actions(lat, watch, retunes=0, cfg=CFG).retune


def test_urgent_only_for_an_elastic_job_short_of_floor_or_deadline() -> None:
    tripped = Watch(tripped=frozenset({Check.THROUGHPUT}))
    assert actions(Targets(floor=1.0, elastic=True), tripped, 0, CFG).urgent
    assert not actions(Targets(floor=1.0, elastic=False), tripped, 0, CFG).urgent
    latency = Watch(tripped=frozenset({Check.LATENCY}))
    assert not actions(Targets(max_ms=1.0, elastic=True), latency, 0, CFG).urgent


def test_reading_of_a_worker_report() -> None:
    report = {
        "window_p95_ms": 12.0,
        "window_p99_ms": 30.0,
        "window_samples_per_s": 50.0,
        "window_steps": 40,
        "samples_per_s": 10.0,
        "tokens_per_s": 1280.0,
        "step": 100,
        "total_steps": 300,
        "global_batch": 16,
    }
    r = reading_of(report, Targets(percentile=99), now=5.0)
    assert (r.at, r.steps, r.latency_ms, r.samples_per_s) == (5.0, 40, 30.0, 50.0)
    assert r.tokens_per_s == 50.0 * 128  # the run's tokens per sample at the window's rate
    assert r.remaining_samples == 200 * 16
    assert reading_of({}, Targets(), 0.0).steps == 0


def test_a_loader_bound_job_is_judged_at_the_wall_clock_and_its_profile_by_its_steps() -> None:
    """Steps at 150 samples/s, 40% of the time waiting on the job's loader: 90/s of work
    against a floor of 100 trips the floor; the profile predicted the steps' 150, which holds."""
    report = {
        "window_samples_per_s": 150.0,
        "window_steps": 40,
        "data_wait_share": 0.4,
        "reads_dataset": True,
        "step": 100,
        "total_steps": 300,
        "global_batch": 10,
    }
    targets = Targets(floor=100.0, predicted_rate=150.0, deadline_at=10.0)
    watch, found = Watch(), []
    for t in range(0, 12):
        r = reading_of(report, targets, now=float(t))
        watch, new = assess(targets, r, watch, CFG)
        found += [(f.check, f.tripped, f.measured) for f in new]
    assert (Check.THROUGHPUT, True, "90.0 samples/s") in found
    assert not any(check is Check.PROFILE for check, _, _ in found)
    # its 2,000 samples left take 22 s at 90/s: due at 10 s, the deadline is judged on that
    assert (Check.DEADLINE, True, "ends in 22 s at 90.0 samples/s") in found
    # the harness's own generated batches: judged by the steps' rate, the floor holds
    generated = reading_of({**report, "reads_dataset": False}, targets, now=0.0)
    assert generated.wall(generated.samples_per_s) == 150.0


def test_a_retune_stop_requeues_without_the_tuned_settings() -> None:
    t = run_ended(
        JobState.RUNNING,
        "run",
        Outcome(OutcomeKind.STOPPED, "stopped"),
        StopReason.RETUNE,
        started=True,
        losses=0,
        stop_note="measured 10 samples/s against 20 predicted",
    )
    assert t.target is JobState.QUEUED and t.fields["tuned"] == ""
    assert "re-tuning" in t.message and not t.lost


def test_a_retune_answer_keeps_the_old_settings_unless_the_new_are_predicted_to_meet() -> None:
    old = {"micro_batch": 8, "grad_accum": 1, "gpus": 1}
    new = {"micro_batch": 32, "grad_accum": 1, "gpus": 1}
    kept = tuning_ended({"retune": True, "previous": old, "feasible": False, "config": new})
    assert kept.target is JobState.QUEUED and kept.fields["tuned"] == old
    assert "resumes with its settings" in kept.message
    moved = tuning_ended({"retune": True, "previous": old, "feasible": True, "config": new})
    assert moved.target is JobState.QUEUED and moved.fields["tuned"] == new
    # a first tuning that finds nothing feasible still fails the job (no previous settings)
    assert tuning_ended({"run": False, "config": None}).target is JobState.FAILED
