"""``/metrics``: the pool, the teams, the queues and the scheduler, for Prometheus.

Nothing is counted in the API process: a :class:`PoolCollector` reads, at each scrape, the pool
view the scheduler publishes, one pass over the jobs' states, and the counters and histograms
the control loop keeps in Redis (:mod:`orchestrator.store.telemetry`), so ``orch serve`` in
another process (or several server workers) reports the same numbers as ``orch up``.

Series (every name starts with ``orch_``):

- ``orch_scheduler_up``: 1 while a scheduler publishes its pool view, else 0.
- ``orch_pool_gpus{kind}``, ``orch_pool_gpus_used{kind}``: GPU slots, and those held by jobs,
  per GPU kind (``orchestrator.kinds``: ``H100``, ``L4``..., ``virtual`` for CPU-backed slots).
- ``orch_pool_warm_workers{kind}``, ``orch_pool_warm_gpus{kind}``: warm workers kept for jobs
  to start on, and the GPU slots they hold (free to the scheduler: a job takes them).
- ``orch_team_gpus_used|guaranteed|limit|borrowed|queued{team}``: each team's GPUs in use,
  its guarantee, its cap (0: none), what it uses beyond its guarantee, what its queued jobs need.
- ``orch_queue_length{class,team}``: queued jobs.
- ``orch_jobs{state,class,team}``: jobs per state (every job the namespace remembers).
- ``orch_job_wait_to_start_seconds{class}`` (histogram): submission to first placement.
- ``orch_sla_verdicts_total{class,verdict}``: finished jobs whose SLA was ``met``,
  ``violated`` or ``unmeasured``.
- ``orch_sla_guard_total{event,check}``: the SLA guard's findings in running jobs
  (``at_risk``, ``violated``, ``recovered``) and its re-tunes, per check (``latency``,
  ``throughput``, ``deadline``, ``profile``).
- ``orch_scheduling_round_seconds`` (histogram): one round of the control loop.
- ``orch_running_data_wait_share{class,team}``, ``orch_running_gpu_busy_share{class,team}``,
  ``orch_running_energy_per_sample_joules{class,team}``: the mean, over the running jobs that
  reported one, of their runs' latest share of the step spent waiting for data, share of wall
  time their GPUs computed, and joules per sample (the last two on GPUs only: none on a pool of
  virtual slots).
- ``orch_running_configs{class,team,gpus,layout,precision}``: running jobs per config their run
  applied (the GPUs it holds, its plan or sharding, its precision), as ``orch show`` says it.
- ``orch_team_gpu_seconds_total{team}``: GPU-seconds held by each team's ended runs (tuning
  runs included); the team's account, kept when its jobs are removed (``orch usage`` reports it).
- ``orch_preemptions_total``, ``orch_resizes_total``, ``orch_tuning_trials_total``,
  ``orch_policy_violations_total`` (decisions dropped for breaking the policy contract).

Who may scrape: any valid token (a viewer token is enough: Prometheus sends it with
``authorization: {credentials_file: ...}``); with ``ORCH_METRICS_PUBLIC=1`` the route needs
none (for a scraper on a trusted network; the numbers name teams but no job).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.security.utils import get_authorization_scheme_param
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from orchestrator.api.auth import authenticate
from orchestrator.store import JobStore
from orchestrator.store.telemetry import ROUND_SECONDS, WAIT_SECONDS, Histogram, Telemetry

__all__ = [
    "PUBLIC_ENV",
    "PoolCollector",
    "metrics_public",
    "registry_for",
    "router",
    "run_figures",
    "running_configs",
]

PUBLIC_ENV = "ORCH_METRICS_PUBLIC"
"""Set to ``1`` (``true``, ``yes``) to serve ``/metrics`` without a token."""

_TEAM_GAUGES = (
    ("used", "used_gpus", "GPUs the team's jobs hold."),
    ("guaranteed", "guaranteed_gpus", "GPUs guaranteed to the team."),
    ("limit", "max_gpus", "The most GPUs the team may hold (0: no cap)."),
    ("borrowed", "borrowed_gpus", "GPUs the team holds beyond its guarantee."),
    ("queued", "queued_gpus", "GPUs the team's queued jobs need at least."),
)
_COUNTERS = (
    ("preemptions", "Runs stopped to make room for other jobs."),
    ("resizes", "Running elastic jobs restarted on another number of GPUs."),
    ("tuning_trials", "Configurations the tuner profiled for jobs."),
    ("policy_violations", "Scheduling decisions dropped for breaking the policy contract."),
)

router = APIRouter(tags=["metrics"])


def metrics_public() -> bool:
    """Whether the environment opens ``/metrics`` to scrapers without a token."""
    return os.environ.get(PUBLIC_ENV, "").strip().lower() in ("1", "true", "yes")


class PoolCollector(Collector):
    """Reads the namespace's numbers at scrape time (see the module doc for the series)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        """Every series, read now."""
        view = self.store.pool_view.read()
        up = GaugeMetricFamily("orch_scheduler_up", "1 while a scheduler publishes its pool view.")
        up.add_metric([], 1.0 if view is not None else 0.0)
        yield up
        if view is not None:
            yield from _pool(view.get("nodes", []))
            yield from _teams(view.get("teams", []))
        rows = self.store.job_fields(("state", "class", "team", "applied"))
        tally = Counter((j.get("state", ""), j.get("class", ""), j.get("team", "")) for j in rows)
        config = self.store.teams()
        teams = {t.name for t in config.teams} if config is not None else set()
        yield from _jobs(tally, teams)
        running = [j for j in rows if j.get("state") == "running"]
        names = [key for _, key, _ in _RUN_GAUGES]
        latest = self.store.latest_metrics([j["id"] for j in running], names) if running else {}
        yield from run_figures(running, latest)
        yield running_configs(running)
        yield from _telemetry(self.store.telemetry.read())


