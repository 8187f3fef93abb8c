"""The harness-overhead benchmark runs end to end in smoke mode (figures are not judged here)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def _threads() -> Iterator[None]:
    before = torch.get_num_threads()  # the benchmark sets its own thread count
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("_threads")
def test_overhead_benchmark_smoke(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench" / "control_plane"))
    import overhead  # the benchmark script

    try:
        # Exit status 0 also says the bare loop ended with the harness's exact parameters.
        assert overhead.main(["--smoke", "--workloads", "mlp,gpt"]) == 0
    finally:
        sys.modules.pop("overhead", None)
    out = json.loads((ROOT / "bench/control_plane/results/overhead-smoke.json").read_text())
    assert set(out["workloads"]) == {"mlp", "gpt"}
    for r in out["workloads"].values():
        assert r["same_params"]
        assert 0 < r["ratio"]["min"] <= r["ratio"]["median"] <= r["ratio"]["max"]
        assert len(r["harness_s"]) == len(r["bare_s"]) == out["meta"]["repeats"]
        assert r["harness_step_ms"] > 0 and r["bare_step_ms"] > 0
