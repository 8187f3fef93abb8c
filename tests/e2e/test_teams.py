"""Team quotas live (real Ray, Redis, torch): a team at its limit is held while GPUs are free,
and a team under its guarantee takes back GPUs another team borrowed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from orchestrator.store.states import JobState
from orchestrator.teams import parse_teams
from tests.e2e.conftest import Orch
from tests.e2e.jobs import mlp_job

LONG = 200_000  # steps: runs until the test is done with it


def _pool_teams(o: Orch) -> dict[str, dict[str, Any]]:
    view = o.store.pool_view.read()
    assert view is not None, "no pool view: is the scheduler up?"
    return {r["team"]: r for r in view["teams"]}


def test_team_limit_holds_and_guarantee_reclaims_borrowed_gpus(
    shared: Orch, tmp_path: Path
) -> None:
    o = shared
    # The pool: 6 GPUs (4 + 2). Vision is guaranteed 4; speech 2, and may hold at most 3.
    teams = tmp_path / "teams.yaml"
    teams.write_text(
        "teams:\n"
        "  - {name: vision, guaranteed_gpus: 4}\n"
        "  - {name: speech, guaranteed_gpus: 2, max_gpus: 3}\n"
    )
    applied = o.cli("teams", "apply", str(teams))
    assert applied.returncode == 0, applied.stderr
    assert o.store.teams() == parse_teams(
        {
            "teams": [
                {"name": "vision", "guaranteed_gpus": 4},
                {"name": "speech", "guaranteed_gpus": 2, "max_gpus": 3},
            ]
        }
    )

    s1 = o.store.submit(mlp_job("s1", team="speech", gpus=2, steps=LONG, checkpoint_every=20)).id
    s2 = o.store.submit(mlp_job("s2", team="speech", gpus=1, steps=LONG, checkpoint_every=20)).id
    s3 = o.store.submit(mlp_job("s3", team="speech", gpus=1, steps=LONG)).id
    for job_id in (s1, s2):
        o.wait(job_id, {JobState.RUNNING})
    # Speech holds 3 of its 3: s3 waits although 3 GPUs are free, and is told why.
    deadline = time.monotonic() + 30
    while "max_gpus" not in o.store.get(s3).message and time.monotonic() < deadline:
        time.sleep(0.2)
    rec = o.store.get(s3)
    assert rec.state is JobState.QUEUED and "3-GPU limit" in rec.message, rec.message
    speech = _pool_teams(o)["speech"]
    assert (speech["used_gpus"], speech["max_gpus"], speech["borrowed_gpus"]) == (3, 3, 1)
    shown = o.cli("pool")
    assert shown.returncode == 0 and "speech" in shown.stdout and "borrowed" in shown.stdout

    # Vision arrives wanting its guarantee: speech's borrowed GPU is taken back.
    v1 = o.store.submit(mlp_job("v1", team="vision", gpus=4, steps=LONG)).id
    o.wait(v1, {JobState.RUNNING}, timeout_s=120)
    preempted = [
        j for j in (s1, s2) if any("preempted" in e.get("message", "") for e in o.store.events(j))
    ]
    assert preempted, {j: o.store.events(j) for j in (s1, s2)}
    assert o.store.get(s3).state is JobState.QUEUED  # never above speech's limit meanwhile
    use = _pool_teams(o)
    assert use["vision"]["used_gpus"] == 4 and use["speech"]["used_gpus"] <= 2
