"""``orch sim TRACE``: simulate a trace under one or more policies and compare them.

The ``sim`` command of :mod:`orchestrator.cli` only declares the options and calls
:func:`simulate`, which does the work: it reads the trace, the pool (``--pool NODESxGPUS`` or a
nodes file) and the team config, refuses jobs that could never start, runs the simulator once
per policy (each inside :class:`~policies.scheduling.TeamCaps`, as the live scheduler runs it),
prints one comparison table, and writes ``results.json`` (per policy: the summary of
:func:`~orchestrator.sim.metrics.summarize` and every job's record) and ``results.png`` (JCT
CDF and utilisation over time, when matplotlib is installed) to the output folder.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator.errors import ConfigError, SpecError
from orchestrator.inputs import describe_errors, load_document
from orchestrator.names import ruled
from orchestrator.sim.config import SimConfig
from orchestrator.sim.engine import Simulator, uniform_pool
from orchestrator.sim.errors import StuckSimulation, UnplaceableJobs
from orchestrator.sim.metrics import SimOutcome, SimResult
from orchestrator.sim.plot import plot_runs
from orchestrator.sim.trace import TraceJob, read_trace
from orchestrator.teams import TeamConfig, load_teams
from policies import SCHEDULING_POLICIES, UnknownPolicyError
from policies.scheduling import SchedulingPolicy
from policies.snapshot import TeamView

DEFAULT_POOL = "16x4"
"""The pool when neither ``--pool`` nor ``--nodes`` is given (the Pollux testbed's shape)."""
DEFAULT_POLICY = "shared"


class NodeSpec(BaseModel):
    """One node of a ``--nodes`` file."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(min_length=1, max_length=253)
    gpus: int = Field(ge=1, le=1024)
    gpu_memory_gb: float | None = Field(default=None, gt=0, le=1 << 20)
    """Memory of each of its GPUs (GB); jobs' ``gpu_memory_gb`` is held to it."""
    kind: str = Field(
        default="",
        max_length=64,
        pattern=ruled(r"^[A-Za-z0-9._-]*$", "must be letters, digits, '.', '_' or '-'"),
    )
    """The kind of its GPUs (jobs' ``gpu_kinds``/``exclude_kinds`` are held to it)."""
    speed: float = Field(default=1.0, gt=0, le=1e6)
    """The kind's speed per GPU, in the unit of the trace's ``duration`` (every node of a kind
    must give the same)."""


def parse_pool(text: str) -> list[tuple[str, int]]:
    """``NODESxGPUS`` (``16x4``) as ``(node, gpus)`` pairs named ``n0``, ``n1``, ...

    Raises:
        ConfigError: not of that form, or a count below 1.
    """
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if m is None or int(m[1]) < 1 or int(m[2]) < 1:
        raise ConfigError(f"--pool must be NODESxGPUS with both >= 1, e.g. 16x4; got {text!r}")
    return uniform_pool(int(m[1]), int(m[2]))


def load_nodes(path: Path) -> list[NodeSpec]:
    """Read a nodes file: a YAML or JSON list of ``{name, gpus, gpu_memory_gb, kind, speed}``
    (the last three optional), in the pool's order.

    Raises:
        SpecError: unreadable file, invalid entries or repeated names, one line per problem.
    """
    data = load_document(path)
    if not isinstance(data, list):
        got = type(data).__name__
        raise SpecError(str(path), [f"a nodes file is a list of {{name, gpus}}, got {got}"])
    try:
        nodes = TypeAdapter(list[NodeSpec]).validate_python(data)
    except ValidationError as err:
        problems = [_node_named(p, data) for p in describe_errors(err, NodeSpec)]
        raise SpecError(str(path), problems) from None
    names = [n.name for n in nodes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if not nodes or dupes:
        why = f"node names must be unique; repeated: {', '.join(dupes)}" if dupes else "no nodes"
        raise SpecError(str(path), [why])
    speeds: dict[str, set[float]] = {}
    for n in nodes:
        speeds.setdefault(n.kind, set()).add(n.speed)
    mixed = [
        f"kind {k or '(unlabelled)'}: every node of a kind has one speed; got "
        + ", ".join(f"{v:g}" for v in sorted(s))
        for k, s in speeds.items()
        if len(s) > 1
    ]
    if mixed:
        raise SpecError(str(path), mixed)
    return nodes


def _node_named(problem: str, data: list[Any]) -> str:
    """A nodes file's problem located by the node (``node 3 ('gpu-a'): speed: ...``), not by
    its index in the list (``2.speed: ...``)."""
    m = re.match(r"(\d+)(?:\.|: )(.*)", problem, re.S)
    if m is None or int(m[1]) >= len(data):
        return problem
    entry = data[int(m[1])]
    name = entry.get("name") if isinstance(entry, dict) else None
    where = f"node {int(m[1]) + 1}" + (f" ({name!r})" if isinstance(name, str) else "")
    return f"{where}: {m[2]}"


def make_policies(names: Sequence[str]) -> dict[str, SchedulingPolicy]:
    """Each named scheduling policy (repeats dropped), within the team caps.

    Raises:
        ConfigError: an unknown name; the message lists the valid ones.
    """
    policies: dict[str, SchedulingPolicy] = {}
    for name in dict.fromkeys(names):
        try:
            policies[name] = SCHEDULING_POLICIES.create(name)  # the simulator adds the caps
        except UnknownPolicyError as err:
            raise ConfigError(str(err)) from None
    return policies


def refused(jobs: Sequence[TraceJob], teams: TeamConfig) -> dict[str, str]:
    """Jobs the team config refuses at submission (as ``orch submit`` would), with why."""
    out = {}
    for job in jobs:
        problems = teams.admission_problems(job.team, job.lo)
        if problems:
            out[job.name] = problems[0]
    return out


def default_out(trace: Path) -> Path:
    """``<trace stem>-sim/`` beside the trace, or ``./sim-out`` where that is not writable."""
    parent = trace.resolve().parent
    return parent / f"{trace.stem}-sim" if os.access(parent, os.W_OK) else Path("sim-out")


def simulate(
    trace: Path,
    policies: Sequence[str],
    *,
    pool: str | None,
    nodes: Path | None,
    teams: Path | None,
    config: SimConfig,
    data: Path | None,
    out: Path | None,
    console: Console,
    err_console: Console,
) -> int:
    """Simulate ``trace`` under each policy; print the table; write the results.

    One command, kept whole: its lines are the checks of its inputs, the loop over the
    policies (each run's error printed, the others still run) and the output, in that order.

    Args:
        trace: the trace file (see :mod:`orchestrator.sim.trace`).
        policies: scheduling policy names (empty: ``shared``).
        pool: ``NODESxGPUS``; nodes: a nodes file instead (default ``16x4``).
        teams: a team config file (the one ``orch teams apply`` takes).
        config: simulator settings.
        data: the Pollux data folder for ``app`` jobs (default: the standard lookup).
        out: the output folder (default :func:`default_out`).
        console, err_console: where the table and the per-policy errors go.

    Returns:
        0, or 1 when a policy's run got stuck (the others still ran; each error is printed).

    Raises:
        ConfigError: bad pool, policy name or setting. SpecError: bad nodes or team file.
        TraceError: bad trace. UnplaceableJobs: jobs that could never start.
    """
    if config.interval_s <= 0:
        raise ConfigError(f"--interval must be > 0 seconds, got {config.interval_s:g}")
    if pool is not None and nodes is not None:
        raise ConfigError("give --pool or --nodes, not both")
    chosen = make_policies(policies or [DEFAULT_POLICY])
    specs = load_nodes(nodes) if nodes is not None else []
    pool_nodes = [(n.name, n.gpus) for n in specs] or parse_pool(pool or DEFAULT_POOL)
    memory = {n.name: n.gpu_memory_gb for n in specs if n.gpu_memory_gb is not None}
    kinds = {n.name: (n.kind, n.speed) for n in specs if n.kind or n.speed != 1.0}
    total = sum(g for _, g in pool_nodes)
    views: tuple[TeamView, ...] = ()
    jobs = read_trace(trace)
    if teams is not None:
        team_config = load_teams(teams)
        views = team_config.views(total)
        never = refused(jobs, team_config)
        if never:
            raise UnplaceableJobs(never)
    root = str(data) if data is not None else None
    runs: dict[str, SimResult] = {}
    stuck: dict[str, StuckSimulation] = {}
    for name, policy in chosen.items():
        sim = Simulator(
            jobs,
            policy,
            pool_nodes,
            views,
            config,
            traces_root=root,
            gpu_memory_gb=memory,
            kinds=kinds,
        )
        if not runs and not stuck:  # the first constructor has refused unplaceable jobs
            inter = sum(j.job_class == "interactive" for j in jobs)
            console.print(
                f"{trace}: {len(jobs)} jobs ({inter} interactive) on {total} GPUs in "
                f"{len(pool_nodes)} node(s); a round every {config.interval_s:g} s, "
                f"{config.restart_s:g} s per start"
            )
        try:
            with console.status(f"simulating {name}..."):
                runs[name] = sim.run()
        except StuckSimulation as err:
            stuck[name] = err
            err_console.print(f"[red]error:[/] {name}: {escape(str(err))}", highlight=False)
    if runs:
        console.print(comparison_table(runs))
    body = results_json(trace, pool_nodes, config, runs, stuck, memory, kinds)
    _write(out or default_out(trace), body, runs, total, console)
    return 1 if stuck else 0


def _write(
    folder: Path, body: dict[str, Any], runs: dict[str, SimResult], total: int, console: Console
) -> None:
    """``results.json`` (and ``results.png`` when matplotlib is there) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / "results.json"
    results.write_text(json.dumps(body, indent=1, allow_nan=False))
    console.print(f"wrote {results}")
    png = folder / "results.png"
    if runs and plot_runs(runs, total, png):
        console.print(f"wrote {png}")
    elif runs:
        console.print("matplotlib not installed: no plot (pip install matplotlib)")


# ---- presentation ------------------------------------------------------------------------


def _num(x: float | None) -> float | None:
    """A figure for JSON: NaN (nothing to measure) becomes ``null``."""
    return None if x is None or math.isnan(x) else x


def record_json(r: SimOutcome) -> dict[str, Any]:
    """One job's record as plain JSON, with its JCT and first wait."""
    return {**asdict(r), "waits": list(r.waits), "jct": r.jct, "wait": r.wait}


def results_json(
    trace: Path,
    nodes: Sequence[tuple[str, int]],
    config: SimConfig,
    runs: Mapping[str, SimResult],
    stuck: Mapping[str, StuckSimulation],
    gpu_memory_gb: Mapping[str, float] | None = None,
    kinds: Mapping[str, tuple[str, float]] | None = None,
) -> dict[str, Any]:
    """The ``results.json`` document: inputs, then per policy its summary and job records."""
    policies: dict[str, Any] = {}
    for name, res in runs.items():
        policies[name] = {
            "summary": {k: _num(v) for k, v in res.summary().items()},
            "rounds": res.rounds,
            "end_time": res.end_time,
            "wall_s": res.wall_s,
            "held_gpus": [list(p) for p in res.usage.timeline],
            "jobs": [record_json(r) for r in res.records],
        }
    for name, err in stuck.items():
        policies[name] = {"error": str(err), "stuck_jobs": err.jobs}
    return {
        "trace": str(trace),
        "pool": [
            {"name": n, "gpus": g}
            | ({"gpu_memory_gb": gpu_memory_gb[n]} if gpu_memory_gb and n in gpu_memory_gb else {})
            | (dict(zip(("kind", "speed"), kinds[n], strict=True)) if kinds and n in kinds else {})
            for n, g in nodes
        ],
        "config": asdict(config),
        "policies": policies,
    }


def _secs(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:,.0f}"


def _frac(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1%}"


def comparison_table(runs: Mapping[str, SimResult]) -> Table:
    """One row per policy: jobs, JCT (mean, median, p95), makespan, utilisation, attainment."""
    table = Table(title="simulated policies (times in seconds)")
    for col in ("policy", "jobs done", "mean JCT", "median JCT", "p95 JCT", "makespan"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for col in ("util", "interactive SLA", "deadlines met", "preemptions"):
        table.add_column(col, justify="right")
    for name, res in runs.items():
        s = res.summary()
        table.add_row(
            name,
            f"{s['completed']:.0f}/{s['jobs']:.0f}",
            _secs(s["mean_jct"]),
            _secs(s["median_jct"]),
            _secs(s["p95_jct"]),
            _secs(s["makespan"]),
            _frac(s["utilisation"]),
            _frac(s["interactive_attainment"]),
            _frac(s["deadline_attainment"]),
            f"{s['preemptions']:.0f}",
        )
    return table
