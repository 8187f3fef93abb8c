"""The Redis key layout: every key the orchestrator writes lives under ``{namespace}:``.

One namespace per orchestrator lets several of them (or several test runs) share one Redis, and
:meth:`Keys.pattern` lets a namespace be listed or deleted as a whole. Job ids and names match
``[a-z0-9._-]`` (see ``orchestrator.spec``), so they never contain the ``:`` separator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

LOG_MAXLEN = 2000
"""Lines of each rank's output a job's log stream keeps (here, beside the layout, so that the
API's limits read it without loading the stores)."""

if TYPE_CHECKING:
    import redis

__all__ = ["KeyFamily", "Keys"]

# Characters that glob-style MATCH patterns treat specially.
_GLOB = re.compile(r"([*?\[\]\\])")


@dataclass(frozen=True)
class Keys:
    """Builds the keys of one namespace.

    Layout (``ns`` is the namespace)::

        ns:seq                     string  submit counter (job order, FIFO scores)
        ns:jobs                    zset    every job id, score = submit sequence
        ns:job:{id}                hash    the job record
        ns:events:{id}             stream  state changes {event, ts, message, from}
        ns:queue:{class}           zset    queued job ids of a class, score = submit sequence
        ns:names:{name}            set     ids of the jobs with that name
        ns:queue-version           string  bumped whenever a queue's membership changes
        ns:metrics:{id}            hash    latest value of each metric (JSON)
        ns:metrics-stream:{id}     stream  metric reports, capped
        ns:logs:{id}               set     ranks of the job that wrote output
        ns:logs:{id}:{rank}        stream  one rank's stdout and stderr lines {s, l}, capped
        ns:teams                   string  the team config (JSON)
        ns:workdir:{digest}        string  a command job's working directory (zip, base64)
        ns:workdirs                zset    every stored working directory, score = last stored
        ns:scheduler:lease         string  owner of the scheduler lease, with a TTL
        ns:pool                    string  the pool view the scheduler publishes (JSON), TTL
        ns:pool:history            stream  the pool's use over time (GPUs, used, per team)
        ns:scaling:{id}            hash    GPU count -> samples/s a run of the job showed
        ns:profile:{job}           string  the tuner's performance profile of a job (JSON)
        ns:tune:{job}              string  the tuning report of a job (JSON)
        ns:tune-cache              hash    tuning-cache index: fingerprint -> similarity group
        ns:tune-cache:{fp}         string  one tuning-cache entry (JSON)
        ns:optuna:*                (Optuna) the namespace's Optuna journal (prefix ns:optuna)
        ns:optuna-aged             string  journal entries already set to expire (``orch gc``)
        ns:tokens                  hash    API token id -> its record (JSON, secret hashed)
        ns:audit                   stream  every mutation and who made it, capped
        ns:telemetry               hash    the loop's counters and histogram buckets (/metrics)
        ns:wake                    channel pub/sub: submissions and cancels wake the scheduler
        ns:svc:{id}:*              a service's endpoint: requests, answers, ready replicas and
                                   the requests' figures (``orchestrator.store.ingress``)

    ``{job}`` is a job id, or a job name for ``orch tune FILE`` (tuned without submitting).
    Each family has one owner in ``orchestrator/store/`` (``JobStore`` and the stores it
    exposes); nothing else reads or writes them.
    """

    namespace: str

    def key(self, *parts: str) -> str:
        """The key ``ns:part1:part2...``; the named keys below are built with it."""
        return ":".join((self.namespace, *parts))

    @property
    def prefix(self) -> str:
        """The common prefix of every key in the namespace, separator included."""
        return f"{self.namespace}:"

    @property
    def pattern(self) -> str:
        """A SCAN ``MATCH`` pattern for every key of the namespace (and only this one)."""
        return _GLOB.sub(r"\\\1", self.prefix) + "*"

    @property
    def seq(self) -> str:
        """The submit counter."""
        return self.key("seq")

    @property
    def jobs(self) -> str:
        """All job ids, scored by submit sequence."""
        return self.key("jobs")

    def job(self, job_id: str) -> str:
        """The hash holding one job record."""
        return self.key("job", job_id)

    def events(self, job_id: str) -> str:
        """The stream of one job's state changes."""
        return self.key("events", job_id)

    def queue(self, job_class: str) -> str:
        """Queued job ids of one class, scored by submit sequence (lowest first = FIFO)."""
        return self.key("queue", job_class)

    @property
    def queue_version(self) -> str:
        """Counter bumped on every change of a queue's membership (a cheap "has it changed")."""
        return self.key("queue-version")

    @property
    def queue_prefix(self) -> str:
        """``queue(c)`` is ``queue_prefix + c``; the transition script builds it this way."""
        return self.key("queue", "")

    def names(self, name: str) -> str:
        """Ids of the jobs submitted under one name."""
        return self.key("names", name)

    def metrics(self, job_id: str) -> str:
        """The latest value of each metric of a job."""
        return self.key("metrics", job_id)

    def metrics_stream(self, job_id: str) -> str:
        """Every metrics report of a job, capped to the most recent ones."""
        return self.key("metrics-stream", job_id)

    def log_ranks(self, job_id: str) -> str:
        """The ranks of a job that wrote output."""
        return self.key("logs", job_id)

    def logs(self, job_id: str, rank: int) -> str:
        """One rank's captured output, capped to the most recent lines."""
        return self.logs_prefix(job_id) + str(rank)

    def logs_prefix(self, job_id: str) -> str:
        """``logs(job_id, rank)`` is ``logs_prefix(job_id) + str(rank)`` (for scripts)."""
        return self.key("logs", job_id, "")

    def working_dir(self, digest: str) -> str:
        """A command job's packed working directory, by content digest (``sha256:...``)."""
        return self.key("workdir", digest)

    @property
    def working_dirs(self) -> str:
        """The stored working directories' digests, scored by when each was last stored (the
        Redis clock): ``orch gc`` removes those no job names (``store/workdirs.py``)."""
        return self.key("workdirs")

    @property
    def teams(self) -> str:
        """The team config."""
        return self.key("teams")

    @property
    def scheduler_lease(self) -> str:
        """The owner of the scheduler lease (at most one scheduler drives a namespace)."""
        return self.key("scheduler", "lease")

    @property
    def scheduler_lease_generation(self) -> str:
        """How many times the scheduler lease was taken (a holder that lost touch with Redis
        takes its lease back only if nobody held it meanwhile)."""
        return self.key("scheduler", "lease", "gen")

    @property
    def pool_view(self) -> str:
        """The pool view the scheduler publishes for ``orch pool``."""
        return self.key("pool")

    @property
    def pool_history(self) -> str:
        """The pool's use over time, sampled by the scheduler (the dashboard's charts)."""
        return self.key("pool", "history")

    def scaling(self, job_id: str) -> str:
        """Throughput per GPU count that runs of a job showed."""
        return self.key("scaling", job_id)

    def kinds(self, job_id: str) -> str:
        """Throughput per GPU that runs of a job showed on each GPU kind."""
        return self.key("kinds", job_id)

    def profile(self, job: str) -> str:
        """The tuner's performance profile of a job."""
        return self.key("profile", job)

    def tune_report(self, job: str) -> str:
        """The tuning report of a job (what ``orch show`` prints)."""
        return self.key("tune", job)

    @property
    def tune_cache_index(self) -> str:
        """The tuning cache's index: fingerprint -> similarity group."""
        return self.key("tune-cache")

    def tune_cache_entry(self, fingerprint: str) -> str:
        """One tuning-cache entry."""
        return self.key("tune-cache", fingerprint)

    @property
    def optuna_journal(self) -> str:
        """The key prefix of the namespace's Optuna journal (Optuna's ``JournalRedisBackend``
        writes its keys under it)."""
        return self.key("optuna")

    @property
    def journal_aged(self) -> str:
        """How many journal entries, from the first, ``orch gc`` has set to expire."""
        return self.key("optuna-aged")

    @property
    def tokens(self) -> str:
        """The API tokens: token id -> record (the secret only as its SHA-256)."""
        return self.key("tokens")

    @property
    def audit(self) -> str:
        """The audit stream: each mutation, who made it and on what."""
        return self.key("audit")

    @property
    def tune_requests(self) -> str:
        """Jobs whose team asked for a re-tune (a set), until the control loop takes them."""
        return self.key("tune-requests")

    @property
    def telemetry(self) -> str:
        """The control loop's counters and histogram buckets, read by ``/metrics``."""
        return self.key("telemetry")


class KeyFamily:
    """Base of a typed store that owns one family of a namespace's keys: it holds the
    client and the namespace's :class:`Keys` (the subclasses say which keys are theirs).

    Args:
        client: the store's Redis client (``decode_responses=True``).
        keys: the namespace's keys.
    """

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
