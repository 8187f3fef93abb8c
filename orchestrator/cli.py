"""The `orch` command line (typer + rich).

Heavy imports stay inside the commands that need them: `orch --help`, `orch submit` and
`orch list` never import torch or start Ray.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from orchestrator.api.commands import (
    Output,
    OutputOption,
    api_client,
    audit_command,
    cancelled_line,
    logs_command,
    print_json,
    serve_command,
    tokens_app,
)
from orchestrator.config import Settings
from orchestrator.errors import ConfigError, OrchError, SpecError
from orchestrator.tuner.cli import tune_command

if TYPE_CHECKING:
    from orchestrator.store import JobStore

app = typer.Typer(
    name="orch",
    help="SLA Orchestrator: tune, schedule and run PyTorch jobs with SLAs on a shared GPU pool.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
# Piped output (CI logs, `| less`) gets a wide fixed width instead of rich's 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

VirtualGPUs = Annotated[
    int | None,
    typer.Option("--virtual-gpus", min=1, help="CPU-backed GPU slots when there is no GPU."),
]


def _settings(**overrides: object) -> Settings:
    return Settings.from_env(**overrides)


@app.command()
def up(
    virtual_gpus: VirtualGPUs = None,
    policy: Annotated[
        str | None,
        typer.Option(
            help=(
                "Scheduling policy: shared (default), gang, tiresias, pollux, "
                "strict-priority, static-partition."
            )
        ),
    ] = None,
    api_address: Annotated[
        str | None,
        typer.Option(
            "--api-address",
            help="host:port the API listens on (default 127.0.0.1:8321, or ORCH_API_ADDRESS).",
        ),
    ] = None,
    standby: Annotated[
        bool | None,
        typer.Option(
            "--standby/--no-standby",
            help="If another scheduler drives the namespace, wait and take over when it "
            "stops (default: refuse; or ORCH_STANDBY).",
        ),
    ] = None,
) -> None:
    """Start the pool and run the scheduler until interrupted (Ctrl-C requeues running jobs),
    with the HTTP API (docs at /docs)."""
    import logging

    from rich.logging import RichHandler

    from orchestrator.services import make_policy, serve_in_background, start_api
    from orchestrator.store.connection import redact

    logging.basicConfig(
        level=logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )
    settings = _settings(
        virtual_gpus=virtual_gpus, policy=policy, api_address=api_address, standby=standby
    )
    chosen = make_policy(settings.policy)
    with console.status("starting Redis and Ray..."):
        running = serve_in_background(settings, chosen)
    api = start_api(settings, console)
    embedded = f"embedded ({settings.data_dir})"
    console.print(
        f"scheduler up: namespace [bold]{settings.namespace}[/], "
        f"Redis {redact(settings.redis_url) if settings.redis_url else embedded}, "
        f"Ray {settings.ray_address or 'local'}; Ctrl-C to stop"
    )
    if settings.standby and not running.scheduler.lease.held:
        console.print("standby: another scheduler drives the namespace; taking over if it stops")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while running.thread.is_alive() and not stop.is_set():
            running.thread.join(0.5)
    except KeyboardInterrupt:
        pass
    console.print("stopping: running jobs are checkpointed and requeued...")
    if api is not None:
        api.stop()
    running.shutdown()
    if running.errors:
        err = running.errors[0]
        if isinstance(err, OrchError):
            raise err
        raise OrchError(f"the scheduler stopped: {type(err).__name__}: {err}") from err


@app.command()
def submit(
    files: Annotated[list[Path], typer.Argument(help="Job files (YAML or JSON).")],
    wait: Annotated[bool, typer.Option("--wait", help="Follow the jobs until they end.")] = False,
    by: Annotated[str | None, typer.Option(help="Who submits (recorded).")] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Refuse a job whose deadline its tuned rate cannot meet at all."
        ),
    ] = False,
) -> None:
    """Validate job files and queue them. If any file is invalid, nothing is submitted."""
    from orchestrator.spec import load_spec

    specs, errors = [], []
    for path in files:
        try:
            specs.append(load_spec(path))
        except SpecError as err:
            errors.append(err)
    if errors:
        for problem in errors:
            err_console.print(f"[red]error:[/] {escape(str(problem))}", highlight=False)
        raise typer.Exit(2)
    if (client := api_client()) is not None:
        from orchestrator.api.commands import remote_submit

        remote_submit(client, specs, wait=wait, by=by, strict=strict)
        return
    from orchestrator.api import operations
    from orchestrator.api.identity import Principal
    from orchestrator.services import open_store

    store, _ = open_store(_settings())
    for check in operations.deadline_checks(store, specs):
        if check.message and not (strict and check.ok is False):
            err_console.print(f"[yellow]warning:[/] {escape(check.message)}", highlight=False)
    # All or none: the team config refuses none of them, or nothing is queued.
    ids = operations.submit(store, Principal.local(by), specs, strict=strict)
    for job_id, spec in zip(ids, specs, strict=True):
        console.print(f"submitted [bold]{job_id}[/] ({spec.job_class}, team {spec.team})")
    if wait:
        if store.pool_view.read() is None:
            err_console.print(
                "[yellow]note:[/] no scheduler is running for this namespace; "
                "the jobs wait until `orch up` starts one"
            )
        _wait(store, ids)


def _wait(store: JobStore, ids: list[str]) -> None:
    from orchestrator.store.states import JobState
    from orchestrator.views import follow, jobs_table

    records = follow(store, ids, console)
    console.print(jobs_table(store, records, title="result"))
    if any(r.state is not JobState.FINISHED for r in records):
        raise typer.Exit(1)


@app.command(name="list")
def list_jobs(
    state: Annotated[list[str] | None, typer.Option(help="Only jobs in this state.")] = None,
    team: Annotated[str | None, typer.Option(help="Only this team's jobs.")] = None,
    job_class: Annotated[
        str | None, typer.Option("--class", help="Only bulk or interactive jobs.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many (newest).")] = 50,
    output: OutputOption = Output.TABLE,
) -> None:
    """List jobs, oldest first."""
    from orchestrator.api import operations
    from orchestrator.api.identity import Principal
    from orchestrator.services import open_store
    from orchestrator.store.states import JobState
    from orchestrator.views import jobs_table

    valid = [s.value for s in JobState]
    for s in state or []:
        if s not in valid:
            raise typer.BadParameter(f"{s!r}; allowed: {', '.join(valid)}", param_hint="--state")
    if job_class not in (None, "bulk", "interactive"):
        raise typer.BadParameter(f"{job_class!r}; allowed: bulk, interactive", param_hint="--class")
    if (client := api_client()) is not None:
        from orchestrator.api.commands import remote_list

        remote_list(
            client, states=state, team=team, job_class=job_class, limit=limit, output=output
        )
        return
    store, _ = open_store(_settings())
    records = operations.list_jobs(
        store, Principal.local(), states=state, team=team, job_class=job_class, limit=limit
    )
    if output is Output.JSON:
        views = [operations.job_view(store, r) for r in records]
        print_json([v.model_dump(mode="json", by_alias=True) for v in views])
        return
    console.print(jobs_table(store, records))


@app.command()
def show(
    job: Annotated[str, typer.Argument(help="Job id or unique name.")],
    output: OutputOption = Output.TABLE,
) -> None:
    """Show one job: settings, SLA and whether it is met, live metrics, events."""
    from orchestrator.api import operations
    from orchestrator.api.identity import Principal
    from orchestrator.services import open_store
    from orchestrator.tuner.cli import show_tuning
    from orchestrator.views import show_job

    if (client := api_client()) is not None:
        from orchestrator.api.commands import remote_show

        remote_show(client, job, output)
        return
    store, _ = open_store(_settings())
    rec = operations.read_job(store, Principal.local(), job)
    if output is Output.JSON:
        print_json(operations.job_detail(store, rec).model_dump(mode="json", by_alias=True))
        return
    console.print(show_job(store, rec))
    for key in (rec.id, rec.name):  # tuned with the job, or beforehand by `orch tune FILE`
        report = store.tune_reports.load(key)
        if report is not None:
            console.print(show_tuning(report, store.profiles.load(key)))
            break


@app.command()
def cancel(
    job: Annotated[str, typer.Argument(help="Job id or unique name.")],
    by: Annotated[str | None, typer.Option(help="Who cancels (recorded).")] = None,
) -> None:
    """Cancel a job: a queued job at once; a running job is stopped and its GPUs freed.

    In API mode the token's principal is recorded as who cancelled (``--by`` is ignored)."""
    from orchestrator.api import operations
    from orchestrator.api.identity import Principal
    from orchestrator.services import open_store

    if (client := api_client()) is not None:
        view = client.cancel(job)
        console.print(cancelled_line(view.id, view.state))
        return
    store, _ = open_store(_settings())
    rec = operations.cancel(store, Principal.local(by), job)
    console.print(cancelled_line(rec.id, rec.state))


