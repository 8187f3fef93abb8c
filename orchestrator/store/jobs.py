"""The job store: one namespace's jobs in Redis (records, the state machine, queues, events
and metrics), and the stores of the namespace's other keys.

:class:`JobStore` is one class because a job's hash, its queue entry and its event stream are
one thing read and written together: every state change goes through
:meth:`JobStore.transition`, one Lua script that checks and applies it atomically, so two
schedulers (or a scheduler and a CLI) racing on one job leave exactly one winner; the reads
beside it batch their round trips (one pipeline or one script call per :data:`BATCH` jobs: the
control loop reads every queued and running job each round). Submission is a second thing (the
admission checks, dependencies and the submit script, which writes a job whole or not at all):
a :class:`~orchestrator.store.submission.JobSubmission` the store owns and exposes through
:meth:`JobStore.submit` and its batch forms. Every other key family has its own typed store,
an attribute of the ``JobStore`` (``profiles``, ``tokens``, ``logs``...).
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib import resources
from typing import Any, cast

import redis

from orchestrator.config import DEFAULT_RETENTION_S
from orchestrator.errors import (
    AmbiguousJob,
    IllegalTransition,
    JobEnded,
    JobNotFound,
    SpecError,
    StoreError,
)
from orchestrator.spec import JobSpec
from orchestrator.store.audit import AuditStore
from orchestrator.store.connection import open_url
from orchestrator.store.history import STORED
from orchestrator.store.ingress import IngressStore
from orchestrator.store.keys import Keys
from orchestrator.store.lease import LEASE_MS, Lease, LeaseLost, lease_holder
from orchestrator.store.logs import LogStore
from orchestrator.store.pool_view import PoolHistoryStore, PoolViewStore
from orchestrator.store.records import CORE_FIELDS, JobRecord
from orchestrator.store.retention import RetentionStore
from orchestrator.store.scaling import ScalingStore
from orchestrator.store.states import TERMINAL, JobState, sources
from orchestrator.store.submission import BATCH, EVENTS_MAXLEN, JobSubmission, pairs
from orchestrator.store.telemetry import TelemetryStore
from orchestrator.store.tokens import TokenStore
from orchestrator.store.tuning import ProfileStore, StudyJournal, TuneCacheStore, TuneReportStore
from orchestrator.store.wake import WakeChannel, Wakeups
from orchestrator.store.workdirs import WorkingDirStore
from orchestrator.teams import TeamConfig, parse_teams

__all__ = ["METRICS_MAXLEN", "QUEUE_FACTS", "JobStore"]


METRICS_MAXLEN = 1000
"""Approximate cap of a job's metrics stream."""

QUEUE_FACTS = (
    "class",
    "team",
    "gpus",
    "seq",
    "submitted_at",
    "gpus_min",
    "gpus_max",
    "deadline_s",
    "wait_target_s",
    "gpu_memory_gb",
    "gpu_kinds",
    "exclude_gpu_kinds",
    "latency_ceiling",
    "after",
    *STORED.values(),
)
"""The job fields a scheduling snapshot reads (see :meth:`JobStore.queue_facts`): the job's
history (``orchestrator.store.history``), written by the control loop when a run ends, and the
others at submission (``after``: the ids of the jobs it starts after, for the loop, not the
policy)."""

# The jobs (hash keys) whose state is "cancelling".
_CANCELLING_LUA = """
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call("HGET", key, "state") == "cancelling" then out[#out + 1] = key end
end
return out
"""
# The same fields of many hashes in one command: a pipeline of one HMGET per running job costs
# the client a command to pack and a reply to parse each (about 2 ms a round at 64 jobs in
# bench/control_plane); one script call costs one of each.
_HMGET_MANY_LUA = """
local out = {}
for i, key in ipairs(KEYS) do out[i] = redis.call("HMGET", key, unpack(ARGV)) end
return out
"""


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


