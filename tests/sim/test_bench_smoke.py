"""The scheduler benchmark runs in smoke mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sim.test_fidelity import HAVE_TRACES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not HAVE_TRACES, reason="Pollux traces not found")
def test_pollux_benchmark_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench/scheduler/pollux.py"), "--smoke", "--workers", "1"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=300,
    )
    assert "tiresias" in out.stdout and "shared-genetic" in out.stdout
    assert "per application" in out.stdout
    result = json.loads((ROOT / "bench/scheduler/results/pollux-smoke.json").read_text())
    # the full run (Tiresias, workload 3 at load 0.5) reproduces each application's mean
    assert {a["app"] for a in result["per_app"]} >= {"cifar10", "ncf"}
    assert all(a["gate"] == "pass" for a in result["per_app"])


@pytest.mark.skipif(not HAVE_TRACES, reason="Pollux traces not found")
@pytest.mark.parametrize(
    ("script", "expect", "result"),
    [
        ("mixed.py", "static-partition", "mixed-smoke.json"),
        ("scale.py", "strict-priority", "scale-smoke.json"),
        ("mixed_pool.py", "dedicated", "mixed-pool-smoke.json"),
    ],
)
def test_mixed_and_scale_benchmarks_smoke(script: str, expect: str, result: str) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench/scheduler" / script), "--smoke"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=300,
    )
    assert expect in out.stdout and "shared" in out.stdout
    if script == "mixed.py":
        assert "shared-genetic" in out.stdout
    assert (ROOT / "bench/scheduler/results" / result).is_file()
