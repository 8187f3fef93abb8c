"""The single-submission API benchmark runs end to end in smoke mode, this tree beside itself as
the baseline (figures are not judged here: they go to bench/api/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_singles_benchmark_smoke(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "singles.json"
    args = ["--smoke", "--baseline", str(ROOT), "--clients", "2", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "bench/api/singles.py", *args],
        cwd=ROOT,
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert set(figures["trees"]) == {"baseline", "this"}
    for tree in figures["trees"].values():
        assert tree["rate"] > 0 and 0 < tree["p50_ms"] <= tree["p99_ms"]
    assert figures["ratio"] > 0
