"""``/v1/working-dirs``: a command job's packed working directory, stored by its digest.

``orch submit --working-dir`` in API mode uploads the zip here (the raw body, ``application/
zip``), then submits the jobs naming the digest it gets back. The body limit is the batch
route's (``ORCH_API_MAX_BATCH_BODY``, 32 MiB), enforced before the body is read
(:mod:`orchestrator.api.limits`); what it unpacks to is bounded by ``ORCH_WORKING_DIR_MAX_MB``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from orchestrator.api import operations
from orchestrator.api.auth import Store, Who
from orchestrator.api.models import WorkingDirStored

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.put("/working-dirs", status_code=201)
async def put_working_dir(request: Request, who: Who, store: Store) -> WorkingDirStored:
    """Store a command job's working directory (a zip, the raw body); returns its digest
    (a viewer is refused with 403, a body that is not a zip of the allowed size with 422)."""
    data = await request.body()
    digest = await run_in_threadpool(operations.store_working_dir, store, who, data)
    return WorkingDirStored(digest=digest)
