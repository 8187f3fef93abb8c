"""The SLA guard's replica scaling of a service (issue 24): up near the ceiling or on a load
rise, down with margin, within the job's GPU range and its team's quota, and no flapping."""

from __future__ import annotations

import dataclasses

import pytest

from policies.replicas import (
    ReplicaConfig,
    Scale,
    ScaleWatch,
    ServiceLimits,
    ServiceReading,
    needed_replicas,
    scale_replicas,
)

CFG = ReplicaConfig(up_hold_s=10.0, down_hold_s=20.0)


def limits(n: int = 1, lo: int = 1, hi: int = 4, room: int | None = None) -> ServiceLimits:
    return ServiceLimits(n, lo, hi, room, percentile=99, max_ms=20.0)


def reading(
    at: float,
    p99: float = 5.0,
    offered: float = 100.0,
    busy: float = 0.3,
    served: float | None = None,
    requests: int = 500,
) -> ServiceReading:
    return ServiceReading(at, requests, p99, offered, offered if served is None else served, busy)


def run(lim: ServiceLimits, readings: list[ServiceReading]) -> list[tuple[float, Scale]]:
    """The decisions over a sequence of rounds, at their clocks."""
    watch, out = ScaleWatch(), []
    for r in readings:
        watch, scale = scale_replicas(lim, r, watch, CFG)
        if scale is not None:
            out.append((r.at, scale))
    return out


def test_a_tail_near_the_ceiling_adds_a_replica_after_the_hold() -> None:
    # p99 18.2 ms against 20 ms (at 80% or more), load light: one more replica after 10 s
    got = run(limits(), [reading(t, p99=18.2, busy=0.2) for t in range(0, 12)])
    assert [(at, s.replicas) for at, s in got] == [(10, 2)]
    assert got[0][1].reason == "scaling 1 -> 2 replicas: p99 18.2 ms near ceiling 20 ms"


def test_a_doubled_load_scales_to_what_keeps_each_replica_at_its_target_busy_share() -> None:
    # one replica busy 55% at 100 req/s: within the 60% target; at 200 req/s it is busy 100%
    # and serves only 180 req/s, so the load needs 1.0 x 200/180 = 1.11 replicas' time:
    # ceil(1.11 / 0.6) = 2 replicas, before the tail has moved
    calm = [reading(t, offered=100, busy=0.55) for t in range(0, 30)]
    assert run(limits(), calm) == []
    doubled = [reading(t, offered=200, served=180, busy=1.0) for t in range(30, 41)]
    got = run(limits(), calm + doubled)
    assert [(at, s.replicas) for at, s in got] == [(40, 2)]
    assert "offered 200 req/s needs 2 replicas at 60% busy" in got[0][1].reason


def test_a_load_far_above_goes_up_several_replicas_at_once_within_gpus_max() -> None:
    # 4 replicas' worth of busy time: ceil(4 / 0.6) = 7, capped at gpus.max 4
    got = run(limits(n=1, hi=4), [reading(t, offered=400, served=100, busy=1.0) for t in range(11)])
    assert [s.replicas for _, s in got] == [4]


def test_its_teams_quota_bounds_the_growth_and_says_so() -> None:
    hot = [reading(t, p99=25.0, offered=400, served=100, busy=1.0) for t in range(11)]
    assert [s.replicas for _, s in run(limits(n=2, hi=4, room=1), hot)] == [3]
    (_, capped), *_ = run(limits(n=2, hi=4, room=0), hot)
    assert capped.replicas == 2
    assert capped.reason.startswith("stays at 2 replicas (its team's quota): p99 25.0 ms")
    (_, top), *_ = run(limits(n=4, hi=4), hot)
    assert top.replicas == 4 and "(its gpus.max)" in top.reason


def test_margin_on_both_signals_removes_one_replica_after_the_longer_hold() -> None:
    # 3 replicas each 20% busy: 0.6 replica-s/s; with 2 each would be 30% busy (<= 40%)
    quiet = [reading(t, p99=6.0, offered=100, busy=0.2) for t in range(0, 22)]
    got = run(limits(n=3), quiet)
    assert [(at, s.replicas) for at, s in got] == [(20, 2)]
    assert got[0][1].reason == (
        "scaling 3 -> 2 replicas: offered 100 req/s keeps 2 replicas each 30% busy; p99 6.0 ms "
        "under 0.5x ceiling 20 ms"
    )


