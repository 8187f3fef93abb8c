"""``orch tune FILE`` and the tuning section of ``orch show JOB``.

Registered by the CLI module (``app.command(name="tune")(tune_command)``); kept here so the
tuner's presentation lives with the tuner. Heavy imports (torch, Optuna) happen inside.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.output import console

if TYPE_CHECKING:
    from orchestrator.config import Settings
    from orchestrator.spec import JobSpec
    from orchestrator.store import JobStore
    from orchestrator.tuner.service import TuneReport

__all__ = ["show_tuning", "trials_table", "tune_command"]


def tune_command(
    file: Annotated[Path, typer.Argument(help="Job file (YAML or JSON) to tune.")],
    strategy: Annotated[
        str, typer.Option(help="Search strategy: sla, tpe, random, grid, heuristic.")
    ] = "sla",
    trials: Annotated[
        int | None, typer.Option(min=1, help="At most this many trials (default: the job's).")
    ] = None,
    seconds: Annotated[
        float | None, typer.Option(min=0.1, help="At most this many profiling seconds.")
    ] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start the study over.")] = False,
    cache: Annotated[bool, typer.Option(help="Use the tuning cache.")] = True,
    gpus: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Tune on this many GPU slots of the pool (Ray at RAY_ADDRESS, else a local "
            "instance), searching the GPU count and DDP/FSDP too. Default: in-process on one "
            "device, or the job's GPU count when it needs more than one.",
        ),
    ] = None,
    working_dir: Annotated[
        Path | None,
        typer.Option(
            "--working-dir",
            help="The folder a command job (workload.command) runs in: stored, and each "
            "trial runs the script from a copy of it.",
        ),
    ] = None,
) -> None:
    """Tune a job against its SLA without running it: profile configs, print the trials and
    the chosen config (stored for `orch show`)."""
    from rich.markup import escape

    from orchestrator.config import Settings
    from orchestrator.services import open_store
    from orchestrator.spec import load_spec
    from orchestrator.store.server import EmbeddedRedis
    from orchestrator.tuner.study import dashboard_command
    from orchestrator.workdir import pack

    packed = pack(working_dir) if working_dir is not None else None  # WorkingDirError: exit 2
    spec = load_spec(file, working_dir=packed.digest if packed else None)
    if trials is not None or seconds is not None:
        budget = spec.tuning.budget.model_copy(
            update={k: v for k, v in {"trials": trials, "seconds": seconds}.items() if v}
        )
        spec = spec.model_copy(update={"tuning": spec.tuning.model_copy(update={"budget": budget})})
    settings = Settings.from_env()
    store, url = open_store(settings)
    if packed is not None and spec.workload.working_dir:
        store.working_dirs.put(packed.data)  # the folder the trials copy
    report = _tune_with_progress(spec, settings, store, url, strategy, cache, fresh, gpus)
    profile = store.profiles.load(report.job)
    console.print(show_tuning(report.to_dict(), profile))
    # The embedded server's password stays in its file; the command reads it from there.
    secret = None if settings.redis_url else EmbeddedRedis(settings.data_dir).password_file
    command = dashboard_command(store.study_journal(url), secret)
    console.print(
        f"[dim]study {report.study}: {escape(command)}[/]", soft_wrap=True, highlight=False
    )
    if not report.run:
        raise typer.Exit(3)


def _tune_with_progress(
    spec: JobSpec,
    settings: Settings,
    store: JobStore,
    url: str,
    strategy: str,
    cache: bool,
    fresh: bool,
    gpus: int | None,
) -> TuneReport:
    """Tune ``spec`` in-process (one device) or on a gang of the pool, with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from orchestrator.errors import ConfigError
    from orchestrator.tuner.history import History, TrialRecord
    from orchestrator.tuner.service import tune_spec
    from policies.registry import UnknownPolicyError

    with Progress(
        TextColumn("[bold]tuning[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}"),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(spec.name, total=spec.tuning.budget.trials, best="")

        def on_trial(rec: TrialRecord, history: History) -> None:
            best = history.best
            text = f"best: {best.config.describe()}" if best else "no feasible config yet"
            progress.update(task, advance=1, best=text)

        tune = functools.partial(
            tune_spec,
            spec,
            store,
            url,
            strategy=strategy,
            use_cache=cache,
            fresh=fresh,
            on_trial=on_trial,
        )
        n = gpus or (spec.resources.gpus.upper if spec.resources.gpus.min > 1 else 1)
        try:
            asked = f"--gpus {n}" if gpus else f"the job needs {n} GPUs (resources.gpus)"
            return tune() if n == 1 else _tune_on_pool(tune, spec, settings, n, asked)
        except UnknownPolicyError as err:
            raise ConfigError(str(err)) from None


def _tune_on_pool(
    tune: Callable[..., TuneReport], spec: JobSpec, settings: Settings, gpus: int, asked: str
) -> TuneReport:
    """Run ``tune`` with trials on a gang of ``gpus`` pool slots (``evaluators.gang``)."""
    from orchestrator.services import open_store
    from orchestrator.tuner.evaluators.gang import GangEvaluator
    from orchestrator.tuner.remote import command_trials, pool_gang

    with pool_gang(settings, gpus, asked=asked) as (pg, nodes, virtual):
        _, url = open_store(settings)
        evaluator = GangEvaluator(
            pg,
            spec.workload.ref,
            dict(spec.workload.args),
            job_id=spec.name,
            num_threads=1 if virtual else None,
            seed=spec.run.seed,
            gpus_per_node=max(Counter(nodes).values()),
            memory_gb=spec.resources.memory_gb,
            network=spec.resources.network,
            **command_trials(spec, url, settings.namespace),
        )
        try:
            # up to one trial per GPU of the gang at once, as a tuning run of a job does
            return tune(evaluator=evaluator, free_gpus=gpus)
        finally:
            evaluator.close()


def trials_table(report: dict[str, Any], limit: int = 50) -> Table:
    """The trials of a tuning report, in order."""
    table = Table(title=f"trials ({report['goal']})", show_lines=False)
    cols = ["#", "config", "global batch", "source", "samples/s", "p50 ms", "p95 ms", "p99 ms"]
    cols.append("step ms: data/fwd-bwd/comm/opt/rest")
    for col in (*cols, "verdict"):
        table.add_column(col, justify="right" if col not in ("config", "verdict") else "left")
    rows = report.get("trials_table", [])
    for t in rows[-limit:]:
        m = t["measurement"]
        from orchestrator.tuner.space import Config

        cfg = Config.from_dict(t["config"])
        verdict = "[green]meets SLA[/]" if t["feasible"] else f"[red]{t['reason'] or 'misses'}[/]"
        table.add_row(
            str(t["number"]),
            cfg.describe(),
            str(cfg.global_batch),
            t["source"],
            _num(m.get("samples_per_s"), 1),
            _num(m.get("p50_ms"), 1),
            _num(m.get("p95_ms"), 1),
            _num(m.get("p99_ms"), 1),
            step_parts(m),
            verdict,
        )
    return table


def step_parts(m: dict[str, Any]) -> str:
    """A trial's step in parts (``Measurement.PARTS``), ``-`` where not measured; ``-`` in
    all when the trial marked none (a command job's script, a failed trial)."""
    from orchestrator.tuner.objective import Measurement

    values = [m.get(k) for k in Measurement.PARTS]
    if all(v is None for v in values[1:]):
        return "-"
    return "/".join(_num(v, 1) for v in values)


def show_tuning(report: dict[str, Any], profile: dict[str, Any] | None = None) -> Group:
    """The tuning section of a job: verdict, chosen config, prediction, cache, trials."""
    from orchestrator.tuner.space import Config

    parts: list[Any] = [trials_table(report)]
    cfg = report.get("config")
    status = report["status"]
    head = "[green]feasible[/]" if status == "feasible" else f"[red]{status}[/]: {report['reason']}"
    lines = [
        f"tuning: {head}",
        f"goal: {report['goal']}",
        f"cache: {report['cache']}   trials: {report['trials']}   profiling: "
        f"{report['profiling_s']:.1f} s   stopped: {report['stopped']}",
    ]
    if cfg:
        label = "chosen" if status == "feasible" else "closest"
        lines.append(f"{label} config: [bold]{Config.from_dict(cfg).describe()}[/]")
        m = report.get("measurement") or {}
        lines.append(
            f"measured: {_num(m.get('samples_per_s'), 1)} samples/s, "
            f"p95 {_num(m.get('p95_ms'), 1)} ms"
        )
    chosen = (profile or {}).get("chosen") or {}
    if "samples_per_s" in chosen:
        lines.append(
            f"predicted: {chosen['samples_per_s']:,.1f} samples/s, p{chosen['percentile']} "
            f"{chosen['latency_ms']:.1f} ms (model fit error {100 * chosen['fit_error']:.1f}%)"
        )
    outcome = (profile or {}).get("outcome")
    if outcome:
        errs = ", ".join(f"{k} {100 * v:+.1f}%" for k, v in outcome["error"].items())
        lines.append(f"prediction error after the run: {errs}")
    if not report.get("run", True):
        lines.append("[yellow]not run: the SLA is infeasible (set tuning.best_effort to run)[/]")
    lines += [f"left out of the search: {escape(reason)}" for reason in report.get("dropped", [])]
    return Group(*parts, *lines)


def _num(x: Any, nd: int) -> str:
    return "-" if x is None else f"{float(x):,.{nd}f}"
