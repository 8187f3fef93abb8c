"""A metrics sink that worker processes carry: picklable, connects on first use, never raises."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from orchestrator.store.jobs import JobStore

__all__ = ["MetricsSink"]

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5.0
"""After a failed write, reports are dropped for this long rather than each waiting on Redis."""

TIMEOUT_S = 2.0


class MetricsSink:
    """Writes a job's metrics reports to the store, from any process (a Ray worker).

    Create it in the control plane and ship it to the worker: it pickles without a connection
    and connects on its first report. A failed write is logged and the report dropped; a
    training run never fails because Redis is slow or gone.

    Args:
        redis_url: the orchestrator's Redis (as the control plane resolved it).
        namespace: the store's namespace.
        job_id: the job whose metrics these are.

    Attributes:
        dropped: how many reports were lost.
    """

    def __init__(self, redis_url: str, namespace: str, job_id: str) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.job_id = job_id
        self.dropped = 0
        self._store: JobStore | None = None
        self._retry_at = 0.0

    def __call__(self, metrics: Mapping[str, Any]) -> None:
        """Record one report (see ``JobStore.put_metrics``); never raises."""
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
            self._store.put_metrics(self.job_id, metrics)
        except Exception as err:  # anything at all: metrics are never worth a failed run
            self.dropped += 1
            self._retry_at = now + RETRY_AFTER_S
            log.warning(
                "metrics of job %s dropped (%d so far), retrying in %.0f s: %s",
                self.job_id,
                self.dropped,
                RETRY_AFTER_S,
                err,
            )

    def close(self) -> None:
        """Close the connection, if one was opened (a later report reopens it)."""
        if self._store is not None:
            self._store.client.close()
            self._store = None

    def __getstate__(self) -> dict[str, Any]:
        # The connection stays behind: a copy (a pickled worker argument) opens its own.
        state = self.__dict__.copy()
        state["_store"] = None
        state["_retry_at"] = 0.0
        return state
