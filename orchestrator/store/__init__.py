"""The Redis state layer: job records, the job state machine, queues, events and metrics, and
every other key the orchestrator keeps (the only code that talks to Redis).

``connect(settings)`` opens the orchestrator's Redis (``REDIS_URL`` or the embedded server);
``JobStore(client, namespace)`` (or ``JobStore.from_url``) reads and writes jobs; state changes
only through ``JobStore.transition``, which enforces :data:`TRANSITIONS` atomically. The other
key families have one typed store each, reached from the ``JobStore``: ``scaling``
(:class:`ScalingStore`), ``profiles`` (:class:`ProfileStore`), ``tune_reports``
(:class:`TuneReportStore`), ``tune_cache`` (:class:`TuneCacheStore`), ``pool_view``
(:class:`PoolViewStore`), ``tokens`` (:class:`TokenStore`: API tokens, hashed), ``audit``
(:class:`AuditStore`: who made each mutation), ``telemetry`` (:class:`TelemetryStore`: the
loop's counters and histograms, for ``/metrics``), ``logs`` (:class:`LogStore`: jobs' captured
output, written by workers through :class:`LogSink`), ``lease(owner)`` (:class:`Lease`) and
``study_journal(url)`` (:class:`StudyJournal`). :class:`Keys` documents the whole layout.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.store.audit import AuditStore
    from orchestrator.store.connection import connect, open_url, resolve_url
    from orchestrator.store.jobs import JobStore
    from orchestrator.store.keys import Keys
    from orchestrator.store.lease import LEASE_MS, Lease, LeaseLost, SchedulerBusy
    from orchestrator.store.logs import LogStore
    from orchestrator.store.pool_view import PoolViewStore
    from orchestrator.store.records import JobRecord
    from orchestrator.store.scaling import ScalingStore
    from orchestrator.store.server import EmbeddedRedis, find_redis_server
    from orchestrator.store.sink import LogSink, MetricsSink, RunFence
    from orchestrator.store.states import ACTIVE, TERMINAL, TRANSITIONS, JobState, is_legal, sources
    from orchestrator.store.telemetry import TelemetryStore
    from orchestrator.store.tokens import TokenStore
    from orchestrator.store.tuning import (
        ProfileStore,
        StudyJournal,
        TuneCacheStore,
        TuneReportStore,
    )

__all__ = [
    "ACTIVE",
    "LEASE_MS",
    "TERMINAL",
    "TRANSITIONS",
    "AuditStore",
    "EmbeddedRedis",
    "JobRecord",
    "JobState",
    "JobStore",
    "Keys",
    "Lease",
    "LeaseLost",
    "LogSink",
    "LogStore",
    "MetricsSink",
    "PoolViewStore",
    "ProfileStore",
    "RunFence",
    "ScalingStore",
    "SchedulerBusy",
    "StudyJournal",
    "TelemetryStore",
    "TokenStore",
    "TuneCacheStore",
    "TuneReportStore",
    "connect",
    "find_redis_server",
    "is_legal",
    "open_url",
    "resolve_url",
    "sources",
]


# Each name loads its module on first use (PEP 562): the CLI reads records and states in API
# mode without importing redis-py's client or the stores it never uses (`orch` starts faster).
_HOME = {
    "AuditStore": "orchestrator.store.audit",
    "connect": "orchestrator.store.connection",
    "open_url": "orchestrator.store.connection",
    "resolve_url": "orchestrator.store.connection",
    "JobStore": "orchestrator.store.jobs",
    "Keys": "orchestrator.store.keys",
    "LEASE_MS": "orchestrator.store.lease",
    "Lease": "orchestrator.store.lease",
    "LeaseLost": "orchestrator.store.lease",
    "SchedulerBusy": "orchestrator.store.lease",
    "LogStore": "orchestrator.store.logs",
    "PoolViewStore": "orchestrator.store.pool_view",
    "JobRecord": "orchestrator.store.records",
    "ScalingStore": "orchestrator.store.scaling",
    "EmbeddedRedis": "orchestrator.store.server",
    "find_redis_server": "orchestrator.store.server",
    "LogSink": "orchestrator.store.sink",
    "MetricsSink": "orchestrator.store.sink",
    "RunFence": "orchestrator.store.sink",
    "ACTIVE": "orchestrator.store.states",
    "TERMINAL": "orchestrator.store.states",
    "TRANSITIONS": "orchestrator.store.states",
    "JobState": "orchestrator.store.states",
    "is_legal": "orchestrator.store.states",
    "sources": "orchestrator.store.states",
    "TelemetryStore": "orchestrator.store.telemetry",
    "TokenStore": "orchestrator.store.tokens",
    "ProfileStore": "orchestrator.store.tuning",
    "StudyJournal": "orchestrator.store.tuning",
    "TuneCacheStore": "orchestrator.store.tuning",
    "TuneReportStore": "orchestrator.store.tuning",
}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
