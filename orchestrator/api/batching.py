"""Concurrent single submissions written together: one thread hop and a few Redis round trips
for every ``POST /v1/jobs`` that arrives while the previous ones are being written.

Each request still stands alone: its token confirmed (:func:`~orchestrator.api.auth.
confirm_each`), its principal authorised for its job's team, its job admitted by the team
config and written by its own atomic script, its audit entry recorded
(:func:`~orchestrator.api.operations.submit_each`); a request refused (401, 403, 422) gets its
own error, and the others in its batch are written all the same. Only a failure of the store
itself (Redis unreachable) answers the whole batch, as it would each request alone.

Batches form by themselves (group commit): the first request waiting starts a batch at once;
the requests arriving while it is written (in a thread, with the store's blocking client)
make up the next. Under light load a batch is one request and costs what it did alone.

:class:`SingleSubmissions` answers such a request without FastAPI's routing and dependency
resolution (most of the rest of its cost, measured with py-spy: ``bench/api/README.md``)
when its body is a valid job; any other request, or body, goes on to the routes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fastapi import HTTPException
from pydantic import ValidationError
from redis.exceptions import RedisError
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.api import operations
from orchestrator.api.auth import CLAIM_KEY, Claim, confirm_each
from orchestrator.api.bodies import strict_json
from orchestrator.api.identity import Principal
from orchestrator.api.limits import replay
from orchestrator.api.models import Submitted
from orchestrator.api.statuses import refusal
from orchestrator.errors import OrchError
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore

__all__ = ["SUBMIT_PATH", "SingleSubmissions", "Submitter"]

SUBMIT_PATH = "/v1/jobs"
"""The route of one job per request."""

_BATCH_MAX = 256
"""Most requests written in one hop (the rest wait for the next)."""


@dataclass
class _Waiting:
    claim: Claim
    spec: JobSpec
    answer: asyncio.Future[Submitted]


@dataclass
class Submitter:
    """Writes the single submissions of the event loop that serves, batched (see the module).

    Args:
        store: where the jobs are written.
    """

    store: JobStore
    _waiting: list[_Waiting] = field(default_factory=list)
    _writing: asyncio.Task[None] | None = None

    async def submit(self, claim: Claim, spec: JobSpec) -> Submitted:
        """Queue ``spec`` for the token ``claim`` checked; returns the new job's id and its
        warnings (``operations.submit_each``).

        Raises:
            Unauthenticated: the token was revoked since it was checked.
            Forbidden: the principal may not submit for the job's team.
            SpecError: the team config (or the pool) refuses the job.
            RedisError: the store failed.
        """
        loop = asyncio.get_running_loop()
        if self._writing is not None and self._writing.get_loop() is not loop:
            self._waiting, self._writing = [], None  # another loop serves now (tests)
        answer: asyncio.Future[Submitted] = loop.create_future()
        self._waiting.append(_Waiting(claim, spec, answer))
        if self._writing is None or self._writing.done():
            self._writing = loop.create_task(self._write())
        return await answer

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            batch = self._waiting[:_BATCH_MAX]
            del self._waiting[:_BATCH_MAX]
            try:
                outcomes = await loop.run_in_executor(None, _write, self.store, batch)
            except Exception as err:  # the store failed: every request of the batch says so
                outcomes = [err] * len(batch)
            for waiting, outcome in zip(batch, outcomes, strict=True):
                if waiting.answer.done():  # its request was cancelled (the client left)
                    continue
                if isinstance(outcome, Submitted):
                    waiting.answer.set_result(outcome)
                else:
                    waiting.answer.set_exception(outcome)


def _write(store: JobStore, batch: list[_Waiting]) -> list[Submitted | Exception]:
    """Each request's submission or refusal (in a thread: blocking calls)."""
    whos = confirm_each(store, [w.claim for w in batch])
    confirmed = [(i, who) for i, who in enumerate(whos) if isinstance(who, Principal)]
    written = operations.submit_each(store, [(who, batch[i].spec) for i, who in confirmed])
    by_index = dict(zip((i for i, _ in confirmed), written, strict=True))
    return [by_index[i] if isinstance(who, Principal) else who for i, who in enumerate(whos)]


class SingleSubmissions:
    """The ASGI middleware that answers ``POST /v1/jobs`` itself when the route would accept
    it: a JSON body (``Content-Type: application/json``) that is a valid job, parsed and
    validated as the route does, no query (``strict`` is the route's), and the token the
    body-limit middleware checked (it sits inside that middleware). The job is written by
    the :class:`Submitter`, and the answer is the route's: 201 with its id and warnings
    (``Submitted``), or the refusal of the app's error handlers. Every other request goes on
    to the app, its body with it: a body the route refuses gets FastAPI's own 422, word for
    word.

    Args:
        app: the application it wraps.
        submitter: writes the jobs (the route's too).
    """

    def __init__(self, app: ASGIApp, *, submitter: Submitter) -> None:
        self.app = app
        self.submitter = submitter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a single submission, or hand the request on."""
        claim = scope.get(CLAIM_KEY)
        if not (
            isinstance(claim, Claim)
            and scope["method"] == "POST"
            and scope["path"] == SUBMIT_PATH
            and not scope["query_string"]
            and _json(scope)
        ):
            await self.app(scope, receive, send)
            return
        message = await receive()  # the whole body: the body-limit middleware read it
        body: bytes = message.get("body", b"")
        spec = _job(body) if message["type"] == "http.request" else None
        if spec is None or message.get("more_body", False):
            await self.app(scope, replay(body, receive), send)
            return
        try:
            submitted = await self.submitter.submit(claim, spec)
        except (OrchError, RedisError) as err:
            response: Response = refusal(err)
        else:
            answer = submitted.model_dump_json()
            response = Response(answer, status_code=201, media_type="application/json")
        await response(scope, receive, send)


def _json(scope: Scope) -> bool:
    """Whether the request says its body is JSON (``application/json``, any parameters)."""
    for name, value in scope["headers"]:
        if name.lower() == b"content-type":
            return bool(value.split(b";")[0].strip().lower() == b"application/json")
    return False


def _job(body: bytes) -> JobSpec | None:
    """The job ``body`` holds, ``None`` when the route would refuse it (then the route says
    why)."""
    try:
        return JobSpec.model_validate(strict_json(body))
    except (HTTPException, ValidationError):
        return None
