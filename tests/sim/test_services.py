"""Services in the simulator (issue 24): the latency model, SLA attainment by hand, the SLA
guard's scaling (``policies.replicas``) driving ``shared`` through ``want_gpus``, and bulk work
taking what a service gives back."""

from __future__ import annotations

import math

import pytest

from orchestrator.sim import SimConfig, Simulator, TraceJob, uniform_pool
from orchestrator.sim.services import (
    LatencyCurve,
    LoadProfile,
    Services,
    ServiceSpec,
    peak_replicas,
)
from policies import SCHEDULING_POLICIES, Decision

# one replica: p99 10 ms at 100 req/s, 50 ms at 1,000 req/s (its capacity)
CURVE = LatencyCurve((100.0, 1000.0), (10.0, 50.0), capacity=1000.0)


def service_row(name: str = "svc", hi: int = 4, duration: float = 1800.0) -> TraceJob:
    return TraceJob(name, 0.0, "web", "interactive", 1, 1, hi, duration)


def run(
    jobs: list[TraceJob], specs: dict[str, ServiceSpec], gpus: int = 4, interval: float = 10.0
) -> Simulator:
    sim = Simulator(
        jobs,
        SCHEDULING_POLICIES.create("shared"),
        uniform_pool(1, gpus),
        config=SimConfig(interval_s=interval, restart_s=0.0, sigma=0.0, every_round=False),
        services=specs,
    )
    sim.run()
    return sim


def test_latency_curve_is_the_measured_points_interpolated_monotone() -> None:
    noisy = LatencyCurve((100.0, 200.0, 300.0), (10.0, 40.0, 20.0), capacity=300.0)
    assert noisy.p99(50.0) == 10.0  # below the first point: its p99
    assert noisy.p99(150.0) == pytest.approx(25.0)
    assert noisy.p99(300.0) == 40.0  # the envelope: a higher load never reads faster
    assert noisy.p99(301.0) == math.inf  # past capacity the queue grows without bound
    assert noisy.busy(150.0) == 0.5 and noisy.busy(600.0) == 1.0


def test_attainment_by_hand() -> None:
    # 500 req/s for 60 s then 2,000 req/s; ceiling 30 ms; one replica
    load = LoadProfile.steps((0.0, 500.0), (60.0, 2000.0))
    services = Services({"s": ServiceSpec(load, CURVE, max_ms=30.0, duration=1000.0)})
    # [0, 100): starting for its first 10 s (a miss), then 500 req/s on 1 replica:
    # p99 = 10 + 40 * 400 / 900 = 27.8 ms <= 30 (50 s met), then 2,000 req/s past its
    # capacity (40 s missed)
    services.window("s", 0.0, 100.0, 1, 10.0, 1000.0)
    st = services.stats["s"]
    assert (st.life_s, st.met_s) == (100.0, 50.0)
    assert st.windows == [(0.0, (500 * 60 + 2000 * 40) / 100, 1, math.inf)]
    # [100, 120) on 2 replicas: 1,000 each, p99 50 ms > 30: a miss; then queued 10 s: a miss
    services.window("s", 100.0, 20.0, 2, 0.0, 1000.0)
    services.window("s", 120.0, 10.0, 0, 10.0, 0.0)
    # [130, 150) on 4 replicas: 500 each, 27.8 ms: met; it ends 15 s in (its serving left)
    services.window("s", 130.0, 20.0, 4, 0.0, 15.0)
    assert (st.life_s, st.met_s) == (145.0, 65.0)
    assert st.attainment == pytest.approx(65.0 / 145.0)
    assert st.gpu_s == 100 * 1 + 20 * 2 + 15 * 4
    assert services.summary()["service_attainment"] == pytest.approx(65.0 / 145.0)


def test_service_scales_up_when_load_rises_and_down_when_it_falls() -> None:
    # 200 req/s, then 2,000 req/s from 300 s (needs ceil(2000 / (1000 * 0.6)) = 4 replicas by
    # the guard's load rule), then 200 req/s again from 900 s
    load = LoadProfile.steps((0.0, 200.0), (300.0, 2000.0), (900.0, 200.0))
    spec = ServiceSpec(load, CURVE, max_ms=60.0, duration=1800.0)
    sim = run([service_row()], {"svc": spec})
    st = sim.services.stats["svc"]
    replicas = {t: n for t, _, n, _ in st.windows}
    assert replicas[290.0] == 1
    assert max(replicas.values()) == 4
    up = [t for t, n, _ in st.scales if n == 4]
    assert up and 300.0 < up[0] <= 330.0  # within the guard's up hold (10 s) of the windows
    assert "offered 2,000 req/s needs 4 replicas" in st.scales[0][2]
    downs = [(t, n) for t, n, _ in st.scales if t > 900.0]
    assert [n for _, n in downs] == [3, 2, 1]  # one replica fewer at a time
    assert replicas[1790.0] == 1
    assert peak_replicas(spec) == 4
    # misses: the windows past capacity before it grew (300 s .. the grow), nothing else
    assert 0.97 < st.attainment < 1.0


def test_bulk_gets_the_gpus_a_service_frees() -> None:
    # the service needs 3 replicas at first (1,500 req/s), 1 from 300 s; a 3-GPU bulk job
    # arriving at 100 s finds 1 GPU free and starts in the round the service gives 2 back
    load = LoadProfile.steps((0.0, 1500.0), (300.0, 100.0))
    spec = ServiceSpec(load, CURVE, max_ms=60.0, duration=1200.0)
    bulk = TraceJob("b", 100.0, gpus=3, duration=600.0)
    sim = run([service_row(), bulk], {"svc": spec})
    st = sim.services.stats["svc"]
    assert max(n for _, _, n, _ in st.windows) == 3
    to_one = [t for t, n, _ in st.scales if n == 1]
    assert to_one
    rec = sim.by_id["b"]
    assert rec.first_start == to_one[0]
    assert rec.preemptions == 0


