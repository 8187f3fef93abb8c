"""What the CLI shows: job tables, one job in full, the pool, and live progress.

Every view takes what both backends return (records with verdicts, metrics, events), so a
command draws the same thing through the API and straight from the store."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError
from rich.console import Console, Group
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator.api.models import Usage
from orchestrator.api.operations import verdict_of
from orchestrator.cli.output import age, is_time_key, iso
from orchestrator.inputs import describe_errors
from orchestrator.sla import SLAVerdict, describe_sla
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore
from orchestrator.store.records import JobRecord
from orchestrator.store.states import TERMINAL, JobState
from orchestrator.teams import TeamConfig

STATE_STYLE = {
    "queued": "yellow",
    "placed": "cyan",
    "tuning": "cyan",
    "running": "bold cyan",
    "cancelling": "magenta",
    "finished": "green",
    "failed": "bold red",
    "cancelled": "magenta",
}


def _met(verdict: SLAVerdict) -> str:
    return {True: "[green]met[/]", False: "[red]missed[/]", None: "[dim]-[/]"}[verdict.met]


def _fnum(value: Any, fmt: str = "{:,.1f}") -> str:
    try:
        return fmt.format(float(value))
    except (TypeError, ValueError):
        return "-"


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def jobs_table(
    store: JobStore, records: Sequence[JobRecord], title: str = "jobs", *, wide: bool = False
) -> Table:
    """One row per job: id, team, state, GPUs, age, SLA verdict (see :func:`verdicts_table`)."""
    return verdicts_table([(rec, verdict_of(store, rec)) for rec in records], title, wide=wide)


def verdicts_table(
    rows: Sequence[tuple[JobRecord, SLAVerdict]],
    title: str = "jobs",
    *,
    wide: bool = False,
    now: float | None = None,
) -> Table:
    """:func:`jobs_table` of records whose verdicts are known (the API sends them).

    The default columns fit 80 characters (job, team, state, GPUs, age, SLA met); ``wide``
    adds the class, the SLA and what was measured, the node and the reason of the last change.
    """
    now = time.time() if now is None else now
    table = Table(title=title)
    table.add_column("job", no_wrap=True, overflow="fold")
    if wide:
        table.add_column("class", no_wrap=True)
    table.add_column("team", overflow="fold")
    table.add_column("state", no_wrap=True, min_width=len("cancelling"))
    table.add_column("GPUs", no_wrap=True, justify="right")
    table.add_column("age", no_wrap=True, justify="right")
    table.add_column("SLA", no_wrap=True)
    if wide:
        for col in ("target", "measured", "node", "reason"):
            table.add_column(col)
    for rec, verdict in rows:
        style = STATE_STYLE.get(rec.state.value, "")
        cells = [
            rec.id,
            *([rec.job_class] if wide else []),
            rec.team,
            f"[{style}]{rec.state.value}[/]" if style else rec.state.value,
            str(gpus_of(rec)),
            age(rec.submitted_at, now),
            _met(verdict),
        ]
        if wide:
            nodes = (rec.placement or {}).get("nodes") or []
            node = ", ".join(n[:12] for n in dict.fromkeys(nodes)) or "-"
            cells += [verdict.target, verdict.measured, node, rec.message or "-"]
        table.add_row(*cells)
    return table


def applied_of(rec: JobRecord) -> dict[str, Any] | None:
    """The config the job's current run applied (``None``: not placed, or no run applied one
    yet: a tuning gang, a run still starting)."""
    raw = rec.fields.get("applied")
    if not rec.placement or not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def gpus_of(rec: JobRecord) -> int:
    """The GPUs a job holds while placed (the policy may give it more or fewer than it asked
    for), else the GPUs it asks for."""
    nodes = (rec.placement or {}).get("nodes") or []
    return len(nodes) if nodes else rec.gpus


def running_spec(rec: JobRecord, profile: dict[str, Any] | None = None) -> JobSpec:
    """The spec the job runs (or will run) with: tuned settings when it was tuned, on the GPUs
    it is placed on (an elastic job keeps its global batch; under a plan, the plan its
    ``profile`` picks for that size, as the control loop picks it: ``tuner.replan``)."""
    from orchestrator.runtime.harness_config import run_spec
    from orchestrator.tuner.replan import replanned_spec

    tuned = rec.fields.get("tuned")
    spec = run_spec(rec.spec, json.loads(tuned) if tuned else None)
    gpus = len((rec.placement or {}).get("nodes", [])) or spec.gpus
    # a placement it cannot keep its batch on: it runs as requested
    return replanned_spec(spec, gpus, profile).spec or spec


def _settings(spec: JobSpec) -> str:
    from orchestrator.tuner.replan import layout_of

    run = spec.run
    gpus = spec.gpus
    layout = layout_of(spec) if spec.serve is None else (run.sharding if gpus > 1 else "one GPU")
    return (
        f"micro-batch {run.micro_batch}, grad-accum {run.grad_accum}, {run.precision}, "
        f"GPUs {gpus} ({layout}), "
        f"global batch {run.micro_batch * run.grad_accum * spec.replicas}, "
        f"checkpointing {'on' if run.activation_checkpointing else 'off'}, "
        f"compile {'on' if run.compile else 'off'}"
    )


def _spec_rows(
    head: Table,
    rec: JobRecord,
    spec: JobSpec,
    verdict: SLAVerdict,
    profile: dict[str, Any] | None,
) -> None:
    """The rows of :func:`job_panel` read from the job's spec: workload, SLA, settings,
    length."""
    run = spec.run
    head.add_row("workload", f"{spec.workload.ref} {spec.workload.args or ''}".rstrip())
    measured = "not measured yet" if verdict.measured == "-" else verdict.measured
    head.add_row("SLA", f"{describe_sla(spec)}  ->  {measured}  {_met(verdict)}")
    try:
        runs_with = running_spec(rec, profile)
    except ValueError as err:  # a pydantic ValidationError among them
        head.add_row("settings", _settings(spec))
        head.add_row("tuned", f"not applicable: {_first_line(err)}")
    else:
        head.add_row("settings", _settings(runs_with))
        if _settings(runs_with) != _settings(spec):
            head.add_row("submitted", _settings(spec))
    length = (
        f"{run.steps} steps"
        if run.steps
        else (f"{run.duration_s:g} s" if run.duration_s else "until the SLA's work is done")
    )
    every = run.checkpoint_every
    head.add_row(
        "length",
        f"{length}, " + (f"checkpoint every {every} steps" if every else "no periodic checkpoints"),
    )


def _first_line(err: Exception) -> str:
    """The gist of an error: its first line that says something, without pydantic's
    ``N validation errors for X`` header."""
    if isinstance(err, ValidationError):
        return describe_errors(err, JobSpec)[0]
    return next((line.strip() for line in str(err).splitlines() if line.strip()), repr(err))


def job_panel(
    rec: JobRecord,
    verdict: SLAVerdict,
    metrics: dict[str, Any],
    events: Sequence[dict[str, Any]],
    profile: dict[str, Any] | None = None,
) -> Group:
    """Everything ``orch show`` says about one job: state, settings, SLA verdict, live
    metrics, events (``orchestrator.api.operations.job_detail`` gathers them). A stored spec
    that no longer validates (written by an older version) or tuned settings that no longer
    apply are said in a row, never raised: whatever is stored, the rest of the job is shown."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("job", f"{rec.id}  ({rec.name}, team {rec.team}, {rec.job_class})")
    head.add_row("state", f"{rec.state.value}  {rec.message}".rstrip())
    try:
        spec = rec.spec
    except ValidationError as err:
        problems = describe_errors(err, JobSpec)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        head.add_row("spec", f"unreadable as stored: {problems[0]}{more}")
    else:
        _spec_rows(head, rec, spec, verdict, profile)
        kinds = _kinds_cell(spec.resources.gpu_kinds, spec.resources.exclude_gpu_kinds)
        if kinds:
            head.add_row("GPU kinds", kinds)
    if rec.placement:
        nodes = rec.placement.get("nodes", [])
        head.add_row(
            "placement",
            f"{rec.placement.get('strategy')}: "
            + ", ".join(f"{n[:8]} x{nodes.count(n)}" for n in dict.fromkeys(nodes)),
        )
    applied = applied_of(rec)
    if applied:
        from orchestrator.tuner.replan import describe_applied

        head.add_row("applied", f"{describe_applied(applied)} ({applied.get('source', '?')})")
    head.add_row("attempts", str(rec.attempts))
    if rec.fields.get("after"):
        head.add_row("after", rec.fields["after"].replace(",", ", "))
    parts: list[Any] = [Panel(head, title=f"job {rec.id}")]
    if metrics:
        mt = Table(title="metrics (latest)", show_header=True)
        mt.add_column("metric")
        mt.add_column("value", justify="right")
        for key in sorted(metrics):
            mt.add_row(key, _metric(key, metrics[key]))
        parts.append(mt)
    et = Table(title="events")
    for col in ("time", "event", "from", "message"):
        et.add_column(col)
    for ev in events:
        et.add_row(
            iso(_float(ev.get("ts"))),
            ev.get("event", ""),
            ev.get("from", ""),
            ev.get("message", ""),
        )
    parts.append(et)
    return Group(*parts)


