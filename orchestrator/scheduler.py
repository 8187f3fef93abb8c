"""The scheduler loop: snapshot -> policy -> decisions -> Ray, and back into the store.

Each round takes an immutable snapshot of the pool, the queue and the running jobs, asks the
policy (pure, in ``policies/``) for decisions and applies them: a START becomes a placement group
plus worker actors (:class:`~orchestrator.launcher.JobRun`); finished runs become store
transitions and free their GPUs. Only one scheduler drives a namespace at a time
(:class:`~orchestrator.lease.Lease`), and on start it reconciles: jobs the store says are placed
or running but that no live scheduler runs are requeued and resume from their last checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from typing import Any

import redis
from pydantic import ValidationError

from orchestrator import elastic
from orchestrator.config import Settings
from orchestrator.errors import IllegalTransition, JobNotFound
from orchestrator.launcher import JobRun, Outcome, OutcomeKind, TuneRun
from orchestrator.lease import Lease
from orchestrator.pool import GPUPool, NodeInfo, nodes_to_json
from orchestrator.sla import evaluate_sla
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore, MetricsSink
from orchestrator.store.records import JobRecord
from orchestrator.store.states import TERMINAL, JobState
from policies import (
    Decision,
    DecisionKind,
    NodeView,
    QueuedJob,
    RunningJob,
    SchedulingPolicy,
    Snapshot,
    TeamView,
)
from policies.scheduling import TeamCaps
from policies.scheduling.resize import drop_gpus

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Runs a job may lose (its workers or node died) before it fails; a workload error never
retries, and preemptions and resizes do not count."""

ACTIVE = (JobState.PLACED, JobState.RUNNING, JobState.CANCELLING)


def next_state(
    state: JobState, outcome: Outcome, attempts: int, *, requeue_stopped: bool = False
) -> tuple[JobState, str]:
    """Where a job goes when its run ends, and why (the decision table, kept pure).

    Args:
        state: the job's state when the run ended (placed, running or cancelling).
        outcome: how the run ended.
        attempts: how many of the job's runs were lost, this one included.
        requeue_stopped: a stopped run is requeued (the scheduler is shutting down), not a cancel.
    """
    kind = outcome.kind
    if kind is OutcomeKind.FINISHED:  # the work is done, even if a cancel came in meanwhile
        return JobState.FINISHED, outcome.message
    if state is JobState.CANCELLING:
        return JobState.CANCELLED, "cancelled"
    if kind is OutcomeKind.FAILED:
        return JobState.FAILED, outcome.message
    if kind is OutcomeKind.STOPPED and not requeue_stopped:
        return JobState.CANCELLED, outcome.message
    if kind is OutcomeKind.LOST and attempts >= MAX_ATTEMPTS:
        return JobState.FAILED, f"gave up after {attempts} attempts: {outcome.message}"
    return JobState.QUEUED, f"requeued: {outcome.message or 'stopped'}"