@app.command()
def retune(
    job: Annotated[str, typer.Argument(help="Job id or unique name of a running tuned job.")],
    by: Annotated[str | None, typer.Option(help="Who asks (recorded).")] = None,
) -> None:
    """Re-tune a running job from what it measures: it stops at a checkpoint, is tuned again
    and resumes with the new settings if they are predicted to meet its SLA, else its own.

    (`orch tune FILE` profiles a job file before it is submitted.)"""
    from orchestrator.api import operations
    from orchestrator.api.identity import Principal
    from orchestrator.services import open_store

    if (client := api_client()) is not None:
        view = client.retune(job)
        console.print(f"{view.id}: re-tune asked (see `orch show {view.id}`)")
        return
    store, _ = open_store(_settings())
    rec = operations.request_tune(store, Principal.local(by), job)
    console.print(f"{rec.id}: re-tune asked (see `orch show {rec.id}`)")


@app.command()
def pool(output: OutputOption = Output.TABLE) -> None:
    """Show the pool's nodes and GPUs as the running scheduler sees them."""
    from orchestrator.services import open_store
    from orchestrator.views import pool_table, teams_table

    client = api_client()
    view = client.pool() if client is not None else open_store(_settings())[0].pool_view.read()
    if view is None:
        raise OrchError("no scheduler is running for this namespace; start one with `orch up`")
    if output is Output.JSON:
        print_json(view)
        return
    console.print(pool_table(view))
    if view.get("teams"):
        console.print(teams_table(view["teams"]))
    age = time.time() - float(view.get("at", 0))
    console.print(f"[dim]as of {age:.1f} s ago[/]")