def _metric(key: str, value: Any) -> str:
    """A metric's value as the metrics table shows it: a time (``first_step_at``...) as an
    ISO-8601 UTC time to the millisecond, a figure to three decimals."""
    if value is None:  # a figure this run cannot have (a GPU's energy on a CPU)
        return "-"
    if is_time_key(key) and isinstance(value, int | float) and not isinstance(value, bool):
        return iso(value, "milliseconds")
    return _fnum(value, "{:,.3f}") if isinstance(value, float) else str(value)


def _kinds_cell(required: Sequence[str], excluded: Sequence[str]) -> str:
    """The GPU kinds a job may run on, as ``orch show`` says it ("": any)."""
    parts = []
    if required:
        parts.append("only " + " or ".join(required))
    if excluded:
        parts.append("never " + ", ".join(excluded))
    return "; ".join(parts)


def pool_table(view: dict[str, Any]) -> Table:
    """The pool as the scheduler last published it."""
    table = Table(
        title=f"pool (scheduler {view.get('scheduler', '?')}, policy {view.get('policy')})"
    )
    for col in ("node", "address", "GPUs", "used", "free", "warm workers", "kind", "GB per GPU"):
        table.add_column(col)
    for n in view.get("nodes", []):
        memory = n.get("gpu_memory_gb")
        models = n.get("models") or []
        name = n.get("kind") or "virtual"
        kind = (
            f"{name} (CPU-backed)"
            if n.get("virtual") or not models
            else f"{name}: " + ", ".join(sorted({m["model"] for m in models}))
        )
        if n.get("speed", 1.0) != 1.0:
            kind += f", speed {n['speed']:g}"
        table.add_row(
            n["node_id"][:12],
            n.get("address", "?"),
            str(n["gpus"]),
            str(n.get("used_gpus", 0)),
            str(n["gpus"] - n.get("used_gpus", 0)),
            _warm_cell(int(n.get("warm_workers", 0)), int(n.get("warm_gpus", 0))),
            kind,
            "?" if memory is None else f"{memory:.3g}",
        )
    return table


