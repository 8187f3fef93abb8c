"""What the control loop asks of a runtime, and what a runtime reports back.

A runtime runs gangs: :meth:`Runtime.launch` starts one for a job on the nodes a decision
named, :meth:`Runtime.stop` asks it to checkpoint and stop, :meth:`Runtime.resize` adds or
drains the replicas of a service with an endpoint while the others serve (:func:`in_place`),
and :meth:`Runtime.poll` hands back what happened since the last poll as :class:`RunEvent`
values. A runtime never writes job state: the control loop turns its events into store
transitions (one writer per fact).

Two implementations: :class:`~orchestrator.runtime.ray_gang.RayRuntime` (a placement group and
one worker actor per GPU, the real thing) and :class:`~orchestrator.runtime.local.LocalRuntime`
(runs that exist only in this process, driven by a test).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from orchestrator.pool import NodeInfo
from orchestrator.spec import JobSpec
from orchestrator.storage import StorageLocation

__all__ = [
    "EventKind",
    "Launch",
    "Outcome",
    "OutcomeKind",
    "RunEvent",
    "RunKind",
    "Runtime",
    "in_place",
]

RunKind = Literal["run", "tune"]


class OutcomeKind(enum.Enum):
    """How a run ended."""

    FINISHED = "finished"  # the harness completed its steps (a tuning run: it has an answer)
    STOPPED = "stopped"  # stopped on request; a checkpoint was written
    FAILED = "failed"  # the workload or harness raised: do not retry
    LOST = "lost"  # a worker or node died, or placement timed out: retry from checkpoint


@dataclass(frozen=True)
class Outcome:
    """How a run ended, with the harness result (or the tuner's answer) when there is one."""

    kind: OutcomeKind
    message: str = ""
    result: dict[str, Any] = field(default_factory=dict)


class EventKind(enum.Enum):
    """What a runtime reports about a run."""

    STARTED = "started"  # its workers exist (the job is running, or tuning)
    ENDED = "ended"  # it is over and its GPUs are free again; ``outcome`` says how
    # a resize in place is done: the run holds ``nodes`` now (a removed replica's GPU is free
    # again, an added replica's workers exist)
    RESIZED = "resized"
    # a service's replica failed or was lost and another was started on its GPU, the others
    # serving throughout (``outcome`` says how the replica ended; ``nodes`` its GPU's node)
    REPLACED = "replaced"


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened to a job's run, in the order it happened.

    Attributes:
        job_id: the job.
        kind: started, resized, replaced (a service's replica) or ended.
        at: wall-clock time of the event.
        outcome: how the run ended (``ENDED``), or how a replaced replica did (``REPLACED``).
        launch: the launch this event belongs to (``Launch.serial``), so an event of an
            earlier run of the same job is never taken for the current one.
        nodes: the node of each GPU the run holds now (``RESIZED``), or the replaced
            replica's (``REPLACED``).
    """

    job_id: str
    kind: EventKind
    at: float
    launch: int
    outcome: Outcome | None = None
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launch:
    """Everything a runtime needs to start one gang.

    Attributes:
        job_id: the job.
        kind: ``run`` (the job's training or inference) or ``tune`` (profiling trials).
        spec: the job as it runs (tuned settings, sized to ``len(nodes)`` GPUs).
        nodes: the node id of each GPU, from the policy's decision.
        strategy: the Ray placement-group strategy the placement policy asks for.
        serial: increases with every launch of the loop (see :attr:`RunEvent.launch`).
        checkpoint_dir: where the job's checkpoints live (kept across runs): a path or an
            fsspec URL, given to the workers as a string.
        virtual: the GPUs are CPU-backed slots (one torch thread per worker then).
        generation: the generation of the lease the loop held when it launched this (a run
            whose generation is no longer current stops without writing: see
            ``orchestrator.store.sink.RunFence``); 0 where there is no lease.
    """

    job_id: str
    kind: RunKind
    spec: JobSpec
    nodes: tuple[str, ...]
    strategy: str
    serial: int
    checkpoint_dir: StorageLocation
    virtual: bool
    generation: int = 0


class Runtime(Protocol):
    """Starts and stops gangs; reports what happened to them (see the module doc).

    Attributes:
        on_event: called (from the runtime's threads) when an event is ready for :meth:`poll`;
            the control loop sets it to wake itself, so a run that ended (its GPUs free for a
            waiting job) is seen at once, not at the next polling round. ``None``: not called.
    """

    on_event: Callable[[], None] | None

    def nodes(self) -> list[NodeInfo]:
        """The pool's nodes with GPU slots, in a stable order."""
        ...

    def launch(self, launch: Launch) -> None:
        """Start a gang; returns at once (a ``STARTED`` then an ``ENDED`` event follow, or
        only ``ENDED`` if it never started)."""
        ...

    def stop(self, job_id: str, *, at_once: bool = False) -> None:
        """Ask the job's run to checkpoint and stop (idempotent; returns at once). A run that
        does not stop within the runtime's grace period is killed. ``at_once``: kill it now,
        for a run that has done no step (nothing to checkpoint: a resumed run's checkpoint is
        still there), whose set-up would otherwise delay the stop by seconds while the GPUs
        it holds are wanted."""
        ...

    def resize(self, job_id: str, nodes: tuple[str, ...]) -> None:
        """Bring a running service with an endpoint (:func:`in_place`) to one replica on each
        of ``nodes`` while it serves: replicas on GPUs it does not hold yet are added (each
        takes traffic once its model has answered a first batch), those on GPUs not in
        ``nodes`` are drained (they leave the ready set, answer what they took, and give their
        GPU back); the others serve throughout. Returns at once; a ``RESIZED`` event follows
        when the run holds exactly ``nodes``. One resize at a time.

        Raises:
            ValueError: the job has no run, its run is not one :func:`in_place` allows, or a
                resize of it is still under way.
        """
        ...

    def poll(self) -> list[RunEvent]:
        """The events since the last poll, oldest first."""
        ...

    def alive(self) -> set[str]:
        """Jobs whose gang still holds GPUs (launched and not yet ended, or ended but not
        yet polled)."""
        ...

    def warm_workers(self) -> dict[str, tuple[int, int]]:
        """Per node, the warm workers kept for jobs to start on and how many of them hold a
        GPU (see :mod:`orchestrator.runtime.warm`); empty for a runtime that keeps none."""
        ...

    def close(self) -> None:
        """Give up what the runtime keeps between runs (the Ray runtime's warm workers), when
        the loop stops; runs are stopped by the loop, not here."""
        ...


def in_place(launch: Launch) -> bool:
    """Whether a launch's run is resized in place (:meth:`Runtime.resize`) rather than stopped
    and relaunched: a service with an endpoint (``serve.endpoint``), whose replicas are
    independent (one GPU and one world each: no collective ties them) and whose requests wait
    in its ingress's queue for whichever replica is ready. A service that generates its own
    stream splits it by rank over a fixed world, so it is relaunched on its new size."""
    serve = launch.spec.serve
    return launch.kind == "run" and serve is not None and serve.endpoint
