"""What a principal may do, in a module of its own: the CLI's ``--role`` option reads it without
importing redis-py or pydantic."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Role"]


class Role(StrEnum):
    """What a principal may do. ``admin``: teams, tokens and any job; ``member``: submit for
    its own team and cancel that team's jobs; ``viewer``: read; ``service``: send requests to
    one service's endpoint and nothing else (a token for the service's own clients)."""

    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"
    SERVICE = "service"
