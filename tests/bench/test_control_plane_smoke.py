"""The control-plane benchmark runs end to end in smoke mode (figures are not judged here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_control_plane_benchmark_smoke(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "control_plane"))
    import run  # the benchmark script

    assert run.main(["--smoke"]) == 0
    out = json.loads((ROOT / "bench/control_plane/results/control_plane-smoke.json").read_text())
    assert set(out["submissions_per_s"]) == {"single", "pipelined", "8 clients"}
    assert all(v["median"] > 0 for v in out["submissions_per_s"].values())
    assert set(out["round"]) == {"gang", "shared"}
    sys.modules.pop("run", None)
