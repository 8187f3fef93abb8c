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
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from orchestrator.api import operations
from orchestrator.api.auth import Claim, confirm_each
from orchestrator.api.identity import Principal
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore

__all__ = ["Submitter"]

_BATCH_MAX = 256
"""Most requests written in one hop (the rest wait for the next)."""


@dataclass
class _Waiting:
    claim: Claim
    spec: JobSpec
    answer: asyncio.Future[str]


@dataclass
class Submitter:
    """Writes the single submissions of the event loop that serves, batched (see the module).

    Args:
        store: where the jobs are written.
    """

    store: JobStore
    _waiting: list[_Waiting] = field(default_factory=list)
    _writing: asyncio.Task[None] | None = None

    async def submit(self, claim: Claim, spec: JobSpec) -> str:
        """Queue ``spec`` for the token ``claim`` checked; returns the new job's id.

        Raises:
            Unauthenticated: the token was revoked since it was checked.
            Forbidden: the principal may not submit for the job's team.
            SpecError: the team config (or the pool) refuses the job.
            RedisError: the store failed.
        """
        loop = asyncio.get_running_loop()
        if self._writing is not None and self._writing.get_loop() is not loop:
            self._waiting, self._writing = [], None  # another loop serves now (tests)
        answer: asyncio.Future[str] = loop.create_future()
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
                if isinstance(outcome, str):
                    waiting.answer.set_result(outcome)
                else:
                    waiting.answer.set_exception(outcome)


def _write(store: JobStore, batch: list[_Waiting]) -> list[str | Exception]:
    """Each request's job id or refusal (in a thread: blocking calls)."""
    whos = confirm_each(store, [w.claim for w in batch])
    confirmed = [(i, who) for i, who in enumerate(whos) if isinstance(who, Principal)]
    written = operations.submit_each(store, [(who, batch[i].spec) for i, who in confirmed])
    outcomes: list[str | Exception] = [w if isinstance(w, Exception) else "" for w in whos]
    for (i, _), outcome in zip(confirmed, written, strict=True):
        outcomes[i] = outcome
    return outcomes