class JobStore:
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
        self.client = client
        self.namespace = namespace
        self.keys = Keys(namespace)
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
        self._cancelling = client.register_script(_CANCELLING_LUA)
        self._hmget_keys = client.register_script(_HMGET_MANY_LUA)
        self._teams: tuple[str | None, TeamConfig | None] = (None, None)
        self.submission = JobSubmission(
            client,
            self.keys,
            jobs=self,
            profiles=self.profiles,
            pool_view=self.pool_view,
            working_dirs=self.working_dirs,
            wake=self.wake,
        )
        """Admission and the submit script (:meth:`submit` and its batch forms use it)."""
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

    def teams(self) -> TeamConfig | None:
        """The stored team config, or ``None`` when none was applied (one ``GET``; parsed only
        when it changed)."""
        raw = cast(str | None, self.client.get(self.keys.teams))
        if raw != self._teams[0]:
            config = parse_teams(json.loads(raw), "stored team config") if raw else None
            self._teams = (raw, config)
        return self._teams[1]

    def put_teams(self, config: TeamConfig) -> None:
        """Store the team config (replacing the previous one); the scheduler applies it on its
        next round, and submissions are checked against it from now on."""
        self.client.set(self.keys.teams, config.model_dump_json())

    # ---- submission (JobSubmission) ------------------------------------------------------------

    def submit(self, spec: JobSpec, *, by: str | None = None) -> JobRecord:
        """Store a new job, queued in its class's FIFO queue, with events submitted and queued
        (:meth:`JobSubmission.submit`: ``by`` is who submitted it; the id is
        ``{spec.name}-{6 hex digits}``).

        Raises:
            SpecError: the team config, the pool or a dependency refuses the job (nothing is
                written).
        """
        return self.submission.submit(spec, by=by)

    def submit_many(self, specs: Iterable[JobSpec], *, by: str | None = None) -> builtins.list[str]:
        """Submit many jobs in one round trip per batch, all or none admitted
        (:meth:`JobSubmission.submit_many`); returns their ids in order."""
        return self.submission.submit_many(specs, by=by)

    def submit_each(
        self, specs: Sequence[JobSpec], bys: Sequence[str]
    ) -> builtins.list[str | SpecError]:
        """Submit jobs each on its own, in a few round trips for them all
        (:meth:`JobSubmission.submit_each`): each job's id, or why it was refused."""
        return self.submission.submit_each(specs, bys)

    def work_estimates(self, specs: Sequence[JobSpec]) -> builtins.list[float | None]:
        """Each job's seconds of work on its requested GPUs, as submission stores it
        (:meth:`JobSubmission.work_estimates`)."""
        return self.submission.work_estimates(specs)

    # ---- jobs: reads -------------------------------------------------------------------------

    def get(self, job_id: str) -> JobRecord:
        """The job with this id.

        Raises:
            JobNotFound: no such job.
        """
        h = _hash(self.client.hgetall(self.keys.job(job_id)))
        if not h:
            raise JobNotFound(job_id)
        return JobRecord.from_hash(h)

    def get_many(self, job_ids: Iterable[str]) -> builtins.list[JobRecord]:
        """The jobs with these ids, in the same order, in one round trip per batch; ids of
        jobs that no longer exist are skipped."""
        ids = builtins.list(job_ids)
        records: builtins.list[JobRecord] = []
        for start in range(0, len(ids), BATCH):
            pipe = self.client.pipeline(transaction=False)
            for job_id in ids[start : start + BATCH]:
                pipe.hgetall(self.keys.job(job_id))
            records += [JobRecord.from_hash(h) for h in pipe.execute() if h]
        return records

    def queue_facts(self, job_ids: Iterable[str]) -> builtins.list[dict[str, str]]:
        """What a scheduling snapshot needs of these jobs, without their specs (a fraction of
        the bytes): ``id`` and the fields of :data:`QUEUE_FACTS` present on each job (absent
        ones are left out: jobs stored by an older version, or facts not known yet); missing
        jobs are skipped."""
        out: builtins.list[dict[str, str]] = []
        for job_id, values in self._hmget_many(builtins.list(job_ids), QUEUE_FACTS):
            if values[0] is not None:
                facts = {k: v for k, v in zip(QUEUE_FACTS, values, strict=True) if v}
                out.append({"id": job_id, **facts})
        return out

    def states(self, job_ids: Iterable[str]) -> dict[str, str | None]:
        """Each job's state (``None``: no such job, e.g. removed by ``orch gc``), one
        pipelined round trip per batch."""
        return {j: v[0] for j, v in self._hmget_many(builtins.list(job_ids), ("state",))}

    def _hmget_many(
        self, ids: builtins.list[str], names: Sequence[str]
    ) -> Iterator[tuple[str, builtins.list[str | None]]]:
        """``(id, values of names)`` per job, one pipelined round trip per batch."""
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            pipe = self.client.pipeline(transaction=False)
            for job_id in chunk:
                pipe.hmget(self.keys.job(job_id), names)
            yield from zip(chunk, pipe.execute(), strict=True)

    def resolve(self, ref: str) -> str:
        """The id of the job ``ref`` names: a job id, or the name of exactly one job.

        Raises:
            JobNotFound: no job has this id or name.
            AmbiguousJob: several jobs have this name (listed in submit order).
        """
        if self.client.exists(self.keys.job(ref)):
            return ref
        ids = cast(builtins.list[str], list(self.client.smembers(self.keys.names(ref))))
        if not ids:
            raise JobNotFound(ref)
        if len(ids) > 1:
            scores = self.client.zmscore(self.keys.jobs, ids)
            ordered = sorted(zip(ids, scores, strict=True), key=lambda p: p[1] or 0.0)
            raise AmbiguousJob(ref, [i for i, _ in ordered])
        return ids[0]

    def list(
        self, states: Iterable[JobState | str] | None = None, limit: int | None = None
    ) -> list[JobRecord]:
        """Jobs in submit order, optionally only those in ``states``.

        Args:
            states: keep only jobs in these states.
            limit: keep only the ``limit`` most recently submitted of the matching jobs.
        """
        wanted = None if states is None else {JobState(s) for s in states}
        if wanted is None and limit is not None:
            ids = _strs(self.client.zrange(self.keys.jobs, -limit, -1)) if limit > 0 else []
        else:
            ids = _strs(self.client.zrange(self.keys.jobs, 0, -1))
        records = self.get_many(ids)
        if wanted is not None:
            records = [r for r in records if r.state in wanted]
        if limit is not None:
            records = records[-limit:] if limit > 0 else []
        return records

    def job_fields(
        self, names: Sequence[str], limit: int | None = None
    ) -> builtins.list[dict[str, str]]:
        """Fields ``names`` of every job (or of the ``limit`` most recently submitted), in submit
        order, one round trip per batch: for listings that need a few fields of many jobs, not
        their records (``/metrics``, the dashboard). Each dict has ``id`` and the named fields
        the job has; jobs deleted meanwhile are skipped."""
        if limit is None:
            ids = _strs(self.client.zrange(self.keys.jobs, 0, -1))
        else:
            ids = _strs(self.client.zrange(self.keys.jobs, -limit, -1)) if limit > 0 else []
        out: builtins.list[dict[str, str]] = []
        for job_id, values in self._hmget_many(ids, names):
            found = {k: v for k, v in zip(names, values, strict=True) if v is not None}
            if found:
                out.append({"id": job_id, **found})
        return out

    def queued(self, job_class: str) -> builtins.list[str]:
        """Ids of the queued jobs of a class, oldest submission first."""
        return _strs(self.client.zrange(self.keys.queue(job_class), 0, -1))

    def queue_version(self) -> int:
        """A counter that changes whenever any queue's membership does (submission, a job
        leaving or re-entering the queue): equal values mean the same queues."""
        return int(cast(str | None, self.client.get(self.keys.queue_version)) or 0)

    def cancelling(self, job_ids: Iterable[str]) -> builtins.list[str]:
        """Which of these jobs are being cancelled (one round trip, a short reply)."""
        keys = [self.keys.job(j) for j in job_ids]
        if not keys:
            return []
        found = self._cancelling(keys=keys)
        return [k.removeprefix(self.keys.key("job", "")) for k in _strs(found)]

    def events(self, job_id: str) -> builtins.list[dict[str, Any]]:
        """The job's state changes, oldest first: ``{id, event, from, message, ts}``.

        ``ts`` is Redis server time in seconds; ``id`` is the stream entry id.

        Raises:
            JobNotFound: no such job.
        """
        entries = _entries(self.client.xrange(self.keys.events(job_id)))
        if not entries and not self.client.exists(self.keys.job(job_id)):
            raise JobNotFound(job_id)
        return [{"id": sid, **f, "ts": float(f["ts"])} for sid, f in entries]

    def events_after(
        self, job_id: str, after: str = "0", block_ms: int = 0
    ) -> builtins.list[dict[str, Any]]:
        """The job's state changes after stream entry ``after`` (as :meth:`events` gives
        them), waiting up to ``block_ms`` for one when there is none yet (0: do not wait)."""
        reply = cast(
            builtins.list[tuple[str, Any]],
            self.client.xread(
                {self.keys.events(job_id): after}, block=block_ms or None, count=EVENTS_MAXLEN
            ),
        )
        entries = _entries(reply[0][1]) if reply else []
        return [{"id": sid, **f, "ts": float(f["ts"])} for sid, f in entries]

    # ---- jobs: state changes and notes -------------------------------------------------------

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

    def latest_metrics(
        self, job_ids: Iterable[str], names: Iterable[str]
    ) -> dict[str, dict[str, Any]]:
        """The latest reported value of metrics ``names`` of each job, in one round trip per
        batch (jobs or metrics never reported are left out)."""
        ids, names = builtins.list(job_ids), tuple(names)
        out: dict[str, dict[str, Any]] = {}
        metrics = self.keys.metrics
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
            replies = self._hmget_keys(keys=[metrics(j) for j in chunk], args=names)
            for job_id, values in zip(chunk, replies, strict=True):
                got = {k: json.loads(v) for k, v in zip(names, values, strict=True) if v}
                if got:
                    out[job_id] = got
        return out

    def metrics(self, job_id: str) -> dict[str, Any]:
        """The latest value of every metric the job reported (empty if none)."""
        raw = _hash(self.client.hgetall(self.keys.metrics(job_id)))
        return {k: json.loads(v) for k, v in raw.items()}

    def ready_replicas(self, job_id: str) -> int:
        """How many of a service's replicas are ready now: its endpoint's ready set (one read;
        0 for a job with none)."""
        from orchestrator.store.ingress import ready_count

        return ready_count(self.client, self.namespace, job_id)

    def judged_metrics(self, rec: JobRecord) -> dict[str, Any]:
        """The metrics a job is judged and shown on: its latest reports, and for a service
        with an endpoint its requests' figures over its whole life as its ingress measured
        them (``orchestrator.store.ingress``: they outlive every relaunch and scale)."""
        from pydantic import ValidationError

        from orchestrator.store.ingress import read_figures, service_keys, with_service_figures

        metrics = self.metrics(rec.id)
        try:
            spec = rec.spec
        except ValidationError:  # stored by an older version: its reports alone
            return metrics
        if spec.serve is None or not spec.serve.endpoint:
            return metrics
        lat = spec.sla.latency
        ceiling = None if lat is None else (lat.percentile / 100.0, lat.max_ms)
        keys = service_keys(self.keys.namespace, rec.id)
        return with_service_figures(metrics, read_figures(self.client, keys, ceiling))

    def metrics_history(self, job_id: str, count: int = 100) -> builtins.list[dict[str, Any]]:
        """The job's last ``count`` metrics reports, oldest first.

        Each report carries ``ts`` (server time of the report, seconds) unless it has its own.
        """
        entries = _entries(self.client.xrevrange(self.keys.metrics_stream(job_id), count=count))
        history = []
        for sid, raw in reversed(entries):
            report: dict[str, Any] = {"ts": int(sid.split("-", 1)[0]) / 1000.0}
            report.update({k: json.loads(v) for k, v in raw.items()})
            history.append(report)
        return history

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


def _hash(reply: object) -> dict[str, str]:
    return cast(dict[str, str], reply)


def _strs(reply: object) -> list[str]:
    return cast(list[str], reply)


def _entries(reply: object) -> list[tuple[str, dict[str, str]]]:
    return cast(list[tuple[str, dict[str, str]]], reply)


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
