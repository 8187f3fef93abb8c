"""The Redis state layer: job records, the job state machine, queues, events and metrics.

``connect(settings)`` opens the orchestrator's Redis (``REDIS_URL`` or the embedded server);
``JobStore(client, namespace)`` reads and writes jobs; state changes only through
``JobStore.transition``, which enforces :data:`TRANSITIONS` atomically.
"""

from __future__ import annotations

from orchestrator.store.connection import connect, open_url, resolve_url
from orchestrator.store.jobs import JobStore
from orchestrator.store.keys import Keys
from orchestrator.store.records import JobRecord
from orchestrator.store.server import EmbeddedRedis, find_redis_server
from orchestrator.store.sink import MetricsSink
from orchestrator.store.states import ACTIVE, TERMINAL, TRANSITIONS, JobState, is_legal, sources

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "TRANSITIONS",
    "EmbeddedRedis",
    "JobRecord",
    "JobState",
    "JobStore",
    "Keys",
    "MetricsSink",
    "connect",
    "find_redis_server",
    "is_legal",
    "open_url",
    "resolve_url",
    "sources",
]
