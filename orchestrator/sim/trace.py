"""The simulator's trace format, and converters from the Pollux workloads and the Philly extract.

A trace is a CSV (or JSONL) file, one job per row, with these columns (empty = default):

============== ======================================================================
name           unique job name
submit_time    seconds from the start of the trace
team           submitting team
job_class      ``bulk`` or ``interactive``
gpus           GPUs asked for (a rigid job's gang; an elastic job's preferred size)
min_gpus       fewest GPUs an elastic bulk job runs on (default: ``gpus``)
max_gpus       most GPUs it can use (default: ``gpus``)
duration       seconds the job runs on ``gpus`` GPUs (bulk: its work; interactive: session)
app            a Pollux application (``cifar10``...): work comes from its measured profile
batch_size     fixed global batch for ``app`` (empty: the policy/model adapts it)
deadline       bulk: seconds after submission the work should be done by (empty: none)
wait_target    interactive: start-wait target in seconds (default 60)
latency_ms     interactive: p95 latency ceiling of the session (recorded, see README)
checkpoint     seconds between checkpoints (0: continuous, no work lost on preemption)
gpu_memory_gb  memory each of its GPUs must have, GB (empty: any; see ``orch sim --nodes``)
gpu_kinds      GPU kinds it may run on, space-separated (empty: any; nodes' ``kind``)
exclude_kinds  GPU kinds it must not run on, space-separated
kind_speed     its speed per GPU on each kind against the unit ``duration`` is counted in,
               ``KIND:SPEED`` space-separated (``A100:1 H100:2.1``); a kind not named: the
               kind's own ``speed`` (``orch sim --nodes``)
============== ======================================================================

Either ``duration`` or ``app`` gives the job's work. In JSONL, ``gpu_kinds`` and
``exclude_kinds`` may also be lists (``["H100", "A100"]``) and ``kind_speed`` an object
(``{"A100": 1, "H100": 2.1}``); kind names are held to the job files' rule.
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from functools import cache
from pathlib import Path

from orchestrator.errors import SpecError
from orchestrator.inputs import parse_json, read_text
from orchestrator.kinds import KIND_NAME
from orchestrator.sim.errors import TraceError
from orchestrator.sim.profiles import traces_dir

COLUMNS = (
    "name",
    "submit_time",
    "team",
    "job_class",
    "gpus",
    "min_gpus",
    "max_gpus",
    "duration",
    "app",
    "batch_size",
    "deadline",
    "wait_target",
    "latency_ms",
    "checkpoint",
    "gpu_memory_gb",
    "gpu_kinds",
    "exclude_kinds",
    "kind_speed",
)
MAX_SPEED = 1e6
"""The largest speed per GPU a trace's ``kind_speed`` may give (as a nodes file's ``speed``)."""
_KIND = re.compile(KIND_NAME)
TRACE_FIELDS = (
    "trace column gpu_memory_gb",
    "trace column gpu_kinds",
    "trace column exclude_kinds",
)
"""Where a trace's job states its GPU memory and kinds (``policies.eligibility.why_barred``)."""
MAX_TRACE_BYTES = 256 << 20
"""Largest trace file read (about two million jobs as CSV)."""


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace (see the module docstring for the meaning of each field)."""

    name: str
    submit_time: float
    team: str = "default"
    job_class: str = "bulk"
    gpus: int = 1
    min_gpus: int = 0
    max_gpus: int = 0
    duration: float = 0.0
    app: str = ""
    batch_size: int = 0
    deadline: float | None = None
    wait_target: float = 60.0
    latency_ms: float | None = None
    checkpoint: float = 0.0
    gpu_memory_gb: float | None = None
    gpu_kinds: str = ""
    exclude_kinds: str = ""
    kind_speed: str = ""

    def __post_init__(self) -> None:
        problems = self.kind_problems()
        try:
            self.speeds()
        except ValueError as err:
            problems.append(str(err))
        if self.job_class not in ("bulk", "interactive"):
            problems.append(f"job_class must be bulk or interactive, got {self.job_class!r}")
        if self.gpus < 1:
            problems.append(f"gpus must be >= 1, got {self.gpus}")
        lo, hi = self.min_gpus or self.gpus, self.max_gpus or self.gpus
        if not lo <= self.gpus <= hi:
            problems.append(f"need min_gpus <= gpus <= max_gpus, got {lo} <= {self.gpus} <= {hi}")
        if not self.app and self.duration <= 0:
            problems.append(f"give app or a duration > 0, got duration {self.duration}")
        if self.submit_time < 0:
            problems.append(f"submit_time must be >= 0, got {self.submit_time}")
        if self.gpu_memory_gb is not None and self.gpu_memory_gb <= 0:
            problems.append(f"gpu_memory_gb must be > 0, got {self.gpu_memory_gb}")
        if problems:
            raise TraceError(f"job {self.name!r}: " + "; ".join(problems))

    @property
    def lo(self) -> int:
        """Fewest GPUs."""
        return self.min_gpus or self.gpus

    @property
    def hi(self) -> int:
        """Most GPUs."""
        return self.max_gpus or self.gpus

    def kinds(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(gpu_kinds, exclude_kinds)`` as the policy's fields."""
        return tuple(self.gpu_kinds.split()), tuple(self.exclude_kinds.split())

    def speeds(self) -> tuple[tuple[str, float], ...]:
        """``kind_speed`` as the policy's field, ``((kind, speed), ...)``.

        Raises:
            ValueError: not ``KIND:SPEED`` pairs, each kind once, named as job files name
                kinds, with a speed > 0 and at most :data:`MAX_SPEED`.
        """
        out: dict[str, float] = {}
        for item in self.kind_speed.split():
            kind, _, raw = item.partition(":")
            try:
                speed = float(raw)
            except ValueError:
                speed = math.nan
            if not _KIND.fullmatch(kind) or not math.isfinite(speed) or not 0 < speed <= MAX_SPEED:
                raise ValueError(
                    f"kind_speed must be KIND:SPEED pairs (a kind named by {KIND_NAME}, a speed "
                    f"> 0 and at most {MAX_SPEED:g}), got {item!r}"
                )
            if kind in out:
                raise ValueError(f"kind_speed names {kind} twice")
            out[kind] = speed
        return tuple(out.items())

    def kind_problems(self) -> list[str]:
        """What is wrong with ``gpu_kinds`` and ``exclude_kinds``: a name a job file could not
        give (:data:`~orchestrator.kinds.KIND_NAME`)."""
        return [
            f"{column} must be kind names ({KIND_NAME}), space-separated, got {name!r}"
            for column, names in (
                ("gpu_kinds", self.gpu_kinds),
                ("exclude_kinds", self.exclude_kinds),
            )
            for name in names.split()
            if not _KIND.fullmatch(name)
        ]


