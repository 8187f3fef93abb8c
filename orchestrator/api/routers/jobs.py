"""``/v1/jobs``: submit one or many, list with filters, show, cancel, and follow events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator
from redis.exceptions import RedisError

from orchestrator.api import operations
from orchestrator.api.auth import Claim, Claimed, Store, Who
from orchestrator.api.batching import Submitter
from orchestrator.api.bodies import StrictJsonRoute
from orchestrator.api.models import JobBatch, JobDetail, JobView, Submitted
from orchestrator.api.params import CURSOR_RULE, MAX_LIST, MAX_REF_CHARS, check_cursor
from orchestrator.api.statuses import status_of
from orchestrator.errors import OrchError
from orchestrator.spec import NAME_PATTERN, JobSpec
from orchestrator.store import JobStore
from orchestrator.store.states import TERMINAL, JobState

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=StrictJsonRoute)

Ref = Annotated[
    str,
    Path(min_length=1, max_length=MAX_REF_CHARS, description="A job id, or the name of one job."),
]
Cursor = Annotated[
    str,
    Query(description=f"Only events after this event id: it {CURSOR_RULE}."),
    AfterValidator(check_cursor),
]
"""An event id to follow a stream from, checked before the stream starts (Redis refuses an
id past 64 bits, and a refusal mid-stream could only cut the answer off)."""
Strict = Annotated[
    bool,
    Query(
        description="Refuse a deadline job its tuned rate cannot meet on all its GPUs, or that "
        "the scheduler's plan declines beside the deadline jobs already admitted (422)."
    ),
]
_T = TypeVar("_T")
_TERMINAL = frozenset(s.value for s in TERMINAL)
_BLOCK_MS = 2000  # under redis-py's default socket timeout (5 s): a block that long would time out


# The submissions are async routes whose store work (blocking Redis calls) runs in one thread
# hop, the token confirmed there too (orchestrator.api.auth); the body is parsed and validated
# on the event loop. A sync route would cost a hop per dependency besides its own. Single
# submissions share their hop and round trips with those arriving meanwhile
# (orchestrator.api.batching).


async def _in_thread(call: Callable[[], _T]) -> _T:
    """``call()`` in the loop's default executor: asyncio's own hop, about half the CPU of
    ``run_in_threadpool`` (anyio's capacity limiter and cancel scope), which at thousands of
    submissions a second is a tenth of the server's time. The call is never abandoned midway:
    each store write is one atomic script."""
    return await asyncio.get_running_loop().run_in_executor(None, call)


@router.post("/jobs", status_code=201, response_model=Submitted)
async def submit(
    spec: JobSpec, claim: Claimed, store: Store, request: Request, strict: Strict = False
) -> Response:
    """Queue one job (a member only for its own team: another team is refused with 403)."""
    if strict:
        return _submitted(await _in_thread(partial(_submit, store, claim, [spec], strict)))
    submitter: Submitter = request.app.state.submitter  # written with concurrent ones
    return _submitted(await submitter.submit(claim, spec))


@router.post("/jobs/batch", status_code=201, response_model=Submitted)
async def submit_batch(
    batch: JobBatch, claim: Claimed, store: Store, strict: Strict = False
) -> Response:
    """Queue many jobs: all, or none when one is refused."""
    return _submitted(await _in_thread(partial(_submit, store, claim, batch.jobs, strict)))


def _submit(store: JobStore, claim: Claim, specs: list[JobSpec], strict: bool) -> Submitted:
    return operations.submit(store, claim.confirm(store), specs, strict=strict)


def _submitted(submitted: Submitted) -> Response:
    # Encoded here: returning the model would have FastAPI validate it again and pass it
    # through its generic encoder, a few percent of a submission's time for a list of ids.
    body = submitted.model_dump_json()
    return Response(body, status_code=201, media_type="application/json")


@router.get("/jobs")
def list_jobs(
    who: Who,
    store: Store,
    state: Annotated[list[JobState] | None, Query(description="Only these states.")] = None,
    team: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    job_class: Annotated[Literal["bulk", "interactive"] | None, Query(alias="class")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST, description="The newest this many.")] = 50,
) -> list[JobView]:
    """Jobs in submit order (a member or a team viewer sees its own team's only)."""
    records = operations.list_jobs(
        store, who, states=state, team=team, job_class=job_class, limit=limit
    )
    return [operations.job_view(store, r) for r in records]


@router.get("/jobs/{ref}")
def show(ref: Ref, who: Who, store: Store) -> JobDetail:
    """One job: record, SLA verdict, latest metrics, events, tuning report."""
    return operations.job_detail(store, operations.read_job(store, who, ref))


@router.post("/jobs/{ref}/cancel")
def cancel(ref: Ref, who: Who, store: Store) -> JobView:
    """Cancel a job: a waiting one at once, a running one is stopped (409 if it has ended)."""
    return operations.job_view(store, operations.cancel(store, who, ref))


@router.post("/jobs/{ref}/tune")
def tune(ref: Ref, who: Who, store: Store) -> JobView:
    """Re-tune a running job from what it measures: it is stopped at a checkpoint, tuned
    again (its measured settings as a known trial) and resumes with the new settings when
    they are predicted to meet its SLA, else with its own (409 if it is not running or does
    not ask to be tuned)."""
    return operations.job_view(store, operations.request_tune(store, who, ref))


@router.get("/jobs/{ref}/events")
def events(ref: Ref, who: Who, store: Store) -> list[dict[str, Any]]:
    """The job's state changes, oldest first: ``{id, event, from, message, ts}``."""
    return store.events(operations.read_job(store, who, ref).id)


@router.get(
    "/jobs/{ref}/events/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
def follow(
    ref: Ref,
    who: Who,
    store: Store,
    after: Cursor = "0",
) -> StreamingResponse:
    """Server-sent events: each state change as it happens (``event: state``, the event as
    JSON data), until the job ends; a comment line every few seconds keeps the stream open.
    Should the store fail meanwhile, an ``event: error`` (``{"detail", "status"}``) ends it."""
    job_id = operations.read_job(store, who, ref).id
    return StreamingResponse(_stream(store, job_id, after), media_type="text/event-stream")


def _stream(store: JobStore, job_id: str, after: str) -> Iterator[str]:
    # The 200 is sent: a failure can only end the stream, so it says why instead of
    # cutting the answer off with a traceback in the server's log.
    try:
        yield from _events(store, job_id, after)
    except (OrchError, RedisError) as err:
        yield stream_error(err)


def stream_error(err: Exception) -> str:
    """The last event of a stream that failed: ``event: error``, with ``{"detail", "status"}``
    as a refusal would have said it (a job removed meanwhile: 404; the store down: 503)."""
    if isinstance(err, OrchError):
        data = {"detail": str(err), "status": status_of(err)}
    else:
        data = {"detail": f"the store failed: {err}", "status": 503}
    return f"event: error\ndata: {json.dumps(data)}\n\n"


def _events(store: JobStore, job_id: str, after: str) -> Iterator[str]:
    last = after
    while True:
        found = store.events_after(job_id, last, block_ms=_BLOCK_MS)
        if not found:
            if store.get(job_id).terminal:  # ended before `after`: nothing more will come
                return
            yield ": waiting\n\n"
        for event in found:
            last = event["id"]
            yield f"id: {last}\nevent: state\ndata: {json.dumps(event)}\n\n"
            if event.get("event") in _TERMINAL:
                return
