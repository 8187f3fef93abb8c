"""The containment benchmark runs end to end in smoke mode (its figures are not judged here:
only that every figure was measured, with and without containment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(os.geteuid() != 0, reason="a run's cgroup and namespace need a root worker")
def test_containment_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "containment.json"
    script = ROOT / "bench" / "sandbox" / "containment.py"
    subprocess.run(
        [sys.executable, str(script), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
    )
    data = json.loads(out.read_text())
    assert set(data["samples"]) == {
        "start_command_ms",
        "start_entry_ms",
        "step_p50_ms",
        "step_p95_ms",
        "end_command_ms",
    }
    for figure, by_variant in data["samples"].items():
        for variant in ("with", "without"):
            assert by_variant[variant] and all(x > 0 for x in by_variant[variant]), figure
    for part in ("cgroup_close_ms", "join_ms"):
        assert data[part] and all(x > 0 for x in data[part]), part
