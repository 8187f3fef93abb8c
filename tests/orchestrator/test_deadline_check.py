"""The submission-time deadline check: hand-computed cases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.errors import SpecError
from orchestrator.sla import check_deadline, profile_rate
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore


def _spec(work: int = 100_000, deadline_s: float = 1000.0, gpus: Any = 4) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "train",
            "team": "a",
            "class": "bulk",
            "workload": "cnn",
            "resources": {"gpus": gpus},
            "sla": {"throughput": {"work_samples": work, "deadline_s": deadline_s}},
        }
    )


def test_met_when_the_work_fits_at_the_tuned_rate() -> None:
    # 100,000 samples at 100 samples/s: 1,000 s, exactly the deadline
    assert check_deadline(_spec(), 100.0).ok is True


def test_refused_with_the_figures_when_it_cannot_be_met() -> None:
    # 100,000 samples at 80 samples/s: 1,250 s > 1,000 s
    check = check_deadline(_spec(), 80.0)
    assert check.ok is False
    assert "1,250 s" in check.message and "deadline_s 1000 s" in check.message


def test_skipped_with_a_note_without_a_rate() -> None:
    check = check_deadline(_spec(), None)
    assert check.ok is None and "no tuned rate" in check.message


def test_the_best_rate_on_the_allowed_gpus_is_used() -> None:
    profile = {
        "chosen": {
            "samples_per_s": 50.0,
            "by_gpus": [
                {"gpus": 1, "samples_per_s": 30.0},
                {"gpus": 2, "samples_per_s": 55.0},
                {"gpus": 8, "samples_per_s": 200.0},
            ],
        }
    }
    assert profile_rate(profile, 4) == 55.0
    assert profile_rate(profile, 8) == 200.0
    assert profile_rate({"chosen": {"samples_per_s": 50.0}}, 4) == 50.0
    assert profile_rate(None, 4) is None


def test_strict_submission_refuses_and_writes_nothing(store: JobStore) -> None:
    store.profiles.save("train", {"chosen": {"samples_per_s": 80.0}})
    who = Principal.local("alice")
    (check,) = operations.deadline_checks(store, [_spec()])
    assert check.ok is False
    with pytest.raises(SpecError, match="cannot be met"):
        operations.submit(store, who, [_spec()], strict=True)
    assert store.list() == []
    # without --strict it is queued (the CLI prints the check as a warning)
    assert len(operations.submit(store, who, [_spec()]).ids) == 1


def test_orch_submit_strict(
    redis_url: str, namespace: str, tmp_path: Path, store: JobStore
) -> None:
    store.profiles.save("train", {"chosen": {"samples_per_s": 80.0}})
    job = tmp_path / "train.json"
    job.write_text(_spec().model_dump_json(by_alias=True, exclude_none=True))
    env = {"REDIS_URL": redis_url, "ORCH_NAMESPACE": namespace, "ORCH_DATA_DIR": str(tmp_path)}
    exe = Path(sys.executable).parent / "orch"
    run = [str(exe), "submit", str(job)]
    out = subprocess.run(
        [*run, "--strict"], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "cannot be met" in out.stderr, out.stderr
    assert store.list() == []
    out = subprocess.run(run, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "warning" in out.stderr and "1,250 s" in out.stderr, out.stderr
