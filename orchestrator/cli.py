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

from orchestrator.config import Settings
from orchestrator.errors import OrchError, SpecError
from orchestrator.tuner.cli import tune_command

if TYPE_CHECKING:
    from orchestrator.store import JobStore

app = typer.Typer(
    name="orch",
    help="SLA Orchestrator: tune, schedule and run PyTorch jobs with SLAs on a shared GPU pool.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
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
) -> None:
    """Start the pool and run the scheduler until interrupted (Ctrl-C requeues running jobs)."""
    import logging

    from rich.logging import RichHandler

    from orchestrator.services import make_policy, serve_in_background

    logging.basicConfig(
        level=logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False)],
    )
    settings = _settings(virtual_gpus=virtual_gpus, policy=policy)
    chosen = make_policy(settings.policy)
    with console.status("starting Redis and Ray..."):
        running = serve_in_background(settings, chosen)
    console.print(
        f"scheduler up: namespace [bold]{settings.namespace}[/], "
        f"Redis {settings.redis_url or 'embedded (' + str(settings.data_dir) + ')'}, "
        f"Ray {settings.ray_address or 'local'}; Ctrl-C to stop"
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while running.thread.is_alive() and not stop.is_set():
            running.thread.join(0.5)
    except KeyboardInterrupt:
        pass
    console.print("stopping: running jobs are checkpointed and requeued...")
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
            err_console.print(f"[red]error:[/] {problem}", highlight=False)
        raise typer.Exit(2)
    from orchestrator.services import open_store

    store, _ = open_store(_settings())
    store.check_admission(specs)  # the team config refuses none of them, or nothing is queued
    ids = []
    for spec in specs:
        rec = store.submit(spec, by=by)
        ids.append(rec.id)
        console.print(f"submitted [bold]{rec.id}[/] ({spec.job_class}, team {spec.team})")
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
    limit: Annotated[int, typer.Option(min=1, help="At most this many (newest).")] = 50,
) -> None:
    """List jobs, oldest first."""
    from orchestrator.services import open_store
    from orchestrator.store.states import JobState
    from orchestrator.views import jobs_table

    valid = [s.value for s in JobState]
    for s in state or []:
        if s not in valid:
            raise typer.BadParameter(f"{s!r}; allowed: {', '.join(valid)}", param_hint="--state")
    store, _ = open_store(_settings())
    console.print(jobs_table(store, store.list(states=state or None, limit=limit)))


@app.command()
def show(job: Annotated[str, typer.Argument(help="Job id or unique name.")]) -> None:
    """Show one job: settings, SLA and whether it is met, live metrics, events."""
    from orchestrator.services import open_store
    from orchestrator.tuner.cli import show_tuning
    from orchestrator.views import show_job

    store, _ = open_store(_settings())
    rec = store.get(store.resolve(job))
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
    """Cancel a job: a queued job at once; a running job is stopped and its GPUs freed."""
    from orchestrator.errors import IllegalTransition
    from orchestrator.services import open_store
    from orchestrator.store.states import TERMINAL, JobState

    store, _ = open_store(_settings())
    job_id = store.resolve(job)
    note = f"cancelled by {by}" if by else "cancelled"
    rec = store.get(job_id)
    for _ in range(3):  # the state may move under us (queued -> placed): retry on the new one
        target = (
            JobState.CANCELLED
            if rec.state in (JobState.SUBMITTED, JobState.QUEUED)
            else (JobState.CANCELLING)
        )
        try:
            rec = store.transition(job_id, target, expect=rec.state, message=note)
            break
        except IllegalTransition as err:
            rec = store.get(job_id)
            if rec.state in TERMINAL or rec.state is JobState.CANCELLING:
                raise OrchError(f"job {job_id} is already {rec.state.value}") from err
    word = (
        "cancelled"
        if rec.state is JobState.CANCELLED
        else "stopping (the scheduler frees its GPUs)"
    )
    console.print(f"{job_id}: {word}")


@app.command()
def pool() -> None:
    """Show the pool's nodes and GPUs as the running scheduler sees them."""
    from orchestrator.services import open_store
    from orchestrator.views import pool_table, teams_table

    store, _ = open_store(_settings())
    view = store.pool_view.read()
    if view is None:
        raise OrchError("no scheduler is running for this namespace; start one with `orch up`")
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
    from orchestrator.services import open_store
    from orchestrator.teams import load_teams
    from orchestrator.views import team_config_table

    config = load_teams(file)
    store, _ = open_store(_settings())
    view = store.pool_view.read()
    if view is not None:  # a scheduler is up: the guarantees must fit its pool
        pool_gpus = sum(int(n["gpus"]) for n in view.get("nodes", []))
        config.views(pool_gpus)
    store.put_teams(config)
    console.print(team_config_table(config))
    console.print(f"applied {len(config.teams)} team(s) to namespace {store.namespace}")


@teams_app.command("show")
def teams_show() -> None:
    """Show the stored team config."""
    from orchestrator.services import open_store
    from orchestrator.views import team_config_table

    store, _ = open_store(_settings())
    config = store.teams()
    if config is None:
        raise OrchError("no team config applied; every team is equal (use `orch teams apply`)")
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
        err_console.print(f"[red]error:[/] {err}", highlight=False)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
