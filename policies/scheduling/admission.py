"""The admission desk (issue 26): a plan's verdict for each deadline job, live and simulated.

Once per round, on the round's snapshot, the desk judges the queued deadline jobs it has not
judged yet (at their first sight: their submission, a round late at most), and every queued
one again when the pool's capacity changes, on one plan
(:func:`policies.scheduling.plan.plan_round`). It returns the verdicts that are new or changed:
the live loop writes each as an ``admission`` event (the job's message too: ``orch show``, the
API and the dashboard show it), the simulator keeps them (:attr:`Simulator.admissions`). Both
call this class with the snapshot they decide on, so a trace gives the same verdicts in both.

The desk's state is what it has judged (the same snapshots in the same order give the same
verdicts), so it lives with the world, not in a policy: :meth:`AdmissionDesk.bind` puts the
declined jobs in the snapshot (``Snapshot.declined``), and a policy that binds the verdict
(``shared(plan=True)``, ``binds_admission``) runs them best effort, outside its deadline class.
"""

from __future__ import annotations

from dataclasses import replace

from policies.scheduling.plan import Verdict, plan_round, plan_round_binding
from policies.snapshot import Snapshot


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
        self._declined: frozenset[str] | None = None

    def round(self, snapshot: Snapshot, rejudge: bool = False) -> list[Verdict]:
        """The new or changed verdicts of this round's queued deadline jobs (``rejudge``: the
        declined ones judged again too, every round)."""
        queued = {q.job_id for q in snapshot.queue if q.deadline is not None and not q.interactive}
        recheck = self._capacity is not None and snapshot.total_gpus != self._capacity
        self._capacity = snapshot.total_gpus
        verdicts = self.verdicts
        if recheck:
            new = queued
        elif rejudge:
            new = {j for j in queued if (v := verdicts.get(j)) is None or not v.admitted}
        else:
            new = {j for j in queued if j not in verdicts}
        if len(self.verdicts) > 2 * len(queued) + 1000:  # forget jobs that left the queue
            live = queued | {r.job_id for r in snapshot.running}
            self.verdicts = {j: v for j, v in self.verdicts.items() if j in live}
            self._declined = None
        if not new:
            return []
        out = []
        judge = plan_round_binding if rejudge else plan_round
        for v in judge(snapshot, new, self.margin_frac):
            old = self.verdicts.get(v.job_id)
            self.verdicts[v.job_id] = v
            if old is None or old.admitted != v.admitted:
                out.append(v)
        return out

    def bind(self, snapshot: Snapshot) -> tuple[Snapshot, list[Verdict]]:
        """:meth:`round` with the declined jobs judged again (a binding verdict must let a
        job in once the plan fits it: judged once, on the mixed smoke benchmark, deadlines met
        fell further), and ``snapshot`` with the declined jobs of all verdicts so far as its
        ``declined`` (jobs gone meanwhile included: a policy looks up its own)."""
        changed = self.round(snapshot, rejudge=True)
        if changed or self._declined is None:
            self._declined = frozenset(j for j, v in self.verdicts.items() if not v.admitted)
        if not self._declined:
            return snapshot, changed
        return replace(snapshot, declined=self._declined), changed
