"""``/v1/pool`` and ``/v1/teams``: the pool as the scheduler sees it, and the team config."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from orchestrator.api import operations
from orchestrator.api.auth import Store, Who
from orchestrator.errors import NotPublished
from orchestrator.teams import TeamConfig

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["pool"])


@router.get("/pool")
def pool(who: Who, store: Store) -> dict[str, Any]:
    """The pool view the running scheduler publishes: nodes, GPUs used, each team's use
    (404 when no scheduler runs for this namespace)."""
    view = store.pool_view.read()
    if view is None:
        raise NotPublished("no scheduler is running for this namespace; start one with `orch up`")
    return view


@router.get("/teams")
def teams(who: Who, store: Store) -> TeamConfig:
    """The stored team config (404 when none was applied: every team is equal)."""
    config = store.teams()
    if config is None:
        raise NotPublished("no team config applied; every team is equal (use `orch teams apply`)")
    return config


@router.put("/teams")
def apply_teams(config: TeamConfig, who: Who, store: Store) -> TeamConfig:
    """Replace the team config (admins only); the scheduler applies it on its next round."""
    operations.apply_teams(store, who, config)
    return config
