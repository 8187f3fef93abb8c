"""The admission desk (issue 26): a plan's verdict for each deadline job, live and simulated.

Once per round, on the round's snapshot, the desk judges the queued deadline jobs it has not
judged yet (at their first sight: their submission, a round late at most), and every queued
one again when the pool's capacity changes, on one plan
(:func:`policies.scheduling.plan.plan_round`). It returns the verdicts that are new or changed:
the live loop writes each as an ``admission`` event (the job's message too: ``orch show``, the
API and the dashboard show it), the simulator keeps them (:attr:`Simulator.admissions`). Both
call this class with the snapshot they decide on, so a trace gives the same verdicts in both.
"""

from __future__ import annotations

from policies import Snapshot
from policies.scheduling.plan import Verdict, plan_round


class AdmissionDesk:
    """Verdicts for deadline jobs, each once, again when capacity changes.

    Args:
        margin_frac: the margin a plan keeps, a fraction of the run time (``shared``'s
            ``deadline_margin``).
    """

    def __init__(self, margin_frac: float = 0.1) -> None:
        self.margin_frac = margin_frac
        self.verdicts: dict[str, Verdict] = {}
        self._capacity: int | None = None

    def round(self, snapshot: Snapshot) -> list[Verdict]:
        """The new or changed verdicts of this round's queued deadline jobs."""
        queued = {q.job_id for q in snapshot.queue if q.deadline is not None and not q.interactive}
        recheck = self._capacity is not None and snapshot.total_gpus != self._capacity
        self._capacity = snapshot.total_gpus
        new = queued if recheck else {j for j in queued if j not in self.verdicts}
        if len(self.verdicts) > 2 * len(queued) + 1000:  # forget jobs that left the queue
            live = queued | {r.job_id for r in snapshot.running}
            self.verdicts = {j: v for j, v in self.verdicts.items() if j in live}
        if not new:
            return []
        out = []
        for v in plan_round(snapshot, new, self.margin_frac):
            old = self.verdicts.get(v.job_id)
            self.verdicts[v.job_id] = v
            if old is None or old.admitted != v.admitted:
                out.append(v)
        return out
