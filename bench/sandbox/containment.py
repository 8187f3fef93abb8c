"""What containment costs a team's run (issue 35): a run's start (the call to its first step
report) and its steady-state step time, with and without the run's cgroup and network
namespace, side by side in one process, alternating, repeated.

- **with**: the shipped code path as it stands: ``limits=Limits()`` (a cgroup of the run's
  own, with its process bound, killed and removed at the end; a network namespace of its own,
  as for a run of world size 1). ``RunCgroup`` is subclassed only to time its ``close``.
- **without**: the same calls with containment off: ``workers.sandbox.RunCgroup`` replaced, in
  this process only, by a stand-in with no hierarchies (so ``sandbox()`` yields
  ``cgroup=None``), and ``Limits(network=True)`` (no namespace).

Both keep the job's own uid and the scrubbed environment (they predate containment). Measured:

- start, command mode: the call of ``workers.command.run_command`` (a working directory packed
  by ``orchestrator.workdir.pack``, a script that calls ``workers.job.report()`` each step) to
  its first step report reaching the ``report`` callback (``time.perf_counter``);
- start, entry workload: the same for ``workers.sandbox.run_sandboxed`` running
  ``tests.workers.sample_workload:build`` (its child imports torch and builds the harness);
- step time: the p50 and p95 the run measures itself (the result's ``p50_ms`` / ``p95_ms``,
  warm-up steps excluded) of a command-mode script doing a fixed amount of torch work per step
  (``MATMULS`` 256x256 matmuls, one thread);
- end of run, command mode: the script's last statement (a ``perf_counter`` stamp it writes;
  the same clock, ``CLOCK_MONOTONIC``, in every process) to ``run_command``'s return: the
  interpreter's exit, the worker noticing it, and the sandbox's teardown (the cgroup's kill,
  wait and removal; the private folder; the uid's release), and within it, for "with", the
  time of ``RunCgroup.close`` alone.

``report_every_s=0.0``: every step reports. Each variant is checked from inside the script
(its ``/proc/self/cgroup`` and network namespace): the benchmark fails if "with" was not
contained or "without" was.

Usage: ``python bench/sandbox/containment.py [--smoke] [--out PATH]`` (as root, as a worker
runs); prints a table and writes ``bench/sandbox/results/containment.json`` (``--smoke``: one
repeat, fewer steps, no warm-up, and nothing written unless ``--out`` is given).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import workers.sandbox  # noqa: E402
from orchestrator.workdir import pack  # noqa: E402
from workers.command import run_command  # noqa: E402
from workers.config import HarnessConfig  # noqa: E402
from workers.contain import Limits, RunCgroup, enforced  # noqa: E402
from workers.sandbox import run_sandboxed  # noqa: E402

ENTRY = "tests.workers.sample_workload:build"
MATMULS = 8
"""256x256 matmuls per step of the step-time script (a few ms on one core)."""
VARIANTS = ("with", "without")
CODE = ("workers", "orchestrator", "tests/workers", "bench/sandbox/containment.py")
"""What the figures depend on: a change here, uncommitted, marks the results ``dirty``."""

STEP_SCRIPT = """
import os, sys, time
import torch
from workers import job
ctx = job.context()
torch.manual_seed(0)
a, b = torch.randn(256, 256), torch.randn(256, 256)
for _ in range(ctx.steps):
    for _ in range(int(sys.argv[1])):
        c = a @ b
    job.report(samples=1)
"""

START_SCRIPT = """
import os, time
from workers import job
ctx = job.context()
for _ in range(ctx.steps):
    job.report(samples=1)
with open("/proc/self/cgroup") as fh:
    cgroups = fh.read()
where = {"cgroups": cgroups, "netns": os.readlink("/proc/self/ns/net")}
with open(os.path.join(ctx.checkpoint_dir, "where.json"), "w") as fh:
    fh.write(__import__("json").dumps(where))
with open(os.path.join(ctx.checkpoint_dir, "exit_at"), "w") as fh:
    fh.write(repr(time.perf_counter()))
