"""The audit stream: every mutation, who made it, on what (``orch audit``).

``{ns}:audit`` is one Redis stream, capped to the most recent :data:`AUDIT_MAXLEN` entries. An
entry's time is its stream id (Redis server time), so entries are ordered and never disagree
with the clock of the server that stored them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from pydantic import BaseModel, ConfigDict

from orchestrator.store.keys import KeyFamily

__all__ = ["AUDIT_MAXLEN", "AuditEntry", "AuditStore"]

AUDIT_MAXLEN = 100_000
"""Approximate cap of the audit stream."""


class AuditEntry(BaseModel):
    """One recorded mutation.

    Attributes:
        id: the stream entry id (``{ms}-{n}``).
        ts: when, Redis server time in seconds.
        actor: the principal's name (``alice``; ``{user}@local`` for direct store access).
        role: the principal's role then (``admin``, ``member``, ``viewer``).
        team: the principal's team, ``""`` if none.
        action: what was done (``submit``, ``cancel``, ``teams.apply``, ``tokens.create``...).
        target: what it was done to (a job id, a token id, ``teams``).
        detail: anything else worth keeping (a job's team, a token's role).
    """

    model_config = ConfigDict(frozen=True)

    id: str
    ts: float
    actor: str
    role: str
    team: str = ""
    action: str
    target: str
    detail: str = ""


class AuditStore(KeyFamily):
    """The audit stream of one namespace."""

    def record(
        self,
        *,
        actor: str,
        role: str,
        team: str | None,
        action: str,
        targets: list[str],
        detail: str = "",
    ) -> None:
        """Append one entry per target (a batch submission records each job), in one round
        trip."""
        common = {"actor": actor, "role": role, "team": team or "", "action": action}
        self.record_many([{**common, "target": target, "detail": detail} for target in targets])

    def record_many(self, entries: Iterable[Mapping[str, str]]) -> None:
        """Append entries of several actions (each with the fields ``actor``, ``role``,
        ``team``, ``action``, ``target`` and ``detail``; ``team`` ``""`` for none), in order,
        in one round trip."""
        pipe = self._client.pipeline(transaction=False)
        for fields in entries:
            pipe.xadd(self._keys.audit, dict(fields), maxlen=AUDIT_MAXLEN, approximate=True)  # type: ignore[arg-type]
        pipe.execute()

    def read(self, count: int = 100, *, action: str | None = None) -> list[AuditEntry]:
        """The most recent ``count`` entries (of ``action`` only, if given), oldest first."""
        found: list[AuditEntry] = []
        last = "+"
        while len(found) < count:
            page = cast(
                list[tuple[str, dict[str, str]]],
                self._client.xrevrange(self._keys.audit, max=last, count=max(count, 100)),
            )
            for sid, fields in page:
                if action is None or fields.get("action") == action:
                    found.append(_entry(sid, fields))
            if len(page) < max(count, 100):
                break
            last = f"({page[-1][0]}"
        return list(reversed(found[:count]))


def _entry(sid: str, fields: dict[str, str]) -> AuditEntry:
    return AuditEntry.model_validate({**fields, "id": sid, "ts": int(sid.split("-", 1)[0]) / 1000})
