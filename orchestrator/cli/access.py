"""The access commands: ``orch serve`` (the API alone), ``orch tokens`` and ``orch audit``.

Like the job commands they act through :mod:`orchestrator.cli.backend`: through the API as the
token's principal, or straight to the store as a local admin. FastAPI and uvicorn load only
inside ``orch serve``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from orchestrator.api import options
from orchestrator.api.params import MAX_ACTION_CHARS, MAX_AUDIT
from orchestrator.cli.backend import connect
from orchestrator.cli.install import require_server_install
from orchestrator.cli.output import (
    Output,
    OutputOption,
    console,
    err_console,
    iso,
    print_data,
)
from orchestrator.errors import OptionError
from orchestrator.store.roles import Role

if TYPE_CHECKING:
    from orchestrator.store.audit import AuditEntry
    from orchestrator.store.tokens import TokenInfo

__all__ = ["audit_command", "serve_command", "tokens_app"]


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
    require_server_install("`orch serve`")  # before the embedded Redis starts
    from orchestrator.api.server import serve
    from orchestrator.config import Settings
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


def _service_ref(value: str | None) -> str | None:
    """The check of ``--service``: a job id or name, as ``JOB`` arguments are checked."""
    if value is None:
        return None
    try:
        return options.job_ref(value)
    except OptionError as err:
        raise OptionError("--service", err.problem) from None


tokens_app = typer.Typer(
    help="API tokens: create one per principal (admins) or for a service's clients (--service: "
    "its team's members too), list them, revoke them.",
    no_args_is_help=True,
)


@tokens_app.command("create")
def tokens_create(
    role: Annotated[
        Role | None, typer.Option(help="admin, member (of --team) or viewer (or give --service).")
    ] = None,
    service: Annotated[
        str | None,
        typer.Option(
            help="A service (job id or name): a token for its own clients, which reaches its "
            "endpoint and nothing else (an admin or a member of its team may make one).",
            callback=_service_ref,
        ),
    ] = None,
    team: Annotated[
        str | None,
        typer.Option(
            help="The team it acts for (required for a member; a viewer without one "
            "reads every team).",
            callback=options.name("--team"),
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            help="Who it is for, recorded on each action (default: ROLE-TEAM).",
            callback=options.name("--name"),
        ),
    ] = None,
) -> None:
    """Make a token and print it once on stdout (only its hash is kept)."""
    if service is not None:
        if role not in (None, Role.SERVICE) or team is not None:
            raise OptionError("--service", "takes no --role or --team: its team is the service's")
        token, info = connect().create_service_token(service, name=name or "clients")
        err_console.print(
            f"token {info.id} for {info.name}, the clients of service {info.service}; reaches "
            "its endpoint only; shown once, keep it secret:"
        )
        sys.stdout.write(token + "\n")
        return
    if role is None:
        raise OptionError("--role", "is needed: admin, member or viewer (or --service JOB)")
    # ROLE-TEAM can outgrow a name (a 60-character team): said as the option to give.
    name = options.name("--name")(name or "-".join(p for p in (role.value, team) if p))
    token, info = connect().create_token(name=name, role=role, team=team)
    err_console.print(
        f"token {info.id} for {info.name} ({info.role.value} of {info.team or 'all teams'}); "
        "shown once, keep it secret:"
    )
    sys.stdout.write(token + "\n")


@tokens_app.command("list")
def tokens_list(output: OutputOption = Output.TABLE) -> None:
    """List every token (never a secret), revoked ones included."""
    infos = connect().tokens()
    if output.data:
        print_data([i.model_dump(mode="json") for i in infos], output)
        return
    console.print(_tokens_table(infos))


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id.", callback=options.token_id)],
) -> None:
    """Revoke a token: it is refused from now on."""
    info = connect().revoke_token(token_id)
    console.print(f"token {info.id} ({info.name}) revoked")


def _tokens_table(infos: Sequence[TokenInfo]) -> Table:
    table = Table(title="API tokens")
    for col in ("id", "name", "role", "team", "created", "by", "revoked"):
        table.add_column(col)
    for i in infos:
        revoked = f"{iso(i.revoked_at)} by {i.revoked_by}" if i.revoked else "-"
        table.add_row(
            i.id, i.name, i.role.value, i.team or "(all)", iso(i.created_at), i.created_by, revoked
        )
    return table


# ---- orch audit ------------------------------------------------------------------------------


def audit_command(
    count: Annotated[
        int,
        typer.Option(
            help=f"The latest this many (1 to {MAX_AUDIT:,}).",
            callback=options.between("--count", 1, MAX_AUDIT),
        ),
    ] = 50,
    action: Annotated[
        str | None,
        typer.Option(
            help="Only this action (submit, cancel, teams.apply...).",
            callback=options.shorter("--action", MAX_ACTION_CHARS),
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show the audit stream: each mutation, who made it, on what (admins)."""
    entries = connect().audit(count, action)
    if output.data:
        print_data([e.model_dump(mode="json") for e in entries], output)
        return
    console.print(_audit_table(entries))


def _audit_table(entries: Sequence[AuditEntry]) -> Table:
    table = Table(title="audit")
    for col in ("time", "actor", "role", "team", "action", "target", "detail"):
        table.add_column(col)
    for e in entries:
        table.add_row(iso(e.ts), e.actor, e.role, e.team or "-", e.action, e.target, e.detail)
    return table