def _warm_cell(workers: int, holding: int) -> str:
    """A node's warm workers, saying how many hold no GPU (those a full node keeps)."""
    gpuless = workers - holding
    return f"{workers} ({gpuless} GPU-less)" if gpuless else str(workers)


def teams_table(rows: list[dict[str, Any]]) -> Table:
    """Each team's use of the pool against its guarantee and limit (as the scheduler last
    published it)."""
    table = Table(title="teams")
    for col in ("team", "weight", "used", "guaranteed", "limit", "borrowed", "queued (min GPUs)"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["team"] + ("" if r.get("configured", True) else " (not configured)"),
            f"{r.get('weight', 1.0):g}",
            str(r["used_gpus"]),
            str(r["guaranteed_gpus"]),
            str(r["max_gpus"] or "none"),
            str(r["borrowed_gpus"]),
            str(r["queued_gpus"]),
        )
    return table


def team_config_table(config: TeamConfig) -> Table:
    """A stored team config."""
    title = "team config" + ("" if config.allow_unlisted else " (unlisted teams refused)")
    table = Table(title=title)
    for col in ("team", "weight", "guaranteed GPUs", "max GPUs"):
        table.add_column(col)
    for t in config.teams:
        table.add_row(t.name, f"{t.weight:g}", str(t.guaranteed_gpus), str(t.max_gpus or "none"))
    return table


