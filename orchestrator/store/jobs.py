"""The job store: job records, the state machine, queues, events and metrics in Redis.

Every state change goes through :meth:`JobStore.transition`, one Lua script that checks and
applies it atomically, so two schedulers (or a scheduler and a CLI) racing on one job leave
exactly one winner. Submission is a script too: a job is either fully written (record, queue
entry, events) or not at all.
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
from orchestrator.elastic import gpu_range
from orchestrator.errors import (
    AmbiguousJob,
    IllegalTransition,
    JobEnded,
    JobNotFound,
    SpecError,
    StoreError,
)
from orchestrator.sla import work_seconds
from orchestrator.spec import JobSpec
from orchestrator.store.audit import AuditStore
from orchestrator.store.connection import open_url
from orchestrator.store.dependencies import new_id, plan_ids
from orchestrator.store.keys import Keys
from orchestrator.store.lease import LEASE_MS, Lease, LeaseLost, lease_holder
from orchestrator.store.logs import LogStore
from orchestrator.store.pool_view import PoolHistoryStore, PoolViewStore, memory_problem
from orchestrator.store.records import CORE_FIELDS, JobRecord
from orchestrator.store.retention import RetentionStore
from orchestrator.store.scaling import ScalingStore
from orchestrator.store.states import TERMINAL, JobState, sources
from orchestrator.store.telemetry import TelemetryStore
from orchestrator.store.tokens import TokenStore
from orchestrator.store.tuning import ProfileStore, StudyJournal, TuneCacheStore, TuneReportStore
from orchestrator.store.wake import WakeChannel, Wakeups
from orchestrator.store.workdirs import WorkingDirStore
from orchestrator.teams import TeamConfig, entry_problem, parse_teams

__all__ = ["EVENTS_MAXLEN", "METRICS_MAXLEN", "QUEUE_FACTS", "JobStore"]

EVENTS_MAXLEN = 1000
"""Approximate cap of a job's event stream (a job requeued forever must not grow it forever)."""

METRICS_MAXLEN = 1000
"""Approximate cap of a job's metrics stream."""

