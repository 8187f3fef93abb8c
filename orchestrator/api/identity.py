"""Who acts, and what they may do: principals and the role rules, in one place.

The rules (see docs/operator-guide.md, "Tokens and roles"):

- ``admin``: everything: any team's jobs, the team config, tokens, the audit stream.
- ``member`` (always of one team): submits jobs for its own team only (a job naming another
  team is refused with 403, never rewritten), cancels that team's jobs, reads that team's jobs.
- ``viewer``: reads: one team's jobs, or every team's when it has no team.
- ``service``: sends requests to one service's endpoint; every other route refuses it (403),
  and it reads, submits and cancels nothing.

A job a principal may not read is not found (``orchestrator.api.operations.read_job``): the
same 404 as a missing one, which tells an outsider nothing about another team's names.

Every principal reads the pool view and the team config (the shared pool is no secret).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass

from orchestrator.errors import Forbidden
from orchestrator.store.tokens import Role, TokenInfo

__all__ = ["Principal", "Role"]


@dataclass(frozen=True)
class Principal:
    """The authenticated actor of a request (or of a CLI command with direct store access).

    Attributes:
        name: recorded on every action (``alice``).
        role: what it may do.
        team: the team whose jobs it reaches; ``None`` for an admin or a viewer of all teams.
        token_id: the token it authenticated with (``None`` for direct store access).
        service: the one service a ``service`` principal may call.
    """

    name: str
    role: Role
    team: str | None = None
    token_id: str | None = None
    service: str | None = None

    @classmethod
    def of_token(cls, info: TokenInfo) -> Principal:
        """The principal a live token speaks for."""
        return cls(info.name, info.role, info.team, info.id, info.service)

    def check_not_service(self) -> None:
        """Refuse a service token on any route but its service's endpoint.

        Raises:
            Forbidden: a service principal.
        """
        if self.role is Role.SERVICE:
            raise Forbidden(
                f"{self.describe()} reaches only the endpoint of service {self.service!r}"
            )

    @classmethod
    def local(cls, name: str | None = None) -> Principal:
        """Whoever runs the CLI with direct store access: an admin, as reaching Redis is
        administrator access. ``name`` is what ``--by`` claims (unchecked), else the OS user."""
        if name:
            return cls(name, Role.ADMIN)
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no user name in this environment (a bare container)
            user = "unknown"
        return cls(f"{user}@local", Role.ADMIN)

    @property
    def reads_all(self) -> bool:
        """Whether it reads every team's jobs (an admin, or a viewer with no team)."""
        return self.role is Role.ADMIN or (self.team is None and self.role is Role.VIEWER)

    def may_read(self, team: str) -> bool:
        """Whether it reads the jobs of ``team`` (its own team's, or every team's; a service
        token reads none)."""
        if self.role is Role.SERVICE:
            return False
        return self.reads_all or team == self.team

    def check_read(self, team: str) -> None:
        """Allow reading the jobs of ``team`` (a listing or usage of a named team).

        Raises:
            Forbidden: a member or viewer of another team.
        """
        if not self.may_read(team):
            raise Forbidden(f"{self.describe()} cannot read the jobs of team {team!r}")

    def check_write(self, team: str) -> None:
        """Allow submitting or cancelling a job of ``team``.

        Raises:
            Forbidden: a viewer, or a member of another team.
        """
        if self.role is Role.ADMIN:
            return
        if self.role is Role.VIEWER:
            raise Forbidden(f"{self.describe()} may only read")
        self.check_not_service()
        if team != self.team:
            raise Forbidden(
                f"{self.describe()} cannot submit or cancel jobs of team {team!r} "
                f"(a member acts for its own team only)"
            )

    def check_admin(self, what: str) -> None:
        """Allow an admin-only action (``what`` names it in the refusal).

        Raises:
            Forbidden: not an admin.
        """
        if self.role is not Role.ADMIN:
            raise Forbidden(f"only an admin may {what}; {self.describe()} may not")

    def describe(self) -> str:
        """``alice (member of vision)``, for messages."""
        where = f" of {self.team}" if self.team else ""
        return f"{self.name} ({self.role.value}{where})"
