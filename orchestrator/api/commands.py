"""The CLI's side of the API: ``orch serve``, ``orch tokens``, ``orch audit``, ``-o json``, and
the API mode of the job commands.

With ``ORCH_API_URL`` and ``ORCH_TOKEN`` set, ``orch submit/list/show/cancel/logs/pool/teams/
tokens/audit`` go through the API with :class:`~orchestrator.client.Client` (the token's principal
is who acts, whatever ``--by`` says); without them they reach the store directly, as a local admin
(reaching Redis is administrator access). Neither FastAPI nor httpx is imported until a command
needs it, so ``orch --help`` stays fast.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from orchestrator.api.identity import Principal
from orchestrator.config import Settings
from orchestrator.store.states import JobState
from orchestrator.store.tokens import Role

if TYPE_CHECKING:
    from orchestrator.api.models import JobView
    from orchestrator.client import Client
    from orchestrator.spec import JobSpec
    from orchestrator.store.audit import AuditEntry
    from orchestrator.store.logs import LogEntry
    from orchestrator.store.tokens import TokenInfo

__all__ = [
    "Output",
    "OutputOption",
    "api_client",
    "audit_command",
    "cancelled_line",
    "logs_command",
    "print_json",
    "serve_command",
    "tokens_app",
]

console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


class Output(StrEnum):
    """How a command prints what it read: rich tables, or JSON for scripts."""

    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[
    Output, typer.Option("--output", "-o", help="table (default) or json (for scripts).")
]


def api_client() -> Client | None:
    """The API client when ``ORCH_API_URL`` and ``ORCH_TOKEN`` are set (API mode), else
    ``None`` (direct store access).

    Raises:
        ConfigError: only one of the two is set.
    """
    if not (os.environ.get("ORCH_API_URL", "").strip() or os.environ.get("ORCH_TOKEN", "").strip()):
        return None  # direct mode: httpx is not even imported
    from orchestrator.client import Client

    return Client.from_env()


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (no rich markup or wrapping)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _dump(views: Sequence[JobView]) -> list[dict[str, Any]]:
    return [v.model_dump(mode="json", by_alias=True) for v in views]


def cancelled_line(job_id: str, state: JobState) -> str:
    """What ``orch cancel`` prints once the job is cancelled or asked to stop."""
    word = "cancelled" if state is JobState.CANCELLED else "stopping (the scheduler frees its GPUs)"
    return f"{job_id}: {word}"


def _ts(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return dt.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


# ---- the job commands in API mode ------------------------------------------------------------


def remote_submit(
    client: Client,
    specs: Sequence[JobSpec],
    *,
    wait: bool,
    by: str | None = None,
    strict: bool = False,
) -> None:
    """``orch submit`` through the API: one batch, all or none."""
    from orchestrator.views import verdicts_table

    if by is not None:
        err_console.print(
            "[yellow]note:[/] --by is ignored in API mode: the token's principal is recorded"
        )
    ids = client.submit_many(specs, strict=strict)
    for job_id, spec in zip(ids, specs, strict=True):
        console.print(f"submitted [bold]{job_id}[/] ({spec.job_class}, team {spec.team})")
    if wait:
        with console.status(f"waiting for {len(ids)} job(s)..."):
            jobs = client.wait(ids)
        rows = [(j.record(), j.verdict.verdict()) for j in jobs]
        console.print(verdicts_table(rows, title="result"))
        if any(j.state is not JobState.FINISHED for j in jobs):
            raise typer.Exit(1)


def remote_list(
    client: Client,
    *,
    states: list[str] | None,
    team: str | None,
    job_class: str | None,
    limit: int,
    output: Output,
) -> None:
    """``orch list`` through the API."""
    from orchestrator.views import verdicts_table

    jobs = client.list(states=states, team=team, job_class=job_class, limit=limit)
    if output is Output.JSON:
        print_json(_dump(jobs))
        return
    console.print(verdicts_table([(j.record(), j.verdict.verdict()) for j in jobs]))


def remote_show(client: Client, ref: str, output: Output) -> None:
    """``orch show`` through the API."""
    from orchestrator.tuner.cli import show_tuning
    from orchestrator.views import job_panel

    detail = client.show(ref)
    if output is Output.JSON:
        print_json(detail.model_dump(mode="json", by_alias=True))
        return
    job = detail.job
    console.print(job_panel(job.record(), job.verdict.verdict(), detail.metrics, detail.events))
    if detail.tuning is not None:
        console.print(show_tuning(detail.tuning, detail.profile))


def remote_pool(client: Client, output: Output) -> dict[str, Any]:
    """The pool view through the API (printed as JSON here when asked; the caller draws the
    tables otherwise)."""
    view = client.pool()
    if output is Output.JSON:
        print_json(view)
    return view


# ---- orch logs -------------------------------------------------------------------------------


def logs_command(
    job: Annotated[str, typer.Argument(help="Job id or unique name.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")
    ] = False,
    rank: Annotated[int | None, typer.Option(min=0, help="Only this rank's output.")] = None,
    tail: Annotated[
        int | None, typer.Option(min=1, help="Only the last this many lines of each rank.")
    ] = None,
) -> None:
    """Print a job's captured stdout and stderr (its print(), warnings, tracebacks), per rank.

    Each line goes to the stream it was written to, prefixed with its rank unless --rank is
    given. The last ~2,000 lines of each rank are kept after the job ends; output written by C
    code straight to the file descriptors (CUDA, NCCL) is not captured."""
    if (client := api_client()) is not None:
        entries: Iterable[LogEntry] = client.logs(job, rank=rank, tail=tail, follow=follow)
    else:
        entries = _direct_logs(job, rank=rank, tail=tail, follow=follow)
    for entry in entries:
        text = entry.line if rank is not None else f"[rank {entry.rank}] {entry.line}"
        out = sys.stderr if entry.stream == "err" else sys.stdout
        out.write(text + "\n")
        if follow:
            out.flush()


def _direct_logs(
    job: str, *, rank: int | None, tail: int | None, follow: bool
) -> Iterator[LogEntry]:
    from orchestrator.api import operations
    from orchestrator.services import open_store

    store, _ = open_store(Settings.from_env())
    job_id = operations.read_job(store, Principal.local(), job).id
    if not follow:
        yield from store.logs.tail(job_id, rank=rank, count=tail)
        return

    def ended() -> bool:
        return store.get(job_id).terminal

    for batch in store.logs.follow(job_id, ended, rank=rank, tail=tail):
        yield from batch


# ---- orch serve ------------------------------------------------------------------------------


def serve_command(
    api_address: Annotated[
        str | None,
        typer.Option(
            "--api-address",
            help="host:port to listen on (default 127.0.0.1:8321, or ORCH_API_ADDRESS).",
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, max=64, help="Server processes (one per core serves most).")
    ] = 1,
) -> None:
    """Serve the HTTP API alone (no scheduler): OpenAPI docs at /docs; Ctrl-C to stop."""
    from orchestrator.api.server import serve
    from orchestrator.services import open_store

    settings = Settings.from_env(api_address=api_address)
    store, _ = open_store(settings)
    serve(
        store,
        settings.api_address,
        announce=lambda url: console.print(
            f"API on {url} (docs at {url}/docs), namespace [bold]{settings.namespace}[/]; "
            "Ctrl-C to stop"
        ),
        workers=workers,
    )


# ---- orch tokens -----------------------------------------------------------------------------

tokens_app = typer.Typer(
    help="API tokens (admins): create one per principal, list them, revoke them.",
    no_args_is_help=True,
)


@tokens_app.command("create")
def tokens_create(
    role: Annotated[Role, typer.Option(help="admin, member (of --team) or viewer.")],
    team: Annotated[
        str | None,
        typer.Option(
            help="The team it acts for (required for a member; a viewer without one "
            "reads every team)."
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(help="Who it is for, recorded on each action (default: ROLE-TEAM)."),
    ] = None,
) -> None:
    """Make a token and print it once on stdout (only its hash is kept)."""
    name = name or "-".join(p for p in (role.value, team) if p)
    if (client := api_client()) is not None:
        created = client.create_token(name=name, role=role, team=team)
        token, info = created.token, created.info
    else:
        from orchestrator.api import operations
        from orchestrator.services import open_store

        store, _ = open_store(Settings.from_env())
        token, info = operations.create_token(
            store, Principal.local(), name=name, role=role, team=team
        )
    err_console.print(
        f"token {info.id} for {info.name} ({info.role.value} of {info.team or 'all teams'}); "
        "shown once, keep it secret:"
    )
    sys.stdout.write(token + "\n")


@tokens_app.command("list")
def tokens_list(output: OutputOption = Output.TABLE) -> None:
    """List every token (never a secret), revoked ones included."""
    if (client := api_client()) is not None:
        infos = client.tokens()
    else:
        from orchestrator.api import operations
        from orchestrator.services import open_store

        store, _ = open_store(Settings.from_env())
        infos = operations.list_tokens(store, Principal.local())
    if output is Output.JSON:
        print_json([i.model_dump(mode="json") for i in infos])
        return
    console.print(_tokens_table(infos))


@tokens_app.command("revoke")
def tokens_revoke(token_id: Annotated[str, typer.Argument(help="The token's id.")]) -> None:
    """Revoke a token: it is refused from now on."""
    if (client := api_client()) is not None:
        info = client.revoke_token(token_id)
    else:
        from orchestrator.api import operations
        from orchestrator.services import open_store

        store, _ = open_store(Settings.from_env())
        info = operations.revoke_token(store, Principal.local(), token_id)
    console.print(f"token {info.id} ({info.name}) revoked")


def _tokens_table(infos: Sequence[TokenInfo]) -> Table:
    table = Table(title="API tokens")
    for col in ("id", "name", "role", "team", "created", "by", "revoked"):
        table.add_column(col)
    for i in infos:
        revoked = f"{_ts(i.revoked_at)} by {i.revoked_by}" if i.revoked else "-"
        table.add_row(
            i.id, i.name, i.role.value, i.team or "(all)", _ts(i.created_at), i.created_by, revoked
        )
    return table


# ---- orch audit ------------------------------------------------------------------------------


def audit_command(
    count: Annotated[int, typer.Option(min=1, max=10_000, help="The latest this many.")] = 50,
    action: Annotated[
        str | None, typer.Option(help="Only this action (submit, cancel, teams.apply...).")
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show the audit stream: each mutation, who made it, on what (admins)."""
    if (client := api_client()) is not None:
        entries = client.audit(count, action)
    else:
        from orchestrator.api import operations
        from orchestrator.services import open_store

        store, _ = open_store(Settings.from_env())
        entries = operations.read_audit(store, Principal.local(), count, action)
    if output is Output.JSON:
        print_json([e.model_dump(mode="json") for e in entries])
        return
    console.print(_audit_table(entries))


def _audit_table(entries: Sequence[AuditEntry]) -> Table:
    table = Table(title="audit")
    for col in ("time", "actor", "role", "team", "action", "target", "detail"):
        table.add_column(col)
    for e in entries:
        table.add_row(_ts(e.ts), e.actor, e.role, e.team or "-", e.action, e.target, e.detail)
    return table
