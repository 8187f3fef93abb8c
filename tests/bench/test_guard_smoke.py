"""The SLA guard's noise benchmark runs end to end in smoke mode: a harness run slowed half-way,
its reports replayed through the guard (its figures are not judged here, only that a hold of 0
sees the slowdown)."""

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
    held0 = {r[0]: r[3] for r in rows if r[1] == "0"}
    assert held0["throughput"] != "-" and held0["latency"] != "-"  # the slowdown was seen
