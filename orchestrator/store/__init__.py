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
from orchestrator.store.sink import LogSink, MetricsSink
from orchestrator.store.states import ACTIVE, TERMINAL, TRANSITIONS, JobState, is_legal, sources
from orchestrator.store.telemetry import TelemetryStore
from orchestrator.store.tokens import TokenStore
from orchestrator.store.tuning import ProfileStore, StudyJournal, TuneCacheStore, TuneReportStore

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
