"""Control-plane latency benchmark (issue 5): an interactive job from submission to its first
training step, on an idle warm pool and on a full pool (preemption).

    .venv/bin/python bench/control_plane/latency.py            # the figures in BENCHMARKS.md
    .venv/bin/python bench/control_plane/latency.py --smoke    # a tiny run (under a minute)

It starts its own orchestrator in this process, as `orch up` does: Redis from ``REDIS_URL``
(else an embedded server in a temporary data directory, stopped at the end), a new local Ray
instance with ``--gpus`` virtual GPU slots (or the cluster at ``RAY_ADDRESS``), the ``shared``
policy (interactive jobs preempt bulk ones), the scheduling interval of the settings
(``ORCH_SCHEDULER_INTERVAL_S``, default 0.5 s; the scheduler also wakes on each submission)
and their warm worker pool (``ORCH_WARM_WORKERS``, default 1 per node; 0 measures fresh worker
starts), in a fresh namespace deleted at the end.

- Idle pool: one job first, not counted (the pool is warm: scheduler, Ray and Redis are up
  and have run a job); then each run waits for the warm worker pool to be full and warm
  again, submits a 1-GPU interactive job through ``JobStore.submit`` (what `orch submit`
  calls) and waits for the worker's first optimizer step (``first_step_at``: the harness's
  wall clock when step 1 ended, in the report it sends right after it), then for the job to
  finish, so every run finds the pool idle.
- Full pool: bulk jobs hold every GPU (one per node, all of its GPUs) and train; each run
  submits a 1-GPU interactive job, which preempts one, and is measured to the interactive
  job's first step. The victim's checkpoint write (``checkpoint_write_s`` of its stopped run)
  is reported apart. Before the next run the interactive job finishes and the victim resumes.

Each run is broken down by the jobs' events: submit -> placed (waiting for a scheduling
round), placed -> running (Ray places the gang, the worker actors are created or a warm one is
handed over: the job's ``started_at``), running -> first step, of which the worker's start
(process, ``import torch``, model build; from the first report's ``elapsed_s``; the report
also says whether the job ran on a warm worker, and the tables count those runs). A full pool
has no free GPU to keep a warm worker on: it keeps a warm worker that holds no GPU (GPU-less), which
the preempting job takes once Ray has given it the victim's GPU (``orchestrator.runtime.warm``);
each run waits for it to be warm, as an idle run waits for the pool. With
preemption, submit -> victim stopped (its stop report, after its checkpoint) and victim
stopped -> placed (its gang torn down, reaped by the next round). Times come from this host's
clock (Redis server time, the harness's and the runtime's ``time.time()``); on a remote Redis
or cluster they are only as comparable as the machines' clocks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.config import Settings
from orchestrator.runtime.ray_gang import RayRuntime
from orchestrator.services import Running, serve_in_background
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import EmbeddedRedis, JobStore
from orchestrator.store.records import JobRecord
from orchestrator.store.states import TERMINAL, JobState
from workers.telemetry import percentile

RESULTS = Path(__file__).parent / "results"
POLL_S = 0.02
TIMEOUT_S = 300.0
BULK_STEPS = 10**9  # bulk jobs never finish on their own; the namespace is dropped at the end
TERMINAL_STATES = {s.value for s in TERMINAL}

# The workloads of the jobs: a small GPT (an eval loop or a notebook's model), and tiny models
# for the smoke run, where every GPU slot of a test cluster may hold a bulk rank.
FULL_WORKLOAD: dict[str, Any] = {"workload": "gpt", "micro_batch": 8}
SMOKE_WORKLOAD: dict[str, Any] = {
    "workload": {"name": "mlp", "args": {"in_features": 16, "hidden": 32}},
    "micro_batch": 4,
}


def interactive_job(workload: dict[str, Any], steps: int = 5) -> JobSpec:
    """A 1-GPU interactive job of ``steps`` optimizer steps."""
    return parse_spec(
        {
            "name": "bench-interactive",
            "team": "bench",
            "class": "interactive",
            "workload": workload["workload"],
            "sla": {"latency": {"max_ms": 1000}},
            "run": {"micro_batch": workload["micro_batch"], "steps": steps, "warmup_steps": 1},
        }
    )


def bulk_job(name: str, gpus: int, workload: dict[str, Any], checkpoint_every: int) -> JobSpec:
    """A rigid bulk job on ``gpus`` GPUs that trains until it is stopped."""
    return parse_spec(
        {
            "name": name,
            "team": "bench",
            "class": "bulk",
            "workload": workload["workload"],
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": gpus},
            "run": {
                "micro_batch": workload["micro_batch"],
                "steps": BULK_STEPS,
                "warmup_steps": 1,
                "checkpoint_every": checkpoint_every,
            },
        }
    )


class Bench:
    """A live orchestrator, and waiting on its jobs (fails loudly instead of hanging)."""

    def __init__(self, running: Running, timeout_s: float = TIMEOUT_S) -> None:
        self.running = running
        self.store: JobStore = running.scheduler.store
        self.timeout_s = timeout_s

    def _until(self, what: str, ready: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self.running.errors:
                raise RuntimeError(f"the scheduler stopped: {self.running.errors[0]!r}")
            value = ready()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {self.timeout_s:g} s for {what}")
            time.sleep(POLL_S)

    def wait_state(self, job_id: str, states: set[JobState]) -> JobRecord:
        """The job's record once it is in one of ``states``."""

        def ready() -> JobRecord | None:
            rec = self.store.get(job_id)
            if rec.terminal and rec.state not in states:
                raise RuntimeError(f"{job_id} ended {rec.state.value}: {rec.message}")
            return rec if rec.state in states else None

        return self._until(f"{job_id} to be {sorted(s.value for s in states)}", ready)

    def wait_first_step(self, job_id: str, after: float = 0.0) -> float:
        """``first_step_at`` of the job's first run that took a step later than ``after``."""

        def ready() -> float | None:
            at = self.store.metrics(job_id).get("first_step_at")
            if isinstance(at, float) and at > after:
                return at
            rec = self.store.get(job_id)
            if rec.state.value in TERMINAL_STATES:
                raise RuntimeError(f"{job_id} ended {rec.state.value}: {rec.message}")
            return None

        return float(self._until(f"{job_id}'s first step", ready))

    def wait_warm_pool(self) -> None:
        """Until the warm worker pool holds its full size, every worker warm (holding a GPU on
        an idle pool, GPU-less on a full one)."""
        runtime = self.running.scheduler.runtime
        assert isinstance(runtime, RayRuntime)
        per_node = runtime.warm.per_node
        size = sum(min(per_node, n.gpus) for n in self.running.pool.nodes())

        def ready() -> bool:
            workers = runtime.warm.workers()
            return len(workers) == size and all(warm for _, warm in workers)

        self._until("a full warm worker pool", ready)