"""


class _NoCgroup(RunCgroup):
    """``RunCgroup`` for the runs without containment: no hierarchy at all, so ``sandbox()``
    yields ``cgroup=None`` (as on a host that offers none)."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.limits = limits
        self.dirs = []


class _TimedCgroup(RunCgroup):
    """The shipped ``RunCgroup``, its :meth:`close` (kill, wait until empty, remove) timed."""

    closes_ms: ClassVar[list[float]] = []

    def close(self, timeout_s: float = 10.0) -> bool:
        t0 = time.perf_counter()
        try:
            return super().close(timeout_s)
        finally:
            _TimedCgroup.closes_ms.append((time.perf_counter() - t0) * 1e3)


@contextlib.contextmanager
def _containment(variant: str) -> Iterator[Limits]:
    """For the block: the limits to run with, and the cgroup class ``sandbox()`` makes (the
    shipped one, its close timed; or, ``without``, the stand-in with no hierarchies)."""
    shipped = workers.sandbox.RunCgroup
    workers.sandbox.RunCgroup = _TimedCgroup if variant == "with" else _NoCgroup
    try:
        yield Limits() if variant == "with" else Limits(network=True)
    finally:
        workers.sandbox.RunCgroup = shipped


def join_ms() -> float:
    """Milliseconds a forked child takes to write itself into a fresh run cgroup's
    ``cgroup.procs`` files (what :func:`workers.contain.launcher`'s child does first), with
    no cgroup write in the 0.2 s before, as between runs (none in the 0.2 s after either,
    so the next run is not helped)."""
    time.sleep(0.2)
    cgroup = RunCgroup("bench-join", Limits())
    files = cgroup.procs_files()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        t0 = time.perf_counter()
        for path in files:
            fd = os.open(path, os.O_WRONLY)
            os.write(fd, b"0")
            os.close(fd)
        os.write(w, struct.pack("d", (time.perf_counter() - t0) * 1e3))
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        (ms,) = struct.unpack("d", fh.read(8))
    os.waitpid(pid, 0)
    cgroup.close()
    time.sleep(0.2)
    return float(ms)


