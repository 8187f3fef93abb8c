"""What command mode's step reporting costs a script: seconds per step of a loop that does
no work but ``job.report()``, run by ``orch``'s worker (``workers.command.run_command``: a
JSON line per step through a pipe, parsed and measured by the worker) against the same loop
run on its own (``report()`` writes nothing without the worker). Alternating, repeated, at
three step counts an order of magnitude apart.

Usage: ``python bench/command/report_overhead.py [--smoke]``; prints a table and writes
``bench/command/results/report_overhead.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.workdir import pack  # noqa: E402
from workers.command import run_command  # noqa: E402

SCRIPT = """
import os, sys, time
from workers import job
n = int(sys.argv[1])
job.context()
t0 = time.perf_counter()
for step in range(1, n + 1):
    job.report(samples=1, step=step)
elapsed = time.perf_counter() - t0
with open(os.path.join(job.context().checkpoint_dir, "loop_s"), "w") as fh:
    fh.write(repr(elapsed))
"""


def _config(steps: int, digest: str) -> dict[str, object]:
    return {
        "workload": "loop",
        "workload_args": {},
        "micro_batch": 1,
        "grad_accum": 1,
        "steps": steps,
        "warmup_steps": 0,
        "command": {
            "argv": ["python", "loop.py", str(steps)],
            "first_report_s": 600,
            "working_dir": digest,
        },
    }


def under_orch(folder: Path, steps: int) -> float:
    """Seconds per step of the loop run by the worker (the loop's own clock)."""
    ckpt = folder / f"ckpt-{steps}-{time.monotonic_ns()}"
    packed = pack(folder / "src")
    run_command(
        _config(steps, packed.digest),
        job_id="bench",
        rank=0,
        world_size=1,
        init_method=None,
        checkpoint_dir=str(ckpt),
        report=lambda r: None,
        report_every_s=1.0,
        should_stop=lambda: False,
        fence=lambda: True,
        num_threads=1,
        archive=packed.data,
    )
    return float((ckpt / "loop_s").read_text()) / steps


def alone(folder: Path, steps: int) -> float:
    """Seconds per step of the same loop with no worker (report() sends nothing)."""
    ckpt = folder / f"alone-{steps}"
    ckpt.mkdir(exist_ok=True)
    (folder / "context.json").write_text(json.dumps({"checkpoint_dir": str(ckpt)}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ORCH_JOB_CONTEXT": str(folder / "context.json")}
    subprocess.run([sys.executable, "loop.py", str(steps)], cwd=folder / "src", env=env, check=True)
    return float((ckpt / "loop_s").read_text()) / steps


def main() -> None:
    smoke = "--smoke" in sys.argv
    sizes = (100, 1000) if smoke else (1_000, 10_000, 100_000)
    repeats = 1 if smoke else 3
    rows = []
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as tmp:
        folder = Path(tmp)
        os.chmod(folder, 0o755)  # the job's uid reaches its folders (as root)
        (folder / "src").mkdir()
        (folder / "src" / "loop.py").write_text(SCRIPT)
        for steps in sizes:
            ours, base = [], []
            for _ in range(repeats):  # alternating, so drift hits both alike
                ours.append(under_orch(folder, steps))
                base.append(alone(folder, steps))
            rows.append(
                {
                    "steps": steps,
                    "orch_us": [x * 1e6 for x in ours],
                    "alone_us": [x * 1e6 for x in base],
                    "overhead_us": statistics.median(ours) * 1e6 - statistics.median(base) * 1e6,
                }
            )
    print(f"{'steps':>8} {'orch us/step (min-max)':>26} {'alone us/step':>16} {'overhead us':>12}")
    for r in rows:
        o, a = r["orch_us"], r["alone_us"]
        print(
            f"{r['steps']:>8} {statistics.median(o):>10.2f} ({min(o):.2f}-{max(o):.2f})"
            f" {statistics.median(a):>16.2f} {r['overhead_us']:>12.2f}"
        )
    if not smoke:
        out = Path(__file__).parent / "results" / "report_overhead.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
