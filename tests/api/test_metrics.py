"""``/metrics``: a small run of the real control loop (in-process runtime, real Redis), then the
real HTTP server scraped and parsed with prometheus-client's own parser."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.api.metrics import PUBLIC_ENV, run_figures, running_configs
from orchestrator.api.server import ApiServer, start
from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.control.telemetry import LoopTelemetry
from orchestrator.runtime.base import OutcomeKind
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore
from orchestrator.store.telemetry import ROUND_SECONDS, TelemetryBuffer
from orchestrator.teams import parse_teams
from policies import Decision, DecisionKind
from tests.api.conftest import ROOT, http

GRAFANA = ROOT / "deploy" / "grafana" / "orch-dashboard.json"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def job(name: str, team: str, cls: str = "bulk", **extra: Any) -> JobSpec:
    sla = {"throughput": {"min_samples_per_s": 5}} if cls == "bulk" else {"latency": {"max_ms": 50}}
    data = {
        "name": name,
        "team": team,
        "class": cls,
        "workload": "mlp",
        "sla": sla,
        "resources": {"gpus": 1},
        "run": {"steps": 20, "micro_batch": 8},
    }
    return parse_spec({**data, **extra})


def scrape(api: ApiServer, token: str | None) -> Samples:
    """Every sample of ``/metrics``, parsed by prometheus-client: (name, labels) -> value."""
    reply = http(api, token).get("/metrics")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def loop(store: JobStore, tmp_path: Path) -> Iterator[tuple[ControlLoop, LocalRuntime]]:
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    runtime = LocalRuntime([("n0", 3)])
    control = ControlLoop(settings, store, runtime, make_policy("gang"))
    control.lease.acquire(store.namespace)
    yield control, runtime
    control.lease.release()


def small_run(store: JobStore, control: ControlLoop, rt: LocalRuntime) -> int:
    """Two bulk jobs finish (one meets its SLA, one misses it), a tuned job tunes with 3
    trials, one run is preempted, an elastic one resized, one job stays queued; returns the
    rounds run."""
    rounds = 0

    def turn(n: int = 1) -> None:
        nonlocal rounds
        for _ in range(n):
            control.round()
            rounds += 1

    fast = store.submit(job("fast", "vision")).id
    slow = store.submit(job("slow", "speech")).id
    tuned = store.submit(job("tuned", "vision", tuning={"enabled": True})).id
    turn(2)  # all three hold a GPU: running, running, tuning
    rt.end(fast, OutcomeKind.FINISHED, "done", {"samples_per_s": 50.0, "world_size": 1})
    rt.end(slow, OutcomeKind.FINISHED, "done", {"samples_per_s": 1.0, "world_size": 1})
    answer = {"run": True, "config": {"micro_batch": 8, "gpus": 1}, "cache": "miss", "trials": 3}
    rt.end(tuned, OutcomeKind.FINISHED, "tuned", answer)
    stretchy = store.submit(job("stretchy", "speech", resources={"gpus": {"min": 1, "max": 2}}))
    turn(2)  # the tuned job runs; the elastic one starts
    control.bind(Decision(DecisionKind.PREEMPT, tuned, reason="test"), {"n0": 0})
    control.bind(Decision(DecisionKind.RESIZE, stretchy.id, nodes=("n0", "n0")), {"n0": 1})
    for name in ("waits-1", "waits-2"):
        store.submit(job(name, "vision", cls="interactive", resources={"gpus": 3}))
    turn(2)
    control.telemetry.flush()
    return rounds


def test_metrics_after_a_small_run_has_the_expected_series(
    store: JobStore,
    api: ApiServer,
    tokens: dict[str, str],
    loop: tuple[ControlLoop, LocalRuntime],
) -> None:
    store.put_teams(
        parse_teams(
            {
                "teams": [
                    {"name": "vision", "guaranteed_gpus": 1, "max_gpus": 3},
                    {"name": "speech", "guaranteed_gpus": 1},
                ]
            }
        )
    )
    control, rt = loop
    rounds = small_run(store, control, rt)
    samples = scrape(api, tokens["viewer"])  # any valid token may scrape

    assert value(samples, "orch_scheduler_up") == 1
    assert value(samples, "orch_pool_gpus", kind="virtual") == 3
    used = value(samples, "orch_pool_gpus_used", kind="virtual")
    team_used = sum(v for (n, _), v in samples.items() if n == "orch_team_gpus_used")
    assert 1 <= used <= 3 and team_used == used
    assert value(samples, "orch_team_gpus_guaranteed", team="vision") == 1
    assert value(samples, "orch_team_gpus_limit", team="vision") == 3
    assert value(samples, "orch_team_gpus_limit", team="speech") == 0  # no cap
    borrowed = value(samples, "orch_team_gpus_borrowed", team="speech")
    assert borrowed == max(0, value(samples, "orch_team_gpus_used", team="speech") - 1)

    assert value(samples, "orch_jobs", state="finished", **{"class": "bulk"}, team="vision") == 1
    assert value(samples, "orch_jobs", state="finished", **{"class": "bulk"}, team="speech") == 1
    assert value(samples, "orch_queue_length", **{"class": "interactive"}, team="vision") == 2
    # present at zero for a team with no queued job (a board reads 0, not "No data")
    assert value(samples, "orch_queue_length", **{"class": "bulk"}, team="speech") == 0
    total_jobs = sum(v for (n, _), v in samples.items() if n == "orch_jobs")
    assert total_jobs == 6

    assert value(samples, "orch_sla_verdicts_total", **{"class": "bulk"}, verdict="met") == 1
    assert value(samples, "orch_sla_verdicts_total", **{"class": "bulk"}, verdict="violated") == 1
    assert value(samples, "orch_preemptions_total") == 1
    assert value(samples, "orch_resizes_total") == 1
    assert value(samples, "orch_tuning_trials_total") == 3
    assert value(samples, "orch_policy_violations_total") == 0

    # every bulk job placed once counts one wait (the tuned job at its tuning placement only)
    waits = value(samples, "orch_job_wait_to_start_seconds_count", **{"class": "bulk"})
    assert waits == 4
    inf = value(samples, "orch_job_wait_to_start_seconds_bucket", **{"class": "bulk"}, le="+Inf")
    assert inf == waits
    assert value(samples, "orch_scheduling_round_seconds_count") == rounds
    assert value(samples, "orch_scheduling_round_seconds_sum") > 0
    buckets = [
        (float(dict(labels)["le"]), v)
        for (n, labels), v in samples.items()
        if n == "orch_scheduling_round_seconds_bucket"
    ]
    counts = [v for _, v in sorted(buckets)]
    assert counts == sorted(counts) and counts[-1] == rounds  # cumulative, +Inf last

    # the Grafana dashboard in deploy/ draws only series that are served
    served = {name for name, _ in samples}
    drawn = set(re.findall(r"orch_[a-z_]+", GRAFANA.read_text()))
    assert drawn and drawn <= served, drawn - served


def test_warm_workers_are_counted_per_node_kind_apart_from_used_gpus(
    store: JobStore, api: ApiServer, tokens: dict[str, str]
) -> None:
    """The pool view counts each node's warm workers and those holding a GPU (whose GPU stays
    free to jobs, so not "used"); /metrics sums them per node kind and `orch pool` shows them."""
    from orchestrator.cli.views import pool_table
    from orchestrator.control.pool_view import pool_view
    from orchestrator.pool import NodeInfo
    from policies import Snapshot

    nodes = [NodeInfo("idle", "10.0.0.1", 2, virtual=True), NodeInfo("full", "10.0.0.2", 2, True)]
    view = pool_view(
        nodes,
        {"bulk-1": ("t", ("full", "full"))},
        Snapshot(nodes=()),
        at=0.0,
        scheduler="s",
        policy="shared",
        warm={"idle": (1, 1), "full": (1, 0)},  # a full node's warm worker holds no GPU
    )
    assert [(n["used_gpus"], n["warm_workers"], n["warm_gpus"]) for n in view["nodes"]] == [
        (0, 1, 1),
        (2, 1, 0),
    ]
    store.pool_view.publish(view, ttl_ms=60_000)
    samples = scrape(api, tokens["viewer"])
    assert value(samples, "orch_pool_gpus_used", kind="virtual") == 2
    assert value(samples, "orch_pool_warm_workers", kind="virtual") == 2
    assert value(samples, "orch_pool_warm_gpus", kind="virtual") == 1
    cells = [row for row in pool_table(view).columns[5].cells]
    assert cells == ["1", "1 (1 GPU-less)"]


def test_metrics_need_a_token_unless_made_public(
    store: JobStore, api: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert http(api).get("/metrics").status_code == 401
    assert http(api, "orch_0123abcd_not-a-token").get("/metrics").status_code == 401
    monkeypatch.setenv(PUBLIC_ENV, "1")
    public = start(store, "127.0.0.1:0")
    try:
        samples = scrape(public, None)
        assert value(samples, "orch_scheduler_up") == 0  # no scheduler: no pool series
        assert not any(n.startswith("orch_pool_") for n, _ in samples)
    finally:
        public.stop()


def test_histogram_buckets_are_cumulative_with_le_semantics(store: JobStore) -> None:
    buffer = TelemetryBuffer()
    for seconds in (0.0005, 0.0007, 0.003, 100.0, math.inf):  # +inf is not an observation
        buffer.observe(ROUND_SECONDS, seconds)
    buffer.count("preemptions", by=2)
    store.telemetry.add(buffer)
    assert not buffer
    store.telemetry.add(buffer)  # empty: a no-op
    read = store.telemetry.read()
    h = read.histogram(ROUND_SECONDS)[""]
    cumulative = dict(h.buckets)
    assert cumulative[0.0005] == 1 and cumulative[0.001] == 2 and cumulative[0.005] == 3
    assert cumulative[5.0] == 3 and cumulative[math.inf] == 4 == h.count
    assert h.total == pytest.approx(100.0042)
    assert read.counter("preemptions") == {"": 2.0}


def test_the_loop_writes_its_counts_at_most_once_per_interval(store: JobStore) -> None:
    """A round pays no Redis write per event: counts wait in memory until the interval is up
    (the control plane's round budget is milliseconds)."""
    telemetry = LoopTelemetry(store.telemetry, flush_every_s=3600)
    telemetry.preempted()
    telemetry.tuned(5)
    telemetry.round_took(0.002)
    telemetry.maybe_flush()
    assert store.telemetry.read().fields == {}  # nothing written yet
    telemetry.flush_every_s = 0
    telemetry.round_took(0.003)
    telemetry.maybe_flush()
    read = store.telemetry.read()
    assert read.counter("preemptions") == {"": 1.0} and read.counter("tuning_trials") == {"": 5.0}
    assert read.histogram(ROUND_SECONDS)[""].count == 2


def test_running_jobs_figures_are_means_per_class_and_team() -> None:
    running = [
        {"id": "a", "class": "bulk", "team": "vision"},
        {"id": "b", "class": "bulk", "team": "vision"},
        {"id": "c", "class": "interactive", "team": "speech"},
        {"id": "d", "class": "bulk", "team": "speech"},  # no report yet
    ]
    latest: dict[str, dict[str, Any]] = {
        "a": {"data_wait_share": 0.2, "gpu_busy_share": 0.9, "energy_per_sample_j": 1.5},
        "b": {"data_wait_share": 0.4, "gpu_busy_share": 0.7, "energy_per_sample_j": 2.5},
        "c": {"data_wait_share": 0.1, "gpu_busy_share": None, "energy_per_sample_j": None},
    }
    got = {
        (s.name, s.labels["class"], s.labels["team"]): s.value
        for family in run_figures(running, latest)
        for s in family.samples
    }
    assert got == {
        ("orch_running_data_wait_share", "bulk", "vision"): pytest.approx(0.3),
        ("orch_running_data_wait_share", "interactive", "speech"): pytest.approx(0.1),
        ("orch_running_gpu_busy_share", "bulk", "vision"): pytest.approx(0.8),
        ("orch_running_energy_per_sample_joules", "bulk", "vision"): pytest.approx(2.0),
    }  # a CPU run's absent figures are left out, not counted as 0


def test_running_jobs_are_counted_per_applied_config() -> None:
    """``orch_running_configs``: what each run applied (GPUs, layout, precision), as ``orch
    show`` says it; a run that applied none yet (a tuning gang, a start) is not counted."""
    ddp2 = json.dumps({"gpus": 2, "layout": "ddp", "precision": "bf16", "micro_batch": 8})
    running = [
        {"id": "a", "class": "bulk", "team": "vision", "applied": ddp2},
        {"id": "b", "class": "bulk", "team": "vision", "applied": ddp2},
        {"id": "c", "class": "bulk", "team": "vision"},
        {"id": "d", "class": "bulk", "team": "vision", "applied": "not json"},
    ]
    samples = running_configs(running).samples
    assert [(s.labels, s.value) for s in samples] == [
        (
            {"class": "bulk", "team": "vision", "gpus": "2", "layout": "ddp", "precision": "bf16"},
            2.0,
        )
    ]
