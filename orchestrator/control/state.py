"""What the control loop keeps between rounds, shared by its collaborators.

:class:`LoopState` is the one object the loop (:mod:`~orchestrator.control.loop`), its gang
actions (:mod:`~orchestrator.control.gangs`) and its reaper (:mod:`~orchestrator.control.reap`)
all read and write: the runs the loop launched, the views and facts it read of their jobs, and
the pool's nodes as the last round saw them. It holds data only; who changes what is said on
each field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.control.ledger import Run
from orchestrator.pool import NodeInfo
from policies import QueuedJob

__all__ = ["LoopState"]


@dataclass
class LoopState:
    """The loop's memory between rounds (see the module doc).

    Attributes:
        runs: the runs the loop launched and has not yet seen end, by job id (added by the
            gang actions at launch, removed by the reaper when a run ends).
        waits: the reason each queued job was last told it waits (the gang actions tell it
            once per distinct reason).
        queued: queued jobs' snapshot views, read once per stay in the queue (by the loop's
            observe phase; forgotten when a job is placed or its run ends).
        facts: running jobs' facts, read when their run launched (by the gang actions; the
            reaper updates a job's speedup curve and forgets them when its run ends).
        nodes: the pool's nodes as the last round's observe phase read them from the runtime.
    """

    runs: dict[str, Run] = field(default_factory=dict)
    waits: dict[str, str] = field(default_factory=dict)
    queued: dict[str, QueuedJob] = field(default_factory=dict)
    facts: dict[str, QueuedJob] = field(default_factory=dict)
    nodes: list[NodeInfo] = field(default_factory=list)

    def forget(self, job_id: str) -> None:
        """Drop what was read of a job whose run ended (its next run reads it afresh)."""
        self.queued.pop(job_id, None)
        self.facts.pop(job_id, None)