_INT = {"gpus", "min_gpus", "max_gpus", "batch_size"}
_FLOAT = {"submit_time", "duration", "wait_target", "checkpoint"}
_OPT_FLOAT = {"deadline", "latency_ms", "gpu_memory_gb"}


def _text(key: str, raw: object, where: str) -> str:
    """A text column's value: a JSON list of kind names for ``gpu_kinds`` / ``exclude_kinds``
    and an object of speeds for ``kind_speed`` are taken as their space-separated forms; any
    other list or object is refused."""
    if isinstance(raw, list) and key in ("gpu_kinds", "exclude_kinds"):
        if all(isinstance(k, str) for k in raw):
            return " ".join(raw)
    elif isinstance(raw, dict) and key == "kind_speed":
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw.values()):
            return " ".join(f"{k}:{v!r}" for k, v in raw.items())
    elif not isinstance(raw, list | dict):
        return str(raw)
    form = {
        "gpu_kinds": "kind names, space-separated (or a JSON list of them)",
        "exclude_kinds": "kind names, space-separated (or a JSON list of them)",
        "kind_speed": 'KIND:SPEED pairs, space-separated (or a JSON object {"KIND": SPEED})',
    }.get(key, "a string")
    raise TraceError(f"{where}: column {key!r} must be {form}, got {raw!r}")


