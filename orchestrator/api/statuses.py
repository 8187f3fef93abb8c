"""The HTTP status each orchestrator error answers with: one table, read by the app's error
handler and by the event stream, which can only say a failure inside a 200."""

from __future__ import annotations

from orchestrator.errors import (
    AmbiguousJob,
    ConfigError,
    Forbidden,
    IllegalTransition,
    JobEnded,
    JobNotFound,
    NotPublished,
    OrchError,
    SpecError,
    StoreError,
    TokenNotFound,
    TuneError,
    Unauthenticated,
    WorkingDirError,
)

__all__ = ["status_of"]

_STATUS: tuple[tuple[type[OrchError], int], ...] = (
    (Unauthenticated, 401),
    (Forbidden, 403),
    (JobNotFound, 404),
    (TokenNotFound, 404),
    (NotPublished, 404),
    (AmbiguousJob, 409),
    (JobEnded, 409),
    (TuneError, 409),
    (IllegalTransition, 409),
    (SpecError, 422),
    (ConfigError, 422),
    (WorkingDirError, 422),
    (StoreError, 503),
)


def status_of(err: OrchError) -> int:
    """The HTTP status an orchestrator error answers with."""
    return next((code for kind, code in _STATUS if isinstance(err, kind)), 400)