@pytest.mark.parametrize(
    ("p99", "busy", "why"),
    [
        (12.0, 0.2, "the tail is between margin (10 ms) and near (16 ms)"),
        (6.0, 0.3, "with one fewer each replica would be 45% busy, over the 40% down share"),
    ],
)
def test_no_scale_down_without_margin_on_both_signals(p99: float, busy: float, why: str) -> None:
    assert run(limits(n=3), [reading(t, p99=p99, busy=busy) for t in range(60)]) == [], why


def test_never_below_gpus_min() -> None:
    idle = [reading(t, p99=1.0, offered=1, busy=0.01) for t in range(60)]
    assert run(limits(n=2, lo=2), idle) == []


def test_no_flapping_a_call_broken_before_its_hold_starts_over() -> None:
    # the tail crosses "near" for 9 s out of every 10 (noise between bursts): never 10 s in a
    # row, so nothing is done; a down call is broken by every burst as well
    noisy = [reading(t, p99=18.0 if t % 10 else 12.0, busy=0.2) for t in range(100)]
    assert run(limits(n=2), noisy) == []


def test_a_load_in_the_band_between_the_down_and_up_shares_holds_the_count() -> None:
    # 2 replicas each 50% busy: under the 60% target (no up), 100% with one (no down)
    steady = [reading(t, p99=6.0, offered=100, busy=0.5) for t in range(100)]
    assert run(limits(n=2), steady) == []


def test_few_requests_say_nothing_of_the_tail_but_the_load_still_counts() -> None:
    # 5 requests at 30 ms: not judged as a tail; their load (busy 10%) lets 3 go down to 2
    sparse = [reading(t, p99=30.0, requests=5, busy=0.1) for t in range(22)]
    got = run(limits(n=3), sparse)
    assert [s.replicas for _, s in got] == [2]
    assert got[0][1].reason.endswith("too few requests in its window to judge its tail")


def test_a_scale_down_waits_for_a_stream_long_enough_to_pay_for_its_relaunch() -> None:
    # the quiet service of the test above, whose relaunch takes 10 s: with 15 s of its stream
    # left, the GPU it would free serves others 5 s for 10 s unanswered: it stays, and says so
    lim = dataclasses.replace(limits(n=3), relaunch_s=10.0)
    short = [
        dataclasses.replace(reading(t, p99=6.0, busy=0.2), time_left_s=15.0 - t / 10)
        for t in range(22)
    ]
    got = run(lim, short)
    assert [(at, s.replicas) for at, s in got] == [(20, 3)]
    assert got[0][1].reason == (
        "stays at 3 replicas: its stream ends in 13 s, under 2x its relaunch (10 s without an "
        "answer)"
    )
    # with 20 s or more left (2 relaunches), the relaunch pays: one fewer
    long = [dataclasses.replace(r, time_left_s=20.0) for r in short]
    assert [s.replicas for _, s in run(lim, long)] == [2]
    # a relaunch or a stream end not known yet: the rule cannot judge, it goes down
    assert [s.replicas for _, s in run(limits(n=3), short)] == [2]


def test_no_scale_up_whose_relaunch_would_serve_after_the_stream_ends() -> None:
    lim = dataclasses.replace(limits(), relaunch_s=12.0)
    tail = [reading(t, p99=18.2, busy=0.2) for t in range(12)]
    late = [dataclasses.replace(r, time_left_s=12.0) for r in tail]
    got = run(lim, late)
    assert [s.replicas for _, s in got] == [1]
    assert got[0][1].reason == (
        "stays at 1 replica: its stream ends in 12 s, before a relaunch (12 s) would serve: "
        "p99 18.2 ms near ceiling 20 ms"
    )
    early = [dataclasses.replace(r, time_left_s=13.0) for r in tail]
    assert [s.replicas for _, s in run(lim, early)] == [2]


def test_needed_replicas_counts_the_load_a_lagging_service_does_not_serve() -> None:
    assert needed_replicas(reading(0, offered=200, served=100, busy=1.0), 2) == 4.0
    assert needed_replicas(reading(0, offered=0, served=0, busy=0.0), 2) == 0.0
    assert needed_replicas(ServiceReading(0, 0), 2) is None


def test_bad_thresholds_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="margin must be in"):
        ReplicaConfig(near=0.5, margin=0.6)
    with pytest.raises(ValueError, match="down_util < target_util"):
        ReplicaConfig(target_util=0.4, down_util=0.5)
    with pytest.raises(ValueError, match="down_payback must be >= 1"):
        ReplicaConfig(down_payback=0.5)
