"""The HTTP status each orchestrator error answers with: one table, read by the app's error
handlers (:func:`refusal`) and by the event stream, which can only say a failure inside a 200."""

from __future__ import annotations

from redis.exceptions import RedisError
from starlette.responses import JSONResponse

from orchestrator.api.bodies import encodable
from orchestrator.errors import (
    AmbiguousJob,
    ConfigError,
    Forbidden,
    IllegalTransition,
    JobEnded,
    JobNotFound,
    NotAService,
    NotPublished,
    OrchError,
    SpecError,
    StoreError,
    TokenNotFound,
    TuneError,
    Unauthenticated,
    WorkingDirError,
)

__all__ = ["refusal", "status_of"]

_STATUS: tuple[tuple[type[OrchError], int], ...] = (
    (Unauthenticated, 401),
    (Forbidden, 403),
    (JobNotFound, 404),
    (TokenNotFound, 404),
    (NotPublished, 404),
    (AmbiguousJob, 409),
    (JobEnded, 409),
    (NotAService, 409),
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


def refusal(err: OrchError | RedisError) -> JSONResponse:
    """The answer to a request that ``err`` stopped: ``{"detail": ...}``, its message (for a
    refused spec, one item per problem, as FastAPI's own 422 names each field), with its
    status; a store failure is 503."""
    if isinstance(err, RedisError):
        return JSONResponse({"detail": f"the store failed: {err}"}, status_code=503)
    status = status_of(err)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(err, SpecError):
        detail: object = [
            {"loc": ["body"], "msg": problem, "type": "value_error"} for problem in err.problems
        ]
    else:
        detail = str(err)
    # a message quoting what was sent may hold what UTF-8 cannot encode (a lone surrogate)
    return JSONResponse({"detail": encodable(detail)}, status_code=status, headers=headers)