class _FirstReport:
    """A ``report`` callback that keeps the clock at its first call."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self, data: dict[str, Any]) -> None:
        if self.at is None:
            self.at = time.perf_counter()


def _command_config(argv: list[str], digest: str, steps: int, warmup: int) -> dict[str, Any]:
    return HarnessConfig(
        workload=" ".join(argv),
        micro_batch=1,
        steps=steps,
        warmup_steps=warmup,
        command={"argv": argv, "first_report_s": 600, "working_dir": digest},
    ).to_dict()


def _run_command(
    config: dict[str, Any], archive: bytes, ckpt: Path, limits: Limits
) -> tuple[dict[str, Any], float, float, float]:
    """``(result, call, first report, return)`` of one command-mode run (``perf_counter``)."""
    first = _FirstReport()
    t0 = time.perf_counter()
    result = run_command(
        config,
        job_id="bench-contain",
        rank=0,
        world_size=1,
        init_method=None,
        checkpoint_dir=str(ckpt),
        report=first,
        report_every_s=0.0,
        should_stop=lambda: False,
        fence=lambda: True,
        num_threads=1,
        archive=archive,
        limits=limits,
    )
    t1 = time.perf_counter()
    assert first.at is not None, "no report reached the callback"
    return result, t0, first.at, t1


class Bench:
    """One benchmark run: its scratch folder, the packed working directory, the samples."""

    def __init__(self, folder: Path, steps: int, warmup: int) -> None:
        self.folder, self.steps, self.warmup = folder, steps, warmup
        src = folder / "src"
        src.mkdir()
        (src / "start.py").write_text(START_SCRIPT)
        (src / "step.py").write_text(STEP_SCRIPT)
        self.packed = pack(src)
        self.host_netns = os.readlink("/proc/self/ns/net")
        self.runs = 0
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.seen: dict[str, list[dict[str, bool]]] = {v: [] for v in VARIANTS}
        self.cgroup_close_ms: list[float] = []
        self.join_ms: list[float] = []

    def _ckpt(self) -> Path:
        self.runs += 1
        return self.folder / f"ckpt-{self.runs}"

    def _keep(self, figure: str, variant: str, value: float) -> None:
        self.samples.setdefault(figure, {v: [] for v in VARIANTS})[variant].append(value)

    def command_start(self, variant: str, keep: bool) -> None:
        """Start and end of run of the tiny command-mode script (3 steps)."""
        config = _command_config(["python", "start.py"], self.packed.digest, 3, 0)
        ckpt = self._ckpt()
        _TimedCgroup.closes_ms.clear()
        with _containment(variant) as limits:
            _, t0, first, t1 = _run_command(config, self.packed.data, ckpt, limits)
        exit_at = float((ckpt / "exit_at").read_text())
        where = json.loads((ckpt / "where.json").read_text())
        contained = {
            "cgroup": "/orch-bench-contain-0-" in where["cgroups"],
            "netns": where["netns"] != self.host_netns,
        }
        if contained != {"cgroup": variant == "with", "netns": variant == "with"}:
            raise SystemExit(f"the {variant!r} run was not what it says: {contained}")
        self.seen[variant].append(contained)
        if keep:
            self._keep("start_command_ms", variant, (first - t0) * 1e3)
            self._keep("end_command_ms", variant, (t1 - exit_at) * 1e3)
            if variant == "with":
                self.cgroup_close_ms.extend(_TimedCgroup.closes_ms)

    def entry_start(self, variant: str, keep: bool) -> None:
        """Start of the entry workload in its sandboxed child (3 steps)."""
        config = HarnessConfig(
            workload=ENTRY,
            workload_args={"features": 8},
            micro_batch=2,
            steps=3,
            warmup_steps=1,
            optimizer="sgd",
        ).to_dict()
        first = _FirstReport()
        with _containment(variant) as limits:
            t0 = time.perf_counter()
            run_sandboxed(
                config,
                job_id="bench-contain",
                rank=0,
                world_size=1,
                init_method=None,
                checkpoint_dir=None,
                report=first,
                report_every_s=0.0,
                should_stop=lambda: False,
                fence=lambda: True,
                num_threads=1,
                limits=limits,
            )
        assert first.at is not None, "no report reached the callback"
        if keep:
            self._keep("start_entry_ms", variant, (first.at - t0) * 1e3)

    def step_time(self, variant: str, keep: bool) -> None:
        """p50/p95 step time of the torch script, as the run measures it."""
        argv = ["python", "step.py", str(MATMULS)]
        config = _command_config(argv, self.packed.digest, self.steps, self.warmup)
        with _containment(variant) as limits:
            result, *_ = _run_command(config, self.packed.data, self._ckpt(), limits)
        if keep:
            self._keep("step_p50_ms", variant, float(result["p50_ms"]))
            self._keep("step_p95_ms", variant, float(result["p95_ms"]))


FIGURES: dict[str, str] = {
    "start_command_ms": "start, command mode (ms)",
    "start_entry_ms": "start, entry workload (ms)",
    "step_p50_ms": f"step p50, {MATMULS} matmuls (ms)",
    "step_p95_ms": f"step p95, {MATMULS} matmuls (ms)",
    "end_command_ms": "end of run, command mode (ms)",
}


def summary(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Per figure: median, min and max of each variant, and the ratio of the medians."""
    out: dict[str, dict[str, float]] = {}
    for figure, by_variant in samples.items():
        row: dict[str, float] = {}
        for v in VARIANTS:
            xs = by_variant[v]
            row |= {f"{v}_median": statistics.median(xs), f"{v}_min": min(xs), f"{v}_max": max(xs)}
        row["ratio"] = row["with_median"] / row["without_median"]
        out[figure] = row
    return out


