"""The API's routers: ``jobs`` (submit, list, show, cancel, events), ``workdirs`` (command
jobs' working directories), ``logs`` (a job's captured output), ``pool`` (the pool view and the
team config), ``access`` (who am I, tokens, the audit stream) and ``services`` (a service's
endpoint, its figures and its clients' tokens)."""

from __future__ import annotations

from orchestrator.api.routers.access import router as access
from orchestrator.api.routers.jobs import router as jobs
from orchestrator.api.routers.logs import router as logs
from orchestrator.api.routers.pool import router as pool
from orchestrator.api.routers.services import router as services
from orchestrator.api.routers.workdirs import router as workdirs

__all__ = ["access", "jobs", "logs", "pool", "services", "workdirs"]