def _progress_of(rec: JobRecord, metrics: dict[str, Any]) -> tuple[float, str]:
    """Fraction done (0..1) and a short status, from the latest metrics."""
    step = _float(metrics.get("step")) or 0.0
    total = _float(metrics.get("total_steps"))
    if total:
        frac = step / total
    elif rec.spec.run.duration_s:
        frac = (_float(metrics.get("elapsed_s")) or 0.0) / rec.spec.run.duration_s
    else:
        frac = 0.0
    if rec.state in TERMINAL:
        frac = 1.0 if rec.state is JobState.FINISHED else frac
    return min(max(frac, 0.0), 1.0), rec.state.value


def follow(
    read: Callable[[str], tuple[JobRecord, dict[str, Any]]],
    job_ids: Sequence[str],
    console: Console,
    *,
    timeout_s: float | None = None,
    poll_s: float = 0.5,
    alive: Callable[[], bool] | None = None,
) -> list[JobRecord]:
    """Show a progress bar per job until every job ends, ``timeout_s`` passes, or ``alive``
    (the scheduler serving them) says it has stopped; return the records.

    Args:
        read: a job's record and latest metrics by id (from the store, or through the API).
    """
    progress = Progress(
        TextColumn("{task.description}", justify="left"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
    )
    tasks = {j: progress.add_task(j, total=1.0, status="queued") for j in job_ids}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    records: dict[str, JobRecord] = {}
    with progress:
        while True:
            for job_id in job_ids:
                rec, metrics = read(job_id)
                records[job_id] = rec
                frac, status = _progress_of(rec, metrics)
                progress.update(tasks[job_id], completed=frac, status=status + _live(rec, metrics))
            if all(r.state in TERMINAL for r in records.values()):
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            if alive is not None and not alive():
                break
            time.sleep(poll_s)
    return [records[j] for j in job_ids]


def _live(rec: JobRecord, metrics: dict[str, Any]) -> str:
    """The live figures beside a progress bar: the percentile the job's SLA names (p95 when
    it names none) against its ceiling, and the throughput."""
    try:
        latency = rec.spec.sla.latency
    except ValidationError:
        latency = None
    pct = latency.percentile if latency is not None else 95
    key = f"p{pct}_ms"
    if key not in metrics:
        return ""
    ceiling = f" (<= {latency.max_ms:g})" if latency is not None else ""
    return (
        f" p{pct} {_fnum(metrics[key])} ms{ceiling},"
        f" {_fnum(metrics.get('samples_per_s'))} samples/s"
    )


def usage_tables(report: Usage, *, wide: bool = False) -> list[Table]:
    """``orch usage``: GPU-hours per team over the window and its account, then per job (with
    ``wide``)."""
    teams = Table(title=f"GPU use since {iso(report.since) if report.since else 'the start'}")
    for col in ("team", "jobs", "GPU-hours", "account (GPU-hours)"):
        teams.add_column(col, justify="left" if col == "team" else "right")
    names = sorted(set(report.teams) | set(report.accounts))
    for name in names:
        jobs = sum(1 for j in report.jobs if j.team == name)
        account = report.accounts.get(name)
        teams.add_row(
            name,
            str(jobs),
            f"{report.teams.get(name, 0.0) / 3600:,.2f}",
            "-" if account is None else f"{account / 3600:,.2f}",
        )
    if not wide:
        return [teams]
    jobs_table = Table(title="jobs")
    for col in ("job", "team", "class", "state", "GPU-hours", "ended"):
        jobs_table.add_column(col)
    for j in report.jobs:
        jobs_table.add_row(
            j.id, j.team, j.job_class, j.state.value, f"{j.gpu_s / 3600:,.3f}", iso(j.finished_at)
        )
    return [teams, jobs_table]
