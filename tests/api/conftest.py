"""The API served for real: uvicorn on a free port in a background thread, over the session's
Redis in a fresh namespace, with one token per principal of the authorization matrix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.api.server import ApiServer, start
from orchestrator.spec import JobSpec, load_spec
from orchestrator.store import JobStore
from orchestrator.store.tokens import Role

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "interactive-mlp.yaml"

PRINCIPALS: dict[str, tuple[Role, str | None]] = {
    "admin": (Role.ADMIN, None),
    "member": (Role.MEMBER, "vision"),
    "viewer": (Role.VIEWER, "vision"),
    "viewer-all": (Role.VIEWER, None),
    "outsider": (Role.MEMBER, "speech"),
}
"""Who the matrix tests: ``member`` and ``viewer`` are of team vision, ``outsider`` is a member
of another team, ``viewer-all`` reads every team."""


@pytest.fixture
def api(store: JobStore) -> Iterator[ApiServer]:
    """The API over the test's store, answering on a free loopback port."""
    server = start(store, "127.0.0.1:0")
    yield server
    server.stop()


@pytest.fixture
def tokens(store: JobStore) -> dict[str, str]:
    """A live token for each of :data:`PRINCIPALS`, made as a local admin would."""
    root = Principal.local("root")
    return {
        name: operations.create_token(store, root, name=name, role=role, team=team)[0]
        for name, (role, team) in PRINCIPALS.items()
    }


def spec_data(team: str = "vision", name: str = "mlp-eval") -> dict[str, Any]:
    """The example interactive job as a request body, for ``team``."""
    spec = load_spec(EXAMPLE)
    return {
        **spec.model_dump(mode="json", by_alias=True, exclude_unset=True),
        "team": team,
        "name": name,
    }


def job_spec(team: str = "vision", name: str = "mlp-eval") -> JobSpec:
    """The example interactive job, for ``team``."""
    return JobSpec.model_validate(spec_data(team, name))


def http(api: ApiServer, token: str | None = None) -> httpx.Client:
    """A plain HTTP client of the API, with ``token`` as its bearer token if given."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=api.url, headers=headers, timeout=30)