def test_a_trace_without_services_runs_as_before() -> None:
    jobs = [
        TraceJob(f"b{i}", 30.0 * i, gpus=2, min_gpus=1, max_gpus=4, duration=500.0)
        for i in range(4)
    ]
    plain = Simulator(
        jobs, SCHEDULING_POLICIES.create("shared"), uniform_pool(1, 4), config=SimConfig()
    ).run()
    empty = Simulator(
        jobs,
        SCHEDULING_POLICIES.create("shared"),
        uniform_pool(1, 4),
        config=SimConfig(),
        services={},
    ).run()
    assert plain.records == empty.records and plain.rounds == empty.rounds


def test_bad_load_profiles_are_refused_naming_the_problem() -> None:
    with pytest.raises(ValueError, match="offered load must be >= 0"):
        LoadProfile.steps((0.0, -1.0))
    with pytest.raises(ValueError, match="times must increase"):
        LoadProfile.steps((0.0, 1.0), (0.0, 2.0))
    with pytest.raises(ValueError, match="capacity must be > 0"):
        LatencyCurve((1.0,), (1.0,), capacity=0.0)


def test_warm_replicas_alone_serve_while_a_scale_up_in_place_loads() -> None:
    # 1,500 req/s on 2 replicas held, the second loading for its first 10 s: 1 replica alone
    # is past its capacity (a miss), then 750 each meets 60 ms
    load = LoadProfile.steps((0.0, 1500.0))
    services = Services({"s": ServiceSpec(load, CURVE, max_ms=60.0, duration=1000.0)})
    services.window("s", 0.0, 30.0, 2, 0.0, 1000.0, warm=(10.0, 1))
    st = services.stats["s"]
    assert (st.life_s, st.met_s) == (30.0, 20.0)
    assert st.gpu_s == 60.0  # both held throughout
    # 400 req/s: one replica carries it while the other loads: met throughout
    low = Services({"s": ServiceSpec(LoadProfile.steps((0.0, 400.0)), CURVE, 60.0, 1000.0)})
    low.window("s", 0.0, 30.0, 2, 0.0, 1000.0, warm=(10.0, 1))
    assert low.stats["s"].met_s == 30.0


def test_a_service_resized_in_place_serves_through_its_scales_and_a_relaunch_does_not() -> None:
    """Live, a service with an endpoint (the default) is resized in place and a self-loading
    one relaunched: the simulator models both, and the guard weighs a relaunch's gap only
    for the second."""
    load = LoadProfile.steps((0.0, 200.0), (300.0, 2000.0), (900.0, 200.0))
    stats = {}
    for in_place in (True, False):
        spec = ServiceSpec(load, CURVE, 60.0, 1800.0, startup_s=30.0, in_place=in_place)
        stats[in_place] = run([service_row()], {"svc": spec}).services.stats["svc"]
    for st in stats.values():
        assert max(n for _, _, n, _ in st.windows) == 4 and st.windows[-1][2] == 1
    # after the load falls (900 s on) it scales down: in place nothing is missed, the
    # replicas that stay serve; relaunched, each step down serves nothing for 30 s
    after = {k: [p99 for t, _, _, p99 in st.windows if t >= 900.0] for k, st in stats.items()}
    assert all(p99 <= 60.0 for p99 in after[True])
    assert math.inf in after[False]
    assert stats[True].attainment > stats[False].attainment


def _launches(spec: ServiceSpec) -> tuple[Simulator, set[float]]:
    """A service run to its end, and every ``started_at`` its run had while it held GPUs."""
    sim = Simulator(
        [service_row()],
        SCHEDULING_POLICIES.create("shared"),
        uniform_pool(1, 4),
        config=SimConfig(interval_s=10.0, restart_s=0.0, sigma=0.0, every_round=False),
        services={"svc": spec},
    )
    launched: set[float] = set()
    apply = sim._apply

    def watched(d: Decision) -> None:
        apply(d)
        if sim.by_id["svc"].nodes:
            launched.add(sim.by_id["svc"].started_at)

    sim._apply = watched  # type: ignore[method-assign]
    sim.run()
    return sim, launched


def test_a_service_resized_in_place_stays_one_run_as_live() -> None:
    """Live, a resize in place is not a run's end: the job's history advances once, when the
    service ends (no restart counted, its GPU-seconds those of each size for as long as it
    held it), and its view keeps its launch and first answer. A relaunched one restarts."""
    load = LoadProfile.steps((0.0, 200.0), (300.0, 2000.0), (900.0, 200.0))
    for in_place in (True, False):
        spec = ServiceSpec(load, CURVE, 60.0, 1800.0, startup_s=30.0, in_place=in_place)
        sim, launched = _launches(spec)
        job, st = sim.by_id["svc"], sim.services.stats["svc"]
        assert job.resizes >= 4  # up to 4 replicas and down again to 1
        if in_place:
            assert launched == {0.0}  # one run, from its start
            assert job.history.restarts == 0 and job.history.most_gpus == 4
            assert job.history.attained_service == pytest.approx(st.gpu_s)
        else:
            assert len(launched) == job.resizes + 1
            assert job.history.restarts == job.resizes