def node_kind(node: dict[str, Any]) -> str:
    """A node's kind for labels: the pool's kind of its GPUs (``orchestrator.kinds``: ``H100``,
    a declared ``L4``, ``virtual`` for CPU-backed slots that declare none); from a view
    published before kinds, its GPU model(s) or ``virtual``."""
    if node.get("kind"):
        return str(node["kind"])
    models = sorted({str(g.get("model", "")) for g in node.get("models") or ()} - {""})
    return "virtual" if node.get("virtual") or not models else "+".join(models)


_POOL_GAUGES = (
    ("orch_pool_gpus", "gpus", "GPU slots in the pool."),
    ("orch_pool_gpus_used", "used_gpus", "GPU slots jobs hold."),
    ("orch_pool_warm_workers", "warm_workers", "Warm workers kept for jobs to start on."),
    ("orch_pool_warm_gpus", "warm_gpus", "GPU slots warm workers hold (free to jobs)."),
)


def _pool(nodes: Iterable[dict[str, Any]]) -> Iterator[Metric]:
    sums: dict[str, Counter[str]] = {key: Counter() for _, key, _ in _POOL_GAUGES}
    for n in nodes:
        for key, per_kind in sums.items():
            per_kind[node_kind(n)] += int(n.get(key, 0))
    for name, key, doc in _POOL_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=["kind"])
        for kind in sorted(sums["gpus"]):
            family.add_metric([kind], sums[key][kind])
        yield family


def _teams(rows: list[dict[str, Any]]) -> Iterator[Metric]:
    for suffix, key, doc in _TEAM_GAUGES:
        family = GaugeMetricFamily(f"orch_team_gpus_{suffix}", doc, labels=["team"])
        for row in rows:
            family.add_metric([str(row["team"])], float(row.get(key, 0)))
        yield family


def _jobs(tally: Counter[tuple[str, str, str]], teams: set[str]) -> Iterator[Metric]:
    """Jobs per state, and the queue per class and team: present at 0 for every team with
    jobs or in the team config (and for team ``""`` with none), so a board reads 0, not
    "No data", when the queue empties."""
    jobs = GaugeMetricFamily(
        "orch_jobs", "Jobs per state, class and team.", labels=["state", "class", "team"]
    )
    queue = GaugeMetricFamily(
        "orch_queue_length", "Queued jobs per class and team.", labels=["class", "team"]
    )
    queued: Counter[tuple[str, str]] = Counter()
    for (state, job_class, team), n in sorted(tally.items()):
        jobs.add_metric([state, job_class, team], n)
        queued[(job_class, team)] += n if state == "queued" else 0
    for team in (teams | {t for _, t in queued}) or {""}:
        for job_class in ("bulk", "interactive"):
            queued.setdefault((job_class, team), 0)
    for (job_class, team), n in sorted(queued.items()):
        queue.add_metric([job_class, team], n)
    yield jobs
    yield queue


_RUN_GAUGES = (
    (
        "orch_running_data_wait_share",
        "data_wait_share",
        "Mean share of the step running jobs spend waiting for their data.",
    ),
    (
        "orch_running_gpu_busy_share",
        "gpu_busy_share",
        "Mean share of wall time running jobs keep their GPUs computing (GPU runs only).",
    ),
    (
        "orch_running_energy_per_sample_joules",
        "energy_per_sample_j",
        "Mean joules per sample of running jobs, from NVML's energy counter (GPU runs only).",
    ),
)


