"""How the CLI prints: one console per stream, ``-o table|wide|json|yaml``, times and ages.

Tables are for people (rich, fitted to the terminal; when piped, to ``COLUMNS`` or 160
columns); ``json`` and ``yaml`` are for scripts and carry every field. Times are ISO-8601 UTC
strings in both (``2026-11-28T17:40:12Z``; the data keeps the sub-second part), while the API
sends the stored epoch seconds: :func:`iso_times` turns a body's times (keys ``at``, ``ts``,
``since``, ``*_at``, ``*_until``) into strings, leaving a job's ``spec`` (the job file, which
must read back as one) and ``fields`` (its stored record, as stored) alone.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from enum import StrEnum
from typing import Annotated, Any, Literal, TextIO

import typer
from rich.console import Console, RenderableType
from rich.measure import Measurement

__all__ = [
    "Output",
    "OutputOption",
    "age",
    "console",
    "err_console",
    "iso",
    "iso_times",
    "print_data",
    "print_json",
    "print_table",
]

PIPED_WIDTH = 160
"""Columns of a table written to a pipe or file (CI logs, ``| less``, a script's grep) when
``COLUMNS`` does not say: wide enough that no table cuts a node id, a policy name or a verdict
(at 100, four of the suite's checks of piped output lost what they looked for)."""


def piped_width(stream: TextIO) -> int | None:
    """The width to draw at on ``stream``: ``None`` (rich measures the terminal) on a
    terminal, else ``COLUMNS`` when it is a positive number, else :data:`PIPED_WIDTH`."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH


# Written to a pipe, a line of text stays whole (a script or a log reads it); tables still
# fit the width.
console = Console(width=piped_width(sys.stdout), soft_wrap=not sys.stdout.isatty())
# Messages are lines: unwrapped, so a log keeps each whole (and a test can find it).
err_console = Console(stderr=True, width=piped_width(sys.stderr), soft_wrap=True)


def print_table(table: RenderableType, output: Output) -> None:
    """``table`` on stdout; with ``-o wide`` written to a pipe or file, at its natural width
    (asked for more columns, it is not folded to fit :func:`piped_width`)."""
    if output is not Output.WIDE or console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update(max_width=10_000), table).maximum
    Console(width=max(console.width, natural)).print(table)  # print() caps at its console's


class Output(StrEnum):
    """How a command prints what it read: a table (``wide``: with more columns), or data."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def data(self) -> bool:
        """Machine-readable (``json``/``yaml``), not a table."""
        return self in (Output.JSON, Output.YAML)


OutputOption = Annotated[
    Output,
    typer.Option(
        "--output", "-o", help="table (default), wide (more columns), json or yaml (for scripts)."
    ),
]


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (no rich markup or wrapping)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_data(data: Any, output: Output) -> None:
    """``data`` (JSON-ready) as JSON or YAML on stdout, as ``output`` says, its times as
    ISO-8601 strings (:func:`iso_times`)."""
    data = iso_times(data)
    if output is Output.YAML:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
        return
    print_json(data)


Timespec = Literal["seconds", "milliseconds", "microseconds"]


def iso(seconds: float | None, timespec: Timespec = "seconds") -> str:
    """Epoch seconds as an ISO-8601 UTC time (``2026-11-26T12:10:03Z``; ``timespec`` keeps
    milli- or microseconds: ``2026-11-26T12:10:03.250Z``); ``-`` for none (0 or ``None``)."""
    if not seconds:
        return "-"
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")


_TIME_KEYS = frozenset({"at", "ts", "since"})
_AS_STORED = frozenset({"spec", "fields"})


def is_time_key(key: str) -> bool:
    """Whether a body's field named ``key`` holds epoch seconds (``at``, ``ts``, ``since``,
    ``*_at``, ``*_until``: the names the store, the API and the workers' metrics use)."""
    return key in _TIME_KEYS or key.endswith(("_at", "_until"))


def iso_times(data: Any) -> Any:
    """``data`` (JSON-ready) with every time (a number under a key :func:`is_time_key`
    names) as an ISO-8601 UTC string to the microsecond (``2026-11-28T17:40:12.930512Z``,
    whole seconds without the fraction); ``spec`` and ``fields`` are kept as they are."""
    if isinstance(data, list):
        return [iso_times(item) for item in data]
    if not isinstance(data, dict):
        return data
    out: dict[Any, Any] = {}
    for key, value in data.items():
        if key in _AS_STORED:
            out[key] = value
        elif _is_number(value) and isinstance(key, str) and is_time_key(key):
            whole = float(value).is_integer()
            moment = dt.datetime.fromtimestamp(float(value), dt.UTC)
            text = moment.isoformat(timespec="seconds" if whole else "microseconds")
            out[key] = text.replace("+00:00", "Z")
        else:
            out[key] = iso_times(value)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def age(seconds: float, now: float) -> str:
    """How long ago ``seconds`` was, as kubectl says it: ``42s``, ``7m``, ``3h``, ``12d``."""
    ago = max(0.0, now - seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if ago >= size:
            return f"{int(ago // size)}{unit}"
    return f"{int(ago)}s"
