"""Scheduling scenarios that used to run end to end on Ray, on the in-process runtime instead:
what they show is the loop's and the policy's decisions, which the real runtime does not change
(the runtime contract, ``tests/runtime/``, holds the two runtimes to the same promises). Real
Redis, the real ``orch`` command for what a user types; runs start, step and end when the test
says.

Moved from ``tests/e2e/test_placement.py`` (interactive before earlier bulk) and
``tests/e2e/test_teams.py`` (a team's limit holds; a guarantee takes borrowed GPUs back).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.runtime.base import OutcomeKind
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from orchestrator.teams import parse_teams
from tests.e2e.jobs import mlp_job

ROOT = Path(__file__).resolve().parents[2]
POOL = [("node-a", 4), ("node-b", 2)]
"""The end-to-end cluster's GPU nodes: node A with 4 GPU slots, node B with 2."""


def _cli(
    redis_url: str, store: JobStore, data_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """The real ``orch`` command against the test's namespace (a local admin)."""
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "ORCH_NAMESPACE": store.namespace,
        "ORCH_DATA_DIR": str(data_dir),
    }
    exe = Path(sys.executable).parent / "orch"
    return subprocess.run(
        [str(exe), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def loop_on(store: JobStore, tmp_path: Path) -> Iterator[Any]:
    """``loop_on(policy)``: a control loop holding the namespace's lease, on the pool above."""
    loops: list[ControlLoop] = []

    def make(policy: str) -> tuple[ControlLoop, LocalRuntime]:
        settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
        rt = LocalRuntime(POOL, stop_ends=True)
        loop = ControlLoop(settings, store, rt, make_policy(policy))
        loop.lease.acquire(store.namespace)
        loops.append(loop)
        return loop, rt

    yield make
    for loop in loops:
        loop.lease.release()


def rounds(loop: ControlLoop, n: int = 3) -> None:
    """A few scheduling rounds (a stop's end is reaped, then its GPUs are given out)."""
    for _ in range(n):
        loop.round()


def stepped(store: JobStore, *job_ids: str) -> None:
    """The jobs' workers report a first step and a checkpoint (what a real run would)."""
    now = time.time()
    for job_id in job_ids:
        store.put_metrics(job_id, {"first_step_at": now, "checkpoint_at": now, "step": 20})


def test_interactive_goes_before_earlier_bulk(store: JobStore, loop_on: Any) -> None:
    loop, rt = loop_on("gang")
    # Fill node A and node B so both queued jobs must wait, then free the pool.
    blocker = store.submit(mlp_job("blocker", gpus=6, duration_s=60)).id
    rounds(loop)
    assert store.get(blocker).state is JobState.RUNNING
    bulk = store.submit(mlp_job("bulk", gpus=4, steps=3)).id
    inter = store.submit(mlp_job("inter", gpus=4, cls="interactive", steps=3)).id
    rounds(loop)
    assert store.get(bulk).state is store.get(inter).state is JobState.QUEUED
    store.transition(blocker, JobState.CANCELLING)
    rounds(loop)
    assert store.get(blocker).state is JobState.CANCELLED
    assert store.get(inter).state is JobState.RUNNING
    assert store.get(bulk).state is JobState.QUEUED  # 2 GPUs left: it waits for the interactive
    rt.end(inter, OutcomeKind.FINISHED, result={"status": "finished"})
    rounds(loop)
    assert store.get(bulk).state is JobState.RUNNING
    rt.end(bulk, OutcomeKind.FINISHED, result={"status": "finished"})
    rounds(loop)
    assert store.get(bulk).state is JobState.FINISHED
    assert [launch.job_id for launch in rt.launches] == [blocker, inter, bulk]


def _pool_teams(store: JobStore) -> dict[str, dict[str, Any]]:
    view = store.pool_view.read()
    assert view is not None, "no pool view: has the loop run a round?"
    return {r["team"]: r for r in view["teams"]}


def test_team_limit_holds_and_guarantee_reclaims_borrowed_gpus(
    store: JobStore, loop_on: Any, redis_url: str, tmp_path: Path
) -> None:
    loop, rt = loop_on("shared")
    # The pool: 6 GPUs (4 + 2). Vision is guaranteed 4; speech 2, and may hold at most 3.
    teams = tmp_path / "teams.yaml"
    teams.write_text(
        "teams:\n"
        "  - {name: vision, guaranteed_gpus: 4}\n"
        "  - {name: speech, guaranteed_gpus: 2, max_gpus: 3}\n"
    )
    applied = _cli(redis_url, store, tmp_path, "teams", "apply", str(teams))
    assert applied.returncode == 0, applied.stderr
    assert store.teams() == parse_teams(
        {
            "teams": [
                {"name": "vision", "guaranteed_gpus": 4},
                {"name": "speech", "guaranteed_gpus": 2, "max_gpus": 3},
            ]
        }
    )

    s1 = store.submit(mlp_job("s1", team="speech", gpus=2, steps=200_000)).id
    s2 = store.submit(mlp_job("s2", team="speech", gpus=1, steps=200_000)).id
    s3 = store.submit(mlp_job("s3", team="speech", gpus=1, steps=200_000)).id
    rounds(loop)
    assert store.get(s1).state is store.get(s2).state is JobState.RUNNING
    # Speech holds 3 of its 3: s3 waits although 3 GPUs are free, and is told why.
    rec = store.get(s3)
    assert rec.state is JobState.QUEUED and "3-GPU limit" in rec.message, rec.message
    speech = _pool_teams(store)["speech"]
    assert (speech["used_gpus"], speech["max_gpus"], speech["borrowed_gpus"]) == (3, 3, 1)
    shown = _cli(redis_url, store, tmp_path, "pool")
    assert shown.returncode == 0 and "speech" in shown.stdout and "borrowed" in shown.stdout

    # Vision arrives wanting its guarantee: speech's borrowed GPU is taken back.
    stepped(store, s1, s2)
    loop.observe()  # reads the runs' progress
    v1 = store.submit(mlp_job("v1", team="vision", gpus=4, steps=200_000)).id
    rounds(loop, 5)
    assert store.get(v1).state is JobState.RUNNING
    preempted = [
        j for j in (s1, s2) if any("preempted" in e.get("message", "") for e in store.events(j))
    ]
    assert preempted and set(rt.stops) == set(preempted), {j: store.events(j) for j in (s1, s2)}
    assert store.get(s3).state is JobState.QUEUED  # never above speech's limit meanwhile
    use = _pool_teams(store)
    assert use["vision"]["used_gpus"] == 4 and use["speech"]["used_gpus"] <= 2
