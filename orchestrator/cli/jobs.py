"""The job commands: ``orch submit``, ``list``, ``show``, ``wait``, ``cancel``, ``retune``,
``logs``, ``pool`` and ``whoami``, each written once over :mod:`orchestrator.cli.backend` (the
API with a token, or the store as a local admin).

Scripts get what kubectl and Slurm users expect: ``orch submit -`` reads a job from stdin,
``-o json|yaml`` on every read (and on ``submit``), ``orch wait JOB...`` with exit codes (0 every
job finished, 1 one failed, was cancelled or the wait timed out), ISO-8601 times, and tables
that fit 80 columns (``-o wide`` adds the SLA, what was measured, the node and the reason).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from orchestrator.api import options
from orchestrator.api.params import MAX_LIST, MAX_RANK, MAX_TAIL
from orchestrator.cli.backend import ENDED, Backend, connect
from orchestrator.cli.output import (
    Output,
    OutputOption,
    console,
    err_console,
    print_data,
    print_table,
)
from orchestrator.errors import OptionError, OrchError, SpecError

if TYPE_CHECKING:
    from orchestrator.api.models import JobDetail, JobView
    from orchestrator.spec import JobSpec
    from orchestrator.store.records import JobRecord

__all__ = ["register"]

By = Annotated[
    str | None,
    typer.Option(
        help="Who acts, recorded (a name, as a token's: 1-63 of a-z 0-9 . _ -); direct mode only.",
        callback=options.name("--by"),
    ),
]
JobRef = Annotated[str, typer.Argument(help="Job id or unique name.", callback=options.job_ref)]
Timeout = Annotated[
    float | None,
    typer.Option(min=0.1, help="Stop waiting after this many seconds (exit 1; the jobs go on)."),
]


def submit(
    files: Annotated[
        list[str], typer.Argument(help="Job files (YAML or JSON); - reads one from stdin.")
    ],
    wait: Annotated[bool, typer.Option("--wait", help="Follow the jobs until they end.")] = False,
    by: By = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Refuse a deadline job its tuned rate cannot meet at all, or that the "
            "scheduler's plan declines beside the deadline jobs already admitted.",
        ),
    ] = False,
    working_dir: Annotated[
        Path | None,
        typer.Option(
            "--working-dir",
            help="The folder a command job (workload.command) runs in: shipped with the jobs "
            "to every host (at most ORCH_WORKING_DIR_MAX_MB, default 50).",
        ),
    ] = None,
    timeout: Timeout = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Validate job files and queue them, all or none: if any file is invalid, nothing is
    submitted. With --wait, follow them and exit 0 only if every one finished."""
    from orchestrator.workdir import WorkingDirError, pack

    packed = None
    if working_dir is not None:
        try:
            packed = pack(working_dir)
        except WorkingDirError as err:
            err_console.print(f"[red]error:[/] {escape(str(err))}", highlight=False)
            raise typer.Exit(2) from None
    specs = _read_specs(files, packed.digest if packed else None)
    backend = connect(by)
    if by is not None and backend.api:
        err_console.print(
            "[yellow]note:[/] --by is ignored in API mode: the token's principal is recorded"
        )
    shipped = packed.data if packed and any(s.workload.working_dir for s in specs) else None
    done = backend.submit(specs, strict=strict, working_dir=shipped)
    for message in done.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)
    if not backend.scheduler_running():
        err_console.print(
            f"[yellow]warning:[/] no scheduler is running for {backend.where}: the jobs wait "
            "in the queue until `orch up` starts one"
        )
    if output.data and not wait:
        print_data({"ids": done.ids, "warnings": done.warnings}, output)
    elif not output.data:
        for job_id, spec in zip(done.ids, specs, strict=True):
            console.print(f"submitted [bold]{job_id}[/] ({spec.job_class}, team {spec.team})")
            if spec.serve is not None and spec.serve.endpoint:  # it answers only its clients
                console.print(
                    f"  a service: its clients POST to /v1/services/{job_id}/infer "
                    f"(`orch load {job_id} --rate R --duration S` sends a load; a token for "
                    f"them: `orch tokens create --service {job_id}`)",
                    highlight=False,
                )
    if wait:
        _follow(backend, done.ids, timeout, output)


def _read_specs(files: Sequence[str], digest: str | None) -> list[JobSpec]:
    """Every job file validated; all problems printed together (exit 2) before any is sent."""
    from orchestrator.inputs import parse_yaml, read_stdin
    from orchestrator.spec import load_spec, spec_from_document

    if files.count("-") > 1:
        raise OptionError("FILES", "may name standard input (-) once")
    specs, errors = [], []
    for name in files:
        try:
            if name == "-":
                document = parse_yaml(read_stdin(), "<stdin>")  # JSON is YAML too
                specs.append(spec_from_document(document, "<stdin>", working_dir=digest))
            else:
                specs.append(load_spec(name, working_dir=digest))
        except SpecError as err:
            errors.append(err)
    if errors:
        for problem in errors:
            err_console.print(f"[red]error:[/] {escape(str(problem))}", highlight=False)
        raise typer.Exit(2)
    return specs


