"""The latency benchmark (bench/control_plane/latency.py) runs end to end in smoke mode on the
session's Ray cluster (figures are not judged here, only that they exist and add up)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_latency_benchmark_smoke(
    ray_cluster: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The benchmark joins the session's cluster (Ray is initialised once per test session).
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)
    monkeypatch.setenv("ORCH_SCHEDULER_INTERVAL_S", "0.2")
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "control_plane"))
    import latency  # the benchmark script

    try:
        assert latency.main(["--smoke"]) == 0
    finally:
        sys.modules.pop("latency", None)
    out = json.loads((ROOT / "bench/control_plane/results/latency-smoke.json").read_text())
    assert out["meta"]["policy"] == "shared"
    assert len(out["idle"]["runs"]) == out["meta"]["idle_runs"] >= 1
    assert len(out["preemption"]["runs"]) == out["meta"]["preempt_runs"] >= 1
    for part in ("idle", "preemption"):
        for run in out[part]["runs"]:
            assert run["submit_to_first_step_s"] > 0
            parts = ("submit_to_placed_s", "placed_to_running_s", "running_to_first_step_s")
            assert math.isclose(sum(run[p] for p in parts), run["submit_to_first_step_s"])
        for v in out[part]["summary"].values():
            assert v["p50"] <= v["p95"] <= v["max"]
    # each idle run waited for a full, warm worker pool: every one started on a warm worker
    assert out["idle"]["warm_starts"] == len(out["idle"]["runs"])
    # and each preempting run for the GPU-less warm workers a full pool keeps: all start warm
    assert out["preemption"]["warm_starts"] == len(out["preemption"]["runs"])
    for run in out["preemption"]["runs"]:
        assert run["checkpoint_write_s"] > 0
        assert run["submit_to_victim_stopped_s"] > 0
