"""The light client: the package installed without its server extra, alone in a fresh virtual
environment, submits and waits through a real API server (what a team member installs on a
laptop: no torch, no Ray). Its size and start time are printed, never asserted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.api.server import ApiServer
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from tests.api.conftest import spec_data

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "ray", "optuna", "fastapi", "uvicorn", "numpy", "scipy")


def _light_install(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src)
    for package in ("orchestrator", "workers", "policies"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(src)],
        check=True,
        timeout=900,
    )
    return venv / "bin"


@pytest.mark.slow
def test_the_light_client_alone_submits_and_waits_through_the_api(
    api: ApiServer, store: JobStore, tokens: dict[str, str], tmp_path: Path
) -> None:
    bin_dir = _light_install(tmp_path)
    found = subprocess.run(
        [
            str(bin_dir / "python"),
            "-c",
            "import importlib.util as u, json; "
            f"print(json.dumps([m for m in {HEAVY!r} if u.find_spec(m)]))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(found.stdout) == []  # none of the server's packages came with it
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    tools = ("pip", "setuptools", "pkg_resources", "_distutils_hack")  # the venv's own
    size = sum(
        f.stat().st_size
        for f in site.rglob("*")
        if f.is_file() and not f.relative_to(site).parts[0].startswith(tools)
    )
    began = time.perf_counter()
    subprocess.run([str(bin_dir / "orch"), "--version"], check=True, capture_output=True)
    took = time.perf_counter() - began
    print(f"light client: {size / 1e6:.1f} MB besides pip, orch --version {took:.2f} s")

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "REDIS_"))},
        "ORCH_API_URL": api.url,
        "ORCH_TOKEN": tokens["member"],
    }

    def orch(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir / "orch"), *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    submitted = orch("submit", "-", "-o", "json", stdin=json.dumps(spec_data("vision")))
    assert submitted.returncode == 0, submitted.stderr
    (job_id,) = json.loads(submitted.stdout)["ids"]
    assert json.loads(orch("whoami", "-o", "json").stdout)["team"] == "vision"
    for state in (JobState.PLACED, JobState.RUNNING, JobState.FINISHED):  # as the scheduler
        store.transition(job_id, state)
    waited = orch("wait", job_id, "--timeout", "60", "-o", "json")
    assert waited.returncode == 0, waited.stderr
    assert [j["state"] for j in json.loads(waited.stdout)] == ["finished"]

    up = orch("up")
    assert up.returncode == 1 and "needs the server install" in up.stderr, up.stderr
    assert "Traceback" not in up.stderr
