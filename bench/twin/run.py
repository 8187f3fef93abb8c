"""Twin benchmark: one trace run live and in the simulator; where do their decisions agree?

    .venv/bin/python bench/twin/run.py        # about 3 minutes on 2 cores

A trace of 18 short real jobs (both classes, three teams with guarantees, one team capped, an
elastic job, a deadline job, one interactive start that needs a preemption) runs live under
``shared`` on a local multi-node Ray cluster with virtual GPUs (a head, a 4-GPU node, a 2-GPU
node; ``ray.cluster_utils.Cluster``, as the end-to-end tests build it) against a real Redis
(``REDIS_URL``, else the embedded server), then in the simulator on the same nodes, with the
very policy object the live loop ran, the submission times the live run had, each job's last
run length (first step to end) and the median gang start (placement to first step) as the
restart cost. It prints both timelines and how far the order of starts, the preemption
victims and the resizes agree, and writes ``bench/twin/results/twin.json``.

Lining the two worlds up: jobs run for a wall-clock ``duration_s`` live and restart it when they
resume, as simulated jobs that never checkpoint do; the simulator models no stop latency (a
live run asked to stop sees it only after its first step) and its parametric jobs go faster on
more GPUs, which a live ``duration_s`` job does not: see BENCHMARKS.md for what diverges.
This is a measurement, not a test: the twin test (issue 12) asserts agreement once both gaps
are closed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.config import Settings
from orchestrator.services import serve_in_background
from orchestrator.sim.engine import SimConfig, Simulator
from orchestrator.sim.trace import TraceJob
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store.states import JobState
from orchestrator.teams import parse_teams
from policies import DecisionKind
from tests.e2e.conftest import Orch  # the live orchestrator the end-to-end tests drive

RESULTS = Path(__file__).parent / "results"

RESTART_S = 6.0
"""What the live loop weighs a restart at (about a gang's start on this loaded machine)."""
TEAMS = {
    "teams": [
        {"name": "vision", "guaranteed_gpus": 2},
        {"name": "speech", "guaranteed_gpus": 2, "max_gpus": 3},
        {"name": "nlp", "guaranteed_gpus": 2},
    ]
}


@dataclass(frozen=True)
class Job:
    """One job of the trace: when it is submitted (s after the first) and what it is."""

    at: float
    name: str
    team: str
    cls: str = "bulk"
    gpus: int | tuple[int, int] = 1
    duration_s: float = 10.0
    deadline_s: float | None = None


TRACE = [
    # contention, decided by team accounting, with events at least ~8 s apart (a gang takes
    # ~11 s from placement to its first step on this machine, and a run asked to stop only
    # sees it after its first step, which the simulator does not model: no job is preempted
    # while still starting up)
    Job(0, "v1", "vision", gpus=2, duration_s=40),
    Job(0, "s1", "speech", gpus=2, duration_s=20),
    Job(0, "s2", "speech", gpus=2, duration_s=25),  # over speech's cap until s1 ends
    Job(0, "n1", "nlp", gpus=(1, 2), duration_s=30),  # elastic
    Job(18, "i1", "vision", cls="interactive", duration_s=10),  # n1 gives a GPU back
    Job(60, "i2", "nlp", cls="interactive", gpus=2, duration_s=10),  # nlp's own n1 gives way
    # then waves within every team's guarantee, each done before the next
    Job(100, "v2", "vision", duration_s=5),
    Job(100, "s3", "speech", duration_s=5),
    Job(100, "d1", "vision", duration_s=0, deadline_s=300),  # work by a deadline
    Job(100, "n2", "nlp", duration_s=5),
    Job(122, "s4", "speech", duration_s=5),
    Job(122, "v3", "vision", duration_s=5),
    Job(122, "i3", "speech", cls="interactive", duration_s=5),
    Job(122, "n3", "nlp", duration_s=5),
    Job(144, "v4", "vision", duration_s=5),
    Job(144, "s5", "speech", duration_s=5),
    Job(144, "n4", "nlp", duration_s=5),
    Job(144, "v5", "vision", duration_s=5),
]


def _spec(job: Job) -> JobSpec:
    lo, hi = job.gpus if isinstance(job.gpus, tuple) else (job.gpus, job.gpus)
    run: dict[str, Any] = {"micro_batch": 8, "warmup_steps": 1, "checkpoint_every": 0}
    if job.deadline_s is not None:
        sla: dict[str, Any] = {
            "throughput": {"work_samples": 8 * 400, "deadline_s": job.deadline_s}
        }
    elif job.cls == "interactive":
        sla = {"latency": {"max_ms": 10_000, "start_within_s": 5}}
        run["duration_s"] = job.duration_s
    else:
        sla = {"throughput": {"min_samples_per_s": 1}}
        run["duration_s"] = job.duration_s
    return parse_spec(
        {
            "name": job.name,
            "team": job.team,
            "class": job.cls,
            "workload": {"name": "mlp", "args": {"hidden": 32}},
            "sla": sla,
            "resources": {"gpus": {"min": lo, "max": hi}},
            "run": run,
        }
    )


def _run_live(o: Orch) -> dict[str, str]:
    t0 = time.monotonic()
    ids: dict[str, str] = {}
    for job in sorted(TRACE, key=lambda j: j.at):
        delay = t0 + job.at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        ids[job.name] = o.store.submit(_spec(job)).id
    for job_id in ids.values():
        rec = o.wait(job_id, {JobState.FINISHED, JobState.FAILED}, timeout_s=300)
        if rec.state is not JobState.FINISHED:
            raise RuntimeError(f"{rec.id} {rec.state.value}: {rec.message}")
    return ids


def _timeline(o: Orch, ids: dict[str, str]) -> tuple[list[tuple[float, str, str]], dict]:
    """The live run as (time, what, job), and per job: submission, the length of each run
    (first step to its end, as the simulator counts work) and each start's latency (placed to
    first step, the simulator's restart cost)."""
    events: list[tuple[float, str, str]] = []
    facts: dict[str, dict[str, Any]] = defaultdict(lambda: {"runs": [], "starts": []})
    for name, job_id in ids.items():
        evs = o.store.events(job_id)
        reports = o.store.metrics_history(job_id, 1000)
        firsts = sorted({float(r["first_step_at"]) for r in reports if r.get("first_step_at")})
        f = facts[name]
        f["submitted"] = evs[0]["ts"]
        placed = None
        for e in evs:
            kind, src, msg = e["event"], e.get("from", ""), e.get("message", "")
            if kind == "placed":
                placed = e["ts"]
                if src == "queued":
                    events.append((e["ts"], "start", name))
                else:
                    size = msg.split(" GPUs")[0].split(" to ")[-1]
                    events.append((e["ts"], f"resize->{size}", name))
            if kind == "queued" and msg.startswith("requeued: preempted"):
                events.append((e["ts"], "preempt", name))
            if placed is not None and kind in ("queued", "placed", "finished") and e is not evs[0]:
                first = next((t for t in firsts if placed < t <= e["ts"]), None)
                if first is not None and kind != "placed":
                    f["starts"].append(first - placed)
                    f["runs"].append(e["ts"] - first)
                if kind != "placed":
                    placed = None
    return sorted(events), facts


def _simulate(
    o: Orch, facts: dict[str, dict[str, Any]], restart_s: float
) -> list[tuple[float, str, str]]:
    t0 = min(f["submitted"] for f in facts.values())
    trace = []
    by_name = {j.name: j for j in TRACE}
    for name, f in facts.items():
        job = by_name[name]
        lo, hi = job.gpus if isinstance(job.gpus, tuple) else (job.gpus, job.gpus)
        trace.append(
            TraceJob(
                name,
                f["submitted"] - t0,
                team=job.team,
                job_class=job.cls,
                gpus=lo,
                min_gpus=lo,
                max_gpus=hi,
                duration=f["runs"][-1],  # every restart starts its duration again
                deadline=job.deadline_s,
                wait_target=5.0 if job.cls == "interactive" else 60.0,
                checkpoint=1e9,  # never: a restart loses the run's work, as live
            )
        )
    nodes = [(n.node_id, n.gpus) for n in o.running.scheduler.runtime.nodes() if n.gpus]
    teams = parse_teams(TEAMS, "twin teams").views()
    sim = Simulator(
        trace,
        o.running.scheduler.policy,  # the very policy object the live loop ran
        nodes,
        teams,
        SimConfig(
            interval_s=o.settings.scheduler_interval_s,
            restart_s=restart_s,
            sigma=0.0,  # the live speedup curve of a job never measured: linear
            log_decisions=True,
        ),
    )
    sim.run()
    out = []
    sizes = {j.name: 0 for j in trace}
    for at, d in sim.applied:
        if d.kind is DecisionKind.START:
            out.append((at, "start", d.job_id))
        elif d.kind is DecisionKind.PREEMPT:
            out.append((at, "preempt", d.job_id))
        elif len(d.nodes) != sizes[d.job_id]:
            out.append((at, f"resize->{len(d.nodes)}", d.job_id))
        sizes[d.job_id] = len(d.nodes) if d.kind is not DecisionKind.PREEMPT else 0
    return out


def _kinds(timeline: list[tuple[float, str, str]], prefix: str) -> list[str]:
    return [job for _, what, job in timeline if what.startswith(prefix)]


def _kinds(timeline: list[tuple[float, str, str]], prefix: str) -> list[str]:
    return [job for _, what, job in timeline if what.startswith(prefix)]


def _agree(a: list[Any], b: list[Any]) -> int:
    """How many leading items two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def main() -> int:
    """Run the trace live, then simulated; print and write the comparison."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=4)
    cluster.add_node(num_cpus=1, num_gpus=2)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    data = Path(tempfile.mkdtemp(prefix="twin-"))
    settings = Settings(
        redis_url=os.environ.get("REDIS_URL") or None,
        ray_address=cluster.address,
        data_dir=data,
        namespace=f"twin-{uuid.uuid4().hex[:6]}",
        scheduler_interval_s=0.2,
        policy="shared",
    )
    running = serve_in_background(settings)
    o = Orch(settings, running.scheduler.store, running)
    try:
        o.running.scheduler.restart_cost_s = RESTART_S
        o.store.put_teams(parse_teams(TEAMS, "twin teams"))
        ids = _run_live(o)
        live_events, facts = _timeline(o, ids)
        median_start = statistics.median(s for f in facts.values() for s in f["starts"])
        sim_events = _simulate(o, facts, median_start)
    finally:
        running.shutdown()
        o.store.delete_namespace()
        ray.shutdown()
        cluster.shutdown()
    t0 = live_events[0][0]
    print(f"live (median placed -> first step {median_start:.1f} s):")
    for t, w, j in live_events:
        print(f"  {t - t0:6.1f} {w:10s} {j}")
    print("simulated:")
    for t, w, j in sim_events:
        print(f"  {t:6.1f} {w:10s} {j}")
    summary = {}
    for kind in ("start", "preempt", "resize"):
        lv = [(j, w) for _, w, j in live_events if w.startswith(kind)]
        sv = [(j, w) for _, w, j in sim_events if w.startswith(kind)]
        summary[kind] = {"live": len(lv), "simulated": len(sv), "agree_prefix": _agree(lv, sv)}
        print(
            f"{kind:8s} live {len(lv):3d}  simulated {len(sv):3d}  same order for the "
            f"first {summary[kind]['agree_prefix']}"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "twin.json").write_text(
        json.dumps(
            {
                "meta": {"date": time.strftime("%Y-%m-%d"), "median_start_s": median_start},
                "summary": summary,
                "live": [(round(t - t0, 2), w, j) for t, w, j in live_events],
                "simulated": [(round(t, 2), w, j) for t, w, j in sim_events],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
