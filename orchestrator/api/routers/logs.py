"""``/v1/jobs/{ref}/logs``: a job's captured stdout and stderr, per rank, and following them.

Whoever may show a job may read its output (an admin, or a member or viewer of its team).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from redis.exceptions import RedisError

from orchestrator.api import operations
from orchestrator.api.auth import Store, Who
from orchestrator.api.params import MAX_RANK, MAX_TAIL
from orchestrator.api.routers.jobs import Ref, stream_error
from orchestrator.errors import OrchError
from orchestrator.store.logs import LogEntry

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["logs"])

Rank = Annotated[int | None, Query(ge=0, le=MAX_RANK, description="Only this rank's output.")]
Tail = Annotated[
    int | None,
    Query(ge=1, le=MAX_TAIL, description="Only the last this many lines of each rank."),
]


@router.get("/jobs/{ref}/logs")
def logs(ref: Ref, who: Who, store: Store, rank: Rank = None, tail: Tail = None) -> list[LogEntry]:
    """The job's captured output so far (the last ~2,000 lines of each rank are kept), oldest
    first across ranks; each line says its rank and stream (``out`` or ``err``)."""
    return operations.read_logs(store, who, ref, rank=rank, tail=tail)


@router.get(
    "/jobs/{ref}/logs/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
def follow_logs(
    ref: Ref, who: Who, store: Store, rank: Rank = None, tail: Tail = None
) -> StreamingResponse:
    """Server-sent events: the output kept so far (``tail`` lines of each rank), then each
    line as it is written (``event: log``, the line as JSON data), until the job ends; a
    comment line every few seconds keeps the stream open. Should the store fail meanwhile, an
    ``event: error`` (``{"detail", "status"}``) ends it."""
    batches = operations.follow_logs(store, who, ref, rank=rank, tail=tail)
    return StreamingResponse(_stream(batches), media_type="text/event-stream")


def _stream(batches: Iterator[list[LogEntry]]) -> Iterator[str]:
    try:  # the 200 is sent: a failure can only end the stream, saying why
        for batch in batches:
            if not batch:
                yield ": waiting\n\n"
            for entry in batch:
                yield _event(entry)
    except (OrchError, RedisError) as err:
        yield stream_error(err)


def _event(entry: LogEntry) -> str:
    return f"id: {entry.rank}:{entry.id}\nevent: log\ndata: {entry.model_dump_json()}\n\n"