def _last_event(store: JobStore, job_id: str, event: str, after: float = 0.0) -> float | None:
    times = [e["ts"] for e in store.events(job_id) if e["event"] == event and e["ts"] >= after]
    return max(times) if times else None


def _stages(store: JobStore, job_id: str, submitted: float, first: float) -> dict[str, float]:
    """Where a job's time from ``submitted`` to its first step ``first`` went (and
    ``warm_start``: 1 if it ran on a warm worker, else 0). "Running" is the run's
    ``started_at``: when the runtime had the gang's workers up (the ``running`` event itself is
    written when the next round reaps that, which may be after the first step)."""
    placed = _last_event(store, job_id, "placed")
    started = store.get(job_id).fields.get("started_at")
    reports = [r for r in store.metrics_history(job_id, 1000) if r.get("first_step_at") == first]
    if placed is None or not started or not reports:
        raise RuntimeError(f"{job_id}: no placed event, no start or no report of its first step")
    running = float(started)
    # The first report is sent right after step 1; its elapsed_s counts from the harness's run
    # start, after the worker process started and built the model.
    harness_up = first - float(reports[0]["elapsed_s"])
    return {
        "submit_to_first_step_s": first - submitted,
        "submit_to_placed_s": placed - submitted,
        "placed_to_running_s": running - placed,
        "running_to_first_step_s": first - running,
        "worker_start_s": harness_up - running,
        "warm_start": float(bool(reports[0].get("warm_start"))),
    }


