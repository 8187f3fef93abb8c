"""The job store: job records, the state machine, queues, events and metrics in Redis.

Every state change goes through :meth:`JobStore.transition`, one Lua script that checks and
applies it atomically, so two schedulers (or a scheduler and a CLI) racing on one job leave
exactly one winner. Submission is a script too: a job is either fully written (record, queue
entry, events) or not at all (:mod:`~orchestrator.store.submission`). The reads are in
:mod:`~orchestrator.store.job_reads`; this module adds the writes and the namespace's other
stores.
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import redis

from orchestrator.config import DEFAULT_RETENTION_S
from orchestrator.errors import (
    IllegalTransition,
    JobEnded,
    JobNotFound,
    StoreError,
)
from orchestrator.store.audit import AuditStore
from orchestrator.store.connection import open_url
from orchestrator.store.ingress import IngressStore
from orchestrator.store.job_reads import BATCH, EVENTS_MAXLEN, pairs
from orchestrator.store.lease import LEASE_MS, Lease, LeaseLost, lease_holder
from orchestrator.store.logs import LogStore
from orchestrator.store.pool_view import PoolHistoryStore, PoolViewStore
from orchestrator.store.records import CORE_FIELDS, JobRecord
from orchestrator.store.retention import RetentionStore
from orchestrator.store.scaling import ScalingStore
from orchestrator.store.states import TERMINAL, JobState, sources
from orchestrator.store.submission import JobSubmission
from orchestrator.store.telemetry import TelemetryStore
from orchestrator.store.tokens import TokenStore
from orchestrator.store.tuning import ProfileStore, StudyJournal, TuneCacheStore, TuneReportStore
from orchestrator.store.wake import WakeChannel, Wakeups
from orchestrator.store.workdirs import WorkingDirStore
from orchestrator.teams import TeamConfig

__all__ = ["METRICS_MAXLEN", "JobStore"]

METRICS_MAXLEN = 1000
"""Approximate cap of a job's metrics stream."""

_TRANSITION_LUA = (
    resources.files("orchestrator.store").joinpath("transition.lua").read_text(encoding="utf-8")
)
# HINCRBY alone would create a stray hash for a job that does not exist.
_INCR_ATTEMPTS_LUA = """
if redis.call("EXISTS", KEYS[1]) == 0 then return false end
return redis.call("HINCRBY", KEYS[1], "attempts", ARGV[1])
"""
# A note on a job (why it waits, the config a run applied) is not a state change: no
# transition. ARGV: field/value pairs; a job that does not exist gets no stray hash.
_ANNOTATE_LUA = """
if redis.call("EXISTS", KEYS[1]) == 0 then return false end
redis.call("HSET", KEYS[1], unpack(ARGV))
return 1
"""

# A run that holds other GPUs in the same state (a service resized in place): its placement and
# message, and a "scaled" event; fenced and compared-and-set as a transition is.
_PLACEMENT_LUA = """
if ARGV[2] ~= "" then
  local holder = redis.call("GET", KEYS[3])
  if holder ~= ARGV[2] then return {"fenced", holder or ""} end
end
local current = redis.call("HGET", KEYS[1], "state")
if not current then return {"missing"} end
if current ~= ARGV[1] then return {"illegal", current} end
local t = redis.call("TIME")
local ts = t[1] .. "." .. string.format("%06d", tonumber(t[2]))
redis.call("HSET", KEYS[1], "placement", ARGV[3], "message", ARGV[4], "updated_at", ts)
redis.call("XADD", KEYS[2], "MAXLEN", "~", ARGV[5], "*",
  "event", "scaled", "ts", ts, "message", ARGV[4], "from", "")
return {"ok"}
"""


