"""`orch demo` end to end on a small folder of jobs (the real examples run in test_lifecycle)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from rich.console import Console

from orchestrator.cli.demo import run_demo
from orchestrator.config import Settings
from tests.e2e.conftest import ROOT


def test_demo_runs_the_folder_and_prints_the_sla_table(
    ray_cluster: object, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    shutil.copy(ROOT / "examples" / "interactive-mlp.yaml", folder)
    settings = Settings(
        redis_url=redis_url,
        ray_address=getattr(ray_cluster, "address", None),
        data_dir=tmp_path / "data",
        namespace=namespace,
        scheduler_interval_s=0.2,
    )
    out = io.StringIO()
    ok = run_demo(settings, folder, Console(file=out, width=200), timeout_s=300)
    text = out.getvalue()
    assert ok, text
    assert "virtual (CPU-backed)" in text
    assert "demo: measured against each job's SLA" in text
    assert "p95 <= 100 ms" in text and "finished" in text
    # tuned in front of the user, its global batch kept, run with the chosen config
    assert "tuning: feasible" in text and "chosen config:" in text
    assert "its global batch (16) is kept" in text
    assert "orch list -o wide" in text  # the next commands
