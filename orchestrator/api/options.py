"""The CLI's checks of its options and arguments, by the bounds the API's routes take
(:mod:`orchestrator.api.params`, the name rule of :mod:`orchestrator.inputs`): a value the API
refuses with 422, the CLI refuses in direct mode too, with one line and exit 2
(:class:`~orchestrator.errors.OptionError`), before the store is reached.

Each function makes a typer ``callback`` for one option, given the option's name as the user
types it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from orchestrator.api.params import MAX_REF_CHARS, TOKEN_ID_PATTERN
from orchestrator.errors import OptionError
from orchestrator.names import NAME_PATTERN, NAME_RULE

__all__ = ["between", "job_ref", "name", "shorter", "token_id"]

T = TypeVar("T", str, str | None)
N = TypeVar("N", int, int | None)


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) <= 40:
        return text
    return f"{text[:37]}... ({len(str(value)):,} characters)"


def name(option: str) -> Callable[[T], T]:
    """A check that the value is a name (a principal, a team): 1-63 lowercase letters,
    digits, ``.``, ``_`` or ``-``, as a token's name and a job's team must be."""

    def check(value: T) -> T:
        if value is not None and re.fullmatch(NAME_PATTERN, value) is None:
            raise OptionError(option, f"{NAME_RULE}, got {_shown(value)}")
        return value

    return check


def shorter(option: str, most: int) -> Callable[[T], T]:
    """A check that the value has at most ``most`` characters."""

    def check(value: T) -> T:
        if value is not None and len(value) > most:
            raise OptionError(option, f"must be at most {most:,} characters, got {_shown(value)}")
        return value

    return check


def between(option: str, least: int, most: int) -> Callable[[N], N]:
    """A check that the value is from ``least`` to ``most``."""

    def check(value: N) -> N:
        if value is not None and not least <= value <= most:
            raise OptionError(option, f"must be from {least:,} to {most:,}, got {_shown(value)}")
        return value

    return check


def job_ref(value: str) -> str:
    """The check of a ``JOB`` argument: a job id or name, 1 to 200 characters (the API's
    ``/v1/jobs/{ref}``)."""
    if not 1 <= len(value) <= MAX_REF_CHARS:
        raise OptionError(
            "JOB",
            f"must be a job id or name of 1 to {MAX_REF_CHARS} characters, got {_shown(value)}",
        )
    return value


def token_id(value: str) -> str:
    """The check of a ``TOKEN_ID`` argument: 8 hex digits (the API's
    ``/v1/tokens/{token_id}``)."""
    if re.fullmatch(TOKEN_ID_PATTERN, value) is None:
        raise OptionError(
            "TOKEN_ID",
            f"must be a token's id: 8 lowercase hex digits (orch tokens list), got {_shown(value)}",
        )
    return value