def run_figures(
    running: Iterable[dict[str, str]], latest: dict[str, dict[str, Any]]
) -> Iterator[Metric]:
    """The ``orch_running_*`` gauges: per class and team, the mean of each figure over the
    running jobs (``running``: ``id``, ``class``, ``team``) whose latest report has it."""
    for name, key, doc in _RUN_GAUGES:
        sums: dict[tuple[str, str], list[float]] = {}
        for j in running:
            v = latest.get(j["id"], {}).get(key)
            if isinstance(v, int | float) and not isinstance(v, bool):
                sums.setdefault((j.get("class", ""), j.get("team", "")), []).append(float(v))
        family = GaugeMetricFamily(name, doc, labels=["class", "team"])
        for (job_class, team), values in sorted(sums.items()):
            family.add_metric([job_class, team], sum(values) / len(values))
        yield family


def running_configs(running: Iterable[dict[str, str]]) -> Metric:
    """``orch_running_configs``: running jobs per class, team and the config their run
    applied (GPUs, layout, precision; a job's ``applied`` field, written at launch)."""
    tally: Counter[tuple[str, ...]] = Counter()
    for j in running:
        try:
            applied = json.loads(j.get("applied") or "{}")
        except ValueError:
            applied = {}
        if not isinstance(applied, dict) or not applied:
            continue
        config = (str(applied.get(k, "")) for k in ("gpus", "layout", "precision"))
        tally[(j.get("class", ""), j.get("team", ""), *config)] += 1
    family = GaugeMetricFamily(
        "orch_running_configs",
        "Running jobs per class, team and applied config (GPUs, layout, precision).",
        labels=["class", "team", "gpus", "layout", "precision"],
    )
    for labels, count in sorted(tally.items()):
        family.add_metric(list(labels), float(count))
    return family


def _telemetry(t: Telemetry) -> Iterator[Metric]:
    verdicts = CounterMetricFamily(
        "orch_sla_verdicts",
        "Finished jobs by SLA verdict (met, violated, unmeasured) and class.",
        labels=["class", "verdict"],
    )
    for verdict in ("met", "violated", "unmeasured"):
        for job_class, n in sorted(t.counter(f"sla_{verdict}").items()):
            verdicts.add_metric([job_class, verdict], n)
    yield verdicts
    guard = CounterMetricFamily(
        "orch_sla_guard",
        "What the SLA guard found in running jobs (at_risk, violated, recovered) or did "
        "(retune; scale_up, scale_down of a service's replicas), per check (latency, "
        "throughput, deadline, profile, replicas).",
        labels=["event", "check"],
    )
    for event in ("at_risk", "violated", "recovered", "retune", "scale_up", "scale_down"):
        for check, n in sorted(t.counter(f"guard_{event}").items()):
            guard.add_metric([event, check], n)
    yield guard
    used = CounterMetricFamily(
        "orch_team_gpu_seconds",
        "GPU-seconds held by each team's ended runs (tuning runs included), kept after the "
        "jobs are removed.",
        labels=["team"],
    )
    for team, gpu_s in sorted(t.counter("gpu_seconds").items()):
        used.add_metric([team], gpu_s)
    yield used
    for name, doc in _COUNTERS:
        counter = CounterMetricFamily(f"orch_{name}", doc)
        counter.add_metric([], t.counter(name).get("", 0.0))
        yield counter
    wait = HistogramMetricFamily(
        "orch_job_wait_to_start_seconds",
        "From a job's submission to its first placement.",
        labels=["class"],
    )
    for job_class, h in sorted(t.histogram(WAIT_SECONDS).items()):
        wait.add_metric([job_class], _buckets(h), h.total)
    yield wait
    rounds = HistogramMetricFamily(
        "orch_scheduling_round_seconds", "One round of the control loop (reap to publish)."
    )
    round_h = t.histogram(ROUND_SECONDS).get("")
    if round_h is not None:
        rounds.add_metric([], _buckets(round_h), round_h.total)
    yield rounds


def _buckets(h: Histogram) -> list[tuple[str, float]]:
    return [("+Inf" if b == float("inf") else f"{b:g}", float(n)) for b, n in h.buckets]


def registry_for(store: JobStore) -> CollectorRegistry:
    """A registry holding only the namespace's collector (no process metrics: the API may run
    in several processes, and the numbers are the pool's, not the server's)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector(store))
    return registry


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
def metrics(request: Request) -> Response:
    """Prometheus text exposition of the pool, the teams, the queues and the scheduler (any
    valid token; none when the server runs with ``ORCH_METRICS_PUBLIC=1``)."""
    if not request.app.state.metrics_public:
        scheme, token = get_authorization_scheme_param(request.headers.get("Authorization"))
        live = token if scheme.lower() == "bearer" and token else None
        # 401 unless a live token; 403 for a service token (it reaches only its endpoint)
        authenticate(request.app.state.store, live).check_not_service()
    registry: CollectorRegistry = request.app.state.metrics_registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
