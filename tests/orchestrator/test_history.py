"""One job history (issue 25 part 2): one record, one rule, the same names everywhere.

The rule (``policies.history.advance``) on hand-built run ends; the store's encoding of the
record, through a real Redis; the snapshot's job types and the loop's facts carrying every field
of the record under its name; and the simulator advancing it by the same rule as the live loop
(its views' history equal to the rule applied to the runs it saw end).
"""

from __future__ import annotations

import dataclasses

import redis

from orchestrator.control.snapshot import RunFacts, job_facts, running_view
from orchestrator.sim.engine import Simulator, uniform_pool
from orchestrator.store.history import STORED, history_fields, read_history
from policies import QueuedJob, RunningJob, Snapshot
from policies.decisions import Decision
from policies.history import HISTORY_FIELDS, JobHistory, RunEnd, advance
from policies.scheduling import TiresiasSchedulingPolicy
from tests.sim.test_engine import NO_RESTART, bulk


def end(**kw: object) -> RunEnd:
    base: dict[str, object] = {"at": 100.0, "gpus": 2, "held_s": 40.0, "trained": True}
    return RunEnd(**{**base, **kw})  # type: ignore[arg-type]


def test_a_preemption_adds_service_a_restart_and_its_time() -> None:
    h = advance(
        JobHistory(attained_service=10.0, remaining_work=500.0),
        end(goes_on=True, requeued=True, preempted=True, remaining_work=120.0),
    )
    assert h == JobHistory(
        attained_service=90.0,  # 10 + 40 s on 2 GPUs
        remaining_work=120.0,
        preempted_at=100.0,
        restarts=1,
        most_gpus=2,
    )


def test_a_resize_restarts_but_keeps_the_queue_facts() -> None:
    before = JobHistory(remaining_work=500.0, preempted_at=7.0, most_gpus=4)
    h = advance(before, end(goes_on=True, remaining_work=1.0))
    assert (h.restarts, h.most_gpus) == (1, 4)  # 2 GPUs < the 4 it had
    assert (h.remaining_work, h.preempted_at) == (500.0, 7.0)  # not requeued: unchanged


def test_a_requeue_that_is_not_a_preemption_clears_its_time_and_keeps_the_estimate() -> None:
    h = advance(JobHistory(preempted_at=7.0, remaining_work=9.0), end(goes_on=True, requeued=True))
    assert (h.preempted_at, h.remaining_work) == (None, 9.0)


def test_a_tuning_run_counts_only_its_gpu_time() -> None:
    h = advance(JobHistory(), end(trained=False, goes_on=True, requeued=True))
    assert h == JobHistory(attained_service=80.0)


def test_retunes_and_losses_are_counted_and_time_never_negative() -> None:
    h = advance(JobHistory(), end(held_s=-5.0, requeued=True, retune=True, lost=True))
    assert (h.attained_service, h.retunes, h.losses) == (0.0, 1, 1)


def test_the_store_encoding_round_trips_through_redis(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Written as the loop writes it, read back as the snapshot and the API read it."""
    key = f"{namespace}:history"
    h = JobHistory(attained_service=12.5, remaining_work=None, preempted_at=3.0, restarts=2)
    try:
        redis_client.hset(key, mapping={k: str(v) for k, v in history_fields(h).items()})
        assert read_history(redis_client.hgetall(key)) == h
        changed = history_fields(dataclasses.replace(h, restarts=3), h)
        assert changed == {"restarts": 3}  # only what changed is written
    finally:
        redis_client.delete(key)


def test_every_field_has_its_stored_name_and_reads_back_as_default_when_absent() -> None:
    assert tuple(STORED) == HISTORY_FIELDS
    assert read_history({}) == JobHistory()
    assert read_history({"restarts": "oops", "remaining_s": ""}) == JobHistory()


def test_the_snapshot_types_carry_the_record_under_its_names() -> None:
    """A new fact added to the record reaches the policies with no other change."""
    for cls in (QueuedJob, RunningJob):
        names = {f.name for f in dataclasses.fields(cls)}
        assert set(HISTORY_FIELDS) <= names, cls
    h = JobHistory(attained_service=5.0, remaining_work=6.0, preempted_at=7.0, restarts=8)
    h = dataclasses.replace(h, most_gpus=9, retunes=1, losses=2)
    facts = job_facts("a", "bulk", "t", 2, 1, 0.0, history=h)
    views = (facts, running_view(facts, RunFacts(("n0",), started_at=1.0)))
    for view in views:
        assert {n: getattr(view, n) for n in HISTORY_FIELDS} == dataclasses.asdict(h)


def test_the_simulator_advances_the_history_by_the_live_rule() -> None:
    """A job preempted once: the history its queued view shows is the rule applied to the
    run that ended (as the live loop writes it)."""
    seen: dict[float, JobHistory] = {}

    class Recording(TiresiasSchedulingPolicy):
        def decide(self, snapshot: Snapshot) -> list[Decision]:
            for j in snapshot.queue:
                if j.job_id == "a":
                    seen[snapshot.now] = JobHistory(**{n: getattr(j, n) for n in HISTORY_FIELDS})
            return super().decide(snapshot)

    # a runs 0-60 on 1 GPU, is preempted by b at 60, waits, resumes at 120
    jobs = [bulk("a", 0, 1, 300), bulk("b", 10, 1, 60)]
    Simulator(jobs, Recording(threshold_gpu_s=60.0), uniform_pool(1, 1), config=NO_RESTART).run()
    first = end(at=60.0, gpus=1, held_s=60.0, goes_on=True, requeued=True, preempted=True)
    expected = advance(JobHistory(), first)
    got = seen[120.0]
    assert got.remaining_work is not None  # the simulator's exact progress report
    assert dataclasses.replace(got, remaining_work=None) == expected
