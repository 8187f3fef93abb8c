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

__all__ = ["LogSink", "MetricsSink"]

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

    def _write(self, write: Callable[[JobStore], None]) -> None:
        """``write(store)``, or drop it (see the class doc)."""
        now = time.monotonic()
        if now < self._retry_at:
            self.dropped += 1
            return
        try:
            if self._store is None:
                client = redis.Redis.from_url(
                    self.redis_url,
                    decode_responses=True,
                    socket_timeout=TIMEOUT_S,
                    socket_connect_timeout=TIMEOUT_S,
                    retry=Retry(NoBackoff(), 1),
                )
                self._store = JobStore(client, self.namespace)
            write(self._store)
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
