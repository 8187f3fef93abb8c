"""The SLA guard's noise benchmark runs end to end in smoke mode: a harness run slowed half-way,
its reports replayed through the guard (its figures are not judged here, only that each check
sees the slowdown at some hold: a hold of 0 may already have tripped on noise before it, and a
tripped check reports nothing new until it clears, so on a busy machine it shows "-")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_guard_noise_benchmark_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "guard" / "noise.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith(("throughput", "latency"))]
    assert {(r[0], r[1]) for r in rows} >= {("throughput", "0"), ("latency", "20")}
    seen = {r[0] for r in rows if r[3] != "-"}
    assert seen == {"throughput", "latency"}, out  # the slowdown was seen by both checks