def idle_pool(b: Bench, runs: int, job: JobSpec, gap_s: float) -> list[dict[str, float]]:
    """Submit-to-first-step of ``runs`` interactive jobs, one at a time on an idle pool."""
    out = []
    for i in range(runs + 1):  # run 0 warms the pool up and is not counted
        b.wait_warm_pool()
        t0 = time.time()
        job_id = b.store.submit(job, by="bench").id
        first = b.wait_first_step(job_id)
        b.wait_state(job_id, {JobState.FINISHED})
        if i:
            out.append(_stages(b.store, job_id, t0, first))
        time.sleep(gap_s)
    return out


def fill_pool(b: Bench, workload: dict[str, Any], checkpoint_every: int) -> list[str]:
    """Bulk jobs holding every GPU of the pool (one per node), each training."""
    nodes = sorted(b.running.pool.nodes(), key=lambda n: -n.gpus)
    ids = [
        b.store.submit(bulk_job(f"bench-bulk{i}", n.gpus, workload, checkpoint_every)).id
        for i, n in enumerate(nodes)
    ]
    for job_id in ids:
        b.wait_first_step(job_id)
    return ids


def _victim(b: Bench, bulk: list[str], since: float) -> tuple[str, dict[str, Any]]:
    """The bulk job preempted since ``since`` (Redis time), and its stop report."""
    for job_id in bulk:
        if _last_event(b.store, job_id, "queued", after=since) is None:
            continue
        stopped = [
            r
            for r in b.store.metrics_history(job_id, 50)
            if r.get("status") == "stopped" and r["ts"] >= since
        ]
        if stopped:
            return job_id, stopped[-1]
    raise RuntimeError("no bulk job was preempted: was the pool full?")


def full_pool(
    b: Bench, runs: int, job: JobSpec, bulk: list[str], gap_s: float
) -> list[dict[str, float]]:
    """Submit-to-first-step of ``runs`` interactive jobs that each preempt a bulk job."""
    out: list[dict[str, float]] = []
    victim, first = "", 0.0
    for _ in range(runs):
        if victim:  # the last run's victim resumed: the pool is full again
            b.wait_first_step(victim, after=first)
        b.wait_warm_pool()  # its GPU-less warm workers
        time.sleep(gap_s)
        t0 = time.time()
        rec = b.store.submit(job, by="bench")
        first = b.wait_first_step(rec.id)
        b.wait_state(rec.id, {JobState.RUNNING, JobState.FINISHED})  # its start is recorded
        victim, report = _victim(b, bulk, rec.submitted_at)
        stages = _stages(b.store, rec.id, t0, first)
        placed = stages["submit_to_placed_s"] + t0
        stages.update(
            {
                "checkpoint_write_s": float(report["checkpoint_write_s"]),
                "first_step_minus_checkpoint_s": (
                    stages["submit_to_first_step_s"] - float(report["checkpoint_write_s"])
                ),
                "submit_to_victim_stopped_s": report["ts"] - t0,
                "victim_stopped_to_placed_s": placed - report["ts"],
            }
        )
        out.append(stages)
    return out