def _parse(row: dict[str, object], where: str) -> TraceJob:
    kwargs: dict[str, object] = {}
    known = {f.name for f in fields(TraceJob)}
    for key, raw in row.items():
        if key is None:  # csv.DictReader's key for values beyond the header's columns
            raise TraceError(f"{where}: more values than the header has columns")
        if key not in known:
            raise TraceError(f"{where}: unknown column {key!r}; columns: {', '.join(COLUMNS)}")
        if raw is None or raw == "":
            continue
        if key not in _INT and key not in _FLOAT and key not in _OPT_FLOAT:
            kwargs[key] = _text(key, raw, where)
            continue
        try:
            number = float(str(raw)) if not isinstance(raw, bool) else math.nan
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or abs(number) > 1e15:
            raise TraceError(
                f"{where}: column {key!r} must be a finite number (at most 1e15), got {raw!r}"
            )
        kwargs[key] = int(number) if key in _INT else number
    if "name" not in kwargs or "submit_time" not in kwargs:
        raise TraceError(f"{where}: name and submit_time are required")
    try:
        return TraceJob(**kwargs)  # type: ignore[arg-type]
    except TraceError as err:
        raise TraceError(f"{where}: {err}") from None


def read_trace(path: Path) -> list[TraceJob]:
    """Read a trace file (``.csv`` or ``.jsonl``), sorted by submission time.

    Raises:
        TraceError: missing file, unknown column, bad value (the message names the row).
    """
    try:  # a regular file of bounded size (see orchestrator.inputs)
        text = read_text(path, max_bytes=MAX_TRACE_BYTES)
    except SpecError as err:
        raise TraceError(f"trace file {path}: {'; '.join(err.problems)}") from None
    jobs: list[TraceJob] = []
    if path.suffix == ".jsonl":
        for i, line in enumerate(text.splitlines(), 1):
            if line.strip():
                where = f"{path}:{i}"
                try:
                    row = parse_json(line, where)
                except SpecError as err:
                    raise TraceError(f"{where}: {'; '.join(err.problems)}") from None
                if not isinstance(row, dict):
                    raise TraceError(f"{where}: each line must be a JSON object of columns")
                jobs.append(_parse(row, where))
    else:
        try:
            for i, row in enumerate(csv.DictReader(io.StringIO(text, newline="")), 2):
                jobs.append(_parse(dict(row), f"{path}:{i}"))
        except csv.Error as err:
            raise TraceError(f"{path}: not a valid CSV trace: {err}") from None
    if not jobs:
        raise TraceError(f"{path}: the trace has no jobs")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise TraceError(f"{path}: job names must be unique")
    return sorted(jobs, key=lambda j: j.submit_time)


