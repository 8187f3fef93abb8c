"""Applying a policy's decisions to the simulated pool (the :class:`Simulator`'s part that
takes and gives back GPUs): a mixin of :class:`~orchestrator.sim.engine.Simulator`, apart so
that the engine stays one concern per module."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from orchestrator.sim.errors import PolicyViolation
from orchestrator.sim.services import ServiceJobModel
from orchestrator.sim.simjob import QUEUED, RUNNING, SimJob, placement_of
from policies import Decision, DecisionKind, RunEnd, advance

if TYPE_CHECKING:
    from orchestrator.sim.config import SimConfig


class DecisionApplier:
    """Starts, preemptions and resizes applied to the pool (the simulator's state below)."""

    config: SimConfig
    now: float
    by_id: dict[str, SimJob]
    queued: dict[str, SimJob]
    running: dict[str, SimJob]
    free: dict[str, int]
    _changed: set[str]
    _team_gpus: dict[str, int]
    _demand: dict[str, list[int]]
    kinds: dict[str, tuple[str, float]]

    def _speed_on(self, job: SimJob) -> float:
        """The job's speed on the GPUs it holds: its own on their kind (``kind_speed``), else
        the kind's; the slowest kind's when its gang spans several (it steps as one); 1 for a
        model whose progress ignores the kind (``JobModel.kind_bound``)."""
        kinds = self.kinds
        if not kinds or not job.model.kind_bound:
            return 1.0
        own = dict(job.kind_speed)
        speeds = []
        for node in set(job.nodes):
            kind, prior = kinds.get(node, ("", 1.0))
            speeds.append(own.get(kind, prior))
        return min(speeds, default=1.0)

    def _apply(self, d: Decision) -> None:
        job = self.by_id.get(d.job_id)
        if job is None:
            raise PolicyViolation(f"decision for unknown job {d.job_id!r}")
        if d.kind is DecisionKind.WAIT:
            job.wait_reason = d.reason
            return
        if d.kind is DecisionKind.START:
            if job.state != QUEUED:
                raise PolicyViolation(f"START for {d.job_id}, which is not queued")
            self._take(d, job, ())
            job.state = RUNNING
            del self.queued[d.job_id]
            self._ask(job, -job.lo, -1)  # no longer queued: its lo no longer asked for
            self.running[d.job_id] = job
            job.waits.append(self.now - job.queued_since)
            if job.first_start is None:
                job.first_start = self.now
        elif d.kind is DecisionKind.PREEMPT:
            if job.state != RUNNING:
                raise PolicyViolation(f"PREEMPT for {d.job_id}, which is not running")
            if job.completed_at is not None:
                return
            before = job.lost_gpu_s
            self._lose_work(job)
            job.preempt_lost_gpu_s += job.lost_gpu_s - before + job.start_s * len(job.nodes)
            self._release(job, goes_on=True, requeued=True, preempted=True)
            job.state = QUEUED
            job.queued_since = self.now
            job.preemptions += 1
            self.queued[d.job_id] = job
            self._ask(job, job.lo, 1)
        elif d.kind is DecisionKind.RESIZE:
            if job.state != RUNNING:
                raise PolicyViolation(f"RESIZE for {d.job_id}, which is not running")
            if tuple(d.nodes) == job.nodes:
                return
            model = job.model
            in_place = isinstance(model, ServiceJobModel) and model.spec.in_place
            self._lose_work(job)
            old = job.nodes
            self._release(job, goes_on=True, in_place=in_place)
            try:
                self._take(d, job, old, in_place=in_place)
            except PolicyViolation:
                self._take(Decision(DecisionKind.START, d.job_id, old), job, (), in_place=in_place)
                raise
            job.state = RUNNING
            self.running[d.job_id] = job
            job.resizes += 1
            if in_place and isinstance(model, ServiceJobModel):
                # resized in place, as a service with an endpoint is live: one run throughout
                # (its history advances when it ends, its launch and first answer stay); the
                # replicas that stay (on GPUs it keeps, and already serving) serve throughout,
                # the new ones once loaded
                kept = sum((Counter(old) & Counter(job.nodes)).values())
                serving = min(kept, job.warm_replicas) if job.warm_left > 0 else kept
                job.warm_replicas = serving
                job.warm_left = 0.0
                start = model.start_s(self.config.restart_s)
                if serving:
                    job.warm_left = start if len(job.nodes) > serving else 0.0
                else:  # every replica is new: nothing serves until they load
                    job.restart_left = start

    def _release_moves(self, decisions: list[Decision]) -> dict[str, tuple[str, ...]]:
        """``SimConfig.atomic_moves``: every job the round moves (a ``RESIZE`` to other GPUs)
        lets go of its GPUs before any decision takes GPUs; returns what each held."""
        moving: dict[str, tuple[str, ...]] = {}
        for d in decisions:
            job = self.by_id.get(d.job_id)
            if d.kind is not DecisionKind.RESIZE or job is None or job.state != RUNNING:
                continue
            if tuple(d.nodes) == job.nodes or isinstance(job.model, ServiceJobModel):
                continue
            moving[d.job_id] = job.nodes
            self._lose_work(job)
            self._release(job, goes_on=True)
        return moving

    def _finish_move(self, d: Decision, old: tuple[str, ...]) -> None:
        """The second half of an atomic move (:meth:`_release_moves`): the job takes its new
        GPUs."""
        job = self.by_id[d.job_id]
        self._take(d, job, old)
        job.state = RUNNING
        self.running[d.job_id] = job
        job.resizes += 1

    def _take(
        self, d: Decision, job: SimJob, old: tuple[str, ...], *, in_place: bool = False
    ) -> None:
        """The job takes ``d.nodes`` (a start, or the new GPUs of a resize from ``old``); a
        new run starts on them, unless it is ``in_place`` (a service resized in place: the
        same run goes on, its start and launch kept)."""
        s = job.spec
        if not s.lo <= len(d.nodes) <= s.hi:
            raise PolicyViolation(
                f"{d.kind.value} {d.job_id} on {len(d.nodes)} GPUs; it runs on {s.lo}..{s.hi}"
            )
        need: dict[str, int] = {}
        for node in d.nodes:
            need[node] = need.get(node, 0) + 1
        for node, count in need.items():
            if self.free.get(node, 0) < count:
                raise PolicyViolation(
                    f"{d.kind.value} {d.job_id}: {count} GPUs on {node}, "
                    f"{self.free.get(node, 0)} free"
                )
        for node, count in need.items():
            self.free[node] -= count
        self._changed.update(need)
        job.nodes = tuple(d.nodes)
        gpus = len(job.nodes)
        self._team_gpus[job.team] = self._team_gpus.get(job.team, 0) + gpus
        self._ask(job, gpus if gpus >= job.lo else job.lo, 1)
        job.placement = placement_of(job.nodes)
        job.speed = self._speed_on(job)
        if not job.model.kind_bound:  # its progress depends on the kind: tell it which
            kinds = self.kinds
            on = tuple(kinds.get(n, ("", 1.0))[0] for n in job.nodes)
            job.model.placed(on, job.placement, resize=bool(old))
        job.view = None
        if in_place:
            job.run_most_gpus = max(job.run_most_gpus, gpus)
            job.run_since = self.now
            return
        job.run_most_gpus, job.run_gpu_s, job.run_since = gpus, 0.0, self.now
        model = job.model
        start = model.start_s(self.config.restart_s)
        if start <= 0 and old:  # a move its model says costs nothing: its last start goes on
            start = job.restart_left
        job.start_s = job.restart_left = start
        job.started_at = self.now
        job.since_ckpt = 0.0

    def _release(
        self,
        job: SimJob,
        *,
        goes_on: bool = False,
        requeued: bool = False,
        preempted: bool = False,
        in_place: bool = False,
    ) -> None:
        """The job's run ends (completed, preempted or resized): its GPUs go back to the pool
        and its history is advanced by the live loop's rule (its work left is read from its
        model at each view, the simulator's exact progress report). ``in_place``: only its
        GPUs change (a service resized in place), its run goes on: its GPU-seconds so far are
        kept for the run's end, as the live ledger keeps them."""
        gpus = len(job.nodes)
        job.run_gpu_s += (self.now - job.run_since) * gpus
        if not in_place:
            resized = job.run_most_gpus != gpus or job.run_since != job.started_at
            end = RunEnd(
                at=self.now,
                gpus=max(job.run_most_gpus, gpus),
                held_s=self.now - job.started_at,
                trained=True,
                goes_on=goes_on,
                requeued=requeued,
                preempted=preempted,
                gpu_s=job.run_gpu_s if resized else None,
            )
            job.history = advance(job.history, end)
        for node in job.nodes:
            self.free[node] += 1
        self._changed.update(job.nodes)
        self._team_gpus[job.team] -= gpus
        self._ask(job, -(gpus if gpus >= job.lo else job.lo), -1)
        job.nodes = ()
        job.placement = ()
        job.view = None
        self.running.pop(job.spec.name, None)

    def _ask(self, job: SimJob, gpus: int, jobs: int) -> None:
        """Change the demand of the job's team by ``gpus`` and its count of jobs queued or
        running by ``jobs``: a queued job asks for its ``lo``, a running one for
        ``max(gpus, lo)`` (read every round by the entitlements; a team with no such job
        is not in it)."""
        entry = self._demand.get(job.team)
        if entry is None:
            self._demand[job.team] = [gpus, jobs]
        else:
            entry[0] += gpus
            entry[1] += jobs
            if not entry[1]:
                del self._demand[job.team]

    def _lose_work(self, job: SimJob) -> None:
        if job.spec.checkpoint > 0 and job.since_ckpt > 0:
            job.lost_gpu_s += job.since_ckpt * len(job.nodes)
            job.model.restore(job.ckpt)
            job.since_ckpt = 0.0