class Scheduler:
    """Drives one namespace's jobs on one Ray pool.

    Args:
        settings: where the store and pool are.
        store: the job store (the only writer of job state).
        pool: the started GPU pool.
        policy: the scheduling policy (see ``policies.SCHEDULING_POLICIES``).
        redis_url: the URL workers use to stream their metrics.
        placement_timeout_s: Ray must place a gang within this, or the job is requeued.
        stop_grace_s: how long a stopping job may take to checkpoint before it is killed.
    """

    def __init__(
        self,
        settings: Settings,
        store: JobStore,
        pool: GPUPool,
        policy: SchedulingPolicy,
        redis_url: str,
        *,
        placement_timeout_s: float = 60.0,
        stop_grace_s: float = 30.0,
    ) -> None:
        self.settings = settings
        self.store = store
        self.pool = pool
        self.policy: SchedulingPolicy = TeamCaps(policy)  # team caps hold whatever the policy
        self.policy_name = type(policy).__name__
        self.redis_url = redis_url
        self.placement_timeout_s = placement_timeout_s
        self.stop_grace_s = stop_grace_s
        self.runs: dict[str, JobRun] = {}
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease = Lease(store.client, store.keys.key("scheduler", "lease"), self.owner)
        self._waits: dict[str, str] = {}
        self._queued: dict[str, QueuedJob] = {}
        self._nodes: list[NodeInfo] = []
        self._teams: tuple[TeamView, ...] = ()
        self._queue_ids: tuple[int, list[str]] = (-1, [])  # (queue version, ids) last read
        self._published: tuple[float, object] = (0.0, None)  # when, and what the pool view was
        self._elastic: dict[str, tuple[JobSpec, tuple[float, ...]]] = {}

    # ---- lifecycle -------------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the namespace's lease and reconcile with what the store says.

        Raises:
            SchedulerBusy: another live scheduler holds the lease.
        """
        self.lease.acquire(self.settings.namespace)
        self.reconcile()

    def release(self) -> None:
        """Stop running jobs (they requeue and resume later) and give the lease back.

        If the lease was lost, another scheduler owns the jobs now: ours are stopped (so no job
        runs twice) but their state is left to the new owner.
        """
        for run in self.runs.values():
            run.request_stop()
        deadline = time.monotonic() + self.stop_grace_s + 10
        while self.runs and time.monotonic() < deadline:
            if self.lease.held:
                try:
                    self._reap(requeue_stopped=True)
                except redis.RedisError as err:
                    log.warning("cannot record stopped jobs yet: %s", err)
            else:
                for job_id in [j for j, r in self.runs.items() if not r.is_alive()]:
                    del self.runs[job_id]
            time.sleep(0.1)
        self.lease.release()

    def reconcile(self) -> None:
        """Requeue jobs left placed or running by a scheduler that is gone.

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

        Raises:
            LeaseLost: the lease was lost; this scheduler stopped its jobs.
        """
        from ray.exceptions import RayError

        backoff = self.settings.scheduler_interval_s
        try:
            while not stop.is_set():
                try:
                    self.round()
                    backoff = self.settings.scheduler_interval_s
                except (redis.RedisError, RayError, OSError) as err:
                    backoff = min(backoff * 2, 10.0)
                    log.warning("scheduling round failed (%s); retrying in %.1f s", err, backoff)
                stop.wait(backoff)
        finally:
            self.release()

    # ---- one round -------------------------------------------------------------------------

    def round(self) -> None:
        """Reap ended runs, forward cancellations, decide and apply, publish the pool view.

        Raises:
            LeaseLost: the lease is no longer ours; nothing was written.
        """
        self.lease.check()
        self._reap()
        self._forward_cancels()
        self._nodes = self.pool.nodes()
        snapshot = self.snapshot()
        # GPUs physically free now: a preempted or resized job holds its GPUs until its
        # checkpoint is written and its gang is gone, although the policy already counts them
        # as free (or, growing, counts its new GPUs as taken).
        free = {n.node_id: n.gpus for n in self._nodes}
        for run in self.runs.values():
            held = Counter(run.nodes) | Counter(run.resize_to or ())
            for node, n in held.items():
                free[node] = free.get(node, 0) - n
        for d in self.policy.decide(snapshot):
            self.lease.check()
            if d.kind is DecisionKind.PREEMPT:
                self._preempt(d.job_id, d.reason)
            elif d.kind is DecisionKind.START:
                need = Counter(d.nodes)
                if any(free.get(node, 0) < n for node, n in need.items()):
                    self._wait(d.job_id, "its GPUs are being freed by a preemption")
                    continue
                if self._start(d.job_id, d.nodes, d.strategy):
                    free.update({node: free[node] - n for node, n in need.items()})
            elif d.kind is DecisionKind.WAIT:
                self._wait(d.job_id, d.reason)
            else:
                self._resize(d, free)
        self._publish_pool(snapshot)

    def _wait(self, job_id: str, reason: str) -> None:
        """Tell the user why a queued job waits (once per distinct reason)."""
        if self._waits.get(job_id) != reason:
            self._waits[job_id] = reason
            self.store.annotate(job_id, f"waiting: {reason}")

    def _preempt(self, job_id: str, reason: str) -> None:
        """Stop a running job so its GPUs go to another; it is requeued and resumes from its
        checkpoint. The stop is bounded by ``stop_grace_s``, after which the gang is killed."""
        run = self.runs.get(job_id)
        if run is None or (run.stopping and run.resize_to is None) or run.preempted_for:
            return
        log.info("%s: preempting (%s)", job_id, reason)
        run.preempt(reason)
        self.store.annotate(job_id, f"preempting: {reason}")

    def _resize(self, d: Decision, free: dict[str, int]) -> None:
        """Restart a running elastic job on the decision's GPUs (checkpoint, stop, start the new
        gang once the old one is gone), at the largest size it can keep its global batch on."""
        run = self.runs.get(d.job_id)
        base = self._elastic.get(d.job_id, (None, ()))[0]
        if run is None or run.stopping or isinstance(run, TuneRun) or base is None:
            return
        nodes = self._fit(base, d.nodes)
        if not nodes or len(nodes) == len(run.nodes):
            return
        extra = Counter(nodes) - Counter(run.nodes)
        if any(free.get(node, 0) < n for node, n in extra.items()):
            return  # its new GPUs are still being freed: the policy asks again next round
        for node, n in extra.items():
            free[node] -= n
        log.info("%s: resizing %d -> %d GPUs (%s)", d.job_id, len(run.nodes), len(nodes), d.reason)
        run.resize(nodes)
        self.store.annotate(d.job_id, f"resizing to {len(nodes)} GPUs: {d.reason}")

    @staticmethod
    def _fit(spec: JobSpec, nodes: tuple[str, ...]) -> tuple[str, ...]:
        """``nodes`` cut to the largest size the job can keep its global batch on (empty if
        none fits)."""
        sizes = [n for n in elastic.feasible_sizes(spec) if n <= len(nodes)]
        if not sizes:
            return ()
        kept = list(nodes)
        drop_gpus(kept, len(kept) - sizes[-1])
        return tuple(kept)

    def _elastic_info(self, job_id: str) -> tuple[JobSpec, tuple[float, ...]] | None:
        """An elastic job's spec (as it runs, at its requested size) and speedup curve: from
        its profile (tuner prediction, throughput seen on each size), read once and refreshed
        when a run of it reports a new throughput."""
        if job_id not in self._elastic:
            try:
                rec = self.store.get(job_id)
                spec = self._run_spec(rec)
            except (JobNotFound, ValidationError, ValueError):
                return None
            measured = self._profile_throughputs(job_id)
            self._elastic[job_id] = (spec, elastic.speedup_curve(spec, measured))
        return self._elastic[job_id]

    def _profile_throughputs(self, job_id: str) -> dict[int, float]:
        """Samples/s per GPU count: what runs of the job measured, else what the tuner
        predicted (its profile)."""
        from orchestrator.tuner.profile import load_profile

        client, ns = self.store.client, self.store.namespace
        measured = elastic.read_throughputs(client, ns, job_id)
        chosen = (load_profile(client, ns, job_id) or {}).get("chosen", {})
        for point in chosen.get("by_gpus", []):
            measured.setdefault(int(point["gpus"]), float(point["samples_per_s"]))
        if chosen.get("measured_samples_per_s"):
            gpus = int((chosen.get("config") or {}).get("gpus", 1))
            measured.setdefault(gpus, float(chosen["measured_samples_per_s"]))
        return measured

    @staticmethod
    def _run_spec(rec: JobRecord) -> JobSpec:
        """The spec a job runs with: its own, with the tuner's chosen settings if tuned."""
        spec = rec.spec
        if "tuned" in rec.fields:
            from orchestrator.tuner.service import tuned_spec
            from orchestrator.tuner.space import Config

            spec = tuned_spec(spec, Config.from_dict(json.loads(rec.fields["tuned"])))
        return spec

    def snapshot(self) -> Snapshot:
        """The immutable view the policy decides on."""
        config = self.store.teams()
        self._teams = config.views() if config is not None else ()
        # A job being preempted has already given its GPUs away as far as policy goes, and a
        # resizing one holds its new set.
        staying = {j: r for j, r in self.runs.items() if not r.preempted_for}
        held = Counter(n for run in staying.values() for n in run.resize_to or run.nodes)
        nodes = tuple(
            NodeView(n.node_id, n.gpus, n.gpus - held.get(n.node_id, 0)) for n in self._nodes
        )
        version = self.store.queue_version()
        if version != self._queue_ids[0]:  # most rounds nothing joined or left the queue
            self._queue_ids = (
                version,
                [j for c in ("interactive", "bulk") for j in self.store.queued(c)],
            )
        ids = self._queue_ids[1]
        # What a queued job shows a policy never changes after submission: fetch new ids only.
        missing = [j for j in ids if j not in self._queued]
        for fields in self.store.queue_fields(missing):
            self._queued[fields[0]] = QueuedJob(*fields)
        cached = self._queued
        queue = [
            q if q.min_gpus == q.max_gpus else self._queue_view(q)
            for q in (cached[j] for j in ids if j in cached)
        ]
        if len(self._queued) > 2 * len(ids) + 1000:  # forget jobs that left the queue
            self._queued = {j: self._queued[j] for j in ids if j in self._queued}
            live = set(ids) | set(self.runs)
            self._elastic = {j: v for j, v in self._elastic.items() if j in live}
        running = []
        for job_id, run in staying.items():
            info = self._elastic.get(job_id)
            lo = hi = 0
            curve: tuple[float, ...] = ()
            if info is not None and not isinstance(run, TuneRun):
                sizes = elastic.feasible_sizes(info[0])
                lo, hi, curve = sizes[0], sizes[-1], info[1]
            running.append(
                RunningJob(
                    job_id,
                    run.spec.job_class,
                    run.spec.team,
                    run.resize_to or run.nodes,
                    started_at=run.started_at,
                    checkpoint_at=run.started_at,  # unknown live: assume work since start is lost
                    min_gpus=lo,
                    max_gpus=hi,
                    speedup=curve,
                )
            )
        return Snapshot(
            nodes=nodes,
            queue=tuple(queue),
            running=tuple(running),
            now=time.time(),
            teams=self._teams,
        )

    def _queue_view(self, q: QueuedJob) -> QueuedJob:
        """A queued job as the policy sees it: an elastic one with its speedup curve."""
        if q.lo == q.hi or q.interactive:
            return q
        info = self._elastic_info(q.job_id)
        return q if info is None or not info[1] else dataclasses.replace(q, speedup=info[1])

    def _start(self, job_id: str, nodes: tuple[str, ...], strategy: str) -> bool:
        """Place and launch a queued job; whether it now holds ``nodes``."""
        if job_id in self.runs:  # never two runs of one job in one scheduler
            return False
        cached = self._queued.get(job_id)
        if cached is not None and cached.lo != cached.hi and not cached.interactive:
            info = self._elastic_info(job_id)  # an elastic job runs on a size that keeps its batch
            if info is not None and not (nodes := self._fit(info[0], nodes)):
                self._wait(job_id, "no size in its GPU range keeps its global batch here")
                return False
        try:
            rec = self.store.transition(
                job_id,
                JobState.PLACED,
                expect=JobState.QUEUED,
                message=f"placed on {len(set(nodes))} node(s)",
                fields={"placement": {"nodes": list(nodes), "strategy": strategy}},
            )
        except (IllegalTransition, JobNotFound):
            return False  # cancelled (or taken) since the snapshot
        self._waits.pop(job_id, None)
        try:
            spec = rec.spec
        except ValidationError as err:  # stored under an older version, no longer valid
            first = err.errors()[0]
            self._settle(job_id, JobState.FAILED, f"the stored job is no longer valid: {first}")
            return False
        try:
            if spec.tuning.enabled and "tuned" not in rec.fields:
                run: JobRun = TuneRun(
                    job_id,
                    spec,
                    nodes,
                    strategy,
                    self.redis_url,
                    self.settings.namespace,
                    num_threads=1 if self._virtual(nodes) else None,
                    placement_timeout_s=self.placement_timeout_s,
                    stop_grace_s=self.stop_grace_s,
                )
                run.start()
                self.runs[job_id] = run
                gpus = len(nodes)
                self.store.annotate(
                    job_id, f"tuning: profiling configs on up to {gpus} GPU{'s' * (gpus > 1)}"
                )
                log.info("%s: tuning on %s", job_id, _where(run.nodes))
                return True
            spec = self._run_spec(rec)
        except Exception as err:  # never leave a job placed with nothing running it
            log.exception("%s: could not start tuning", job_id)
            self._settle(job_id, JobState.FAILED, f"could not tune: {err}")
            return False
        if spec.job_class == "bulk" and spec.resources.gpus.min != spec.resources.gpus.upper:
            self._elastic.pop(job_id, None)  # re-read: tuned settings or a new profile
            self._elastic_info(job_id)
        log.info("%s: placed on %s", job_id, _where(nodes))
        return self._launch(job_id, spec, nodes, strategy)

    def _launch(self, job_id: str, spec: JobSpec, nodes: tuple[str, ...], strategy: str) -> bool:
        """Start the gang of a placed job on ``nodes`` (an elastic job at that size)."""
        try:
            sized = elastic.resized_spec(spec, len(nodes)) if len(nodes) != spec.gpus else spec
            if sized is None:
                raise ValueError(f"cannot keep the global batch on {len(nodes)} GPUs")
            run = JobRun(
                job_id,
                sized,
                nodes,
                strategy,
                checkpoint_dir=self.settings.checkpoint_dir / job_id,
                reporter_factory=functools.partial(
                    MetricsSink, self.redis_url, self.settings.namespace, job_id
                ),
                on_running=functools.partial(self._on_running, job_id),
                num_threads=1 if self._virtual(nodes) else None,
                placement_timeout_s=self.placement_timeout_s,
                stop_grace_s=self.stop_grace_s,
            )
            run.start()
        except Exception as err:  # never leave a job placed with nothing running it
            log.exception("%s: could not start", job_id)
            self._settle(job_id, JobState.QUEUED, f"requeued: could not start: {err}")
            return False
        self.runs[job_id] = run
        return True

    def _restart_resized(self, job_id: str, run: JobRun) -> bool:
        """A run stopped for a resize has ended: start the job on its new GPUs. ``False`` when
        it cannot (cancelled meanwhile): its outcome is then recorded as usual."""
        nodes = run.resize_to or ()
        info = self._elastic.get(job_id)
        if info is None or not nodes:
            return False
        try:
            self.store.transition(
                job_id,
                JobState.PLACED,
                expect=JobState.RUNNING,
                message=f"resized from {len(run.nodes)} to {len(nodes)} GPUs; resumes",
                fields={"placement": {"nodes": list(nodes), "strategy": run.strategy}},
            )
        except (IllegalTransition, JobNotFound):
            return False
        del self.runs[job_id]
        self._launch(job_id, info[0], nodes, run.strategy)
        return True

    def _on_running(self, job_id: str) -> bool:
        """Called by the run once its workers exist: mark running and count the attempt.

        Returns ``False`` when the job was cancelled meanwhile (the run then stops)."""
        try:
            self.store.transition(
                job_id, JobState.RUNNING, expect=JobState.PLACED, fields={"started_at": time.time()}
            )
        except IllegalTransition:
            return False
        self.store.incr_attempts(job_id)
        return True

    def _virtual(self, nodes: tuple[str, ...]) -> bool:
        """Whether the job's GPUs are CPU-backed slots (then each worker gets one CPU thread,
        so a few virtual GPUs do not oversubscribe the host's cores)."""
        virtual = {n.node_id for n in self._nodes if n.virtual}
        return all(n in virtual for n in nodes)

    def _forward_cancels(self) -> None:
        for job_id in self.store.cancelling(self.runs):
            self.runs[job_id].request_stop()

    def _reap(self, requeue_stopped: bool = False) -> None:
        for job_id, run in list(self.runs.items()):
            if run.is_alive():
                continue
            outcome = run.outcome or Outcome(OutcomeKind.LOST, "no outcome")
            if isinstance(run, TuneRun) and outcome.kind is OutcomeKind.FINISHED:
                self._record_tuning(job_id, outcome.result)
                del self.runs[job_id]
                continue
            self._note_throughput(job_id, outcome.result)
            if run.preempted_for and outcome.kind is OutcomeKind.STOPPED:
                outcome = Outcome(OutcomeKind.STOPPED, f"preempted: {run.preempted_for}")
            elif run.resize_to and outcome.kind is OutcomeKind.STOPPED and not requeue_stopped:
                if outcome.result:
                    self.store.put_metrics(job_id, _metrics_of(outcome.result))
                if self._restart_resized(job_id, run):
                    continue
            self._record(job_id, outcome, requeue_stopped or bool(run.preempted_for))
            del self.runs[job_id]

    def _note_throughput(self, job_id: str, result: dict[str, Any]) -> None:
        """Keep the throughput a run of an elastic job showed on its GPU count (its profile)."""
        info = self._elastic.get(job_id)
        sps, world = result.get("samples_per_s"), result.get("world_size")
        if info is None or not sps or not world:
            return
        elastic.record_throughput(
            self.store.client, self.store.namespace, job_id, int(world), float(sps)
        )
        measured = self._profile_throughputs(job_id)
        self._elastic[job_id] = (info[0], elastic.speedup_curve(info[0], measured))

    def _record(self, job_id: str, outcome: Outcome, requeue_stopped: bool) -> None:
        """Turn a run's outcome into the job's next state (re-deciding if a cancel races in)."""
        if outcome.result:
            self.store.put_metrics(job_id, _metrics_of(outcome.result))
        for _ in range(3):
            try:
                rec = self.store.get(job_id)
            except JobNotFound:
                return
            if rec.state not in ACTIVE:
                return
            # A run lost before it ran (Ray could not place the gang) is no loss of work.
            lost = outcome.kind is OutcomeKind.LOST and rec.state is not JobState.PLACED
            losses = int(rec.fields.get("losses", 0)) + lost
            target, msg = next_state(rec.state, outcome, losses, requeue_stopped=requeue_stopped)
            if target is JobState.FINISHED:
                msg = self._sla_message(rec) + self._prediction_error(rec, outcome.result)
            try:
                self._settle(
                    job_id,
                    target,
                    msg,
                    expect=rec.state,
                    result=outcome.result,
                    fields={"losses": losses} if losses else None,
                )
                return
            except IllegalTransition:
                continue  # the state moved (a cancel): decide again on the new one
        log.warning("%s: could not record its outcome %s", job_id, outcome.kind.value)

    def _record_tuning(self, job_id: str, answer: dict[str, Any]) -> None:
        """A tuning run ended: requeue the job with its tuned settings, or stop it as
        SLA-infeasible (unless its spec accepts best effort)."""
        cache, trials = answer.get("cache", "?"), answer.get("trials", 0)
        try:
            if answer.get("run") and answer.get("config"):
                from orchestrator.tuner.space import Config

                config = Config.from_dict(answer["config"])
                msg = f"tuned ({cache}, {trials} trials): {config.describe()}"
                self._settle(
                    job_id, JobState.QUEUED, msg, expect=ACTIVE, fields={"tuned": answer["config"]}
                )
            else:
                msg = (
                    f"sla-infeasible: {answer.get('reason') or 'no config meets the SLA'} "
                    f"(closest: {answer.get('closest')}; {trials} trials); set "
                    "tuning.best_effort: true to run the closest config anyway"
                )
                self._settle(job_id, JobState.FAILED, msg, expect=ACTIVE)
        except IllegalTransition:  # cancelled meanwhile
            self._record(job_id, Outcome(OutcomeKind.STOPPED, "cancelled"), False)

    def _settle(
        self,
        job_id: str,
        target: JobState,
        message: str,
        *,
        expect: JobState | tuple[JobState, ...] = JobState.PLACED,
        result: dict[str, object] | None = None,
        fields: dict[str, object] | None = None,
    ) -> None:
        """Move a job the scheduler holds to ``target``, freeing its placement."""
        fields = {"placement": "", **(fields or {})}
        if target in TERMINAL:
            fields["finished_at"] = time.time()
        if result:
            fields["result"] = result
        self.store.transition(job_id, target, expect=expect, message=message, fields=fields)
        log.info("%s: %s%s", job_id, target.value, f" ({message})" if message else "")

    def _prediction_error(self, rec: JobRecord, result: dict[str, Any]) -> str:
        """For a tuned job that ran as tuned: how far the tuner's prediction was from what the
        run measured (kept in its profile). A run resized to another GPU count ran another
        config (its micro-batch was re-derived), so its figures are not compared."""
        if "tuned" not in rec.fields or not result:
            return ""
        tuned = json.loads(rec.fields["tuned"])
        if int(tuned.get("gpus", 1)) != int(result.get("world_size", 1)):
            return ""
        from orchestrator.tuner.profile import record_outcome

        errors = record_outcome(self.store.client, self.store.namespace, rec.id, result)
        if not errors:
            return ""
        parts = [f"{k.removesuffix('_ms').replace('_', ' ')} {v:+.0%}" for k, v in errors.items()]
        return f"; tuner prediction error: {', '.join(parts)}"

    def _sla_message(self, rec: JobRecord) -> str:
        verdict = evaluate_sla(
            rec.spec,
            self.store.metrics(rec.id),
            elapsed_s=time.time() - rec.submitted_at,
            finished=True,
        )
        met = {True: "SLA met", False: "SLA missed", None: "SLA not measured"}[verdict.met]
        return f"{met}: {verdict.measured} (target {verdict.target})"

    def _publish_pool(self, snapshot: Snapshot) -> None:
        """Publish the pool view for `orch pool`: when the jobs holding GPUs changed, else at
        most once a second (it is read by people, and costs a serialisation per round)."""
        placed = {job_id: run.nodes for job_id, run in self.runs.items()}
        now = time.monotonic()
        if placed == self._published[1] and now - self._published[0] < 1.0:
            return
        self._published = (now, placed)
        held = Counter(n for run in self.runs.values() for n in run.nodes)
        view = {
            "at": time.time(),
            "scheduler": self.owner,
            "policy": self.policy_name,
            "nodes": [
                {**n, "used_gpus": held.get(n["node_id"], 0)} for n in nodes_to_json(self._nodes)
            ],
            "jobs": {job_id: list(run.nodes) for job_id, run in self.runs.items()},
            "teams": team_usage(
                snapshot.teams,
                [(r.spec.team, len(r.nodes)) for r in self.runs.values()],
                [(q.team, q.lo) for q in snapshot.queue],
            ),
        }
        self.store.client.set(self.store.keys.key("pool"), json.dumps(view), px=self.lease.ttl_ms)


