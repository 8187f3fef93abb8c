"""How the CLI prints: one console per stream, ``-o table|wide|json|yaml``, times and ages.

Tables are for people (rich, fitted to the terminal; 160 columns when piped); ``json`` and
``yaml`` are for scripts and carry every field, times as ISO-8601 strings where a person reads
them in a table and as the stored epoch seconds in the data (what the API sends).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console

__all__ = [
    "Output",
    "OutputOption",
    "age",
    "console",
    "err_console",
    "iso",
    "print_data",
    "print_json",
]

# Piped output (CI logs, `| less`) gets a wide fixed width instead of rich's 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


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
    """``data`` (JSON-ready) as JSON or YAML on stdout, as ``output`` says."""
    if output is Output.YAML:
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
        return
    print_json(data)


def iso(seconds: float | None) -> str:
    """Epoch seconds as an ISO-8601 UTC time to the second (``2026-11-26T12:10:03Z``)."""
    if not seconds:
        return "-"
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def age(seconds: float, now: float) -> str:
    """How long ago ``seconds`` was, as kubectl says it: ``42s``, ``7m``, ``3h``, ``12d``."""
    ago = max(0.0, now - seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if ago >= size:
            return f"{int(ago // size)}{unit}"
    return f"{int(ago)}s"
