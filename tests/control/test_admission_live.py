"""Admission with a plan, live (issue 26): a deadline job is judged from its submission on the
work its spec and profile give, as the simulator judges it, and ``--strict`` refuses what the
plan declines."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.errors import SpecError
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.sim import SimConfig, Simulator, TraceJob, uniform_pool
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore
from policies import SCHEDULING_POLICIES
from policies.scheduling.shared import SharedSchedulingPolicy

# what `orch tune` keeps under a job's name: 8 samples/s on its 4 GPUs, so 8,000 samples are
# 1,000 s of work
PROFILE = {"chosen": {"samples_per_s": 8.0, "by_gpus": [{"gpus": 4, "samples_per_s": 8.0}]}}


def _spec(name: str, deadline_s: float) -> JobSpec:
    return parse_spec(
        {
            "name": name,
            "team": "a",
            "class": "bulk",
            "workload": "mlp",
            "resources": {"gpus": 4},
            "sla": {"throughput": {"work_samples": 8000, "deadline_s": deadline_s}},
            "run": {"micro_batch": 8},
        }
    )


@pytest.fixture
def loop(store: JobStore, tmp_path: Path) -> Iterator[ControlLoop]:
    """A loop over one 4-GPU node, weighing a restart as the simulator does (30 s)."""
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    live = ControlLoop(
        settings, store, LocalRuntime([("n0", 4)]), make_policy("shared"), restart_cost_s=30.0
    )
    live.lease.acquire(store.namespace)
    try:
        yield live
    finally:
        live.release(grace_s=5)


def _simulated() -> dict[str, Any]:
    """The simulator's verdicts at t=0 for the same jobs: 1,000 s each on 4 GPUs."""
    trace = [
        TraceJob("later", 0.0, team="a", gpus=4, duration=1000.0, deadline=2000.0),
        TraceJob("soon", 0.0, team="a", gpus=4, duration=1000.0, deadline=1500.0),
    ]
    sim = Simulator(
        trace,
        SCHEDULING_POLICIES.create("shared"),
        uniform_pool(1, 4),
        config=SimConfig(interval_s=60.0, restart_s=30.0, plan_admission=True),
    )
    sim.run()
    return {v.job_id: v for t, v in sim.admissions if t == 0.0}


def test_a_never_run_deadline_job_is_judged_as_the_simulator_judges_it(
    store: JobStore, loop: ControlLoop
) -> None:
    # 'soon' (due in 1,500 s) is planned first: 30 + 1.1 x 1,000 = 1,130 s; 'later' (2,000 s)
    # could start at 1,130 only, done at 2,260: declined
    for name in ("soon", "later"):
        store.profiles.save(name, PROFILE)
    due = {"later": 2000, "soon": 1500}
    ids = {name: store.submit(_spec(name, s)).id for name, s in due.items()}
    assert store.get(ids["soon"]).fields["remaining_s"] == "1000.0"  # recorded at submission
    snapshot = loop.observe()
    assert {q.remaining_work for q in snapshot.queue} == {1000.0}  # never run, work known
    loop.admit(snapshot)
    simulated = _simulated()
    for name, job_id in ids.items():
        live, sim = loop.admission.verdicts[job_id], simulated[name]
        assert (live.admitted, live.gpus) == (sim.admitted, sim.gpus), name
        assert live.start - snapshot.now == pytest.approx(sim.start)
        assert live.earliest - snapshot.now == pytest.approx(sim.earliest)
    assert simulated["soon"].admitted and not simulated["later"].admitted
    (event,) = [e for e in store.events(ids["later"]) if e["event"] == "admission"]
    assert event["message"].startswith("declined: runs best effort")


def test_without_a_profile_the_work_stays_unknown(store: JobStore) -> None:
    job_id = store.submit(_spec("untuned", 1500)).id
    assert store.get(job_id).fields["remaining_s"] == ""


def test_strict_refuses_what_the_plan_declines_and_writes_nothing(
    store: JobStore, loop: ControlLoop
) -> None:
    for name in ("soon", "later", "x", "y"):
        store.profiles.save(name, PROFILE)
    who = Principal.local("alice")
    operations.submit(store, who, [_spec("soon", 1500)], strict=True)  # the plan admits it
    snapshot = loop.observe()
    loop.admit(snapshot)
    loop.publish(snapshot)  # the plan, 'soon' in place: no GPU free for 1,130 s
    # on all its 4 GPUs at its tuned rate it could make 2,000 s (the old check passes); beside
    # 'soon' it is done at 2,260 s at the earliest
    (check,) = operations.deadline_checks(store, [_spec("later", 2000)])
    assert check.ok is True
    with pytest.raises(SpecError) as refused:
        operations.submit(store, who, [_spec("later", 2000)], strict=True)
    (problem,) = refused.value.problems
    assert "'later': sla.throughput.deadline_s 2000 s cannot be met" in problem
    earliest = re.search(r"earliest it could be done is ([\d,]+) s after submission", problem)
    assert earliest is not None
    assert float(earliest[1].replace(",", "")) == pytest.approx(2260, abs=5)
    assert len(store.list()) == 1  # nothing of 'later' written
    # without --strict it is queued, and the scheduler's verdict says why it runs best effort
    job_id = operations.submit(store, who, [_spec("later", 2000)]).ids[0]
    loop.admit(loop.observe())
    assert not loop.admission.verdicts[job_id].admitted
    # two jobs of one batch are judged together, EDF: the second no longer fits beside the first
    problems = operations.plan_declines(store, [_spec("x", 2500), _spec("y", 2400)])
    assert len(problems) == 1 and "'x'" in problems[0]


def test_a_policy_that_binds_the_verdict_gets_the_declined_jobs_in_its_snapshot(
    store: JobStore, tmp_path: Path
) -> None:
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    policy = SharedSchedulingPolicy(plan=True)
    live = ControlLoop(settings, store, LocalRuntime([("n0", 4)]), policy, restart_cost_s=30.0)
    live.lease.acquire(store.namespace)
    try:
        for name in ("soon", "later"):
            store.profiles.save(name, PROFILE)
        store.submit(_spec("soon", 1500))
        later = store.submit(_spec("later", 2000)).id
        assert live.admit(live.observe()).declined == {later}  # 'later' runs best effort
    finally:
        live.release(grace_s=5)
