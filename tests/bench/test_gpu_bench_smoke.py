"""The GPU benchmark's plumbing, on the CPU: ``--cpu-smoke`` runs every section tiny and writes
every section's figures (their values are not judged here, only that they are figures: positive
rates, ordered percentiles, an MFU in (0, 1], the guard's counts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu" / "run.py"
SECTIONS = {"mfu", "tuned", "precision", "ddp", "compile", "serve", "guard"}


def _runs(data: Any) -> list[dict[str, Any]]:
    """Every harness run recorded anywhere in a section's figures."""
    if isinstance(data, dict):
        found = list(data["runs"]) if isinstance(data.get("runs"), list) else []
        return found + [r for v in data.values() for r in _runs(v)]
    return []


def test_cpu_smoke_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    assert "section" in proc.stdout and str(out) in proc.stdout  # the table was printed
    sections = json.loads(out.read_text())["sections"]
    assert set(sections) == SECTIONS
    failed = {k: v.get("error") for k, v in sections.items() if v["status"] != "ok"}
    assert not failed
    d = {k: v["data"] for k, v in sections.items()}

    runs = _runs(d)
    assert len(runs) >= 10
    for r in runs:
        assert r["samples_per_s"] > 0 and r["measured_steps"] > 0
        assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
        assert r["mfu"] is not None and 0 < r["mfu"] <= 1
        # per-run figures: this run's peak, its data wait apart; no GPU figures on the CPU
        assert r["peak_mem_scope"] == "run" and r["peak_mem_mb"] > 0
        assert 0 <= r["data_wait_share"] <= 1 and r["compute_ms"] > 0
        assert r["gpu_busy_share"] is None and r["energy_per_sample_j"] is None

    assert 0 < d["mfu"]["mfu"] <= 1 and 0 < d["mfu"]["mfu_of_matmul"] <= 1
    assert d["mfu"]["matmul"]["median"] > 0 and d["mfu"]["flops_per_token"] > 0

    assert d["tuned"]["tuner"]["trials"] >= 1 and d["tuned"]["tuner"]["config"] is not None
    assert d["tuned"]["default_config"] == {"micro_batch": 32, "precision": "fp32"}
    assert d["tuned"]["tuned"]["ratio_to_default"]["median"] > 0

    assert d["precision"]["fp16_finite"] is True
    assert {r["config"]["precision"] for r in _runs(d["precision"])} == {"fp32", "bf16", "fp16"}

    assert d["ddp"]["backend"] == ["gloo"] and d["ddp"]["ddp"]["ratio_to_plain"]["median"] > 0
    assert d["compile"]["compile_s"] and all(r["first_step_s"] for r in _runs(d["compile"]))

    serve = d["serve"]["rows"]
    assert {(r["batcher"], r["rate_rps"]) for r in serve} == {
        (b, rate) for b in ("unbatched", "batch-8", "batch-32") for rate in (50.0, 200.0)
    }
    for r in serve:
        assert r["requests"] + r["dropped"] == r["offered"] > 0
        if r["requests"]:
            assert r["request_p50_ms"] <= r["request_p99_ms"] and r["mean_batch"] >= 1
    assert max(r["mean_batch"] or 0 for r in serve if r["batcher"] == "batch-32") > 1

    guard = d["guard"]
    assert guard["rate_before"] > 0 and guard["floor"] < guard["rate_before"]
    rows = {(r["check"], r["hold_s"]): r for r in guard["rows"]}
    assert set(rows) >= {("throughput", 0.0), ("latency", 20.0)}
    assert all(isinstance(r["false_trips"], int) and "detect_s" in r for r in rows.values())
    assert rows[("throughput", 0.0)]["detect_s"] is not None  # the slowdown was seen


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_it_says_so_and_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sections", "mfu"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("no CUDA device:") and "--cpu-smoke" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
