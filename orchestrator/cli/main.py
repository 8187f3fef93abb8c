"""The `orch` command line (typer + rich): the app, the operator's commands (up, down, gc,
teams, sim, demo) and the entry point; the job commands are in :mod:`orchestrator.cli.jobs`.

Heavy imports stay inside the commands that need them: `orch --help`, `orch submit` and
`orch list` never import torch or start Ray.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from orchestrator.cli.access import audit_command, serve_command, tokens_app
from orchestrator.cli.backend import connect
from orchestrator.cli.contexts import register as register_contexts
from orchestrator.cli.install import SERVER_MODULES, require_server_install
from orchestrator.cli.jobs import register as register_jobs
from orchestrator.cli.load import load_command
from orchestrator.cli.output import Output, OutputOption, console, err_console, print_data
from orchestrator.cli.tune import tune_command
from orchestrator.errors import ConfigError, OrchError, ServerInstallMissing

if TYPE_CHECKING:
    from orchestrator.config import Settings

app = typer.Typer(
    name="orch",
    help="SLA Orchestrator: tune, schedule and run PyTorch jobs with SLAs on a shared GPU pool.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)

VirtualGPUs = Annotated[
    int | None,
    typer.Option("--virtual-gpus", min=1, help="CPU-backed GPU slots when there is no GPU."),
]


def _settings(**overrides: object) -> Settings:
    from orchestrator.config import Settings

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
    require_server_install("`orch up`")  # before Redis starts: it would be left running
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
    _say_isolation(settings)
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


def _say_isolation(settings: Settings) -> None:
    """Once, at ``orch up``'s start: what holds around a team's code on this host, or, joined
    to a cluster whose workers are elsewhere, that each says it in the log of a run it could
    not contain."""
    from workers.sandbox import isolation_report

    if settings.ray_address is not None:
        console.print(
            "team code: each worker host contains it as it can (a job's log says what did not hold)"
        )
        return
    for line in isolation_report():
        console.print(line)


teams_app = typer.Typer(help="Teams sharing the pool: guarantees, limits, weights.")
app.add_typer(teams_app, name="teams")


@teams_app.command("apply")
def teams_apply(
    file: Annotated[Path, typer.Argument(help="Team config (YAML); see `orch teams --help`.")],
) -> None:
    """Validate a team config and store it; the scheduler applies it on its next round.

    Example file: `teams: [{name: vision, weight: 2, guaranteed_gpus: 4, max_gpus: 8}]`, and
    `allow_unlisted: false` to refuse jobs and tokens of teams not listed.
    """
    from orchestrator.cli.views import team_config_table
    from orchestrator.teams import load_teams

    config = load_teams(file)
    backend = connect()
    backend.apply_teams(config)
    console.print(team_config_table(config))
    console.print(f"applied {len(config.teams)} team(s) to {backend.where}")


@teams_app.command("show")
def teams_show(output: OutputOption = Output.TABLE) -> None:
    """Show the stored team config."""
    from orchestrator.cli.views import team_config_table

    config = connect().teams()
    if config is None:
        raise OrchError("no team config applied; every team is equal (use `orch teams apply`)")
    if output.data:
        print_data(config.model_dump(mode="json"), output)
        return
    console.print(team_config_table(config))


@app.command()
def sim(
    trace: Annotated[
        Path,
        typer.Argument(
            help="Trace file (CSV or JSONL; see docs/user-guide.md, 'Simulating your own trace')."
        ),
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
    require_server_install("`orch sim`")  # its models need numpy and scipy
    from orchestrator.sim.cli import simulate
    from orchestrator.sim.config import SimConfig

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

# The job commands (orchestrator/cli/jobs.py) and the access ones (orchestrator/cli/access.py):
# FastAPI, uvicorn, httpx and the store load inside them.
register_jobs(app)
register_contexts(app)
app.command(name="load")(load_command)  # its engine and httpx load inside it
app.command(name="serve")(serve_command)
app.command(name="audit")(audit_command)
app.add_typer(tokens_app, name="tokens")


def _version(show: bool) -> None:
    if show:
        from orchestrator import __version__

        console.print(f"orch {__version__}")
        raise typer.Exit()


@app.callback(
    epilog=(
        "With ORCH_API_URL and ORCH_TOKEN set, or a context saved by `orch login`, commands go "
        "through the API as the token's principal; without them they reach the store directly "
        "(administrator access).  \n"
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
    events, metrics, logs, tuning studies, checkpoints and index entries; then the command
    jobs' working directories no job left names. Jobs not ended are never touched.
    """
    # An ended job's keys also expire by themselves after the retention age; this removes what
    # cannot (index entries, the study in the shared Optuna journal) and, with --older-than,
    # ends the wait sooner. It reaches the store directly (administrator access).
    from orchestrator.api.identity import Principal
    from orchestrator.config import format_duration, parse_duration
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
        working_dirs=store.working_dirs,
    )
    if dry_run:
        for job_id in report.removed:
            console.print(job_id, highlight=False)
        console.print(
            f"would remove {len(report.removed)} ended job(s) older than "
            f"{format_duration(age_s)} and the "
            f"leftovers of {len(report.expired)} expired one(s); {report.kept} kept; "
            f"{len(report.working_dirs)} working dir(s) no job names"
        )
        return
    who = Principal.local()
    detail = (
        f"older than {format_duration(age_s)}: "
        f"{len(report.removed)} removed, {len(report.expired)} expired"
    )
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
        f"studies, {report.checkpoints} checkpoint folders, {len(report.working_dirs)} "
        f"working dirs); {report.kept} kept"
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
    from orchestrator.store.lease import live_scheduler

    server = EmbeddedRedis(settings.data_dir)
    if (url := server.url()) is not None and (holder := live_scheduler(url)) is not None:
        # its watchdog would start the server again at once: say so instead of "stopped"
        raise OrchError(
            f"a scheduler ({holder}) uses this Redis: stop it first (Ctrl-C where `orch up` "
            "runs), then `orch down`"
        )
    server.stop()
    console.print("embedded Redis stopped")


@app.command()
def demo(
    examples: Annotated[Path, typer.Option(help="Folder of job files.")] = Path("examples"),
    virtual_gpus: VirtualGPUs = None,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 600,
) -> None:
    """Bring everything up, run the example jobs, and print how each did against its SLA."""
    from orchestrator.cli.demo import EXAMPLES_HINT, demo_namespace, run_demo

    require_server_install("`orch demo`", then=f"and {EXAMPLES_HINT}")

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
        # Messages quote user input: print it as text, never as rich markup; and unwrapped, so
        # a one-line error stays one line in a log (piped, the console is 160 columns wide).
        err_console.print(f"[red]error:[/] {escape(str(err))}", highlight=False, soft_wrap=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except ModuleNotFoundError as err:
        if debug or (err.name or "").split(".")[0] not in SERVER_MODULES:
            raise
        missing = ServerInstallMissing(err.name or "?")  # as text: `[server]` is no markup
        err_console.print(f"[red]error:[/] {escape(str(missing))}", highlight=False, soft_wrap=True)
        sys.exit(missing.exit_code)


if __name__ == "__main__":
    main()
