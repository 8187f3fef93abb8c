"""Sinks that worker processes carry (metrics, captured output): picklable, connect on first
use, never raise."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from orchestrator.store.jobs import JobStore
from orchestrator.store.lease import lease_generation

__all__ = ["LogSink", "MetricsSink", "RunFence", "replica_log_sink"]

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5.0
"""After a failed write, writes are dropped for this long rather than each waiting on Redis."""

TIMEOUT_S = 2.0


class _StoreSink:
    """What the sinks share: a lazily opened store, and dropping (counted) while Redis fails.

    Create it in the control plane and ship it to the worker: it pickles without a connection
    and connects on its first write. A failed write is logged and its data dropped; a training
    run never fails because Redis is slow or gone.

    Attributes:
        dropped: how many writes were lost.
    """

    what = "data"

    def __init__(self, redis_url: str, namespace: str, job_id: str) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.job_id = job_id
        self.dropped = 0
        self._store: JobStore | None = None
        self._retry_at = 0.0

    def _connected(self) -> JobStore:
        if self._store is None:
            client = redis.Redis.from_url(
                self.redis_url,
                decode_responses=True,
                socket_timeout=TIMEOUT_S,
                socket_connect_timeout=TIMEOUT_S,
                retry=Retry(NoBackoff(), 1),
            )
            self._store = JobStore(client, self.namespace)
        return self._store

    def _write(self, write: Callable[[JobStore], None]) -> None:
        """``write(store)``, or drop it (see the class doc)."""
        now = time.monotonic()
        if now < self._retry_at:
            self.dropped += 1
            return
        try:
            write(self._connected())
        except Exception as err:  # anything at all: never worth a failed run
            self.dropped += 1
            self._retry_at = now + RETRY_AFTER_S
            log.warning(
                "%s of job %s dropped (%d so far), retrying in %.0f s: %s",
                self.what,
                self.job_id,
                self.dropped,
                RETRY_AFTER_S,
                err,
            )

    def close(self) -> None:
        """Close the connection, if one was opened (a later write reopens it)."""
        if self._store is not None:
            self._store.client.close()
            self._store = None

    def __getstate__(self) -> dict[str, Any]:
        # The connection stays behind: a copy (a pickled worker argument) opens its own.
        state = self.__dict__.copy()
        state["_store"] = None
        state["_retry_at"] = 0.0
        return state


class MetricsSink(_StoreSink):
    """Writes a job's metrics reports to the store, from any process (a Ray worker).

    Args:
        redis_url: the orchestrator's Redis (as the control plane resolved it).
        namespace: the store's namespace.
        job_id: the job whose metrics these are.

    Attributes:
        dropped: how many reports were lost.
    """

    what = "metrics"

    def __call__(self, metrics: Mapping[str, Any]) -> None:
        """Record one report (see ``JobStore.put_metrics``); never raises."""
        self._write(lambda store: store.put_metrics(self.job_id, metrics))


class LogSink(_StoreSink):
    """Appends one rank's captured output to the store (``workers.logs.LogSink``), from the
    worker; built per rank by ``functools.partial(LogSink, url, namespace, job_id)``.

    Args:
        redis_url: the orchestrator's Redis (as the control plane resolved it).
        namespace: the store's namespace.
        job_id: the job whose output this is.
        rank: the rank that writes it.

    Attributes:
        dropped: how many batches of lines were lost.
    """

    what = "output"

    def __init__(self, redis_url: str, namespace: str, job_id: str, rank: int) -> None:
        super().__init__(redis_url, namespace, job_id)
        self.rank = rank

    def __call__(self, lines: Sequence[tuple[str, str]]) -> None:
        """Append a batch of ``(stream, line)`` (see ``LogStore.append``); never raises."""
        self._write(lambda store: store.logs.append(self.job_id, self.rank, lines))


class RunFence(_StoreSink):
    """Whether a run is still its job's current one: the scheduler that launched it still holds
    the generation of the lease it was launched under (``Lease.generation``, bumped by every
    scheduler that takes the namespace over). Workers ask it once per step and before each
    checkpoint commit (``workers.harness.Harness``'s ``fence``), so the runs of a frozen
    scheduler stop without writing once a standby has taken over and restarted their jobs.

    Built by the control plane and shipped to rank 0's worker like the sinks. An answer is
    kept for ``cache_s`` (one small GET a second per running job). When Redis cannot be asked
    the run goes on (answers ``True``): an outage must not stop every job, and a new generation
    can only start with Redis up, when the next answer sees it.

    Args:
        generation: the lease generation the run was launched under.
        cache_s: how long an answer is reused.
    """

    what = "fence check"

    def __init__(
        self,
        redis_url: str,
        namespace: str,
        job_id: str,
        generation: int,
        *,
        cache_s: float = 1.0,
    ) -> None:
        super().__init__(redis_url, namespace, job_id)
        self.generation = generation
        self.cache_s = cache_s
        self._asked_at = -float("inf")
        self._current = True

    def __call__(self) -> bool:
        """``False`` once another scheduler generation drives the namespace (then for good)."""
        now = time.monotonic()
        if not self._current or now - self._asked_at < self.cache_s:
            return self._current
        self._asked_at = now

        def ask(store: JobStore) -> None:
            latest = lease_generation(store.client, store.keys)
            self._current = latest is None or latest <= self.generation

        self._write(ask)
        if not self._current:
            log.warning(
                "job %s: launched under lease generation %d, which is no longer current",
                self.job_id,
                self.generation,
            )
        return self._current

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_asked_at"] = -float("inf")
        return state


def replica_log_sink(
    redis_url: str, namespace: str, job_id: str, replica: int, rank: int
) -> LogSink:
    """The output sink of a service's replica number ``replica``: each replica is a world of
    one, so its worker asks for rank 0's; its lines go under its replica number instead (one
    stream per replica). Picklable as ``functools.partial(replica_log_sink, url, ns, job_id,
    replica)``, as :class:`LogSink`'s factory is."""
    del rank  # always 0
    return LogSink(redis_url, namespace, job_id, replica)
