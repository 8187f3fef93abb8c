"""The twin test: the first act of the trace of ``tests/e2e/twin.py`` live and simulated makes
the same decisions (the whole trace is the twin benchmark's, ``bench/twin/run.py``).

The live run (real Ray gangs, Redis, torch steps under the ``shared`` policy) and the simulator
(the same policy object, fed the live run's measured start-ups and run lengths) must start the
same jobs in the same order, preempt the same victims and resize the same jobs: the simulated
policy is the one that runs. Two decisions less than ``TIE_S`` apart live may come in either
order (their order is the jitter of measured times, not a decision), and when the exact replay
differs, replays with start-ups jittered by up to a second are tried (see ``twin_of``). About
two minutes on a loaded 2-core machine (139 s): the first act is 35 s of submissions, then its
jobs' runs; the whole trace took about three and a half.
"""

from __future__ import annotations

from tests.e2e.conftest import Orch
from tests.e2e.twin import FIRST_ACT, TIE_S, run_twin


def test_live_and_simulated_decisions_agree(shared: Orch) -> None:
    twin = run_twin(shared, FIRST_ACT)
    assert twin.disagreements(TIE_S) == [], twin.report()
    # what the trace is there to show happened: both interactive starts that needed room
    # took their own team's bulk job (v1 for i1, n1 for i2), and every job ran
    victims = [job for _, what, job in twin.live if what == "preempt"]
    assert victims[:2] == ["v1", "n1"], twin.report()
    assert {job for _, what, job in twin.live if what == "start"} == set(twin.facts)
