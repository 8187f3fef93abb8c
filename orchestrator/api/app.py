"""The app factory: routers, the OpenAPI page at ``/docs``, and errors as HTTP answers.

An :class:`~orchestrator.errors.OrchError` raised by a route becomes one JSON answer whose
``detail`` is its message (or, for a refused spec, one item per problem, as FastAPI's own 422
names each field): 401 unauthenticated, 403 forbidden, 404 not found, 409 conflict (an ended
job, an ambiguous name), 422 invalid input, 503 store unreachable, 400 any other refusal.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from orchestrator import __version__
from orchestrator.api import metrics, routers
from orchestrator.api.routers import dashboard
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
)
from orchestrator.store import JobStore

__all__ = ["create_app", "status_of"]

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
    (StoreError, 503),
)

DESCRIPTION = """\
Submit, follow and cancel PyTorch jobs with SLAs on a shared GPU pool.

Every route but `/healthz` needs `Authorization: Bearer <token>` (an admin makes tokens with
`orch tokens create`). Roles: **admin** (teams, tokens, audit, any job), **member** (submits
and cancels its own team's jobs; a job naming another team is refused with 403), **viewer**
(reads its team's jobs, or every team's when it has none). Every mutation is recorded in the
audit stream with who made it.

`/metrics` (Prometheus) takes any valid token, or none when the server runs with
`ORCH_METRICS_PUBLIC=1`. The web dashboard is at `/dashboard/`: it asks for a token and uses
this API with it.
"""


def status_of(err: OrchError) -> int:
    """The HTTP status an orchestrator error answers with."""
    return next((code for kind, code in _STATUS if isinstance(err, kind)), 400)


def create_app(store: JobStore, *, metrics_public: bool | None = None) -> FastAPI:
    """The API over ``store``'s namespace (one store, shared by every request), with
    ``/metrics`` and the dashboard at ``/dashboard/``.

    Args:
        metrics_public: serve ``/metrics`` without a token; ``None`` reads
            ``ORCH_METRICS_PUBLIC`` (see :mod:`orchestrator.api.metrics`).
    """
    app = FastAPI(
        title="SLA Orchestrator",
        version=__version__,
        description=DESCRIPTION,
        docs_url="/docs",
    )
    app.state.store = store
    for router in (routers.jobs, routers.logs, routers.pool, routers.access):
        app.include_router(router)
    if metrics_public is None:
        metrics_public = metrics.metrics_public()
    app.state.metrics_public = metrics_public
    app.state.metrics_registry = metrics.registry_for(store)
    app.include_router(metrics.router)
    dashboard.mount(app)
    app.add_exception_handler(OrchError, _orch_error)  # type: ignore[arg-type]
    app.add_exception_handler(RedisError, _store_down)  # type: ignore[arg-type]

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: no token needed, touches nothing."""
        return {"status": "ok"}

    return app


async def _orch_error(request: Request, err: OrchError) -> JSONResponse:
    status = status_of(err)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(err, SpecError):
        detail: object = [
            {"loc": ["body"], "msg": problem, "type": "value_error"} for problem in err.problems
        ]
    else:
        detail = str(err)
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


async def _store_down(request: Request, err: RedisError) -> JSONResponse:
    return JSONResponse({"detail": f"the store failed: {err}"}, status_code=503)
