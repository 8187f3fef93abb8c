"""The bounds of every request parameter, shared by the API's routes and the CLI's options, so
both refuse the same values with the same words (no FastAPI here: the CLI imports it).

A value past a bound is refused where it enters (422 from the API, exit 2 from the CLI), not
handed to Redis, which fails on it mid-answer (a 40-digit event id) or with a traceback (a
20-digit ``--limit``).
"""

from __future__ import annotations

from orchestrator.names import ruled
from orchestrator.store.keys import LOG_MAXLEN

__all__ = [
    "CURSOR_RULE",
    "MAX_ACTION_CHARS",
    "MAX_AUDIT",
    "MAX_LIST",
    "MAX_RANK",
    "MAX_REF_CHARS",
    "MAX_TAIL",
    "TOKEN_ID_PATTERN",
    "check_cursor",
    "cursor_problem",
]

MAX_LIST = 100_000
"""Most jobs one listing returns (``GET /v1/jobs?limit=``, ``orch list --limit``)."""
MAX_REF_CHARS = 200
"""Longest job reference (an id, or a job's name) a route or a command takes."""
MAX_RANK = 4095
"""Highest rank whose output may be asked for."""
MAX_TAIL = LOG_MAXLEN * 2
"""Most lines of each rank's output one read returns (more than are kept)."""
MAX_AUDIT = 10_000
"""Most audit entries one read returns."""
MAX_ACTION_CHARS = 64
"""Longest audit action filter (``submit``, ``teams.apply``...)."""
TOKEN_ID_PATTERN = ruled(r"^[0-9a-f]{8}$", "must be a token id: 8 hex digits")
"""A token's id: the 8 hex digits after ``orch_`` in the token."""

_U64 = 2**64
CURSOR_RULE = (
    "must be an event id as the events give it: MS or MS-SEQ, each a whole number below 2**64 "
    "(e.g. 1700000000000-0)"
)


def cursor_problem(value: str) -> str | None:
    """Why ``value`` is not a Redis stream entry id (``None``: it is one), in words naming
    what is allowed. Redis refuses a part of 2**64 or more, and a stream the server already
    answers cannot take back its 200, so a bad cursor must be caught before the stream."""
    ms, sep, seq = value.partition("-")
    parts = (ms, seq) if sep else (ms,)
    if all(p.isascii() and p.isdigit() and len(p) <= 20 and int(p) < _U64 for p in parts):
        return None
    shown = value if len(value) <= 60 else value[:57] + "..."
    return f"{CURSOR_RULE}, got {shown!r}"


def check_cursor(value: str) -> str:
    """``value`` if it is a stream entry id (a pydantic after-validator).

    Raises:
        ValueError: not one, saying what is allowed.
    """
    problem = cursor_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value
