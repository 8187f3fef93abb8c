"""The batcher, replicas and request latency on a virtual clock, against hand-computed waits."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest

from workers.arrivals import poisson_arrivals
from workers.config import HarnessConfig
from workers.errors import HarnessConfigError
from workers.harness import Harness
from workers.serve_run import serve_arrivals
from workers.serving import serve


def const(seconds: float) -> Callable[[int], float]:
    """A service time that does not depend on the batch."""
    return lambda n: seconds


def test_a_batch_leaves_when_full_or_when_its_oldest_request_has_waited_the_delay() -> None:
    t = serve([0.0, 0.001, 0.002, 0.010], const(0.005), max_batch=2, max_delay_s=0.004)
    # [0, 0.001] full at 0.001, done 0.006; [0.002] leaves when the replica is free (0.006,
    # also the end of its window) and is alone (0.010 has not arrived), done 0.011;
    # [0.010] waits its whole window (no second request), leaves 0.014, done 0.019
    assert t.batches == [2, 1, 1]
    assert t.latency_ms == pytest.approx([6.0, 5.0, 9.0, 9.0])
    assert t.queue_ms == pytest.approx([1.0, 0.0, 4.0, 4.0])
    assert t.span_s == pytest.approx(0.019) and t.busy_s == pytest.approx(0.015)


def test_no_window_sends_what_is_queued_and_a_fixed_batch_waits_until_full() -> None:
    t = serve([0.0, 0.001], const(0.005), max_batch=8, max_delay_s=0.0)
    assert t.batches == [1, 1] and t.latency_ms == pytest.approx([5.0, 9.0])
    fixed = serve([0.0, 1.0, 2.0], const(0.1), max_batch=2, max_delay_s=None)
    # the first waits a second for its partner; the last, short of one, leaves with itself
    assert fixed.batches == [2, 1]
    assert fixed.latency_ms == pytest.approx([1100.0, 100.0, 100.0])


def test_replicas_serve_at_once_and_late_requests_are_dropped() -> None:
    both = serve([0.0, 0.0], const(1.0), max_batch=1, max_delay_s=0.0, replicas=2)
    assert both.latency_ms == pytest.approx([1000.0, 1000.0])
    one = serve([0.0, 0.0], const(1.0), max_batch=1, max_delay_s=0.0)
    assert one.latency_ms == pytest.approx([1000.0, 2000.0])
    late = serve([0.0, 0.0001], const(1.0), max_batch=1, max_delay_s=0.0, timeout_s=0.5)
    assert late.dropped == 1 and late.offered == 2 and len(late.latency_ms) == 1
    s = late.summary()
    assert s["dropped"] == 1 and s["requests"] == 1 and s["offered"] == 2


def test_with_a_constant_step_time_the_tail_rises_with_the_load() -> None:
    step = 0.010  # 100 requests/s at batch 1
    p99 = []
    for load in (0.1, 0.5, 0.8, 0.95):
        arrivals = poisson_arrivals(load / step, 300.0, seed=1)
        s = serve(arrivals, const(step), max_batch=1, max_delay_s=0.0).summary()
        p99.append(s["request_p99_ms"])
    assert all(v is not None for v in p99)
    assert p99 == sorted(p99) and p99[0] < p99[-1] / 5  # queueing dominates near saturation
    assert p99[0] >= step * 1000 * 0.99  # never below one step: it includes the service
    # a batch's service time that grows slower than its size lets dynamic batching keep up
    arrivals = poisson_arrivals(0.95 / step, 300.0, seed=1)
    batched = serve(arrivals, lambda n: step * (1 + 0.1 * (n - 1)), max_batch=8, max_delay_s=0.002)
    assert (batched.summary()["request_p99_ms"] or 0) < p99[-1]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_batch": 0, "max_delay_s": 0.0}, "max_batch"),
        ({"max_batch": 1, "max_delay_s": -1.0}, "max_delay_s"),
        ({"max_batch": 1, "max_delay_s": 0.0, "replicas": 0}, "replicas"),
        ({"max_batch": 1, "max_delay_s": 0.0, "timeout_s": float("nan")}, "timeout_s"),
    ],
)
def test_bad_settings_name_their_field(kwargs: dict, field: str) -> None:
    with pytest.raises(HarnessConfigError, match=field):
        serve([0.0], const(0.1), **kwargs)


def test_a_live_load_test_times_real_forward_passes_and_counts_the_queue() -> None:
    from workers.serve_run import load_test
    from workers.workloads.registry import build_workload

    infer = build_workload("infer", {"model": "mlp"}, 0)
    arrivals = poisson_arrivals(200.0, 2.0, seed=0)
    t = load_test(infer, arrivals, max_batch=8, max_delay_s=0.002)
    s = t.summary()
    assert s["requests"] == len(arrivals) and s["dropped"] == 0 and sum(t.batches) == len(arrivals)
    assert t.busy_s > 0 and max(t.batches) <= 8
    # each request's latency is its queueing plus its batch's measured forward pass
    assert all(lat > q for lat, q in zip(t.latency_ms, t.queue_ms, strict=True))
    with pytest.raises(HarnessConfigError, match="forward-only"):
        load_test(build_workload("mlp", {}, 0), arrivals, max_batch=1, max_delay_s=0.0)


def _service(**serve: object) -> HarnessConfig:
    return HarnessConfig(
        workload="infer",
        workload_args={"model": "mlp"},
        micro_batch=8,
        duration_s=1.5,
        serve={"rate_rps": 200.0, "max_delay_s": 0.002, **serve},
    )


def test_a_live_service_answers_its_stream_on_the_wall_clock_and_reports_requests() -> None:
    reports: list[dict] = []
    t0 = time.perf_counter()
    result = Harness(_service(), report=reports.append, report_every_s=0.2).run()
    wall = time.perf_counter() - t0
    offered = len(poisson_arrivals(200.0, 1.5, seed=0))
    assert result.status == "finished" and result.forward_only
    assert result.measured_steps == offered  # every request answered, none dropped
    assert wall >= 1.4  # paced by its arrivals, not run as fast as it can
    assert result.p99_ms is not None and result.p50_ms is not None
    assert result.p99_ms >= result.p50_ms > 0
    last = reports[-1]
    assert last["status"] == "finished" and last["dropped"] == 0
    assert last["offered_rps"] == pytest.approx(offered / 1.5)
    assert 1 <= last["mean_batch"] <= 8 and last["queue_p95_ms"] is not None
    assert last["window_steps"] == offered and last["window_p99_ms"] is not None
    assert len(reports) >= 3  # periodic reports while it serves


def test_a_service_stops_when_asked_and_refuses_a_training_workload() -> None:
    t0 = time.perf_counter()
    result = Harness(_service(), should_stop=lambda: time.perf_counter() - t0 > 0.3).run()
    assert result.status == "stopped" and result.measured_steps < len(
        poisson_arrivals(200.0, 1.5, seed=0)
    )
    with pytest.raises(HarnessConfigError, match="training workload"):
        Harness(dataclasses.replace(_service(), workload="mlp", workload_args={})).run()
    with pytest.raises(HarnessConfigError, match="exactly one of rate_rps and trace"):
        _service(trace=[0.0, 0.1])
    with pytest.raises(HarnessConfigError, match="duration_s"):
        HarnessConfig(workload="infer", steps=3, serve={"rate_rps": 1.0})


def test_a_trace_repeats_to_cover_the_service_duration() -> None:
    times = serve_arrivals({"trace": [0.0, 0.25, 0.5]}, 1.2, seed=0)
    assert times == pytest.approx([0.0, 0.25, 0.5, 0.5, 0.75, 1.0, 1.0])


def test_a_resized_service_goes_on_where_its_stream_is_and_reports_its_load() -> None:
    # its stream began 0.5 s ago (a run before the resize): this run serves only what is due
    # from now on, and reports the stream's start for the next one
    began = time.time() - 0.5
    config = dataclasses.replace(_service(start_at=began), duration_s=3.0)
    reports: list[dict] = []
    result = Harness(config, report=reports.append, report_every_s=0.2).run()
    due = [t for t in poisson_arrivals(200.0, 3.0, seed=0) if t >= 0.5]
    assert result.status == "finished"
    assert 0 < result.measured_steps <= len(due)
    last = reports[-1]
    assert last["stream_started_at"] == began
    assert last["time_left_s"] == 0.0
    # the last seconds' load, in a report while the stream still ran (a report after its end
    # counts the quiet time past it too: on a loaded machine the run ends late): the
    # stream's arrivals over them (about 200/s), what this one replica served, and the share
    # of them it spent serving batches
    during = [r for r in reports if r["time_left_s"] > 0 and r["elapsed_s"] >= 0.5]
    assert during, reports
    mid = during[-1]
    assert mid["window_offered_rps"] == pytest.approx(200.0, rel=0.35)
    assert 0 < mid["window_served_rps"] <= mid["window_offered_rps"] * 1.2
    assert 0 < mid["window_busy"] <= 1.0
    # one replica: its own rate is the service's (not a count capped by the latency window)
    assert mid["window_samples_per_s"] == mid["window_served_rps"]


def test_a_relaunched_service_counts_what_was_due_while_it_restarted_as_dropped() -> None:
    # its stream began 0.5 s ago and the run before stopped serving 0.4 s ago: the requests
    # due in between reached no replica, so this run reports them dropped (and apart)
    now = time.time()
    began, stopped = now - 0.5, now - 0.4
    config = dataclasses.replace(_service(start_at=began, stopped_at=stopped), duration_s=1.0)
    reports: list[dict] = []
    result = Harness(config, report=reports.append, report_every_s=0.2).run()
    assert result.status == "finished"
    last = reports[-1]
    arrivals = poisson_arrivals(200.0, 1.0, seed=0)
    # at least those due from the stop to the launch; at most those due until the end
    least = len([t for t in arrivals if 0.1 <= t < 0.5])
    most = len([t for t in arrivals if t >= 0.1])
    assert 0 < least <= last["relaunch_dropped"] <= most
    # what this run served it was offered from where the stream was: none of the gap
    assert result.measured_steps + last["relaunch_dropped"] <= most
    assert last["dropped"] >= last["relaunch_dropped"]
    assert last["served_until"] >= now
    with pytest.raises(HarnessConfigError, match=r"serve.stopped_at must be a wall-clock"):
        _service(stopped_at=-1.0)
