"""``orch load SERVICE``: open-loop load on a service's endpoint through the API, a real
client's view of it (the engine is :mod:`orchestrator.load`).

Registered by the CLI module (``app.command(name="load")(load_command)``). It needs the API
(``ORCH_API_URL`` and ``ORCH_TOKEN``, or a context): direct mode reaches the store, which
answers no request. httpx, pydantic and the engine load inside the command.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.api import options
from orchestrator.cli.output import Output, OutputOption, console, err_console, print_data
from orchestrator.errors import ConfigError, OptionError

if TYPE_CHECKING:
    from orchestrator.load import LoadReport, Schedule, Spread

__all__ = ["load_command"]

LAG_WARN_MS = 10.0
"""A p99 send lag over this says the client did not keep up (on stderr)."""
MAX_CONNECTIONS = 10_000


# One function though over 80 lines: 40 of them are its options (typer reads them from the
# signature, each with its help); the body checks the flags, reads the service, runs the load
# and prints, each step a named helper (_schedule, _positive, send_load, _table). Its docstring
# is the command's --help, so the note is here.
def load_command(
    service: Annotated[
        str, typer.Argument(help="The service: job id or unique name.", callback=options.job_ref)
    ],
    rate: Annotated[
        float | None,
        typer.Option(
            help="Poisson arrivals at this many requests per second, over --duration "
            "(give this or --trace)."
        ),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option(
            help="A file of arrival times in seconds, one per line or whitespace separated, "
            "never decreasing ('#' comments), from its first (give this or --rate)."
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            help="Seconds of load; needed with --rate. A trace repeats every last-time "
            "seconds to cover it, as a service's serve.trace does (without it, a trace is "
            "sent once)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seeds the Poisson arrivals and the inputs.")] = 0,
    timeout: Annotated[
        float,
        typer.Option(help="A request unanswered this many seconds after it starts is a timeout."),
    ] = 30.0,
    connections: Annotated[
        int,
        typer.Option(
            help=f"At most this many connections open at once (1 to {MAX_CONNECTIONS:,}); "
            "a request waits for a free one, counted in its latency.",
            callback=options.between("--connections", 1, MAX_CONNECTIONS),
        ),
    ] = 100,
    output: OutputOption = Output.TABLE,
) -> None:
    """Send requests to a service at their intended times, open loop (never waiting for an
    answer before the next), and report answers by status, latency p50/p95/p99/max from each
    request's intended time to its answer (a stall's wait counted, not hidden), offered and
    achieved rate, and how late requests left (a client that cannot keep up says so).

    Inputs are random (seeded) of the shape and dtype the service advertises, made before the
    first request. Needs the API (ORCH_API_URL and ORCH_TOKEN, or `orch login`). Exit 0 once
    every request is answered or given up on, whatever the answers: they are the measurement.
    """
    from orchestrator.cli.backend import api_client
    from orchestrator.load import send_load

    schedule = _schedule(rate, trace, duration, seed)
    _positive("--timeout", timeout)
    client = api_client()
    if client is None:
        raise ConfigError(
            "orch load needs the API (ORCH_API_URL and ORCH_TOKEN, or `orch login`): direct "
            "mode reaches the store, which serves no request"
        )
    with client:
        info = client.service(service)
        job_id = str(info.get("job_id") or service)
        if not info.get("ready_replicas"):
            err_console.print(
                f"[yellow]warning:[/] {escape(job_id)} has no ready replica: it answers 503 "
                "until one is",
                highlight=False,
            )
        if not output.data:
            err_console.print(
                f"{len(schedule.offsets):,} requests to {escape(job_id)} over "
                f"{schedule.span_s:g} s...",
                highlight=False,
            )
        report = send_load(
            client,
            job_id,
            info,
            schedule,
            seed=seed,
            timeout_s=timeout,
            connections=connections,
        )
    if report.send_lag is not None and report.send_lag.p99 > LAG_WARN_MS:
        err_console.print(
            f"[yellow]warning:[/] requests left late (p99 {report.send_lag.p99:,.1f} ms, at "
            f"most {report.send_lag.max:,.1f} ms behind their time): this client, or its "
            f"{connections} connections, did not keep up; the latencies count that wait",
            highlight=False,
        )
    if output.data:
        meta = {"service": job_id, "seed": seed, "timeout_s": timeout, "connections": connections}
        print_data({**meta, **report.data()}, output)
        return
    console.print(_table(job_id, report))


def _positive(option: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise OptionError(option, f"must be a number > 0, got {value:g}")


def _schedule(
    rate: float | None, trace: Path | None, duration: float | None, seed: int
) -> Schedule:
    """When each request is due, from the flags; each mistake names its flag (exit 2)."""
    from orchestrator.load import MAX_REQUESTS, poisson_schedule, trace_schedule

    if rate is not None and trace is not None:
        raise OptionError("--rate", "and --trace: give one of them, not both")
    if duration is not None:
        _positive("--duration", duration)
    if rate is not None:
        _positive("--rate", rate)
        if duration is None:
            raise OptionError("--duration", "is needed with --rate (seconds of load)")
        if rate * duration > MAX_REQUESTS:
            raise OptionError(
                "--rate",
                f"x --duration is {rate * duration:,.0f} requests; at most {MAX_REQUESTS:,} "
                "in one run",
            )
        return poisson_schedule(rate, duration, seed)
    if trace is None:
        raise OptionError(
            "--rate", "or --trace: give one (requests per second, or a file of arrival times)"
        )
    try:
        text = trace.read_text()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) else "not a text file"
        raise OptionError("--trace", f"cannot read {str(trace)!r}: {why}") from None
    try:
        return trace_schedule(text, duration)
    except ValueError as err:
        raise OptionError("--trace", f"{trace}: {err}") from None


def _table(job_id: str, report: LoadReport) -> Table:
    def rps(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f} req/s"

    def spread(s: Spread | None, *keys: str) -> str:
        if s is None:
            return "-"
        return "  ".join(f"{k} {getattr(s, k):,.1f}" for k in keys) + " ms"

    table = Table(
        title=f"load on {escape(job_id)}: {report.requests:,} requests over {report.span_s:g} s",
        show_header=False,
    )
    table.add_column(style="bold")
    table.add_column()
    table.add_row("offered", rps(report.offered_rps))
    table.add_row("achieved", f"{rps(report.achieved_rps)} (200s, to the last answer)")
    table.add_row("answers", "  ".join(f"{k}: {v:,}" for k, v in report.statuses.items()))
    table.add_row("latency (200s)", spread(report.latency, "p50", "p95", "p99", "max"))
    table.add_row("sent late by", spread(report.send_lag, "p50", "p99", "max"))
    return table