teams_app = typer.Typer(help="Teams sharing the pool: guarantees, limits, weights.")
app.add_typer(teams_app, name="teams")


@teams_app.command("apply")
def teams_apply(
    file: Annotated[Path, typer.Argument(help="Team config (YAML); see `orch teams --help`.")],
) -> None:
    """Validate a team config and store it; the scheduler applies it on its next round.

    Example file: `teams: [{name: vision, weight: 2, guaranteed_gpus: 4, max_gpus: 8}]`, and
    `allow_unlisted: false` to refuse jobs from teams not listed.
    """
    from orchestrator.api import operations
    from orchestrator.api.identity import Principal
    from orchestrator.services import open_store
    from orchestrator.teams import load_teams
    from orchestrator.views import team_config_table

    config = load_teams(file)
    if (client := api_client()) is not None:
        client.apply_teams(config)
        where = client.url
    else:
        store, _ = open_store(_settings())
        # A scheduler is up: the guarantees must fit its pool (checked there).
        operations.apply_teams(store, Principal.local(), config)
        where = f"namespace {store.namespace}"
    console.print(team_config_table(config))
    console.print(f"applied {len(config.teams)} team(s) to {where}")


@teams_app.command("show")
def teams_show(output: OutputOption = Output.TABLE) -> None:
    """Show the stored team config."""
    from orchestrator.services import open_store
    from orchestrator.views import team_config_table

    client = api_client()
    config = client.teams() if client is not None else open_store(_settings())[0].teams()
    if config is None:
        raise OrchError("no team config applied; every team is equal (use `orch teams apply`)")
    if output is Output.JSON:
        print_json(config.model_dump(mode="json"))
        return
    console.print(team_config_table(config))