def table(rows: dict[str, dict[str, float]], parts: dict[str, list[float]]) -> str:
    """The summary as a text table, with the parts of "with" measured apart (``parts``:
    figure -> its label and samples, after the row of the figure they are part of)."""

    def cell(row: dict[str, float], v: str) -> str:
        return f"{row[f'{v}_median']:.1f} ({row[f'{v}_min']:.1f}-{row[f'{v}_max']:.1f})"

    lines = [f"{'figure':<34} {'with (min-max)':>24} {'without (min-max)':>24} {'ratio':>6}"]
    for figure, label in FIGURES.items():
        row = rows[figure]
        lines.append(
            f"{label:<34} {cell(row, 'with'):>24} {cell(row, 'without'):>24} {row['ratio']:>6.2f}"
        )
        for part, xs in parts.items():
            if part.startswith(figure + ":"):
                label = "  of which " + part.split(":", 1)[1]
                text = f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
                lines.append(f"{label:<34} {text:>24} {'-':>24}")
    return "\n".join(lines)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="1 repeat, 20 steps, no warm-up")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=500, help="steps of the step-time script")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    repeats, steps, warmup = (1, 20, 2) if args.smoke else (args.repeats, args.steps, 10)
    out = args.out or (None if args.smoke else Path(__file__).parent / "results/containment.json")
    kinds: list[Callable[[Bench, str, bool], None]] = [
        Bench.command_start,
        Bench.entry_start,
        Bench.step_time,
    ]
    started, load_before = time.time(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="orch-bench-contain-") as tmp:
        os.chmod(tmp, 0o755)  # the job's uid reaches its checkpoint folder (as root)
        bench = Bench(Path(tmp), steps, warmup)
        if not args.smoke:  # one untimed run of each, both ways (the page cache, torch's import)
            for kind in kinds:
                for v in VARIANTS:
                    kind(bench, v, False)
        for r in range(repeats):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]  # alternating, who goes first too
            for kind in kinds:
                for v in order:
                    kind(bench, v, True)
            bench.join_ms.append(join_ms())
    rows = summary(bench.samples)
    print(
        "with = Limits() (a cgroup of the run's own + a network namespace of its own); "
        "without = RunCgroup stand-in with no hierarchies (cgroup=None) + "
        "Limits(network=True); the job's uid and scrubbed environment in both"
    )
    print(
        f"{repeats} repeats alternating, medians (min-max); step time: {steps} steps, "
        f"{warmup} warm-up excluded, {MATMULS} 256x256 matmuls a step, 1 thread"
    )
    parts = {
        "start_command_ms:joining the cgroup (ms)": bench.join_ms,
        "end_command_ms:RunCgroup.close (ms)": bench.cgroup_close_ms,
    }
    print(table(rows, parts))
    if out is not None:
        meta = {
            "date": datetime.date.today().isoformat(),
            "commit": _git("rev-parse", "--short", "HEAD"),
            "dirty": bool(_git("status", "--porcelain", "--", *CODE)),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": importlib.metadata.version("torch"),
            "uid": os.geteuid(),
            "enforced": enforced(),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
            "wall_s": round(time.time() - started, 1),
            "repeats": repeats,
            "steps": steps,
            "warmup_steps": warmup,
            "matmuls_per_step": MATMULS,
            "with": "limits=Limits(): the run's cgroup (v2 membership + kill, v1 pids/memory "
            "where offered) and a network namespace of its own",
            "without": "workers.sandbox.RunCgroup replaced by a stand-in with no hierarchies "
            "(sandbox() yields cgroup=None) and Limits(network=True) (no namespace); the "
            "job's uid and scrubbed environment kept in both",
            "checked": bench.seen,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "meta": meta,
                    "summary": rows,
                    "samples": bench.samples,
                    "cgroup_close_ms": bench.cgroup_close_ms,
                    "join_ms": bench.join_ms,
                },
                indent=1,
            )
            + "\n"
        )
        print(f"written: {out}")


if __name__ == "__main__":
    main()
