"""The scheduler loop: snapshot -> policy -> decisions -> Ray, and back into the store.

Each round takes an immutable snapshot of the pool, the queue and the running jobs, asks the
policy (pure, in ``policies/``) for decisions and applies them: a START becomes a placement group
plus worker actors (:class:`~orchestrator.launcher.JobRun`); finished runs become store
transitions and free their GPUs. Only one scheduler may drive a namespace at a time (a lease in
Redis), and on start it reconciles: jobs the store says are placed or running but that no live
scheduler runs are requeued and resume from their last checkpoint.
"""

from __future__ import annotations

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

from orchestrator.config import Settings
from orchestrator.errors import IllegalTransition, JobNotFound, OrchError
from orchestrator.launcher import JobRun, Outcome, OutcomeKind
from orchestrator.pool import GPUPool, NodeInfo, nodes_to_json
from orchestrator.sla import evaluate_sla
from orchestrator.store import JobStore, MetricsSink
from orchestrator.store.states import JobState
from policies import DecisionKind, NodeView, QueuedJob, RunningJob, SchedulingPolicy, Snapshot

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Starts allowed per job when workers are lost (node failure); a workload error never retries."""

LEASE_MS = 15_000
_RENEW_LUA = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"""


_TAKEOVER_LUA = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
end
return false
"""


class SchedulerBusy(OrchError):
    """Another scheduler holds this namespace's lease."""