def wait(
    jobs: Annotated[list[str], typer.Argument(help="Job ids or unique names.")],
    timeout: Timeout = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Follow jobs until they end: exit 0 if every one finished, 1 if one failed or was
    cancelled, or the timeout passed first (the jobs go on)."""
    for ref in jobs:
        options.job_ref(ref)
    backend = connect()
    ids = [backend.show(ref).job.id for ref in jobs]  # names resolved, unknown ones refused
    _follow(backend, ids, timeout, output)


def _follow(backend: Backend, ids: list[str], timeout_s: float | None, output: Output) -> None:
    """Progress bars until the jobs end (on stderr when the output is data), then the result:
    a table or the jobs' data, each failure's reason, and exit 1 unless every job finished."""
    from orchestrator.cli.views import follow, verdicts_table

    details: dict[str, JobDetail] = {}

    def read(job_id: str) -> tuple[JobRecord, dict[str, Any]]:
        details[job_id] = detail = backend.show(job_id)
        return detail.job.record(), detail.metrics

    shown_on = err_console if output.data else console
    poll_s = 1.0 if backend.api else 0.5
    try:
        follow(read, ids, shown_on, timeout_s=timeout_s, poll_s=poll_s)
    except KeyboardInterrupt:
        left = [j for j in ids if j in details and details[j].job.state.value not in ENDED]
        err_console.print(
            f"stopped following; {len(left)} job(s) go on in the pool: "
            + (", ".join(left) or "none")
            + (
                f". `orch wait {' '.join(left)}` follows them again, `orch cancel JOB` stops one"
                if left
                else ""
            )
        )
        raise typer.Exit(130) from None
    views = [details[j].job for j in ids]
    if output.data:
        print_data([_dump(v) for v in views], output)
    else:
        rows = [(v.record(), v.verdict.verdict()) for v in views]
        print_table(verdicts_table(rows, title="result", wide=output is Output.WIDE), output)
    for v in views:
        if v.state.value in ("failed", "cancelled"):
            reason = v.message or "no reason recorded"
            err_console.print(f"{v.id} {v.state.value}: {escape(reason)}", highlight=False)
    running = [v.id for v in views if v.state.value not in ENDED]
    if running:
        err_console.print(f"timed out waiting; still going: {', '.join(running)}", highlight=False)
    if any(v.state.value != "finished" for v in views):
        raise typer.Exit(1)


def _dump(view: JobView) -> dict[str, Any]:
    return view.model_dump(mode="json", by_alias=True)


def list_jobs(
    state: Annotated[list[str] | None, typer.Option(help="Only jobs in this state.")] = None,
    team: Annotated[
        str | None, typer.Option(help="Only this team's jobs.", callback=options.name("--team"))
    ] = None,
    job_class: Annotated[
        str | None, typer.Option("--class", help="Only bulk or interactive jobs.")
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            help=f"At most this many (newest; 1 to {MAX_LIST:,}).",
            callback=options.between("--limit", 1, MAX_LIST),
        ),
    ] = 50,
    output: OutputOption = Output.TABLE,
) -> None:
    """List jobs, oldest first."""
    from orchestrator.cli.views import verdicts_table
    from orchestrator.store.states import JobState

    valid = [s.value for s in JobState]
    for s in state or []:
        if s not in valid:
            raise typer.BadParameter(f"{s!r}; allowed: {', '.join(valid)}", param_hint="--state")
    if job_class not in (None, "bulk", "interactive"):
        raise typer.BadParameter(f"{job_class!r}; allowed: bulk, interactive", param_hint="--class")
    views = connect().list(states=state, team=team, job_class=job_class, limit=limit)
    if output.data:
        print_data([_dump(v) for v in views], output)
        return
    rows = [(v.record(), v.verdict.verdict()) for v in views]
    print_table(verdicts_table(rows, wide=output is Output.WIDE), output)


def show(job: JobRef, output: OutputOption = Output.TABLE) -> None:
    """Show one job: settings, SLA and whether it is met, live metrics, events, tuning."""
    from orchestrator.cli.tune import show_tuning
    from orchestrator.cli.views import job_panel

    detail = connect().show(job)
    if output.data:
        print_data(detail.model_dump(mode="json", by_alias=True), output)
        return
    view = detail.job
    panel = job_panel(
        view.record(), view.verdict.verdict(), detail.metrics, detail.events, detail.profile
    )
    console.print(panel)
    if detail.tuning is not None:
        console.print(show_tuning(detail.tuning, detail.profile))


def cancel(job: JobRef, by: By = None) -> None:
    """Cancel a job: a queued job at once; a running job is stopped and its GPUs freed.

    In API mode the token's principal is recorded as who cancelled (``--by`` is ignored)."""
    view = connect(by).cancel(job)
    word = (
        "cancelled"
        if view.state.value == "cancelled"
        else "stopping (the scheduler frees its GPUs)"
    )
    console.print(f"{view.id}: {word}")


def retune(
    job: Annotated[
        str,
        typer.Argument(
            help="Job id or unique name of a running tuned job.", callback=options.job_ref
        ),
    ],
    by: By = None,
) -> None:
    """Re-tune a running job from what it measures: it stops at a checkpoint, is tuned again
    and resumes with the new settings if they are predicted to meet its SLA, else its own.

    (`orch tune FILE` profiles a job file before it is submitted.)"""
    view = connect(by).retune(job)
    console.print(f"{view.id}: re-tune asked (see `orch show {view.id}`)")


def pool(output: OutputOption = Output.TABLE) -> None:
    """Show the pool's nodes and GPUs as the running scheduler sees them."""
    from orchestrator.cli.views import pool_table, teams_table

    backend = connect()
    view = backend.pool()
    if view is None:
        raise OrchError("no scheduler is running for this namespace; start one with `orch up`")
    if output.data:
        print_data(view, output)
        return
    console.print(pool_table(view))
    if view.get("teams"):
        console.print(teams_table(view["teams"]))
    age = time.time() - float(view.get("at", 0))
    console.print(f"[dim]as of {age:.1f} s ago[/]")


def logs(
    job: JobRef,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")
    ] = False,
    rank: Annotated[
        int | None,
        typer.Option(
            help=f"Only this rank's output (0 to {MAX_RANK}).",
            callback=options.between("--rank", 0, MAX_RANK),
        ),
    ] = None,
    tail: Annotated[
        int | None,
        typer.Option(
            help=f"Only the last this many lines of each rank (1 to {MAX_TAIL:,}).",
            callback=options.between("--tail", 1, MAX_TAIL),
        ),
    ] = None,
) -> None:
    """Print a job's captured stdout and stderr (its print(), warnings, tracebacks), per rank.

    Each line goes to the stream it was written to, prefixed with its rank unless --rank is
    given. The last ~2,000 lines of each rank are kept after the job ends; output written by C
    code straight to the file descriptors (CUDA, NCCL) is not captured."""
    for entry in connect().logs(job, rank=rank, tail=tail, follow=follow):
        text = entry.line if rank is not None else f"[rank {entry.rank}] {entry.line}"
        out = sys.stderr if entry.stream == "err" else sys.stdout
        out.write(text + "\n")
        if follow:
            out.flush()


