"""Reads of one namespace's jobs in Redis: records, queues, events, metrics and the team
config, for :class:`~orchestrator.store.jobs.JobStore`, which adds the writes.

Reads batch their round trips (one pipeline or one script call per :data:`BATCH` jobs): the
control loop reads every queued and running job each round.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import redis

from orchestrator.errors import AmbiguousJob, JobNotFound
from orchestrator.store.history import STORED
from orchestrator.store.keys import Keys
from orchestrator.store.records import JobRecord
from orchestrator.store.states import JobState
from orchestrator.teams import TeamConfig, parse_teams

__all__ = ["BATCH", "EVENTS_MAXLEN", "QUEUE_FACTS", "JobReads", "pairs"]

EVENTS_MAXLEN = 1000
"""Approximate cap of a job's event stream (a job requeued forever must not grow it forever)."""

BATCH = 500
"""Jobs per pipelined round trip."""

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
    "after",
    *STORED.values(),
)
"""The job fields a scheduling snapshot reads (see :meth:`JobStore.queue_facts`): the job's
history (``orchestrator.store.history``), written by the control loop when a run ends, and the
others at submission (``after``: the ids of the jobs it starts after, for the loop, not the
policy)."""


class JobReads:
    """Reads of the jobs of one namespace in one Redis (see the module doc).

    Args:
        client: a Redis client created with ``decode_responses=True`` (see ``connect``).
        namespace: prefix of every key (see :class:`Keys`).
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.keys = Keys(namespace)
        self._cancelling = client.register_script(_CANCELLING_LUA)
        self._hmget_keys = client.register_script(_HMGET_MANY_LUA)
        self._teams: tuple[str | None, TeamConfig | None] = (None, None)

    def teams(self) -> TeamConfig | None:
        """The stored team config, or ``None`` when none was applied (one ``GET``; parsed only
        when it changed)."""
        raw = cast(str | None, self.client.get(self.keys.teams))
        if raw != self._teams[0]:
            config = parse_teams(json.loads(raw), "stored team config") if raw else None
            self._teams = (raw, config)
        return self._teams[1]

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

    def metrics(self, job_id: str) -> dict[str, Any]:
        """The latest value of every metric the job reported (empty if none)."""
        raw = _hash(self.client.hgetall(self.keys.metrics(job_id)))
        return {k: json.loads(v) for k, v in raw.items()}

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


# The client decodes responses (decode_responses=True), but redis-py types every reply as
# ``bytes | str``; these casts state what the connection guarantees.


def _hash(reply: object) -> dict[str, str]:
    return cast(dict[str, str], reply)


def _strs(reply: object) -> list[str]:
    return cast(list[str], reply)


def _entries(reply: object) -> list[tuple[str, dict[str, str]]]:
    return cast(list[tuple[str, dict[str, str]]], reply)


def pairs(flat: list[str]) -> dict[str, str]:
    """A flattened ``HGETALL`` reply (as a script returns it) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
