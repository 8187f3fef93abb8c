"""`orch demo` end to end on a small folder of jobs (the real examples run in test_lifecycle)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from orchestrator.cli.demo import run_demo
from orchestrator.config import Settings
from tests.e2e.conftest import ROOT


def _busy() -> list[subprocess.Popen[bytes]]:
    """A process spinning a core: the demo runs on a busy machine. One, not two: in the suite
    the other test worker (``-n 2``) keeps the second core busy already, and two spinners would
    halve its tests' speed (by hand, the full `orch demo` at load 5-9, other sessions' tests
    and benchmarks beside it, ran every job and met every SLA, exit 0)."""
    spin = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", spin])]


def test_demo_runs_the_folder_and_prints_the_sla_table(
    ray_cluster: object, redis_url: str, namespace: str, tmp_path: Path
) -> None:
    """Beside a busy process (issue 39: `make demo` on a busy laptop must not fail): every job
    runs, the table prints, the SLAs have the margin CPU slots need."""
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
    busy = _busy()
    try:
        ok = run_demo(settings, folder, Console(file=out, width=200), timeout_s=300)
    finally:
        for p in busy:
            p.kill()
            p.wait(10)
    text = out.getvalue()
    assert ok, text
    assert "virtual (CPU-backed)" in text
    assert "demo: measured against each job's SLA" in text
    assert "p95 <= 100 ms" in text and "finished" in text
    # tuned in front of the user, its global batch kept, run with the chosen config
    assert "tuning: feasible" in text and "chosen config:" in text
    assert "its global batch (16) is kept" in text
    assert "orch list -o wide" in text  # the next commands