def whoami(output: OutputOption = Output.TABLE) -> None:
    """Who the commands act as: the token's principal (API mode), or a local admin."""
    backend = connect()
    me = backend.whoami()
    if output.data:
        print_data({**me.model_dump(mode="json"), "where": backend.where}, output)
        return
    team = f" of team {me.team}" if me.team else ""
    console.print(f"{me.name}: {me.role.value}{team}, at {backend.where}", highlight=False)


def usage(
    team: Annotated[
        str | None, typer.Option(help="Only this team's jobs.", callback=options.name("--team"))
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="The window's start: this long ago (30d, 12h, 90m, 3600) or an ISO date or "
            "time, UTC unless it says (2026-11-28, 2026-11-28T10:00Z); default: all."
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """GPU-seconds per job and per team (a report like Slurm's sacct): the jobs that held GPUs
    in the window, each for its use in it (a job that never ran is in none), and each team's
    account."""
    from orchestrator.cli.views import usage_tables
    from orchestrator.config import parse_since

    try:
        start = 0.0 if since is None else parse_since(since, time.time())
    except ValueError as err:
        raise OptionError("--since", f"{err}, got {since!r}") from None
    report = connect().usage(since=start, team=team)
    if output.data:
        print_data(report.model_dump(mode="json", by_alias=True), output)
        return
    for table in usage_tables(report, wide=output is Output.WIDE):
        print_table(table, output)


def register(app: typer.Typer) -> None:
    """Add the job commands to ``app``."""
    app.command()(submit)
    app.command(name="list")(list_jobs)
    app.command()(show)
    app.command()(wait)
    app.command()(cancel)
    app.command()(retune)
    app.command()(logs)
    app.command()(pool)
    app.command()(whoami)
    app.command()(usage)