def team_usage(
    teams: tuple[TeamView, ...],
    running: list[tuple[str, int]],
    queued_jobs: list[tuple[str, int]],
) -> list[dict[str, Any]]:
    """Each team's GPUs in use against its guarantee and limit, what it borrows (uses beyond
    its guarantee), and the GPUs its queued jobs need at least; configured teams first, then
    any other with jobs.

    Args:
        teams: the team config.
        running: ``(team, GPUs held)`` of each running job.
        queued_jobs: ``(team, fewest GPUs)`` of each queued job.
    """
    used: Counter[str] = Counter()
    for team, n in running:
        used[team] += n
    queued: Counter[str] = Counter()
    for team, n in queued_jobs:
        queued[team] += n
    config = {t.name: t for t in teams}
    names = list(config) + sorted((set(used) | set(queued)) - set(config))
    rows = []
    for name in names:
        t = config.get(name)
        guarantee = t.guaranteed_gpus if t else 0
        rows.append(
            {
                "team": name,
                "used_gpus": used[name],
                "guaranteed_gpus": guarantee,
                "max_gpus": t.max_gpus if t else 0,
                "weight": t.weight if t else 1.0,
                "borrowed_gpus": max(0, used[name] - guarantee),
                "queued_gpus": queued[name],
                "configured": t is not None,
            }
        )
    return rows


def _where(nodes: tuple[str, ...]) -> str:
    """``"2 GPU(s) on 1a2b3c4d"`` style summary of a gang's nodes."""
    return ", ".join(f"{nodes.count(n)} GPU(s) on {n[:8]}" for n in dict.fromkeys(nodes))


def _metrics_of(result: dict[str, object]) -> dict[str, object]:
    """The scalar metrics of a harness result (``p95_ms``, ``samples_per_s``...)."""
    return {k: v for k, v in result.items() if isinstance(v, int | float | str)}
