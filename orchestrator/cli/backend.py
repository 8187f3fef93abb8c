"""What the CLI's commands act through: the API (as a token's principal) or the store (as a local
admin), behind one interface, so each command is written once (as SkyPilot's CLI calls its SDK).

With ``ORCH_API_URL`` and ``ORCH_TOKEN`` set, or a context saved by ``orch login``
(:mod:`orchestrator.cli.contexts`), :func:`connect` returns an :class:`ApiBackend`
(the SDK client: the token's principal acts, whatever ``--by`` says); without them a
:class:`StoreBackend` reaches Redis directly, as a local admin (reaching Redis is administrator
access). Both return the API's own response models (``JobView``, ``JobDetail``...), built for
the store by the same :mod:`orchestrator.api.operations` the HTTP handlers call. Neither httpx nor
the store is imported until a command connects, so ``orch --help`` stays fast.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.errors import ApiError
from orchestrator.store.states import TERMINAL

if TYPE_CHECKING:
    from orchestrator.api.identity import Principal
    from orchestrator.api.models import JobDetail, JobView, Submitted, Usage, WhoAmI
    from orchestrator.client import Client
    from orchestrator.spec import JobSpec
    from orchestrator.store import JobStore
    from orchestrator.store.audit import AuditEntry
    from orchestrator.store.logs import LogEntry
    from orchestrator.store.tokens import Role, TokenInfo
    from orchestrator.teams import TeamConfig

__all__ = ["ApiBackend", "Backend", "StoreBackend", "api_client", "connect"]

ENDED = tuple(sorted(s.value for s in TERMINAL))
"""The states a job ends in, by value (what `orch wait` waits for; their home is
``orchestrator.store.states.TERMINAL``)."""


class Backend(Protocol):
    """The operations every job and admin command needs, whoever carries them."""

    where: str
    """Where it acts, in words (an API URL, or ``namespace NAME``)."""

    api: bool
    """Whether the API carries it (the token's principal acts; ``--by`` is ignored)."""

    def submit(
        self, specs: Sequence[JobSpec], *, strict: bool, working_dir: bytes | None
    ) -> Submitted: ...
    def list(
        self, *, states: Sequence[str] | None, team: str | None, job_class: str | None, limit: int
    ) -> builtins.list[JobView]: ...
    def show(self, ref: str) -> JobDetail: ...
    def cancel(self, ref: str) -> JobView: ...
    def retune(self, ref: str) -> JobView: ...
    def pool(self) -> dict[str, Any] | None: ...
    def scheduler_running(self) -> bool: ...
    def teams(self) -> TeamConfig | None: ...
    def apply_teams(self, config: TeamConfig) -> None: ...
    def logs(
        self, ref: str, *, rank: int | None, tail: int | None, follow: bool
    ) -> Iterator[LogEntry]: ...
    def whoami(self) -> WhoAmI: ...
    def usage(self, *, since: float, team: str | None) -> Usage: ...
    def create_token(self, *, name: str, role: Role, team: str | None) -> tuple[str, TokenInfo]: ...
    def create_service_token(self, ref: str, *, name: str) -> tuple[str, TokenInfo]: ...
    def tokens(self) -> builtins.list[TokenInfo]: ...
    def revoke_token(self, token_id: str) -> TokenInfo: ...
    def audit(self, count: int, action: str | None) -> builtins.list[AuditEntry]: ...


def connect(by: str | None = None) -> Backend:
    """The API backend when ``ORCH_API_URL`` and ``ORCH_TOKEN`` are set or a context is current
    (:mod:`orchestrator.cli.contexts`), else the store's.

    Args:
        by: who acts, as ``--by`` claims it (direct mode only; the API records the token's
            principal).

    Raises:
        ConfigError: only one of the two variables is set.
        StoreError: the store cannot be reached.
    """
    if (client := api_client()) is not None:
        return ApiBackend(client)
    from orchestrator.api.identity import Principal
    from orchestrator.config import Settings
    from orchestrator.services import open_store

    store, _ = open_store(Settings.from_env())
    return StoreBackend(store, Principal.local(by))


def api_client() -> Client | None:
    """The SDK client of ``ORCH_API_URL`` and ``ORCH_TOKEN``, else of the current context
    (:mod:`orchestrator.cli.contexts`); ``None`` when neither is set (direct mode).

    Raises:
        ConfigError: only one of the two variables is set, or the contexts file is unreadable.
    """
    from orchestrator.cli.contexts import current_context
    from orchestrator.client import Client

    client = Client.from_env()  # the variables first, as kubectl's flags before its contexts
    if client is None and (context := current_context()) is not None:
        client = Client(context.url, context.token)
    return client


class ApiBackend:
    """Every command through the HTTP API, as the token's principal (the SDK client)."""

    api = True

    def __init__(self, client: Client) -> None:
        self.sdk = client
        self.where = client.url

    def submit(
        self, specs: Sequence[JobSpec], *, strict: bool, working_dir: bytes | None
    ) -> Submitted:
        if working_dir is not None:
            self.sdk.put_working_dir(working_dir)  # before the jobs that name it
        return self.sdk.submit_batch(specs, strict=strict)

    def list(
        self, *, states: Sequence[str] | None, team: str | None, job_class: str | None, limit: int
    ) -> builtins.list[JobView]:
        return self.sdk.list(states=states, team=team, job_class=job_class, limit=limit)

    def show(self, ref: str) -> JobDetail:
        return self.sdk.show(ref)

    def cancel(self, ref: str) -> JobView:
        return self.sdk.cancel(ref)

    def retune(self, ref: str) -> JobView:
        return self.sdk.retune(ref)

    def pool(self) -> dict[str, Any] | None:
        return self.sdk.pool()  # none published: 404, exit 2 as every refusal

    def scheduler_running(self) -> bool:
        try:
            self.sdk.pool()
        except ApiError as err:
            if err.status == 404:  # no scheduler publishes the pool
                return False
            raise
        return True

    def teams(self) -> TeamConfig | None:
        return self.sdk.teams()  # none published: 404, exit 2 as every refusal

    def apply_teams(self, config: TeamConfig) -> None:
        self.sdk.apply_teams(config)

    def logs(
        self, ref: str, *, rank: int | None, tail: int | None, follow: bool
    ) -> Iterator[LogEntry]:
        return iter(self.sdk.logs(ref, rank=rank, tail=tail, follow=follow))

    def whoami(self) -> WhoAmI:
        return self.sdk.whoami()

    def usage(self, *, since: float, team: str | None) -> Usage:
        return self.sdk.usage(since=since, team=team)

    def create_token(self, *, name: str, role: Role, team: str | None) -> tuple[str, TokenInfo]:
        created = self.sdk.create_token(name=name, role=role, team=team)
        return created.token, created.info

    def create_service_token(self, ref: str, *, name: str) -> tuple[str, TokenInfo]:
        created = self.sdk.create_service_token(ref, name=name)
        return created.token, created.info

    def tokens(self) -> builtins.list[TokenInfo]:
        return self.sdk.tokens()

    def revoke_token(self, token_id: str) -> TokenInfo:
        return self.sdk.revoke_token(token_id)

    def audit(self, count: int, action: str | None) -> builtins.list[AuditEntry]:
        return self.sdk.audit(count, action)


class StoreBackend:
    """Every command straight to the store, as a local admin, through the operations the API's
    handlers call (so the two modes refuse and record the same things)."""

    api = False

    def __init__(self, store: JobStore, who: Principal) -> None:
        self.store = store
        self.who = who
        self.where = f"namespace {store.namespace}"

    def submit(
        self, specs: Sequence[JobSpec], *, strict: bool, working_dir: bytes | None
    ) -> Submitted:
        from orchestrator.api import operations

        if working_dir is not None:
            operations.store_working_dir(self.store, self.who, working_dir)
        # All or none: the team config refuses none of them, or nothing is queued.
        return operations.submit(self.store, self.who, specs, strict=strict)

    def list(
        self, *, states: Sequence[str] | None, team: str | None, job_class: str | None, limit: int
    ) -> builtins.list[JobView]:
        from orchestrator.api import operations

        records = operations.list_jobs(
            self.store,
            self.who,
            states=builtins.list(states or []),
            team=team,
            job_class=job_class,
            limit=limit,
        )
        return [operations.job_view(self.store, r) for r in records]

    def show(self, ref: str) -> JobDetail:
        from orchestrator.api import operations

        return operations.job_detail(self.store, operations.read_job(self.store, self.who, ref))

    def cancel(self, ref: str) -> JobView:
        from orchestrator.api import operations

        rec = operations.cancel(self.store, self.who, ref)
        return operations.job_view(self.store, rec)

    def retune(self, ref: str) -> JobView:
        from orchestrator.api import operations

        rec = operations.request_tune(self.store, self.who, ref)
        return operations.job_view(self.store, rec)

    def pool(self) -> dict[str, Any] | None:
        return self.store.pool_view.read()

    def scheduler_running(self) -> bool:
        return self.store.pool_view.read() is not None

    def teams(self) -> TeamConfig | None:
        return self.store.teams()

    def apply_teams(self, config: TeamConfig) -> None:
        from orchestrator.api import operations

        # A scheduler is up: the guarantees must fit its pool (checked there).
        operations.apply_teams(self.store, self.who, config)

    def logs(
        self, ref: str, *, rank: int | None, tail: int | None, follow: bool
    ) -> Iterator[LogEntry]:
        from orchestrator.api import operations

        if not follow:
            yield from operations.read_logs(self.store, self.who, ref, rank=rank, tail=tail)
            return
        for batch in operations.follow_logs(self.store, self.who, ref, rank=rank, tail=tail):
            yield from batch

    def whoami(self) -> WhoAmI:
        from orchestrator.api.models import WhoAmI

        return WhoAmI(name=self.who.name, role=self.who.role, team=self.who.team, token_id=None)

    def usage(self, *, since: float, team: str | None) -> Usage:
        from orchestrator.api import operations

        return operations.usage(self.store, self.who, since=since, team=team)

    def create_token(self, *, name: str, role: Role, team: str | None) -> tuple[str, TokenInfo]:
        from orchestrator.api import operations

        return operations.create_token(self.store, self.who, name=name, role=role, team=team)

    def create_service_token(self, ref: str, *, name: str) -> tuple[str, TokenInfo]:
        from orchestrator.api import operations

        return operations.create_service_token(self.store, self.who, ref, name)

    def tokens(self) -> builtins.list[TokenInfo]:
        from orchestrator.api import operations

        return operations.list_tokens(self.store, self.who)

    def revoke_token(self, token_id: str) -> TokenInfo:
        from orchestrator.api import operations

        return operations.revoke_token(self.store, self.who, token_id)

    def audit(self, count: int, action: str | None) -> builtins.list[AuditEntry]:
        from orchestrator.api import operations

        return operations.read_audit(self.store, self.who, count, action)