class JobStore(JobSubmission):
    """Jobs of one namespace in one Redis, and the stores of the namespace's other keys.

    Args:
        client: a Redis client created with ``decode_responses=True`` (see ``connect``).
        namespace: prefix of every key (see :class:`Keys`).

    Attributes:
        scaling: throughput per GPU count that runs of a job showed.
        profiles: the tuner's performance profiles.
        tune_reports: the tuning reports.
        tune_cache: the tuning cache's entries and index.
        pool_view: the pool view the scheduler publishes.
        tokens: the API tokens (hashed).
        audit: the audit stream (who made each mutation).
        telemetry: the control loop's counters and histograms (for ``/metrics``).
        logs: the captured output of jobs, per rank.
        retention: expiry of ended jobs' keys and the sweep of what is left (``orch gc``).
        retention_s: how long an ended job's keys live (``Settings.retention_s``).
        wake: the wake channel, published on by submissions and cancels (see
            :meth:`wakeups`).
        working_dirs: command jobs' packed working directories, by digest.
        ingress: services' endpoints: requests, answers, ready replicas and the requests'
            figures (the API's side; see ``orchestrator.store.ingress``).
    """

    def __init__(
        self, client: redis.Redis, namespace: str, *, retention_s: float = DEFAULT_RETENTION_S
    ) -> None:
        super().__init__(client, namespace)
        self.retention_s = retention_s
        self.scaling = ScalingStore(client, self.keys)
        self.profiles = ProfileStore(client, self.keys)
        self.tune_reports = TuneReportStore(client, self.keys)
        self.tune_cache = TuneCacheStore(client, self.keys)
        self.pool_view = PoolViewStore(client, self.keys)
        self.pool_history = PoolHistoryStore(client, self.keys)
        self.tokens = TokenStore(client, self.keys)
        self.audit = AuditStore(client, self.keys)
        self.telemetry = TelemetryStore(client, self.keys)
        self.logs = LogStore(client, self.keys)
        self.retention = RetentionStore(client, self.keys, self.logs)
        self.wake = WakeChannel(client, self.keys)
        self.working_dirs = WorkingDirStore(client, self.keys)
        self.ingress = IngressStore(client, namespace)
        self._transition = client.register_script(_TRANSITION_LUA)
        self._incr_attempts = client.register_script(_INCR_ATTEMPTS_LUA)
        self._annotate = client.register_script(_ANNOTATE_LUA)
        self._place = client.register_script(_PLACEMENT_LUA)
        self.fence: str | None = None
        """The scheduler lease holder this store writes state for (set by the control loop
        once it holds the lease): every transition is refused unless it still holds it."""

    @classmethod
    def from_url(
        cls, url: str, namespace: str, *, retention_s: float = DEFAULT_RETENTION_S
    ) -> JobStore:
        """The store of ``namespace`` on the Redis at ``url``.

        Raises:
            StoreError: the URL is invalid or the server does not answer.
        """
        return cls(open_url(url), namespace, retention_s=retention_s)

    # ---- the namespace's other keys ----------------------------------------------------------

    def lease(self, owner: str, ttl_ms: int = LEASE_MS) -> Lease:
        """The scheduler lease of this namespace, as ``owner`` would hold it (not yet taken:
        see :meth:`Lease.acquire`)."""
        return Lease(self.client, self.keys, owner, ttl_ms)

    def lease_holder(self) -> str | None:
        """Who holds the scheduler lease (``host:pid:tag``), or ``None`` when no scheduler
        drives this namespace."""
        return lease_holder(self.client, self.keys)

    def study_journal(self, url: str) -> StudyJournal:
        """The namespace's Optuna journal on the Redis at ``url`` (this store's Redis: Optuna
        opens its own connection to it)."""
        return StudyJournal.of(url, self.keys)

    # ---- teams -------------------------------------------------------------------------------

    def put_teams(self, config: TeamConfig) -> None:
        """Store the team config (replacing the previous one); the scheduler applies it on its
        next round, and submissions are checked against it from now on."""
        self.client.set(self.keys.teams, config.model_dump_json())

    def transition(
        self,
        job_id: str,
        to: JobState | str,
        *,
        expect: JobState | str | Iterable[JobState | str] | None = None,
        message: str = "",
        fields: Mapping[str, object] | None = None,
    ) -> JobRecord:
        """Move a job to state ``to``, atomically, if the state machine allows it.

        Args:
            job_id: the job.
            to: the new state.
            expect: the state(s) the caller believes the job is in; any other current state is
                refused even when the transition itself would be legal (compare-and-set).
            message: why, stored on the job and in the event.
            fields: extra fields to set (``placement``, ``started_at``, ``result``...). Strings
                are stored as given, ``None`` as ``""`` (cleared: ``placement=None`` reads back
                as ``None``), anything else as JSON.

        A job that enters a terminal state never changes again: its keys are then set to
        expire after ``retention_s`` (:meth:`RetentionStore.expire`).

        Returns:
            The record as it is right after the transition.

        Raises:
            JobNotFound: no such job.
            IllegalTransition: the job's state is not in ``expect``, or ``to`` cannot be
                entered from it. Nothing is changed.
            LeaseLost: the store is fenced (:attr:`fence`) and its lease holder no longer
                holds the scheduler lease. Nothing is changed.
            ValueError: ``fields`` names a field the store owns (state, id, seq...).
        """
        target = JobState(to)
        # both checked before the script runs: a bad argument changes nothing
        expected, extra = _expected(expect), _field_args(fields)
        reply = self._transition(
            keys=[
                self.keys.job(job_id),
                self.keys.events(job_id),
                self.keys.queue_version,
                self.keys.scheduler_lease,
            ],
            args=[
                target.value,
                " ".join(s.value for s in sources(target)),
                expected,
                message,
                self.keys.queue_prefix,
                EVENTS_MAXLEN,
                self.fence or "",
                *extra,
            ],
        )
        self._raise_refusal(job_id, target, reply)
        if target in TERMINAL:
            # it never changes again: its keys expire after the retention age (orch gc sweeps
            # what cannot expire by itself)
            self.retention.expire(job_id, self.retention_s)
        return JobRecord.from_hash(pairs(reply[2]))

    def _raise_refusal(self, job_id: str, target: JobState, reply: builtins.list[Any]) -> None:
        """Raise what the transition script's ``reply`` says refused the write (nothing when it
        was applied)."""
        if reply[0] == "missing":
            raise JobNotFound(job_id)
        if reply[0] == "fenced":
            holder = reply[1] or "nobody"
            raise LeaseLost(
                f"refused a state write of {self.fence} for {job_id}: the scheduler lease is "
                f"held by {holder} (a deposed scheduler's writes are fenced)"
            )
        if reply[0] == "illegal":
            raise IllegalTransition(job_id, reply[1], target.value)

    def cancel(self, job_id: str, *, message: str = "cancelled") -> JobRecord:
        """Cancel a job: a waiting one at once (``cancelled``); a placed or running one is asked
        to stop (``cancelling``: the control loop stops it and frees its GPUs).

        Returns:
            The record right after the transition.

        Raises:
            JobNotFound: no such job.
            JobEnded: the job has ended or is already being stopped.
        """
        rec = self.get(job_id)
        for _ in range(3):  # the state may move under us (queued -> placed): retry on the new one
            waiting = rec.state in (JobState.SUBMITTED, JobState.QUEUED)
            target = JobState.CANCELLED if waiting else JobState.CANCELLING
            try:
                done = self.transition(job_id, target, expect=rec.state, message=message)
            except IllegalTransition:
                rec = self.get(job_id)
                if rec.state in TERMINAL or rec.state is JobState.CANCELLING:
                    raise JobEnded(job_id, rec.state.value) from None
                continue
            if target is JobState.CANCELLING:  # its run stops now, not at the next round
                self.wake.publish(job_id)
            return done
        raise StoreError(f"job {job_id} keeps changing state ({rec.state.value}); try again")

    def wakeups(self) -> Wakeups:
        """Subscribe to the wake channel: the control loop waits on it between rounds, so a
        submission or a cancel is acted on at once rather than at the next polling round."""
        return self.wake.subscribe()

    def set_placement(
        self, job_id: str, placement: Mapping[str, object], *, expect: JobState, message: str
    ) -> None:
        """Record that the job's run holds other GPUs while its state stays ``expect`` (a
        service resized in place): its ``placement`` and message, and a ``scaled`` event.
        Written by the control loop alone, fenced by its lease as a transition is.

        Raises:
            JobNotFound: no such job.
            IllegalTransition: the job is not in ``expect`` (nothing is changed).
            LeaseLost: the store is fenced and its holder no longer holds the lease.
        """
        reply = self._place(
            keys=[self.keys.job(job_id), self.keys.events(job_id), self.keys.scheduler_lease],
            args=[
                JobState(expect).value,
                self.fence or "",
                json.dumps(dict(placement)),
                message,
                EVENTS_MAXLEN,
            ],
        )
        self._raise_refusal(job_id, JobState(expect), reply)

    def annotate(self, job_id: str, message: str) -> None:
        """Set the job's message without changing its state (e.g. why it is waiting).

        Raises:
            JobNotFound: no such job.
        """
        if self._annotate(keys=[self.keys.job(job_id)], args=["message", message]) is None:
            raise JobNotFound(job_id)

    def request_tune(self, job_id: str) -> None:
        """Ask the control loop to re-tune a running job (it takes the request next round:
        :meth:`take_tune_requests`)."""
        self.client.sadd(self.keys.tune_requests, job_id)

    def take_tune_requests(self) -> builtins.list[str]:
        """The jobs whose re-tune was asked for since the last call (taken atomically)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.smembers(self.keys.tune_requests)
        pipe.delete(self.keys.tune_requests)
        members, _ = pipe.execute()
        return sorted(members)

    def note_event(
        self,
        job_id: str,
        event: str,
        message: str,
        fields: Mapping[str, str] | None = None,
        *,
        as_message: bool = True,
    ) -> None:
        """Add an event that changes no state to the job's event stream (``event`` names what
        was seen: ``sla-violated``, ``guard``, ``config``...; its ``from`` is empty) and make
        ``message`` the job's message, as a state change would (unless not ``as_message``);
        ``fields``: written with it (not the store's own: ``CORE_FIELDS``).

        Raises:
            JobNotFound: no such job.
            ValueError: ``fields`` names a field the store writes itself.
        """
        values = dict(fields or {})
        clash = set(values) & CORE_FIELDS
        if clash:
            raise ValueError(f"note_event may not write the store's fields {sorted(clash)}")
        if as_message:
            values["message"] = message
        extra = [x for kv in values.items() for x in kv]
        if extra and self._annotate(keys=[self.keys.job(job_id)], args=extra) is None:
            raise JobNotFound(job_id)
        if not extra and not self.client.exists(self.keys.job(job_id)):
            raise JobNotFound(job_id)
        self.client.xadd(
            self.keys.events(job_id),
            {"event": event, "ts": f"{time.time():.6f}", "message": message, "from": ""},
            maxlen=EVENTS_MAXLEN,
            approximate=True,
        )

    def incr_attempts(self, job_id: str, by: int = 1) -> int:
        """Count one more start of the job; returns the new count.

        Raises:
            JobNotFound: no such job.
        """
        count = self._incr_attempts(keys=[self.keys.job(job_id)], args=[by])
        if count is None:
            raise JobNotFound(job_id)
        return int(count)

    # ---- metrics -----------------------------------------------------------------------------

    def put_metrics(self, job_id: str, metrics: Mapping[str, Any]) -> None:
        """Record one metrics report: update the latest values and append to the history."""
        if not metrics:
            return
        encoded = {k: json.dumps(v, default=_plain) for k, v in metrics.items()}
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.keys.metrics(job_id), mapping=encoded)  # type: ignore[arg-type]
        pipe.xadd(
            self.keys.metrics_stream(job_id),
            encoded,  # type: ignore[arg-type]
            maxlen=METRICS_MAXLEN,
            approximate=True,
        )
        pipe.execute()

    # ---- housekeeping ------------------------------------------------------------------------

    def delete_namespace(self) -> int:
        """Delete every key of this namespace (tests, ``orch reset``); returns how many."""
        deleted = 0
        batch: builtins.list[str] = []
        for key in self.client.scan_iter(match=self.keys.pattern, count=1000):
            batch.append(key)
            if len(batch) >= BATCH:
                deleted += int(self.client.unlink(*batch))
                batch.clear()
        if batch:
            deleted += int(self.client.unlink(*batch))
        return deleted


# The client decodes responses (decode_responses=True), but redis-py types every reply as
# ``bytes | str``; these casts state what the connection guarantees.


def _plain(value: Any) -> Any:
    """JSON fallback for numpy / torch scalars, which the harness may report as they are."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    return str(value)


def _expected(expect: JobState | str | Iterable[JobState | str] | None) -> str:
    """The transition script's compare-and-set argument: ``*`` (any state) or the expected
    states, space-separated."""
    if expect is None:
        return "*"
    if isinstance(expect, str):
        return JobState(expect).value
    return " ".join(JobState(s).value for s in expect)


def _field_args(fields: Mapping[str, object] | None) -> builtins.list[str]:
    """``fields`` as the transition script's ``name, value, ...`` arguments: strings as given,
    ``None`` as ``""``, anything else as JSON.

    Raises:
        ValueError: a field the store owns (state, id, seq...).
    """
    extra: builtins.list[str] = []
    for name, value in (fields or {}).items():
        if name in CORE_FIELDS:
            raise ValueError(f"field {name!r} is owned by the store; it cannot be set")
        if value is None:
            value = ""
        extra += [name, value if isinstance(value, str) else json.dumps(value)]
    return extra
