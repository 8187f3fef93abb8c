"""A job that runs for a set wall-clock time whatever its GPU count.

What a live job with ``run.duration_s`` does: it runs that long in total, on 1 GPU or on 4, over
all its runs: the run time so far is in the checkpoint a run writes when it is stopped
(preempted, resized), so the next run trains only for what is left. Progress here is never lost
on a stop for the same reason, whatever the trace's checkpoint interval, which then only shapes
what the policy is shown (when the job last checkpointed, as live with ``checkpoint_every``).
The policy is still shown a speedup curve (``reported``, linear by default: what the live loop
assumes of a job whose runs measured nothing yet), so it decides as it would live; only the
progress ignores the GPUs, their kind too (a virtual slot declared an L4 runs a live job's steps
as fast as any other on a CPU machine; the policy is still shown the kind's speed). Used to
replay a live run in the simulator (the twin tests), where decisions must match the live ones.
"""

from __future__ import annotations

from orchestrator.sim.models import ParametricJobModel, amdahl

__all__ = ["WallClockJobModel"]


class WallClockJobModel(ParametricJobModel):
    """``duration`` seconds of progress on any placement (see the module doc).

    Args:
        duration: seconds the job runs in total, over all its runs.
        reported: the speedup curve shown to the policy on 1..n GPUs (default linear).
        starts: each run's start-up in order (placement to first step, as measured live;
            ``None``: not measured), in place of the simulator's one restart cost.
    """

    def __init__(
        self,
        duration: float,
        reported: tuple[float, ...] = (),
        starts: tuple[float | None, ...] = (),
    ) -> None:
        super().__init__(duration, 1, sigma=1.0)  # Amdahl with a serial fraction of 1: s(n) = 1
        self.reported = reported
        self._starts = list(starts)

    kind_bound = False

    def restore(self, state: tuple[float, int]) -> None:
        """See :meth:`JobModel.restore`: nothing to go back to, the stop checkpoint kept the
        run time (see the module doc)."""

    def start_s(self, default: float) -> float:
        """The start-up of the next run: the next measured one, else ``default``."""
        measured = self._starts.pop(0) if self._starts else None
        return default if measured is None else measured

    def speedup(self, max_gpus: int) -> tuple[float, ...]:
        """See :meth:`JobModel.speedup`: the reported curve, not the progress rate."""
        if self.reported:
            base = self.reported[0]
            return tuple(v / base for v in self.reported[:max_gpus])
        return tuple(amdahl(n, 0.0) for n in range(1, max_gpus + 1))
