"""The control loop: one writer of job state, in named phases.

Each round, after checking the lease:

1. **reap**: the runtime's events since the last round become job transitions (a run's
   workers came up: running or tuning; a service's resize in place is done: it holds its new
   GPUs; a run ended: the pure table in
   :mod:`~orchestrator.control.transitions` says where its job goes; the reaper is
   :mod:`~orchestrator.control.reap`); cancellations users asked for reach their runs.
   Re-tunes a job's team asked for reach its run the same way.
1b. **guard**: the SLA guard (:mod:`~orchestrator.control.sla_guard`) compares each running
   job's measured window with its SLA and the tuner's prediction: it records what trips or
   clears, marks elastic jobs short of their floor or deadline urgent (a snapshot fact), and
   stops a run whose measurements contradict its profile to re-tune it.
2. **observe**: one snapshot, through the builder the simulator uses too
   (:mod:`~orchestrator.control.snapshot`), with every fact a policy reads filled in: deadlines,
   start-wait targets, attained service over all runs, last checkpoint and first step of each
   run (from its worker's reports), remaining work, speedup curves.
3. **decide**: the policy, inside the team caps; decisions that break the contract
   (:mod:`~orchestrator.control.invariants`) are logged and dropped, never reshaped.
4. **reserve** and **bind**: in apply order, each decision takes its GPUs in the ledger
   (:mod:`~orchestrator.control.ledger`) when they are physically free, and the runtime starts
   or stops gangs (:mod:`~orchestrator.control.gangs`: place and launch, resize and relaunch,
   or resize a service with an endpoint in place, stop); a start whose GPUs are still being
   freed waits a round.
5. **publish**: the pool view; the round's counters and durations go to ``/metrics``
   (:mod:`~orchestrator.control.telemetry`, written at most once a second).

Only one loop drives a namespace (its lease); on start it reconciles: jobs the store says are
placed, tuning or running but that no live loop runs are requeued and resume from their last
checkpoint.

The loop composes its collaborators and reads as its phases: what it keeps between rounds is
one :class:`~orchestrator.control.state.LoopState`, handed to the gang actions
(:class:`~orchestrator.control.gangs.GangActions`: place, launch, stop, resize) and the reaper
(:class:`~orchestrator.control.reap.Reaper`: run events into transitions); the SLA guard, the
admission desk, the dependency gate, the facts reader and the telemetry are its others.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

import redis

from orchestrator.config import Settings
from orchestrator.control.dependencies import DependencyGate
from orchestrator.control.facts import PROGRESS, JobFactsReader, running_views
from orchestrator.control.gangs import GangActions, is_bulk_run
from orchestrator.control.guard import GuardConfig
from orchestrator.control.invariants import check_decisions, guarded
from orchestrator.control.ledger import ACTIVE, Run, physically_free, policy_nodes
from orchestrator.control.pool_view import pool_view
from orchestrator.control.reap import Reaper
from orchestrator.control.sla_guard import SLAGuard
from orchestrator.control.snapshot import (
    build_snapshot,
)
from orchestrator.control.state import LoopState
from orchestrator.control.telemetry import LoopTelemetry
from orchestrator.control.transitions import StopReason
from orchestrator.errors import IllegalTransition, JobNotFound
from orchestrator.pool import NodeInfo
from orchestrator.runtime.base import EventKind, RunEvent, Runtime
from orchestrator.store import JobStore, LeaseLost
from orchestrator.store.states import JobState
from policies import (
    SCHEDULING_POLICIES,
    Decision,
    DecisionKind,
    QueuedJob,
    RunningJob,
    SchedulingPolicy,
    Snapshot,
    TeamView,
)
from policies.scheduling.admission import AdmissionDesk
from policies.scheduling.plan import base_plan

log = logging.getLogger(__name__)

__all__ = ["ControlLoop"]

HISTORY_EVERY_S = 10.0
"""How often the pool's use is sampled for the dashboard's charts (a day kept: 8,640 samples)."""
ABSENT_KEPT_S = 900.0
"""How long a node gone from the pool is still published as the pool's (``absent_nodes``):
a submission is judged against the pool with it (a restart or a network blip must not make a
job that needs that node's kind or memory refused as one the pool can never run)."""


class ControlLoop:
    """Drives one namespace's jobs on one runtime (see the module doc).

    Args:
        settings: where the store is, the round interval, the checkpoint directory.
        store: the job store.
        runtime: runs the gangs (Ray, or in-process for tests).
        policy: the scheduling policy (see ``policies.SCHEDULING_POLICIES``).
        restart_cost_s: what a start, resume or resize costs a job (the policies weigh it).
        clock: wall clock (seconds); a test may pass its own.
    """

    def __init__(
        self,
        settings: Settings,
        store: JobStore,
        runtime: Runtime,
        policy: SchedulingPolicy,
        *,
        restart_cost_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store
        self.runtime = runtime
        self.policy = guarded(policy)
        self.policy_name = SCHEDULING_POLICIES.name_of(policy)  # `shared`, as users type it
        self.restart_cost_s = restart_cost_s
        self.clock = clock
        self.state = LoopState()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease = store.lease(self.owner, settings.lease_ttl_ms)
        self.violations = 0  # decisions dropped for breaking the contract
        self._last_round = 0.0  # the previous round's clock
        self._sampled = -HISTORY_EVERY_S  # when the pool's use was last sampled (monotonic)
        self._queue_ids: tuple[int, list[str]] = (-1, [])  # (queue version, ids) last read
        self._published: tuple[float, object] = (0.0, None)  # when, and what the pool view was
        self._seen: dict[str, tuple[NodeInfo, float]] = {}  # each node, when last in the pool
        self.facts = JobFactsReader(store)
        self.telemetry = LoopTelemetry(store.telemetry)  # counters for /metrics
        self.admission = AdmissionDesk()  # deadline jobs' verdicts (issue 26)
        self.dependencies = DependencyGate()  # jobs held until those they depend on finish
        self.sla_guard = SLAGuard(
            store,
            self.telemetry,
            GuardConfig(hold_s=settings.guard_hold_s, max_retunes=settings.guard_max_retunes),
        )
        self.gangs = GangActions(
            self.state,
            store,
            runtime,
            facts=self.facts,
            telemetry=self.telemetry,
            sla_guard=self.sla_guard,
            lease=self.lease,
            checkpoint_dir=settings.checkpoint_dir,
            clock=clock,
        )
        self.reaper = Reaper(
            self.state,
            store,
            self.gangs,
            facts=self.facts,
            telemetry=self.telemetry,
            sla_guard=self.sla_guard,
            clock=clock,
        )

    @property
    def runs(self) -> dict[str, Run]:
        """The runs the loop launched and has not yet seen end, by job id."""
        return self.state.runs

    # ---- lifecycle -------------------------------------------------------------------------

    def acquire(self, standby: threading.Event | None = None) -> bool:
        """Take the namespace's lease and reconcile with what the store says. From then on
        every state write of the loop's store is fenced by the lease (a deposed loop's writes
        are refused: :attr:`JobStore.fence`).

        Args:
            standby: wait as a standby until the lease is free (until this event is set);
                ``None``: fail at once if another scheduler holds it.

        Returns:
            Whether the lease was taken (``False``: ``standby`` was set while waiting).

        Raises:
            SchedulerBusy: another live scheduler holds the lease (and no ``standby``).
        """
        if standby is None:
            self.lease.acquire(self.settings.namespace)
        elif not self.lease.acquire_when_free(self.settings.namespace, standby):
            return False
        self.store.fence = self.lease.owner
        self.reconcile()
        # Everything alive after start-up (modules, clients, Ray's state) lives as long as the
        # loop: moved out of the collector's reach, a full collection scans only what rounds
        # made, instead of pausing a round for 24-36 ms (measured, bench/control_plane).
        gc.freeze()
        return True

    def release(self, grace_s: float | None = None) -> None:
        """Stop running jobs (they requeue and resume later) and give the lease back.

        If the lease was lost, another scheduler owns the jobs now: ours are stopped (so no job
        runs twice) but their state is left to the new owner.
        """
        for run in self.runs.values():
            self.gangs.stop(run, StopReason.SHUTDOWN, "the scheduler stopped")
        wait = self.settings.stop_grace_s + 10 if grace_s is None else grace_s
        deadline = time.monotonic() + wait
        while self.runs and time.monotonic() < deadline:
            events = self.runtime.poll()
            if self.lease.held:
                try:
                    self.reap(events)
                except redis.RedisError as err:
                    log.warning("cannot record stopped jobs yet: %s", err)
                except LeaseLost:  # fenced: another scheduler owns the jobs' state now
                    for e in events:
                        if e.kind is EventKind.ENDED:
                            self.runs.pop(e.job_id, None)
            else:
                for e in events:
                    if e.kind is EventKind.ENDED:
                        self.runs.pop(e.job_id, None)
            time.sleep(0.05)
        with contextlib.suppress(redis.RedisError):
            self.telemetry.flush()
        self.lease.release()

    def reconcile(self) -> None:
        """Requeue jobs left placed, tuning or running by a scheduler that is gone.

        Worker actors belong to the scheduler process that made them (they are not detached),
        so when it is gone they are gone: requeueing starts each job exactly once more, from
        its last checkpoint. Jobs being cancelled become cancelled.
        """
        for rec in self.store.list(states=ACTIVE):
            if rec.id in self.runs:
                continue
            if rec.state is JobState.CANCELLING:
                target, msg = JobState.CANCELLED, "cancelled (its scheduler had stopped)"
            else:
                target, msg = JobState.QUEUED, "requeued: its scheduler stopped; resumes"
            try:
                self.store.transition(
                    rec.id, target, expect=rec.state, message=msg, fields={"placement": ""}
                )
            except (IllegalTransition, JobNotFound):
                continue

    def serve(self, stop: threading.Event) -> None:
        """Run rounds until ``stop`` is set, then stop the jobs (they requeue) and release.

        Call :meth:`acquire` first (so a busy namespace is reported before serving). A round
        that fails on Redis or Ray being briefly unreachable is retried with back-off while the
        lease holds; running jobs go on meanwhile.

        Between rounds it waits on the store's wake channel: a submission or a cancel starts
        the next round at once; the interval is the fallback (a wake-up lost while Redis is
        away). When it stops, the runtime gives up what it keeps between runs (warm workers)
        before the jobs are stopped, so their GPUs are not refilled.

        Raises:
            LeaseLost: the lease was lost; this scheduler stopped its jobs.
        """
        from ray.exceptions import RayError

        interval = self.settings.scheduler_interval_s
        backoff = interval
        wakeups = self.store.wakeups()
        # a run that started or ended wakes the loop too: the GPUs a preempted victim frees
        # go to the job waiting for them at once, not at the next polling round
        self.runtime.on_event = functools.partial(self.store.wake.publish, "run")
        try:
            while not stop.is_set():
                try:
                    self.round()
                    self.telemetry.maybe_flush()  # between rounds: never in a round's time
                    backoff = interval
                except (redis.RedisError, RayError, OSError) as err:
                    backoff = min(backoff * 2, 10.0)
                    log.warning("scheduling round failed (%s); retrying in %.1f s", err, backoff)
                if backoff > interval:
                    stop.wait(backoff)  # failing rounds back off whatever is submitted
                else:
                    wakeups.wait(backoff, stop)
        finally:
            self.runtime.on_event = None
            wakeups.close()
            try:
                self.runtime.close()
            finally:
                self.release()

    # ---- one round -------------------------------------------------------------------------

    def round(self) -> list[Decision]:
        """One round: reap, guard, observe, decide, reserve and bind, publish (see the module
        doc).

        Returns:
            The decisions the policy made that kept the contract.

        Raises:
            LeaseLost: the lease is no longer ours; nothing was written.
        """
        began = time.perf_counter()
        self.lease.check()
        self.reap(self.runtime.poll())
        self.forward_cancels()
        self.forward_tune_requests()
        self.guard()
        snapshot = self.admit(self.observe())
        decisions = self.decide(snapshot)
        free = physically_free(self.state.nodes, self.runs.values())
        for d in decisions:
            if d.kind is not DecisionKind.WAIT:  # a wait writes at most a note
                self.lease.check()
            self.bind(d, free)
        self.publish(snapshot)
        self.telemetry.round_took(time.perf_counter() - began)
        return decisions

    # ---- 1. reap ---------------------------------------------------------------------------

    def reap(self, events: list[RunEvent]) -> None:
        """Turn the runtime's events into job transitions, in the order they happened (the
        reaper: :class:`~orchestrator.control.reap.Reaper`)."""
        self.reaper.reap(events)

    def forward_cancels(self) -> None:
        """Cancellations users asked for (the store says cancelling) reach their runs."""
        for job_id in self.store.cancelling(self.runs):
            self.gangs.stop(self.runs[job_id], StopReason.CANCEL, "cancelled")

    def forward_tune_requests(self) -> None:
        """Re-tunes a job's team asked for (``orch retune``, ``POST /v1/jobs/{id}/tune``)
        reach its run: stopped to be tuned again from its measured window."""
        for run, why in self.sla_guard.requested(self.runs):
            self.gangs.stop(run, StopReason.RETUNE, why)

    # ---- 1b. guard -------------------------------------------------------------------------

    def guard(self) -> None:
        """The SLA guard (:class:`~orchestrator.control.sla_guard.SLAGuard`): running jobs'
        measured windows against their SLA; a job it re-tunes is stopped here."""
        for run, why in self.sla_guard.check(self.runs, self.clock()):
            self.gangs.stop(run, StopReason.RETUNE, why)

    # ---- 2. observe ------------------------------------------------------------------------

    def observe(self) -> Snapshot:
        """The immutable view the policy decides on (see the module doc)."""
        # the runtime first: it may be slow (a node probe), and the store reads after it must
        # be close together, or a snapshot mixes an old team config with a newer queue
        self.state.nodes = self.runtime.nodes()
        self.facts.priors = {n.kind: n.speed for n in self.state.nodes}
        config = self.store.teams()
        teams: tuple[TeamView, ...] = config.views() if config is not None else ()
        now = self.clock()
        # the gap since the previous round as it was (a round can start late): a job requeued
        # since then was stopped "in the previous round" whatever the nominal interval
        gap = now - self._last_round if self._last_round else self.settings.scheduler_interval_s
        self._last_round = now
        queued = self._queue_views()
        held = self._hold(queued)
        return build_snapshot(
            policy_nodes(self.state.nodes, self.runs.values()),
            [q for q in queued if q.job_id not in held] if held else queued,
            self._running_views(),
            now=now,
            teams=teams,
            restart_cost_s=self.restart_cost_s,
            interval_s=gap,
        )

    def _hold(self, queued: list[QueuedJob]) -> set[str]:
        """Queued jobs kept out of the snapshot for their dependencies (each told why); a job
        one of whose dependencies will never finish fails, saying which."""
        held, waits, fails = self.dependencies.judge({q.job_id for q in queued}, self.store.states)
        for job_id, reason in waits.items():
            self.gangs.wait(job_id, reason)
        for job_id, reason in fails.items():
            with contextlib.suppress(JobNotFound, IllegalTransition):  # cancelled meanwhile
                self.store.transition(
                    job_id, JobState.FAILED, expect=JobState.QUEUED, message=reason
                )
        return held

    def _queue_views(self) -> list[QueuedJob]:
        """Queued jobs' views: read once per stay in the queue (the loop alone requeues a job,
        and forgets its view when it does), re-read only for new ids."""
        version = self.store.queue_version()
        if version != self._queue_ids[0]:  # most rounds nothing joined or left the queue
            ids = [j for c in ("interactive", "bulk") for j in self.store.queued(c)]
            self._queue_ids = (version, ids)
            if len(self.state.queued) > 2 * len(ids) + 1000:  # forget jobs that left the queue
                self.state.queued = {j: self.state.queued[j] for j in ids if j in self.state.queued}
                live = set(ids) | set(self.runs)
                self.facts.keep_only(live)
        ids = self._queue_ids[1]
        missing = [j for j in ids if j not in self.state.queued]
        for raw in self.store.queue_facts(missing):
            self.dependencies.note(raw["id"], raw.get("after"))
            facts = self.facts.queued(raw)
            self.state.queued[facts.job_id] = facts
        return [self.state.queued[j] for j in ids if j in self.state.queued]

    def _running_views(self) -> list[RunningJob]:
        """Running jobs' views: their facts (read at start) and their current run's progress
        as their workers last reported it."""
        staying = [r for r in self.runs.values() if not r.leaving]
        # only bulk job runs: what a policy reads of progress (first step, last checkpoint,
        # work left) is about bulk jobs; interactive jobs are never stopped for others
        bulk = [r.job_id for r in staying if is_bulk_run(r)]
        progress = self.store.latest_metrics(bulk, PROGRESS) if bulk else {}
        return running_views(
            staying, self.state.facts, progress, self.sla_guard.urgent, self.sla_guard.want
        )

    def admit(self, snapshot: Snapshot) -> Snapshot:
        """Each new or changed admission verdict as an ``admission`` event (issue 26; the
        simulator's desk judges the same snapshots alike); returns the snapshot, with the
        declined jobs in it for a policy that binds the verdict."""
        if self.policy.binds_admission:
            snapshot, verdicts = self.admission.bind(snapshot)
        else:
            verdicts = self.admission.round(snapshot)
        for v in verdicts:
            with contextlib.suppress(JobNotFound):  # gone since the snapshot: nothing to tell
                self.store.note_event(v.job_id, "admission", v.reason)
        return snapshot

    # ---- 3. decide -------------------------------------------------------------------------

    def decide(self, snapshot: Snapshot) -> list[Decision]:
        """The policy's decisions that keep the contract; the others are logged and dropped."""
        kept, broken = check_decisions(snapshot, self.policy.decide(snapshot))
        for _, problem in broken:
            self.violations += 1
            self.telemetry.dropped(1)
            log.error("policy %s broke its contract; dropped: %s", self.policy_name, problem)
        return kept

    # ---- 4. reserve and bind ---------------------------------------------------------------

    def bind(self, d: Decision, free: dict[str, int]) -> None:
        """Apply one decision: reserve its GPUs in the ledger (``free``), then act (the
        actions: :class:`~orchestrator.control.gangs.GangActions`)."""
        if d.kind is DecisionKind.PREEMPT:
            self.gangs.preempt(d)
        elif d.kind is DecisionKind.START:
            self.gangs.start(d, free)
        elif d.kind is DecisionKind.WAIT:
            self.gangs.wait(d.job_id, d.reason)
        else:
            self.gangs.resize(d, free)

    # ---- 5. publish ------------------------------------------------------------------------

    def publish(self, snapshot: Snapshot) -> None:
        """Publish the pool view for `orch pool`, with the admission plan a ``--strict``
        submission is judged on: when the jobs holding GPUs or the nodes changed, else at most
        once a second (it is read by people, and costs a serialisation per round)."""
        holding = {
            j: (self.state.facts[j].team if j in self.state.facts else "", r.nodes)
            for j, r in self.runs.items()
        }
        now = time.monotonic()
        absent = self._absent(now)
        if now - self._sampled >= HISTORY_EVERY_S:  # the dashboard's use over time
            self._sampled = now
            teams: dict[str, int] = {}
            for team, nodes in holding.values():
                teams[team] = teams.get(team, 0) + len(nodes)
            total = sum(n.gpus for n in self.state.nodes)
            self.store.pool_history.append(self.clock(), total, sum(teams.values()), teams)
        # (the pool's nodes too: a node that joins or leaves is published at once)
        what = (holding, [n.node_id for n in self.state.nodes], [n.node_id for n in absent])
        if what == self._published[1] and now - self._published[0] < 1.0:
            return
        self._published = (now, what)
        view = pool_view(
            self.state.nodes,
            holding,
            snapshot,
            at=self.clock(),
            scheduler=self.owner,
            policy=self.policy_name,
            warm=self.runtime.warm_workers(),
            plan=base_plan(snapshot, (), self.admission.margin_frac),
            margin_frac=self.admission.margin_frac,
            absent=absent,
        )
        self.store.pool_view.publish(view, ttl_ms=self.lease.ttl_ms)

    def _absent(self, now: float) -> list[NodeInfo]:
        """The nodes gone from the pool less than :data:`ABSENT_KEPT_S` ago (each node's
        last sight kept; those gone longer forgotten)."""
        seen = self._seen
        for n in self.state.nodes:
            seen[n.node_id] = (n, now)
        if len(seen) == len(self.state.nodes):
            return []
        here = {n.node_id for n in self.state.nodes}
        for node_id in [k for k, (_, at) in seen.items() if now - at > ABSENT_KEPT_S]:
            del seen[node_id]
        return [info for k, (info, _) in seen.items() if k not in here]
