"""Simulator tests on small traces whose outcome is computed by hand."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.sim import (
    PolicyViolation,
    SimConfig,
    Simulator,
    StuckSimulation,
    TraceError,
    TraceJob,
    UnplaceableJobs,
    philly_jobs,
    read_trace,
    uniform_pool,
    write_trace,
)
from policies import SCHEDULING_POLICIES, Decision, DecisionKind, Snapshot
from policies.scheduling import SchedulingPolicy

NO_RESTART = SimConfig(restart_s=0.0, sigma=0.0)


def bulk(name: str, t: float, gpus: int, duration: float, **kw: object) -> TraceJob:
    return TraceJob(name=name, submit_time=t, gpus=gpus, duration=duration, **kw)  # type: ignore[arg-type]


def jcts(jobs: list[TraceJob], policy: str, nodes: int = 1, per: int = 4, **cfg: object) -> dict:
    config = SimConfig(**{"restart_s": 0.0, "sigma": 0.0, **cfg})  # type: ignore[arg-type]
    sim = Simulator(
        jobs, SCHEDULING_POLICIES.create(policy), uniform_pool(nodes, per), config=config
    )
    return {r.name: r.jct for r in sim.run().records}


def test_fifo_by_hand() -> None:
    # 4 GPUs. a: 4 GPUs for 120 s from t=0; b: 2 GPUs for 60 s, submitted at 30.
    # Round at 0: a starts, runs to 120. b joins at the round at 60, waits; at 120 a completes
    # and releases; b starts at 120, ends at 180: JCT 150.
    out = jcts([bulk("a", 0, 4, 120), bulk("b", 30, 2, 60)], "gang")
    assert out == {"a": 120.0, "b": 150.0}


def test_restart_delay_is_added_once_per_start() -> None:
    out = jcts([bulk("a", 0, 1, 100)], "gang", restart_s=30.0)
    assert out == {"a": 130.0}


def test_a_job_submitted_between_rounds_starts_at_the_next_round() -> None:
    out = jcts([bulk("a", 53, 1, 100)], "gang")
    assert out == {"a": 107.0}  # placed at t=60, done at 160


def test_tiresias_preempts_and_keeps_progress() -> None:
    # 1 GPU, threshold 1 GPU-minute. a (300 s) starts at 0; b arrives at 10, joins at 60.
    # At 60 a has 60 GPU-s: demoted, b (queue 0) preempts it and runs 60..120 (done 120);
    # a resumes at 120 with 240 s left: done at 360. No work lost (checkpoint 0).
    jobs = [bulk("a", 0, 1, 300), bulk("b", 10, 1, 60)]
    pol = SCHEDULING_POLICIES.create("tiresias", threshold_gpu_s=60.0)
    sim = Simulator(jobs, pol, uniform_pool(1, 1), config=NO_RESTART)
    res = {r.name: r for r in sim.run().records}
    assert res["b"].jct == 110.0
    assert res["a"].jct == 360.0 and res["a"].preemptions == 1


def test_preemption_loses_work_since_checkpoint() -> None:
    # as above, but a checkpoints every 50 s: preempted at 60 it goes back to 50 s of work
    # done (10 s lost), so it needs 250 s more from 120: done at 370.
    jobs = [bulk("a", 0, 1, 300, checkpoint=50.0), bulk("b", 10, 1, 60)]
    pol = SCHEDULING_POLICIES.create("tiresias", threshold_gpu_s=60.0)
    sim = Simulator(jobs, pol, uniform_pool(1, 1), config=NO_RESTART)
    res = {r.name: r for r in sim.run().records}
    assert res["a"].jct == 370.0 and res["a"].lost_gpu_s == 10.0


def test_elastic_job_grows_with_linear_speedup() -> None:
    # an elastic job (1..4 GPUs, 400 s on 1 GPU, linear) alone on 4 GPUs runs on all 4: 100 s.
    jobs = [bulk("a", 0, 1, 400, max_gpus=4)]
    assert jcts(jobs, "shared") == {"a": 100.0}


def test_interactive_starts_at_once_and_records_attainment() -> None:
    jobs = [
        bulk("a", 0, 4, 600),
        TraceJob(name="i", submit_time=30, job_class="interactive", gpus=1, duration=60),
    ]
    pol = SCHEDULING_POLICIES.create("shared")
    res = Simulator(jobs, pol, uniform_pool(1, 4), config=NO_RESTART).run()
    rec = {r.name: r for r in res.records}
    assert rec["i"].wait == 30.0  # started at the round at 60
    assert res.summary()["interactive_attainment"] == 1.0
    assert rec["a"].preemptions == 1


class _Greedy(SchedulingPolicy):
    def decide(self, snapshot: Snapshot) -> list[Decision]:
        return [
            Decision(DecisionKind.START, q.job_id, nodes=("n0",) * q.gpus) for q in snapshot.queue
        ]


def test_a_policy_that_over_allocates_is_caught() -> None:
    jobs = [bulk("a", 0, 4, 10), bulk("b", 0, 4, 10)]  # both on n0's 4 GPUs
    with pytest.raises(PolicyViolation, match="4 GPUs on n0, 0 free"):
        Simulator(jobs, _Greedy(), uniform_pool(2, 4)).run()


def test_trace_round_trip_and_errors(tmp_path: Path) -> None:
    jobs = [bulk("a", 0, 2, 10, deadline=100.0), bulk("b", 5, 1, 20, min_gpus=1, max_gpus=2)]
    write_trace(jobs, tmp_path / "t.csv")
    assert read_trace(tmp_path / "t.csv") == jobs
    (tmp_path / "bad.csv").write_text("name,submit_time,gpus,duration\nx,0,0,5\n")
    with pytest.raises(TraceError, match="gpus must be >= 1"):
        read_trace(tmp_path / "bad.csv")
    with pytest.raises(TraceError, match="not found"):
        read_trace(tmp_path / "missing.csv")


def test_a_gang_larger_than_a_node_spans_nodes_but_not_the_pool() -> None:
    # every placement may span nodes: 16 GPUs run on 2 x 8 (0..100, no restart cost; small
    # starts at the next round, 120, and ends at 220), but never on 1 x 8
    jobs = [bulk("big", 0, 16, 100), bulk("small", 0, 2, 100)]
    assert jcts(jobs, "gang", nodes=2, per=8) == {"big": 100.0, "small": 220.0}
    with pytest.raises(UnplaceableJobs, match=r"big \(needs 16 GPUs; the pool has 8\)") as err:
        Simulator(jobs, SCHEDULING_POLICIES.create("gang"), uniform_pool(1, 8))
    assert err.value.jobs == {"big": "needs 16 GPUs; the pool has 8"}
    elastic = [bulk("e", 0, 16, 100, min_gpus=12)]  # an elastic job: its minimum counts
    with pytest.raises(UnplaceableJobs, match="needs at least 12 GPUs"):
        Simulator(elastic, SCHEDULING_POLICIES.create("shared"), uniform_pool(1, 8))


class _Never(SchedulingPolicy):
    def decide(self, snapshot: Snapshot) -> list[Decision]:
        return [Decision(DecisionKind.WAIT, q.job_id, reason="not today") for q in snapshot.queue]


class _Flap(SchedulingPolicy):
    """Starts every queued job and preempts every running one, every round."""

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        stops = [Decision(DecisionKind.PREEMPT, r.job_id) for r in snapshot.running]
        return stops + [
            Decision(DecisionKind.START, q.job_id, nodes=("n0",) * q.gpus) for q in snapshot.queue
        ]


def test_a_run_without_progress_stops_naming_the_stuck_jobs() -> None:
    # the rounds at 0, 60, ... 240 leave "a" queued with nothing running: 5 idle rounds
    sim = Simulator(
        [bulk("a", 0, 1, 100)], _Never(), uniform_pool(1, 4), config=SimConfig(stuck_rounds=5)
    )
    with pytest.raises(StuckSimulation, match=r"5 rounds \(since t=0 s\): a \(not today\)") as e:
        sim.run()
    assert e.value.jobs == {"a": "not today"} and e.value.rounds == 5
    assert sim.now == 300.0


def test_starting_and_stopping_without_work_is_no_progress() -> None:
    # a start costs 60 s, a full round: the job never gets past its restart
    cfg = SimConfig(restart_s=60.0, stuck_rounds=4)
    sim = Simulator([bulk("a", 0, 1, 100)], _Flap(), uniform_pool(1, 1), config=cfg)
    with pytest.raises(StuckSimulation) as e:
        sim.run()
    assert list(e.value.jobs) == ["a"]
    # with a 30 s restart it works 30 s in every other round: done after 4 starts
    # (rounds 0, 120, 240, 360: 30 s of work each time; completes at 360 + 30 + 10 = 400)
    cfg = SimConfig(restart_s=30.0, stuck_rounds=2)
    res = Simulator([bulk("a", 0, 1, 100)], _Flap(), uniform_pool(1, 1), config=cfg).run()
    assert res.records[0].jct == 400.0 and res.records[0].preemptions == 3


def test_waiting_for_arrivals_is_not_stuck() -> None:
    # nothing queued and nothing running between the two jobs: 1,666 empty rounds, no error
    jobs = [bulk("a", 0, 1, 60), bulk("b", 100_000, 1, 60)]
    assert jcts(jobs, "gang", stuck_rounds=2) == {"a": 60.0, "b": 60.0 + 20.0}


def test_interactive_attainment_counts_the_wait_after_a_preemption() -> None:
    # 1 GPU, no restart cost, rounds every 60 s; Tiresias demotes a job after 60 GPU-s.
    # 0: i (interactive, 300 s, target 30 s) starts at once: first wait 0.
    # 60: i has 60 GPU-s -> demoted; b (submitted 10, queue 0) takes the GPU, i is preempted.
    # 120: b has 60 GPU-s -> demoted behind i; i resumes: its second wait is 120 - 60 = 60 s,
    #      over the 30 s target, so i misses its SLA although its first start was immediate.
    jobs = [
        TraceJob(
            name="i", submit_time=0, job_class="interactive", gpus=1, duration=300, wait_target=30
        ),
        bulk("b", 10, 1, 600),
    ]
    pol = SCHEDULING_POLICIES.create("tiresias", threshold_gpu_s=60.0)
    res = Simulator(jobs, pol, uniform_pool(1, 1), config=NO_RESTART).run()
    rec = {r.name: r for r in res.records}
    assert rec["i"].wait == 0.0 and rec["i"].waits == (0.0, 60.0)
    assert rec["i"].preemptions == 1 and not rec["i"].waits_met
    assert res.summary()["interactive_attainment"] == 0.0


def test_each_snapshot_carries_the_gap_since_the_previous_round() -> None:
    """The "preempted in the previous round" rule compares with the gap as it was: skipped
    idle rounds and float sums of the interval must not switch it off."""
    from policies.scheduling import GangSchedulingPolicy

    seen: list[tuple[float, float]] = []

    class Recording(GangSchedulingPolicy):
        def decide(self, snapshot: Snapshot) -> list[Decision]:
            seen.append((snapshot.now, snapshot.interval_s))
            return super().decide(snapshot)

    jobs = [TraceJob("a", 0.0, duration=0.5), TraceJob("b", 3.0, duration=0.5)]
    config = SimConfig(interval_s=0.2, restart_s=0.0, every_round=False)
    Simulator(jobs, Recording(), [("n0", 1)], config=config).run()
    assert seen[0][1] == 0.2  # the first round: the configured interval
    for (before, _), (now, gap) in itertools.pairwise(seen):
        assert gap == now - before
    assert any(gap > 0.2 + 1e-9 for _, gap in seen[1:])  # an idle stretch was skipped


def test_a_running_jobs_work_at_stake_is_what_a_stop_would_lose() -> None:
    """The policy's lost work (``lost_work``) is the work since the last periodic checkpoint,
    and none for a job that checkpoints continuously, in every round of its run (its view is
    built once per run: a checkpoint time of "when the view was built" would age with it)."""
    from policies.preemption import lost_work
    from policies.scheduling import GangSchedulingPolicy

    seen: dict[str, list[float]] = {"c": [], "p": []}

    class Recording(GangSchedulingPolicy):
        def decide(self, snapshot: Snapshot) -> list[Decision]:
            for r in snapshot.running:
                seen[r.job_id].append(lost_work(r, snapshot.now))
            return super().decide(snapshot)

    jobs = [bulk("c", 0, 1, 300), bulk("p", 0, 1, 300, checkpoint=100.0)]
    Simulator(jobs, Recording(), uniform_pool(1, 2), config=NO_RESTART).run()
    assert seen["c"] and all(x == 0.0 for x in seen["c"])
    # rounds at 60, 120, ..., 240 s of a run that checkpoints every 100 s
    assert seen["p"] == [60.0, 20.0, 80.0, 40.0]


def test_restarts_and_most_gpus_count_the_runs_that_ended_and_went_on() -> None:
    """As live (``_ended_fields``): a preemption ends a run that goes on, so the job's next
    allocation is a restart; ``most_gpus`` is the largest ended run."""
    from policies.scheduling import TiresiasSchedulingPolicy

    seen: list[tuple[float, str, int, int]] = []

    class Recording(TiresiasSchedulingPolicy):
        def decide(self, snapshot: Snapshot) -> list[Decision]:
            for j in (*snapshot.queue, *snapshot.running):
                if j.job_id == "a":
                    seen.append((snapshot.now, type(j).__name__, j.restarts, j.most_gpus))
            return super().decide(snapshot)

    # as test_tiresias_preempts_and_keeps_progress: a runs 0-60, is preempted, resumes at 120
    jobs = [bulk("a", 0, 1, 300), bulk("b", 10, 1, 60)]
    pol = Recording(threshold_gpu_s=60.0)
    Simulator(jobs, pol, uniform_pool(1, 1), config=NO_RESTART).run()
    assert seen[:4] == [
        (0.0, "QueuedJob", 0, 0),
        (60.0, "RunningJob", 0, 0),
        (120.0, "QueuedJob", 1, 1),  # preempted at 60: its next run is a restart
        (180.0, "RunningJob", 1, 1),
    ]


class _Recounted(Simulator):
    """A simulator that checks, every round, the per-team figures it keeps as jobs come and
    go against a recount over every queued and running job (what it summed before)."""

    def _round(self) -> None:
        demand: dict[str, int] = {}
        for job in self.queued.values():
            demand[job.team] = demand.get(job.team, 0) + job.lo
        held: dict[str, int] = {}
        for job in self.running.values():
            gpus = len(job.nodes)
            demand[job.team] = demand.get(job.team, 0) + max(gpus, job.lo)
            held[job.team] = held.get(job.team, 0) + gpus
        assert {t: d for t, (d, _) in self._demand.items()} == demand
        assert {t: g for t, g in self._team_gpus.items() if t in held} == held
        assert all(g == 0 for t, g in self._team_gpus.items() if t not in held)
        super()._round()


@pytest.mark.parametrize("policy", ["tiresias", "shared", "pollux"])
def test_the_per_team_demand_and_gpus_kept_are_a_recount(policy: str) -> None:
    # Philly jobs of 4 teams on 64 GPUs, half checkpointing: queueing, preemptions (shared),
    # resizes (shared, pollux) and completions
    trace = [
        replace(j, submit_time=j.submit_time / 100, team=f"t{i % 4}", checkpoint=1800.0 * (i % 2))
        for i, j in enumerate(philly_jobs(200, seed=1))
    ]
    sim = _Recounted(trace, SCHEDULING_POLICIES.create(policy), uniform_pool(8, 8))
    result = sim.run()
    assert all(r.completed_at is not None for r in result.records)
    assert not sim._demand and not any(sim._team_gpus.values())
