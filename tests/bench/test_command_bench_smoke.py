"""The command-mode reporting benchmark runs end to end in smoke mode (its figures are not
judged here: only that both columns are measured at each size)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_command_report_overhead_benchmark_smoke() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "command" / "report_overhead.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
    ).stdout
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [r[0] for r in rows] == ["100", "1000"]
    assert all(float(r[1]) > 0 and float(r[3]) > 0 for r in rows), out