def write_trace(jobs: list[TraceJob], path: Path) -> None:
    """Write jobs as a CSV trace (the format :func:`read_trace` reads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for job in jobs:
            row = asdict(job)
            w.writerow({k: ("" if row[k] is None else row[k]) for k in COLUMNS})


def pollux_workload(
    name: str, load: float = 1.0, adaptive: bool = False, root: Path | None = None
) -> list[TraceJob]:
    """Convert a Pollux workload (``workload-N`` at load 1.0 or 0.5) to trace jobs.

    Args:
        name: ``workload-1`` ... ``workload-8``.
        load: 1.0 (``workloads/``) or 0.5 (``workloads-0.5/``).
        adaptive: False: each job keeps its hand-tuned GPUs and batch (Tiresias+TunedJobs);
            True: elastic from 1 GPU up to what its largest batch can use, batch adapted (ncf
            keeps batch 32768 on at most 1 GPU, as in the artifact).
        root: the Pollux data folder (default :func:`traces_dir`).
    """
    from orchestrator.sim.profiles import load_app

    folder = "workloads" if load == 1.0 else f"workloads-{load}"
    path = (root or traces_dir()) / folder / f"{name}.csv"
    if not path.is_file():
        raise TraceError(f"Pollux workload not found: {path}")
    jobs = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            gpus, batch = int(row["num_replicas"]), int(row["batch_size"])
            app = row["application"]
            lo = hi = gpus
            if adaptive:
                profile = load_app(app, str(root) if root else None)
                lo, hi = 1, min(64, profile.max_batch_size // profile.min_local_bsz)
                batch = 0
                if app == "ncf":
                    hi, batch = 1, 32768
                gpus = min(max(gpus, lo), hi)
            jobs.append(
                TraceJob(
                    name=row["name"],
                    submit_time=float(row["time"]),
                    team="pollux",
                    gpus=gpus,
                    min_gpus=lo,
                    max_gpus=hi,
                    app=app,
                    batch_size=batch,
                )
            )
    return sorted(jobs, key=lambda j: j.submit_time)


def philly_jobs(
    count: int,
    seed: int = 0,
    path: Path | None = None,
    elastic: bool = True,
    max_gpus: int = 64,
    max_duration: float = 7 * 86400.0,
) -> list[TraceJob]:
    """Bulk jobs from the Philly extract: teams from ``cluster``, arrival order and gaps kept.

    A window of ``count`` consecutive submissions (by timestamp) starting at a seeded offset;
    with fewer rows than ``count`` the window wraps around, shifted by the trace's span.
    ``duration`` is the job's run time on its GPUs; an elastic job may run on half to twice its
    GPUs (at least 1, at most ``max_gpus``). Durations are capped at ``max_duration``.
    """
    rows = _philly_rows(path or traces_dir() / "philly.csv")
    t0, span = rows[0][0], rows[-1][0] - rows[0][0] + 60.0
    start = random.Random(seed).randrange(len(rows))
    jobs = []
    first = None
    for i in range(count):
        ts, duration, gpus, team = rows[(start + i) % len(rows)]
        t = ts - t0 + span * ((start + i) // len(rows))
        first = t if first is None else first
        gpus = min(max(gpus, 1), max_gpus)
        lo, hi = (max(1, gpus // 2), min(max_gpus, gpus * 2)) if elastic else (gpus, gpus)
        jobs.append(
            TraceJob(
                name=f"philly-{i}",
                submit_time=t - first,
                team=team,
                gpus=gpus,
                min_gpus=lo,
                max_gpus=hi,
                duration=min(max(duration, 60.0), max_duration),
            )
        )
    return jobs


@cache
def _philly_rows(src: Path) -> list[tuple[float, float, int, str]]:
    """(submit timestamp, duration, GPUs, cluster) of every Philly job, by timestamp."""
    if not src.is_file():
        raise TraceError(f"Philly extract not found: {src}")
    rows = []
    with src.open(newline="") as f:
        for r in csv.DictReader(f):
            ts = datetime.fromisoformat(r["timestamp"]).timestamp()
            rows.append((ts, float(r["duration"]), int(r["num_gpus"]), r["cluster"]))
    rows.sort()
    return rows


def philly_window(
    start: str,
    days: float,
    speed: float = 1.0,
    path: Path | None = None,
    elastic: bool = True,
    max_gpus: int = 64,
    max_duration: float = 7 * 86400.0,
) -> list[TraceJob]:
    """Bulk jobs from the Philly extract submitted in ``days`` days from ``start`` (a date).

    Teams come from ``cluster``; submission times are relative to ``start`` and divided by
    ``speed`` (``speed=2``: the same jobs arrive twice as fast, twice the offered load).
    Sizes and durations as :func:`philly_jobs`.
    """
    rows = _philly_rows(path or traces_dir() / "philly.csv")
    t0 = datetime.strptime(start, "%Y-%m-%d").timestamp()
    jobs: list[TraceJob] = []
    for ts, duration, gpus, team in rows:
        if not t0 <= ts < t0 + days * 86400.0:
            continue
        gpus = min(max(gpus, 1), max_gpus)
        lo, hi = (max(1, gpus // 2), min(max_gpus, gpus * 2)) if elastic else (gpus, gpus)
        jobs.append(
            TraceJob(
                name=f"philly-{len(jobs)}",
                submit_time=(ts - t0) / speed,
                team=team,
                gpus=gpus,
                min_gpus=lo,
                max_gpus=hi,
                duration=min(max(duration, 60.0), max_duration),
            )
        )
    if not jobs:
        raise TraceError(f"no Philly jobs submitted in {days} days from {start}")
    return jobs