class Scheduler:
    """Drives one namespace's jobs on one Ray pool.

    Args:
        settings: where the store and pool are.
        store: the job store (the only writer of job state).
        pool: the started GPU pool.
        policy: the scheduling policy (see ``policies.SCHEDULING_POLICIES``).
        redis_url: the URL workers use to stream their metrics.
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
        self.policy = policy
        self.redis_url = redis_url
        self.placement_timeout_s = placement_timeout_s
        self.stop_grace_s = stop_grace_s
        self.runs: dict[str, JobRun] = {}
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._lease_key = store.keys.key("scheduler", "lease")
        self._renew = store.client.register_script(_RENEW_LUA)
        self._takeover = store.client.register_script(_TAKEOVER_LUA)
        self._waits: dict[str, str] = {}
        self._nodes: list[NodeInfo] = []

    # ---- lifecycle -------------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the namespace's scheduler lease and reconcile with what the store says.

        Raises:
            SchedulerBusy: another live scheduler holds the lease.
        """
        client = self.store.client
        if not client.set(self._lease_key, self.owner, nx=True, px=LEASE_MS):
            holder = str(client.get(self._lease_key) or "")
            if not (
                _holder_is_dead(holder)
                and self._takeover(keys=[self._lease_key], args=[holder, self.owner, LEASE_MS])
            ):
                raise SchedulerBusy(
                    f"another scheduler ({holder}) is driving namespace "
                    f"{self.settings.namespace!r}; stop it first, or use another ORCH_NAMESPACE"
                )
            log.warning("took over the lease of %s, whose process is gone", holder)
        self.reconcile()

    def release(self, stop_jobs: bool = True) -> None:
        """Stop running jobs (they requeue and resume later) and give the lease back."""
        if stop_jobs:
            for run in self.runs.values():
                run.request_stop()
            deadline = time.monotonic() + self.stop_grace_s + 5
            while self.runs and time.monotonic() < deadline:
                self._reap(requeue_stopped=True)
                time.sleep(0.1)
        if self.store.client.get(self._lease_key) == self.owner:
            self.store.client.delete(self._lease_key)

    def reconcile(self) -> None:
        """Requeue jobs left placed or running by a scheduler that is gone.

        Worker actors belong to the scheduler process that made them (they are not detached),
        so when it is gone they are gone: requeueing starts each job exactly once more, from
        its last checkpoint. Jobs being cancelled become cancelled.
        """
        stale = (JobState.PLACED, JobState.RUNNING, JobState.CANCELLING)
        for rec in self.store.list(states=stale):
            if rec.id in self.runs:
                continue
            try:
                if rec.state is JobState.CANCELLING:
                    self.store.transition(
                        rec.id,
                        JobState.CANCELLED,
                        expect=rec.state,
                        message="cancelled (its scheduler had stopped)",
                    )
                else:
                    self.store.transition(
                        rec.id,
                        JobState.QUEUED,
                        expect=rec.state,
                        message="requeued: its scheduler stopped; resumes from its checkpoint",
                        fields={"placement": ""},
                    )
            except (IllegalTransition, JobNotFound):
                continue

    def serve(self, stop: threading.Event) -> None:
        """Run rounds until ``stop`` is set, then stop the jobs (they requeue) and release.

        Call :meth:`acquire` first (so a busy namespace is reported before serving).
        """
        try:
            while not stop.is_set():
                self.round()
                stop.wait(self.settings.scheduler_interval_s)
        finally:
            self.release()

    # ---- one round -------------------------------------------------------------------------

    def round(self) -> None:
        """Reap ended runs, forward cancellations, decide and apply, publish the pool view."""
        if not self._renew(keys=[self._lease_key], args=[self.owner, LEASE_MS]):
            raise SchedulerBusy("the scheduler lease was lost (another scheduler took over)")
        self._reap()
        self._forward_cancels()
        self._nodes = self.pool.nodes()
        snapshot = self.snapshot()
        for d in self.policy.decide(snapshot):
            if d.kind is DecisionKind.START:
                self._start(d.job_id, d.nodes, d.strategy)
            elif d.kind is DecisionKind.WAIT and self._waits.get(d.job_id) != d.reason:
                self._waits[d.job_id] = d.reason
                self.store.annotate(d.job_id, f"waiting: {d.reason}")
        self._publish_pool()

    def snapshot(self) -> Snapshot:
        """The immutable view the policy decides on."""
        held = Counter(n for run in self.runs.values() for n in run.nodes)
        nodes = tuple(
            NodeView(n.node_id, n.gpus, n.gpus - held.get(n.node_id, 0)) for n in self._nodes
        )
        ids = [j for c in ("interactive", "bulk") for j in self.store.queued(c)]
        queue = [
            QueuedJob(rec.id, rec.job_class, rec.team, rec.gpus, rec.seq, rec.submitted_at)
            for rec in self.store.get_many(ids)
        ]
        running = tuple(
            RunningJob(job_id, run.spec.job_class, run.spec.team, run.nodes)
            for job_id, run in self.runs.items()
        )
        return Snapshot(nodes=nodes, queue=tuple(queue), running=running, now=time.time())

    def _start(self, job_id: str, nodes: tuple[str, ...], strategy: str) -> None:
        placement = {"nodes": list(nodes), "strategy": strategy}
        try:
            rec = self.store.transition(
                job_id,
                JobState.PLACED,
                expect=JobState.QUEUED,
                message=f"placed on {len(set(nodes))} node(s)",
                fields={"placement": placement},
            )
        except (IllegalTransition, JobNotFound):
            return  # cancelled (or taken) since the snapshot
        self._waits.pop(job_id, None)
        attempt = self.store.incr_attempts(job_id)
        log.info("%s: placed on %s (attempt %d)", job_id, _where(nodes), attempt)

        def on_running() -> bool:
            try:
                self.store.transition(
                    job_id,
                    JobState.RUNNING,
                    expect=JobState.PLACED,
                    fields={"started_at": time.time()},
                )
                return True
            except IllegalTransition:
                return False

        run = JobRun(
            job_id,
            rec.spec,
            nodes,
            strategy,
            checkpoint_dir=self.settings.checkpoint_dir / job_id,
            reporter_factory=functools.partial(
                MetricsSink, self.redis_url, self.settings.namespace, job_id
            ),
            on_running=on_running,
            num_threads=1 if self._virtual(nodes) else None,
            placement_timeout_s=self.placement_timeout_s,
            stop_grace_s=self.stop_grace_s,
        )
        self.runs[job_id] = run
        run.start()

    def _virtual(self, nodes: tuple[str, ...]) -> bool:
        """Whether the job's GPUs are CPU-backed slots (then each worker gets one CPU thread,
        so a few virtual GPUs do not oversubscribe the host's cores)."""
        virtual = {n.node_id for n in self._nodes if n.virtual}
        return all(n in virtual for n in nodes)

    def _forward_cancels(self) -> None:
        if not self.runs:
            return
        pipe = self.store.client.pipeline(transaction=False)
        ids = list(self.runs)
        for job_id in ids:
            pipe.hget(self.store.keys.job(job_id), "state")
        for job_id, state in zip(ids, pipe.execute(), strict=True):
            if state == JobState.CANCELLING.value:
                self.runs[job_id].request_stop()

    def _reap(self, requeue_stopped: bool = False) -> None:
        for job_id, run in list(self.runs.items()):
            if run.is_alive():
                continue
            del self.runs[job_id]
            self._record(
                job_id, run.outcome or Outcome(OutcomeKind.LOST, "no outcome"), requeue_stopped
            )

    def _record(self, job_id: str, outcome: Outcome, requeue_stopped: bool) -> None:
        """Turn a run's outcome into the job's next state."""
        try:
            rec = self.store.get(job_id)
        except JobNotFound:
            return
        now = time.time()
        active = (JobState.PLACED, JobState.RUNNING, JobState.CANCELLING)
        if outcome.result:
            self.store.put_metrics(job_id, _metrics_of(outcome.result))
        try:
            if rec.state is JobState.CANCELLING:
                target, msg = JobState.CANCELLED, "cancelled"
            elif outcome.kind is OutcomeKind.FINISHED:
                target, msg = JobState.FINISHED, self._sla_message(rec.spec, job_id, rec, now)
            elif outcome.kind is OutcomeKind.FAILED:
                target, msg = JobState.FAILED, outcome.message
            elif outcome.kind is OutcomeKind.STOPPED and not requeue_stopped:
                target, msg = JobState.CANCELLED, outcome.message
            elif rec.attempts >= MAX_ATTEMPTS and outcome.kind is OutcomeKind.LOST:
                target, msg = (
                    JobState.FAILED,
                    f"gave up after {rec.attempts} attempts: " + (outcome.message),
                )
            else:
                target, msg = JobState.QUEUED, f"requeued: {outcome.message or 'stopped'}"
            fields: dict[str, object] = {"placement": ""}
            if target in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED):
                fields["finished_at"] = now
            if outcome.result:
                fields["result"] = outcome.result
            self.store.transition(job_id, target, expect=active, message=msg, fields=fields)
            log.info("%s: %s%s", job_id, target.value, f" ({msg})" if msg else "")
        except IllegalTransition as err:
            log.warning("job %s: %s", job_id, err)

    def _sla_message(self, spec: Any, job_id: str, rec: Any, now: float) -> str:
        verdict = evaluate_sla(
            spec, self.store.metrics(job_id), elapsed_s=now - rec.submitted_at, finished=True
        )
        met = {True: "SLA met", False: "SLA missed", None: "SLA not measured"}[verdict.met]
        return f"{met}: {verdict.measured} (target {verdict.target})"

    def _publish_pool(self) -> None:
        held = Counter(n for run in self.runs.values() for n in run.nodes)
        view = {
            "at": time.time(),
            "scheduler": self.owner,
            "policy": type(self.policy).__name__,
            "nodes": [
                {**n, "used_gpus": held.get(n["node_id"], 0)} for n in nodes_to_json(self._nodes)
            ],
            "jobs": {job_id: list(run.nodes) for job_id, run in self.runs.items()},
        }
        self.store.client.set(self.store.keys.key("pool"), json.dumps(view), px=LEASE_MS)


def _where(nodes: tuple[str, ...]) -> str:
    """``"2 GPU(s) on 1a2b3c4d"`` style summary of a gang's nodes."""
    return ", ".join(f"{nodes.count(n)} GPU(s) on {n[:8]}" for n in dict.fromkeys(nodes))


def _holder_is_dead(holder: str) -> bool:
    """Whether a lease holder (``host:pid:tag``) was a process on this host that has exited,
    so a scheduler restarted after a crash need not wait for the lease to expire."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _metrics_of(result: dict[str, Any]) -> dict[str, Any]:
    """The metric summary inside a harness result (flat keys such as ``p95_ms``)."""
    metrics = result.get("metrics")
    if isinstance(metrics, dict):
        return metrics
    return {k: v for k, v in result.items() if isinstance(v, int | float | str)}
