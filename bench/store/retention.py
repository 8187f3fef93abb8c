"""Redis memory against jobs run, with retention on and off (issue 14: bounded state).

    .venv/bin/python bench/store/retention.py                  # 100,000 jobs per pass
    .venv/bin/python bench/store/retention.py --jobs 10000     # the quick check

Each job goes through the store as the scheduler drives it: submitted (``submit_many``, in
batches), placed, running, one metrics report, a line of captured output, finished. Two passes
in one run, each in a fresh namespace of the same Redis:

- **retention on**: the store's retention age is ``--age`` seconds (so an ended job's keys
  expire that long after it finished), and ``orch gc``'s sweep (``RetentionStore.sweep``)
  runs every ``--gc-every`` jobs;
- **retention off**: no expiry (an age longer than the run), no sweep: what the store did before.

After every tenth of the jobs it reads Redis's ``INFO memory`` ``used_memory`` (less the value
before the pass) and how many keys the namespace holds. With retention on the memory should stay
flat (the jobs of the last ``--age`` seconds, whatever the total); off, it grows with the jobs.

The Redis is a private embedded server (``redis-server`` in a temporary directory) unless
``--redis-url`` is given: a shared server's memory moves with its other users.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import EmbeddedRedis, JobStore, open_url
from orchestrator.store.states import JobState

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).parent / "results"
BATCH = 500


def spec(i: int) -> JobSpec:
    return parse_spec(
        {
            "name": f"job{i % 100}",
            "team": "vision",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 10}},
            "resources": {"gpus": 1},
            "run": {"steps": 100},
        }
    )


def run_jobs(store: JobStore, first: int, n: int) -> None:
    """``n`` jobs from submission to finished, as the scheduler and a worker would write them."""
    ids = store.submit_many([spec(first + i) for i in range(n)], by="bench")
    for job_id in ids:
        store.transition(job_id, JobState.PLACED, expect=JobState.QUEUED)
        store.transition(job_id, JobState.RUNNING, expect=JobState.PLACED)
        store.put_metrics(job_id, {"step": 100, "p95_ms": 12.5, "samples_per_s": 800.0})
        store.logs.append(job_id, 0, [("out", "step 100 loss 0.12")])
        store.transition(job_id, JobState.FINISHED, expect=JobState.RUNNING, fields={"result": {}})


def keys_in(store: JobStore) -> int:
    return sum(1 for _ in store.client.scan_iter(match=store.keys.pattern, count=5000))


def one_pass(url: str, jobs: int, age_s: float | None, gc_every: int) -> list[dict[str, Any]]:
    """Run ``jobs`` jobs; ``age_s`` None: retention off. Returns a row per tenth of the jobs."""
    client = open_url(url)
    retention = age_s if age_s is not None else 10 * 365 * 86400.0
    store = JobStore(client, f"bench-retention-{uuid.uuid4().hex[:8]}", retention_s=retention)
    base = int(client.info("memory")["used_memory"])
    rows: list[dict[str, Any]] = []
    step = max(BATCH, jobs // 10)
    t0 = time.perf_counter()
    try:
        done = 0
        while done < jobs:
            n = min(BATCH, jobs - done)
            run_jobs(store, done, n)
            done += n
            if age_s is not None and done % gc_every < n:
                store.retention.sweep(age_s)
            if done % step < n or done == jobs:
                rows.append(
                    {
                        "jobs": done,
                        "seconds": time.perf_counter() - t0,
                        "used_memory_mb": (int(client.info("memory")["used_memory"]) - base)
                        / 2**20,
                        "keys": keys_in(store),
                        "jobs_listed": int(client.zcard(store.keys.jobs)),
                    }
                )
    finally:
        store.delete_namespace()
    return rows


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs per pass")
    parser.add_argument("--age", type=float, default=5.0, help="retention age, seconds")
    parser.add_argument("--gc-every", type=int, default=2000, help="jobs between two sweeps")
    parser.add_argument("--redis-url", help="an existing Redis (default: a private one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-bench-retention-") as tmp:
        server = None if args.redis_url else EmbeddedRedis(Path(tmp))
        url = args.redis_url or (server.ensure_running() if server else "")
        try:
            on = one_pass(url, args.jobs, args.age, args.gc_every)
            off = one_pass(url, args.jobs, None, args.gc_every)
        finally:
            if server is not None:
                server.stop()
    print(
        f"Redis used_memory above the start of each pass (MiB) and the namespace's keys: "
        f"retention on (age {args.age:g} s, sweep every {args.gc_every} jobs) and off"
    )
    print(f"  {'jobs':>9s} {'on MiB':>8s} {'on keys':>8s} {'off MiB':>8s} {'off keys':>9s}")
    for a, b in zip(on, off, strict=True):
        print(
            f"  {a['jobs']:>9,d} {a['used_memory_mb']:8.2f} {a['keys']:8,d} "
            f"{b['used_memory_mb']:8.2f} {b['keys']:9,d}"
        )
    print(f"  pass time: on {on[-1]['seconds']:.0f} s, off {off[-1]['seconds']:.0f} s")
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "redis": "given" if args.redis_url else "embedded",
        "jobs": args.jobs,
        "age_s": args.age,
        "gc_every": args.gc_every,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "retention.json" if args.jobs >= 100_000 else f"retention-{args.jobs}.json"
    (RESULTS / name).write_text(json.dumps({"meta": meta, "on": on, "off": off}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
