"""The twin tests: the first act of the trace of ``tests/e2e/twin.py`` live and simulated makes
the same decisions (the whole trace is the twin benchmark's, ``bench/twin/run.py``).

The live run (real Ray gangs, Redis, torch steps under the ``shared`` policy) and the simulator
(the same policy object, fed the live run's measured start-ups and run lengths) must start the
same jobs in the same order, preempt the same victims and resize the same jobs: the simulated
policy is the one that runs. Two decisions less than ``TIE_S`` apart live may come in either
order (their order is the jitter of measured times, not a decision), and when the exact replay
differs, replays with start-ups jittered by up to a second are tried (see ``twin_of``). About
two minutes on a loaded 2-core machine (139 s): the first act is 35 s of submissions, then its
jobs' runs; the whole trace took about three and a half. The second test does the same with
``KINDS_ACT`` on a pool of two GPU kinds (an L4 node added beside the virtual slots): the
policy's kind choices, jobs that require or exclude a kind, one waiting for its kind while the
other's GPUs are free, an interactive start making room on its kind, live and simulated alike.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Orch, kind_node
from tests.e2e.twin import FIRST_ACT, KINDS_ACT, TIE_S, run_twin


def test_live_and_simulated_decisions_agree(shared: Orch) -> None:
    twin = run_twin(shared, FIRST_ACT)
    assert twin.disagreements(TIE_S) == [], twin.report()
    # what the trace is there to show happened: both interactive starts that needed room
    # took their own team's bulk job (v1 for i1, n1 for i2), and every job ran
    victims = [job for _, what, job in twin.live if what == "preempt"]
    assert victims[:2] == ["v1", "n1"], twin.report()
    assert {job for _, what, job in twin.live if what == "start"} == set(twin.facts)


def test_live_and_simulated_decisions_agree_on_a_pool_of_two_kinds(
    ray_cluster: Any, shared: Orch
) -> None:
    # 2 GPUs of kind L4 beside the cluster's virtual slots, declared as an operator does
    with kind_node(ray_cluster, shared, "L4", gpus=2, speed_pct=40):
        twin = run_twin(shared, KINDS_ACT)
    assert twin.disagreements(TIE_S) == [], twin.report()
    assert {kind for kind, _ in twin.pool.kinds.values()} == {"virtual", "L4"}, twin.pool
    # the kinds each job's runs were measured on live (its per-kind profile)
    ran_on = {name: set(shared.store.scaling.kinds(i)[0]) for name, i in twin.ids.items()}
    assert ran_on == {
        "v1": {"virtual"},
        "n1": {"L4"},
        "s1": {"virtual"},
        "s2": {"virtual"},
        "n2": {"L4"},
        "i1": {"virtual"},
    }, ran_on
    # the interactive start took vision's own bulk job on its kind, not n1 on the L4s
    assert [job for _, what, job in twin.live if what == "preempt"] == ["v1"], twin.report()
    starts = {job: t for t, what, job in twin.live if what == "start"}
    # n2 waited for an L4 while s2 took a virtual GPU freed before it (s1's)
    assert starts["s2"] + TIE_S < starts["n2"], twin.report()