@app.command()
def sim(
    trace: Annotated[
        Path,
        typer.Argument(help="Trace file (CSV or JSONL; see README, 'Simulating your own trace')."),
    ],
    policy: Annotated[
        list[str] | None,
        typer.Option(help="Scheduling policy to simulate; repeat to compare (default: shared)."),
    ] = None,
    pool: Annotated[
        str | None, typer.Option(help="Uniform pool NODESxGPUS, e.g. 16x4 (the default).")
    ] = None,
    nodes: Annotated[
        Path | None, typer.Option(help="YAML/JSON list of {name, gpus}, instead of --pool.")
    ] = None,
    teams: Annotated[
        Path | None, typer.Option(help="Team config (the file `orch teams apply` takes).")
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between scheduling rounds.")] = 60.0,
    restart: Annotated[
        float, typer.Option(min=0, help="Seconds a start, resume or resize costs.")
    ] = 30.0,
    horizon: Annotated[
        float | None, typer.Option(min=0, help="Stop at this simulated time (seconds).")
    ] = None,
    skip_idle: Annotated[
        bool, typer.Option("--skip-idle", help="Skip rounds where nothing happens (faster).")
    ] = False,
    data: Annotated[
        Path | None,
        typer.Option(
            help="Pollux data for `app` jobs (default: $ORCH_POLLUX_TRACES, else bundled)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default: <trace>-sim beside the trace).")
    ] = None,
) -> None:
    """Simulate a trace on a pool under one or more policies: a comparison table, results.json
    and a plot (JCT CDF, utilisation) in the output folder."""
    from orchestrator.sim.cli import simulate
    from orchestrator.sim.engine import SimConfig

    config = SimConfig(
        interval_s=interval, restart_s=restart, every_round=not skip_idle, horizon_s=horizon
    )
    code = simulate(
        trace,
        policy or [],
        pool=pool,
        nodes=nodes,
        teams=teams,
        config=config,
        data=data,
        out=out,
        console=console,
        err_console=err_console,
    )
    if code:
        raise typer.Exit(code)


# `orch tune`: its module keeps torch and Optuna imports inside the command.
app.command(name="tune")(tune_command)

# The API's commands: FastAPI, uvicorn and httpx load inside them (orchestrator/api/commands.py).
app.command(name="serve")(serve_command)
app.command(name="audit")(audit_command)
app.command(name="logs")(logs_command)
app.add_typer(tokens_app, name="tokens")


def _version(show: bool) -> None:
    if show:
        from orchestrator import __version__

        console.print(f"orch {__version__}")
        raise typer.Exit()


@app.callback(
    epilog=(
        "With ORCH_API_URL and ORCH_TOKEN set, commands go through the API as the token's "
        "principal; without them they reach the store directly (administrator access).  \n"
        "Exit codes: 0 success; 1 failure (a job failed, the store or the API unreachable); "
        "2 invalid input or refused (in API mode any 4xx: 401, 403, 404, 409, 422); "
        "3 `orch tune`: no config meets the SLA; 130 interrupted.  \n"
        "Shell completion: orch --install-completion (bash, zsh, fish, PowerShell)."
    )
)
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Options of every command."""


@app.command()
def gc(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Remove jobs that ended longer ago than this (30d, 12h, 90m, 3600). "
            "Default: the retention age (ORCH_RETENTION, 30d).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would be removed.")
    ] = False,
) -> None:
    """Remove ended jobs (finished, failed, cancelled) older than the retention age: records,
    events, metrics, logs, tuning studies, checkpoints and index entries. Jobs not ended are
    never touched.
    """
    # An ended job's keys also expire by themselves after the retention age; this removes what
    # cannot (index entries, the study in the shared Optuna journal) and, with --older-than,
    # ends the wait sooner. It reaches the store directly (administrator access).
    from orchestrator.api.identity import Principal
    from orchestrator.config import parse_duration
    from orchestrator.services import open_store
    from orchestrator.tuner.study import study_name

    settings = _settings()
    try:
        age_s = settings.retention_s if older_than is None else parse_duration(older_than)
    except ValueError as err:
        raise ConfigError(f"--older-than: {err}, got {older_than!r}") from None
    store, url = open_store(settings)
    journal = store.study_journal(url)
    report = store.retention.sweep(
        age_s,
        dry_run=dry_run,
        journal=journal,
        study_name=study_name,
        checkpoints=settings.checkpoint_dir,
    )
    if dry_run:
        for job_id in report.removed:
            console.print(job_id, highlight=False)
        console.print(
            f"would remove {len(report.removed)} ended job(s) older than {age_s:g} s and the "
            f"leftovers of {len(report.expired)} expired one(s); {report.kept} kept"
        )
        return
    who = Principal.local()
    detail = f"older than {age_s:g} s: {len(report.removed)} removed, {len(report.expired)} expired"
    store.audit.record(
        actor=who.name,
        role=who.role.value,
        team=None,
        action="gc",
        targets=[store.namespace],
        detail=detail,
    )
    console.print(
        f"removed {len(report.removed)} ended job(s) and the leftovers of "
        f"{len(report.expired)} expired one(s) ({report.keys} keys, {report.studies} "
        f"studies, {report.checkpoints} checkpoint folders); {report.kept} kept"
    )
    for problem in report.checkpoint_errors:
        console.print(f"kept, its checkpoint could not be deleted: {problem}", highlight=False)


@app.command()
def down() -> None:
    """Stop the embedded Redis server (its data stays under the data directory)."""
    from orchestrator.store.server import EmbeddedRedis

    settings = _settings()
    if settings.redis_url:
        raise OrchError("REDIS_URL is set: that Redis is not ours to stop")
    EmbeddedRedis(settings.data_dir).stop()
    console.print("embedded Redis stopped")


@app.command()
def demo(
    examples: Annotated[Path, typer.Option(help="Folder of job files.")] = Path("examples"),
    virtual_gpus: VirtualGPUs = None,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 600,
) -> None:
    """Bring everything up, run the example jobs, and print how each did against its SLA."""
    from orchestrator.demo import demo_namespace, run_demo

    settings = _settings(virtual_gpus=virtual_gpus)
    settings = settings.model_copy(update={"namespace": demo_namespace(settings.namespace)})
    if not run_demo(settings, examples, console, timeout_s=timeout):
        raise typer.Exit(1)


def main() -> None:
    """Entry point: one clear line for a user's mistake, no traceback (``--debug`` shows it)."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    try:
        code = app(prog_name="orch", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Exit as err:
        sys.exit(err.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except typer.TyperException as err:  # usage errors: typer vendors its own click
        show = getattr(err, "show", None)
        if callable(show):
            show()
        else:
            err_console.print(f"error: {err}")
        sys.exit(int(getattr(err, "exit_code", 2)))
    except OrchError as err:
        if debug:
            raise
        # Messages quote user input: print it as text, never as rich markup.
        err_console.print(f"[red]error:[/] {escape(str(err))}", highlight=False)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
