"""``/v1/pool``, ``/v1/teams`` and ``/v1/usage``: the pool as the scheduler sees it, the team
config, and who used how many GPU-seconds."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from orchestrator.api import operations
from orchestrator.api.auth import Store, Who
from orchestrator.api.bodies import StrictJsonRoute
from orchestrator.api.models import Usage
from orchestrator.errors import NotPublished
from orchestrator.spec import NAME_PATTERN
from orchestrator.teams import TeamConfig

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["pool"], route_class=StrictJsonRoute)


@router.get("/pool")
def pool(who: Who, store: Store) -> dict[str, Any]:
    """The pool view the running scheduler publishes: nodes, GPUs used, each team's use, and
    the jobs holding GPUs that the caller may read (404 when no scheduler runs for this
    namespace)."""
    view = store.pool_view.read()
    if view is None:
        raise NotPublished("no scheduler is running for this namespace; start one with `orch up`")
    return operations.pool_for(who, view)


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


@router.get("/usage")
def usage(
    who: Who,
    store: Store,
    since: Annotated[
        float,
        Query(ge=0, le=1e11, description="Epoch seconds: GPU use since then (default: all)."),
    ] = 0.0,
    team: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
) -> Usage:
    """GPU-seconds per job and per team held since ``since``, and each team's
    account (a member or viewer of one team sees that team's only; 403 for another)."""
    return operations.usage(store, who, since=since, team=team)
