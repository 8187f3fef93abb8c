"""`orch logs` of real jobs: what each rank's workload printed, warned and raised comes back
from the Ray workers through Redis, per rank, after the job has ended (a failure's traceback
holds the team's own frames only, then one line says why)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import workers
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store.states import JobState
from tests.e2e.conftest import Orch

WORKLOAD = "tests.workers.printing_workload:build"


def talker(name: str, gpus: int, **args: Any) -> JobSpec:
    """A job of the printing workload on ``gpus`` ranks."""
    return parse_spec(
        {
            "name": name,
            "team": "e2e",
            "class": "bulk",
            "workload": {"entry": WORKLOAD, "args": args},
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": gpus},
            "run": {"micro_batch": 4, "warmup_steps": 1, "steps": 3},
        }
    )


def test_orch_logs_shows_each_ranks_prints_warnings_and_traceback(orch: Orch) -> None:
    ok, broken = orch.store.submit_many([talker("talker", 2), talker("breaks", 1, fail_at=8)])
    rec = orch.wait(ok, {JobState.FINISHED, JobState.FAILED})
    assert rec.state is JobState.FINISHED, rec.message
    assert orch.wait(broken, {JobState.FINISHED, JobState.FAILED}).state is JobState.FAILED

    out = orch.cli("logs", ok)
    assert out.returncode == 0, out.stderr
    for rank in (0, 1):
        assert f"[rank {rank}] building with seed 0" in out.stdout
        assert f"[rank {rank}] batch from sample" in out.stdout
        assert f"[rank {rank}] to stderr, mid-step" in out.stderr
    assert "UserWarning: a warning from the workload" in out.stderr
    one = orch.cli("logs", ok, "--rank", "1", "-f")  # ended: -f returns at once
    assert one.returncode == 0 and one.stdout.startswith("building with seed 0\n"), one.stderr

    failed = orch.cli("logs", broken)
    assert failed.returncode == 0, failed.stderr
    err = failed.stderr.splitlines()
    assert "[rank 0] Traceback (most recent call last):" in err  # its own code's frames
    assert err[-2:] == [
        "[rank 0] RuntimeError: the workload broke at sample 8",
        "[rank 0] [orch] the run failed: RuntimeError: the workload broke at sample 8",
    ]
    harness = str(Path(workers.__file__).parent) + "/"
    assert not [line for line in err if harness in line or sys.prefix in line]
