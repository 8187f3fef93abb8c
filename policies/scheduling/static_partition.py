"""Static partition baseline: GPUs reserved for interactive work, bulk FIFO on the rest."""

from __future__ import annotations

from collections import Counter

from policies.decisions import Decision, DecisionKind
from policies.eligibility import place, why_barred
from policies.placement import PLACEMENTS, Placement
from policies.scheduling.base import SCHEDULING_POLICIES, SchedulingPolicy
from policies.scheduling.in_order import place_in_order
from policies.snapshot import Snapshot


@SCHEDULING_POLICIES.register("static-partition")
class StaticPartitionSchedulingPolicy(SchedulingPolicy):
    """Two fixed partitions: ``interactive_fraction`` of the GPUs for interactive jobs only.

    The common way to protect interactive latency without preemption: a reserved partition
    (a Slurm partition, a dedicated node pool) that bulk jobs never use, idle or not. The
    reserved GPU slots are taken node by node in the pool's order (a node may be split), so the
    split is the same every round. Interactive jobs start in start-deadline order wherever they
    fit in their partition (a session that does not fit yet does not hold back smaller ones);
    bulk jobs start in strict submission order on the rest (the first that does not fit blocks
    the ones behind it, as the ``fifo`` baseline). A job larger than its whole partition waits
    with that reason and blocks nothing. Nothing is preempted or resized; jobs run at their
    requested ``gpus``.

    Args:
        interactive_fraction: share of the pool's GPUs reserved for interactive jobs, 0..1
            (rounded to whole GPUs).
        placement: a placement policy, or its registered name.
    """

    def __init__(
        self, interactive_fraction: float = 0.1, placement: Placement | str = "pack"
    ) -> None:
        if not 0.0 <= interactive_fraction <= 1.0:
            raise ValueError(f"interactive_fraction must be in 0..1, got {interactive_fraction}")
        self.fraction = interactive_fraction
        self.placement = PLACEMENTS.create(placement) if isinstance(placement, str) else placement

    def partitions(self, snapshot: Snapshot) -> tuple[dict[str, int], dict[str, int]]:
        """Free GPUs per node for (interactive, bulk) jobs this round."""
        left = round(self.fraction * snapshot.total_gpus)
        inter_held: Counter[str] = Counter()
        bulk_held: Counter[str] = Counter()
        for r in snapshot.running:
            (inter_held if r.interactive else bulk_held).update(r.nodes)
        free_i: dict[str, int] = {}
        free_b: dict[str, int] = {}
        for n in snapshot.nodes:
            reserved = min(n.total_gpus, left)
            left -= reserved
            free = max(0, n.free_gpus)
            free_i[n.node_id] = max(0, min(free, reserved - inter_held[n.node_id]))
            rest = n.total_gpus - reserved - bulk_held[n.node_id]
            free_b[n.node_id] = max(0, min(free, rest))
        return free_i, free_b

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """See :meth:`SchedulingPolicy.decide`."""
        free_i, free_b = self.partitions(snapshot)
        size_i = round(self.fraction * snapshot.total_gpus)
        size_b = snapshot.total_gpus - size_i
        decisions: list[Decision] = []
        inter = sorted(
            (q for q in snapshot.queue if q.interactive),
            key=lambda q: (q.submitted_at + q.wait_target_s, q.seq, q.job_id),
        )
        for q in inter:
            fits = q.gpus <= size_i
            nodes = place(self.placement, q.gpus, free_i, snapshot, q) if fits else None
            if nodes is None:
                why = "interactive partition full" if fits else "partition too small"
                why = f"{why} ({size_i} GPUs)"
                note = why_barred(snapshot, q)
                decisions.append(
                    Decision(DecisionKind.WAIT, q.job_id, reason=f"{why}; {note}" if note else why)
                )
                continue
            for n in nodes:
                free_i[n] -= 1
            decisions.append(self._start(q.job_id, nodes, "interactive partition"))
        bulk = sorted(
            (q for q in snapshot.queue if not q.interactive), key=lambda q: (q.seq, q.job_id)
        )
        decisions += place_in_order(
            bulk,
            free_b,
            size_b,
            self.placement,
            snapshot=snapshot,
            where="the bulk partition",
            label="bulk partition",
        )
        return decisions

    def _start(self, job_id: str, nodes: tuple[str, ...], where: str) -> Decision:
        return Decision(
            DecisionKind.START,
            job_id,
            nodes=nodes,
            strategy=self.placement.ray_strategy,
            reason=f"{where}, {len(set(nodes))} node(s)",
        )
