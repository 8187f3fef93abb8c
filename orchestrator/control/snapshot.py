"""One snapshot builder for the live loop and the simulator.

A policy reads a :class:`~policies.Snapshot`; both worlds build it here, from the same plain
facts, so every field a policy reads means the same thing in both: the live loop fills a job's
facts (the policy's own :class:`~policies.QueuedJob`, whatever the job's state: its identity,
sizes, deadline, speedup and history are written in that one class) and :class:`RunFacts`
from the store and its runs, the simulator from its trace and simulated clock; a running job's
view is its facts and its run's (:func:`running_view`, by field name). The meanings that are
easy to get subtly wrong live here once: a deadline is absolute (submission + ``deadline_s``);
a job's history (:class:`~policies.history.JobHistory`) is its ended runs', advanced by one
rule in both worlds (``attained_service`` counts ended runs only: the policy adds the current
one from ``started_at``); work since the later of the run's start and its last checkpoint is what a
preemption loses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from policies import JobHistory, NodeView, QueuedJob, RunningJob, Snapshot, TeamView
from policies.history import NEVER_RUN

__all__ = ["RunFacts", "build_snapshot", "job_facts", "running_view"]


@dataclass(frozen=True)
class RunFacts:
    """What is known about a job's current run.

    Attributes:
        nodes: the node of each GPU it holds (a resizing run: the GPUs it is moving to).
        started_at: when it got these GPUs (start, resume or resize).
        checkpoint_at: when it last wrote a checkpoint (``None``: not since it started).
        first_step_at: when it did its first step (``None``: none yet).
        urgent: the SLA guard found it short of its throughput floor or deadline (live, from
            its measured window; the simulator's jobs run at their modelled rate and carry no
            floor, so it never sets it).
        want_gpus: the replicas the SLA guard asks a service to run (0: none asked; live,
            from its measured window: the simulator models no request latency, so it never
            sets it).
        tuning: the run is the job's tuning gang.
    """

    nodes: tuple[str, ...]
    started_at: float
    checkpoint_at: float | None = None
    first_step_at: float | None = None
    urgent: bool = False
    want_gpus: int = 0
    tuning: bool = False


def job_facts(
    job_id: str,
    job_class: str,
    team: str,
    gpus: int,
    seq: int,
    submitted_at: float,
    *,
    deadline_s: float | None = None,
    history: JobHistory = NEVER_RUN,
    **sizes: Any,
) -> QueuedJob:
    """A job's facts as a policy reads them (:class:`~policies.QueuedJob`), from what both
    worlds know: its deadline relative to its submission (made absolute here, once), its
    history record (its fields carried under their own names), and the rest of
    :class:`~policies.QueuedJob`'s fields by name (``min_gpus``, ``wait_target_s``...)."""
    deadline = None if deadline_s is None else submitted_at + deadline_s
    return QueuedJob(
        job_id,
        job_class,
        team,
        gpus,
        seq,
        submitted_at,
        deadline=deadline,
        **sizes,
        **vars(history),
    )


_SHARED = tuple(f.name for f in fields(RunningJob) if f.name in {g.name for g in fields(QueuedJob)})
"""The fields a running job's view takes from its facts: every field the two classes share
(identity, sizes, deadline, speedup, history), by name."""


def running_view(job: QueuedJob, run: RunFacts) -> RunningJob:
    """A job holding GPUs as a policy sees it: its facts, and its run's."""
    ckpt = run.checkpoint_at
    return RunningJob(
        nodes=run.nodes,
        started_at=run.started_at,
        checkpoint_at=run.started_at if ckpt is None or ckpt < run.started_at else ckpt,
        first_step_at=run.first_step_at,
        urgent=run.urgent,
        want_gpus=run.want_gpus,
        tuning=run.tuning,
        **{name: getattr(job, name) for name in _SHARED},
    )


def build_snapshot(
    nodes: Iterable[NodeView],
    queue: Iterable[QueuedJob],
    running: Iterable[RunningJob],
    *,
    now: float,
    teams: Iterable[TeamView] = (),
    seed: int = 0,
    restart_cost_s: float,
    interval_s: float,
) -> Snapshot:
    """The snapshot of one round (the one constructor both worlds call)."""
    return Snapshot(
        nodes=tuple(nodes),
        queue=tuple(queue),
        running=tuple(running),
        now=now,
        seed=seed,
        teams=tuple(teams),
        restart_cost_s=restart_cost_s,
        interval_s=interval_s,
    )
