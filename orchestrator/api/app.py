"""The app factory: routers, the OpenAPI page at ``/docs``, and errors as HTTP answers.

An :class:`~orchestrator.errors.OrchError` raised by a route becomes one JSON answer whose
``detail`` is its message (or, for a refused spec, one item per problem, as FastAPI's own 422
names each field): 401 unauthenticated, 403 forbidden, 404 not found, 409 conflict (an ended
job, an ambiguous name), 422 invalid input, 503 store unreachable, 400 any other refusal.
A 422 always encodes, whatever the body held (:mod:`orchestrator.api.bodies`), and a body is
refused before it is read when it has no valid token (401) or is too large (413; see
:mod:`orchestrator.api.limits`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from orchestrator import __version__
from orchestrator.api import metrics, routers
from orchestrator.api.auth import Authenticator
from orchestrator.api.batching import SingleSubmissions, Submitter
from orchestrator.api.bodies import validation_failed
from orchestrator.api.limits import BodyLimit, BodyLimits
from orchestrator.api.routers import dashboard
from orchestrator.api.statuses import refusal, status_of
from orchestrator.config import Settings
from orchestrator.errors import OrchError
from orchestrator.store import JobStore

__all__ = ["create_app", "status_of"]

DESCRIPTION = """\
Submit, follow and cancel PyTorch jobs with SLAs on a shared GPU pool.

Every route but `/healthz` needs `Authorization: Bearer <token>` (an admin makes tokens with
`orch tokens create`). Roles: **admin** (teams, tokens, audit, any job), **member** (submits
and cancels its own team's jobs; a job naming another team is refused with 403), **viewer**
(reads its team's jobs, or every team's when it has none). A job the caller may not read
answers 404, exactly as a missing one. Every mutation is recorded in the audit stream with who
made it.

`/metrics` (Prometheus) takes any valid token, or none when the server runs with
`ORCH_METRICS_PUBLIC=1`. The web dashboard is at `/dashboard/`: it asks for a token and uses
this API with it.
"""


def create_app(
    store: JobStore,
    *,
    metrics_public: bool | None = None,
    body_limits: BodyLimits | None = None,
) -> FastAPI:
    """The API over ``store``'s namespace (one store, shared by every request), with
    ``/metrics`` and the dashboard at ``/dashboard/``.

    Args:
        metrics_public: serve ``/metrics`` without a token; ``None`` reads
            ``ORCH_METRICS_PUBLIC`` (see :mod:`orchestrator.api.metrics`).
        body_limits: the largest request bodies read; ``None`` reads ``ORCH_API_MAX_BODY``
            and ``ORCH_API_MAX_BATCH_BODY`` (see :class:`~orchestrator.config.Settings`).

    Raises:
        ConfigError: ``body_limits`` is ``None`` and the environment's settings are invalid.
    """
    auth = Authenticator(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await auth.aclose()
        await store.ingress.aclose()

    app = FastAPI(
        title="SLA Orchestrator",
        version=__version__,
        description=DESCRIPTION,
        docs_url="/docs",
        lifespan=lifespan,
    )
    app.state.store = store
    app.state.auth = auth
    app.state.submitter = submitter = Submitter(store)
    for router in (
        routers.jobs,
        routers.workdirs,
        routers.logs,
        routers.pool,
        routers.access,
        routers.services,
    ):
        app.include_router(router)
    if metrics_public is None:
        metrics_public = metrics.metrics_public()
    app.state.metrics_public = metrics_public
    app.state.metrics_registry = metrics.registry_for(store)
    app.include_router(metrics.router)
    dashboard.mount(app)
    if body_limits is None:
        body_limits = BodyLimits.from_settings(Settings.from_env())
    app.add_middleware(SingleSubmissions, submitter=submitter)  # inside BodyLimit: its token
    app.add_middleware(BodyLimit, auth=auth, limits=body_limits)
    app.add_exception_handler(RequestValidationError, validation_failed)  # type: ignore[arg-type]
    app.add_exception_handler(OrchError, _orch_error)  # type: ignore[arg-type]
    app.add_exception_handler(RedisError, _store_down)  # type: ignore[arg-type]

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: no token needed, touches nothing."""
        return {"status": "ok"}

    return app


async def _orch_error(request: Request, err: OrchError) -> JSONResponse:
    return refusal(err)


async def _store_down(request: Request, err: RedisError) -> JSONResponse:
    return refusal(err)
