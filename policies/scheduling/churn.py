"""``shared``'s rules against bulk-for-bulk churn (issue 28): the hold after a preemption, and
no preemption whose GPUs nobody takes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from policies.snapshot import Snapshot


def late_window(snapshot: Snapshot) -> float:
    """Seconds after its preemption a bulk job is held or late (``shared``, issue 28): the
    longer of the round's interval and the restart cost; 0 when the interval is unknown."""
    interval = snapshot.interval_s
    return max(interval, snapshot.restart_cost_s) if interval > 0.0 else 0.0


def unused_preemptions(
    preempted: Sequence[str], snapshot: Snapshot, free: dict[str, int]
) -> set[str]:
    """The ``preempted`` jobs whose GPUs nobody took this round, undone (issue 28).

    A victim whose GPUs, on every node it holds in ``snapshot``, are still free in ``free``
    keeps them (``free`` is updated): a preemption that frees GPUs nobody uses only throws the
    victim's work away. The last victim is looked at first (the first ones were needed most).
    """
    nodes_of = {r.job_id: r.nodes for r in snapshot.running}
    undone: set[str] = set()
    for job_id in reversed(preempted):
        nodes = nodes_of[job_id]
        if nodes and free.get(nodes[-1], 0) <= 0:
            continue  # the usual case, decided without counting: a GPU of it was taken
        need = Counter(nodes)
        if all(free.get(n, 0) >= c for n, c in need.items()):
            for n, c in need.items():
                free[n] -= c
            undone.add(job_id)
    return undone