_SCRIPTS = resources.files("orchestrator.store")
_SUBMIT_LUA = _SCRIPTS.joinpath("submit.lua").read_text(encoding="utf-8")
_TRANSITION_LUA = _SCRIPTS.joinpath("transition.lua").read_text(encoding="utf-8")
# HINCRBY alone would create a stray hash for a job that does not exist.
_INCR_ATTEMPTS_LUA = """
if redis.call("EXISTS", KEYS[1]) == 0 then return false end
return redis.call("HINCRBY", KEYS[1], "attempts", ARGV[1])
"""
# A note on a job (why it waits) is not a state change: no event, no transition.
_ANNOTATE_LUA = """
if redis.call("EXISTS", KEYS[1]) == 0 then return false end
redis.call("HSET", KEYS[1], "message", ARGV[1])
return 1
"""
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
_ID_TRIES = 16
_BATCH = 500

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
    "attained_gpu_s",
    "remaining_s",
    "preempted_at",
    "gpu_memory_gb",
    "restarts",
    "most_gpus",
    "after",
)
"""The job fields a scheduling snapshot reads (see :meth:`JobStore.queue_facts`);
``attained_gpu_s``, ``remaining_s``, ``preempted_at``, ``restarts`` and ``most_gpus`` are
written by the control loop when a run ends, the others at submission (``after``: the ids of the
jobs it starts after, for the loop, not the policy)."""


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
    """

    def __init__(
        self, client: redis.Redis, namespace: str, *, retention_s: float = DEFAULT_RETENTION_S
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.retention_s = retention_s
        self.keys = Keys(namespace)
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
        self._submit = client.register_script(_SUBMIT_LUA)
        self._transition = client.register_script(_TRANSITION_LUA)
        self._incr_attempts = client.register_script(_INCR_ATTEMPTS_LUA)
        self._annotate = client.register_script(_ANNOTATE_LUA)
        self._cancelling = client.register_script(_CANCELLING_LUA)
        self._hmget_keys = client.register_script(_HMGET_MANY_LUA)
        self._teams: tuple[str | None, TeamConfig | None] = (None, None)
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

    def teams(self) -> TeamConfig | None:
        """The stored team config, or ``None`` when none was applied (one ``GET``; parsed only
        when it changed)."""
        raw = cast(str | None, self.client.get(self.keys.teams))
        if raw != self._teams[0]:
            config = parse_teams(json.loads(raw), "stored team config") if raw else None
            self._teams = (raw, config)
        return self._teams[1]

    def check_admission(self, specs: Iterable[JobSpec]) -> None:
        """Refuse jobs the team config forbids, or whose GPU memory no node of the pool the
        scheduler last published has (none published: the job waits, saying so), before any
        is written.

        Raises:
            SpecError: one line per refused job, naming the field and what is allowed.
        """
        specs = builtins.list(specs)
        config = self.teams()
        problems = [
            f"job {spec.name!r}: {problem}"
            for spec in specs
            if spec.workload.entry is not None
            and (problem := entry_problem(config, spec.team, spec.workload.entry))
        ]
        problems += [
            f"job {spec.name!r}: workload.working_dir {digest} is not stored: submit with "
            "orch submit --working-dir DIR"
            for spec in specs
            if (digest := spec.workload.working_dir) is not None
            and not self.working_dirs.exists(digest)
        ]
        if config is not None:
            problems += [
                f"job {spec.name!r}: {problem}"
                for spec in specs
                for problem in config.admission_problems(spec.team, spec.resources.gpus.min)
            ]
        if problems:
            raise SpecError("team config", problems)
        if any(spec.resources.gpu_memory_gb is not None for spec in specs):
            view = self.pool_view.read() or {}
            problems = [
                f"job {spec.name!r}: {problem}"
                for spec in specs
                if (problem := memory_problem(spec, view.get("nodes") or []))
            ]
            if problems:
                raise SpecError("pool", problems)

    # ---- writing -----------------------------------------------------------------------------

    def submit(self, spec: JobSpec, *, by: str | None = None) -> JobRecord:
        """Store a new job, queued in its class's FIFO queue, with events submitted and queued.

        Args:
            spec: the validated job.
            by: who submitted it (a user name), recorded on the job and its first event.

        Returns:
            The stored record; its id is ``{spec.name}-{6 hex digits}``.

        Raises:
            SpecError: the team config refuses the job (nothing is written).
        """
        self.check_admission([spec])
        ((job_id, after),) = plan_ids(self, [spec])
        (work,) = self.work_estimates([spec])
        return self._submit_one(spec, by, job_id, after, work)

    def _submit_one(
        self, spec: JobSpec, by: str | None, job_id: str, after: str, work: float | None
    ) -> JobRecord:
        """Write one job under ``job_id``, or under a fresh id while it is taken."""
        for _ in range(_ID_TRIES):
            reply = self._submit(**self._submit_args(spec, by, job_id, after, work))
            if reply[0] == "ok":
                return JobRecord.from_hash(_pairs(reply[1]))
            job_id = new_id(spec)
        raise StoreError(f"no free job id for {spec.name!r} after {_ID_TRIES} tries")

    def submit_many(self, specs: Iterable[JobSpec], *, by: str | None = None) -> builtins.list[str]:
        """Submit many jobs in one round trip per batch (each still atomic on its own).

        Returns:
            The new job ids, in the order of ``specs``.

        Raises:
            SpecError: the team config refuses one of the jobs, or a dependency is wrong
                (none is written).
        """
        specs = builtins.list(specs)
        self.check_admission(specs)
        planned = plan_ids(self, specs)
        ids: builtins.list[str] = []
        for start in range(0, len(specs), _BATCH):
            batch = builtins.list(zip(specs[start : start + _BATCH], planned[start:], strict=False))
            pipe = self.client.pipeline(transaction=False)
            works = self.work_estimates([spec for spec, _ in batch])
            for (spec, (job_id, after)), work in zip(batch, works, strict=True):
                self._submit(**self._submit_args(spec, by, job_id, after, work), client=pipe)
            for (spec, (_, after)), work, reply in zip(batch, works, pipe.execute(), strict=True):
                # An id already taken (1 in 16 million per name): retry that one on its own.
                ids.append(
                    _pairs(reply[1])["id"]
                    if reply[0] == "ok"
                    else self._submit_one(spec, by, new_id(spec), after, work).id
                )
        return ids

    def work_estimates(self, specs: Sequence[JobSpec]) -> builtins.list[float | None]:
        """Each job's seconds of work on its requested GPUs from its spec and the profile
        tuned under its name (:func:`~orchestrator.sla.work_seconds`): stored at submission
        as its ``remaining_s`` until a run measures it, so that a deadline job is planned
        from its submission on, live as in the simulator. One ``MGET`` for the profiles."""
        wanted = [s.name for s in specs if s.job_class == "bulk" and s.run.duration_s is None]
        profiles = self.profiles.load_many(wanted)
        return [work_seconds(s, profiles.get(s.name)) for s in specs]

    def _submit_args(
        self, spec: JobSpec, by: str | None, job_id: str, after: str, work: float | None
    ) -> dict[str, Any]:
        """The submit script's keys and arguments for a new job ``job_id`` that starts after
        the jobs ``after`` (comma-separated ids, "" if none), with ``work`` seconds of work
        (``None``: unknown)."""
        spec_json = json.dumps(
            spec.model_dump(mode="json", by_alias=True), separators=(",", ":"), sort_keys=True
        )
        k = self.keys
        return {
            "keys": [
                k.seq,
                k.job(job_id),
                k.jobs,
                k.queue(spec.job_class),
                k.events(job_id),
                k.names(spec.name),
                k.queue_version,
            ],
            "args": [
                job_id,
                spec.name,
                spec.team,
                spec.job_class,
                spec_json,
                spec.gpus,
                by or "",
                EVENTS_MAXLEN,
                *gpu_range(spec),
                *_targets(spec),
                self.wake.channel,
                _gpu_memory(spec),
                after,
                "" if work is None else repr(work),
            ],
        }

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
        if expect is None:
            expected = "*"
        elif isinstance(expect, str):
            expected = JobState(expect).value
        else:
            expected = " ".join(JobState(s).value for s in expect)
        extra: list[str] = []
        for name, value in (fields or {}).items():
            if name in CORE_FIELDS:
                raise ValueError(f"field {name!r} is owned by the store; it cannot be set")
            if value is None:
                value = ""
            extra += [name, value if isinstance(value, str) else json.dumps(value)]
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
        if target in TERMINAL:
            # it never changes again: its keys expire after the retention age (orch gc sweeps
            # what cannot expire by itself)
            self.retention.expire(job_id, self.retention_s)
        return JobRecord.from_hash(_pairs(reply[2]))

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

    def annotate(self, job_id: str, message: str) -> None:
        """Set the job's message without changing its state (e.g. why it is waiting).

        Raises:
            JobNotFound: no such job.
        """
        if self._annotate(keys=[self.keys.job(job_id)], args=[message]) is None:
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

    def note_event(self, job_id: str, event: str, message: str) -> None:
        """Add an event that changes no state to the job's event stream (``event`` names what
        was seen: ``sla-violated``, ``guard``...; its ``from`` is empty) and make ``message``
        the job's message, as a state change would.

        Raises:
            JobNotFound: no such job.
        """
        self.annotate(job_id, message)
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

    # ---- reading -----------------------------------------------------------------------------

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
        for start in range(0, len(ids), _BATCH):
            pipe = self.client.pipeline(transaction=False)
            for job_id in ids[start : start + _BATCH]:
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
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start : start + _BATCH]
            pipe = self.client.pipeline(transaction=False)
            for job_id in chunk:
                pipe.hmget(self.keys.job(job_id), names)
            yield from zip(chunk, pipe.execute(), strict=True)

    def latest_metrics(
        self, job_ids: Iterable[str], names: Iterable[str]
    ) -> dict[str, dict[str, Any]]:
        """The latest reported value of metrics ``names`` of each job, in one round trip per
        batch (jobs or metrics never reported are left out)."""
        ids, names = builtins.list(job_ids), tuple(names)
        out: dict[str, dict[str, Any]] = {}
        metrics = self.keys.metrics
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start : start + _BATCH]
            replies = self._hmget_keys(keys=[metrics(j) for j in chunk], args=names)
            for job_id, values in zip(chunk, replies, strict=True):
                got = {k: json.loads(v) for k, v in zip(names, values, strict=True) if v}
                if got:
                    out[job_id] = got
        return out

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

    def metrics(self, job_id: str) -> dict[str, Any]:
        """The latest value of every metric the job reported (empty if none)."""
        raw = _hash(self.client.hgetall(self.keys.metrics(job_id)))
        return {k: json.loads(v) for k, v in raw.items()}

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
            if len(batch) >= _BATCH:
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


def _targets(spec: JobSpec) -> tuple[str, str]:
    """The job's deadline and start-wait target, in seconds after submission ("": none)."""
    tp, lat = spec.sla.throughput, spec.sla.latency
    deadline = tp.deadline_s if tp is not None and spec.job_class == "bulk" else None
    wait = lat.start_within_s if lat is not None and spec.job_class == "interactive" else None
    return ("" if deadline is None else f"{deadline:g}", "" if wait is None else f"{wait:g}")


def _gpu_memory(spec: JobSpec) -> str:
    """GB each of the job's GPUs must have ("": any), as the snapshot reads it back."""
    gb = spec.resources.gpu_memory_gb
    return "" if gb is None else repr(float(gb))


def _pairs(flat: list[str]) -> dict[str, str]:
    """A flattened ``HGETALL`` reply (as a script returns it) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _plain(value: Any) -> Any:
    """JSON fallback for numpy / torch scalars, which the harness may report as they are."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    return str(value)