def summarise(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """p50, p95 and max of every stage over the runs."""
    return {
        key: {
            "p50": percentile([r[key] for r in runs], 50),
            "p95": percentile([r[key] for r in runs], 95),
            "max": max(r[key] for r in runs),
        }
        for key in runs[0]
        if key != "warm_start"
    }


def _part(runs: list[dict[str, float]]) -> dict[str, Any]:
    """One measurement's runs, their summary, and how many ran on a warm worker."""
    return {
        "runs": runs,
        "summary": summarise(runs),
        "warm_starts": int(sum(r["warm_start"] for r in runs)),
    }


def measure(
    settings: Settings,
    idle_runs: int,
    preempt_runs: int,
    workload: dict[str, Any],
    *,
    gap_s: float = 1.0,
    checkpoint_every: int = 50,
) -> dict[str, Any]:
    """Serve ``settings`` in this process, run both measurements, stop, delete the namespace.

    Returns:
        ``{"idle": {"runs", "summary", "warm_starts"}, "preemption": {...}, "pool": ...}``.
    """
    running = serve_in_background(settings)
    b = Bench(running)
    try:
        nodes = running.pool.nodes()
        job = interactive_job(workload)
        idle = idle_pool(b, idle_runs, job, gap_s)
        bulk = fill_pool(b, workload, checkpoint_every)
        full = full_pool(b, preempt_runs, job, bulk, gap_s)
    finally:
        running.shutdown()
        b.store.delete_namespace()
    return {
        "pool": [{"gpus": n.gpus, "virtual": n.virtual, "label": n.label()} for n in nodes],
        "idle": _part(idle),
        "preemption": _part(full),
    }


def _table(title: str, part: dict[str, Any]) -> None:
    print(f"{title}; {part['warm_starts']} of {len(part['runs'])} on a warm worker (s)")
    print(f"  {'stage':34s} {'p50':>8s} {'p95':>8s} {'max':>8s}")
    for key, v in part["summary"].items():
        print(f"  {key.removesuffix('_s'):34s} {v['p50']:8.3f} {v['p95']:8.3f} {v['max']:8.3f}")


def _start_local_ray(settings: Settings) -> None:
    """A new local Ray instance with ``virtual_gpus`` GPU slots, as ``GPUPool.start`` makes,
    but never another one on this host: without ``address="local"``, ``ray.init`` joins a
    cluster some other process started here (``ray start``, a test session's cluster)."""
    import ray

    ray.init(
        address="local",
        num_cpus=max(2, os.cpu_count() or 2),
        num_gpus=settings.virtual_gpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        namespace=f"orch-{settings.namespace}",
    )


def main(argv: list[str] | None = None) -> int:
    """Run, print the tables, write the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (for the test suite)")
    ap.add_argument("--runs", type=int, help="idle-pool runs (default 20; smoke 2)")
    ap.add_argument("--preempt-runs", type=int, help="full-pool runs (default 10; smoke 1)")
    ap.add_argument("--gpus", type=int, default=2, help="virtual GPU slots of the local pool")
    ap.add_argument("--gap", type=float, help="seconds between runs (default 1; smoke 0.2)")
    args = ap.parse_args(argv)
    idle_runs = args.runs or (2 if args.smoke else 20)
    preempt_runs = args.preempt_runs or (1 if args.smoke else 10)
    gap_s = args.gap if args.gap is not None else (0.2 if args.smoke else 1.0)
    workload = SMOKE_WORKLOAD if args.smoke else FULL_WORKLOAD

    data_dir = Path(tempfile.mkdtemp(prefix="orch-bench-latency-"))
    settings = Settings.from_env(
        data_dir=data_dir,
        namespace=f"bench-latency-{uuid.uuid4().hex[:8]}",
        policy="shared",
        virtual_gpus=args.gpus,
    )
    local_ray = settings.ray_address is None
    if local_ray:
        _start_local_ray(settings)
    try:
        out = measure(settings, idle_runs, preempt_runs, workload, gap_s=gap_s)
    finally:
        if local_ray:
            import ray

            ray.shutdown()
        if settings.redis_url is None:
            EmbeddedRedis(data_dir).stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    out["meta"] = {
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "redis": (settings.redis_url or "embedded").split("@")[-1],
        "ray": settings.ray_address or "local",
        "policy": settings.policy,
        "scheduler_interval_s": settings.scheduler_interval_s,
        "warm_workers": settings.warm_workers,
        "workload": workload,
        "idle_runs": idle_runs,
        "preempt_runs": preempt_runs,
        "warmup_jobs": 1,
        "gap_s": gap_s,
    }
    pool = ", ".join(n["label"] for n in out["pool"])
    print(
        f"pool: {pool}; policy {settings.policy}, rounds every {settings.scheduler_interval_s} s"
        f" (and on submission), {settings.warm_workers} warm worker(s) per node"
    )
    _table(f"interactive job on an idle warm pool, {idle_runs} runs", out["idle"])
    _table(f"interactive job preempting a bulk job, {preempt_runs} runs", out["preemption"])
    RESULTS.mkdir(exist_ok=True)
    name = "latency-smoke.json" if args.smoke else "latency.json"
    (RESULTS / name).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
