"""The light client: the package installed without its server extra, alone in a fresh virtual
environment, submits and waits through a real API server (what a team member installs on a
laptop: no torch, no Ray). Its size and start time are printed, never asserted.

What the server commands say there is also checked in-process, with the server extra's
packages hidden (as the light install lacks them): quicker than a fresh install, and the same
code paths (``orchestrator.cli.main``'s check and its handler of a missing module)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.api.server import ApiServer
from orchestrator.cli.install import SERVER_MODULES
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
    # The wheel is built by this interpreter's setuptools (the build backend pyproject names)
    # and installed, with its dependencies, by this interpreter's pip into a venv without one:
    # the same install, without bootstrapping pip into the venv and a build environment
    # (5 s and 10 s of the test's 23 s on the test machine)
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--quiet", "--no-build-isolation", "--no-deps", "-w", str(dist), str(src)],
        check=True,
        timeout=300,
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (wheel,) = dist.glob("*.whl")
    python = venv / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--quiet", str(wheel)], check=True, timeout=900
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
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    began = time.perf_counter()
    subprocess.run([str(bin_dir / "orch"), "--version"], check=True, capture_output=True)
    took = time.perf_counter() - began
    print(f"light client: {size / 1e6:.1f} MB, orch --version {took:.2f} s")

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

    for command in ("up", "demo"):
        refused = orch(command)
        assert refused.returncode == 2, refused.stderr
        assert "pip install 'sla-orchestrator[server]'" in refused.stderr
        assert "Traceback" not in refused.stderr


# ---- the server's commands in the light install, simulated -------------------------------------


@pytest.fixture
def light(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The server extra's packages hidden from imports and lookups (a ``None`` in
    ``sys.modules``: ``import ray`` raises ModuleNotFoundError, ``find_spec`` finds nothing);
    the embedded defaults, data under ``tmp_path/data``; the working directory a folder with
    no examples (a laptop, not a checkout). Returns the data directory."""
    for module in SERVER_MODULES:
        monkeypatch.setitem(sys.modules, module, None)
    data = tmp_path / "data"
    for var in ("REDIS_URL", "RAY_ADDRESS", "ORCH_API_URL", "ORCH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ORCH_DATA_DIR", str(data))
    monkeypatch.chdir(tmp_path)
    yield data
    if (data / "redis").exists():  # one was started (what must not be): stop it
        from orchestrator.store.server import EmbeddedRedis

        monkeypatch.undo()
        EmbeddedRedis(data).stop()


def _run(*args: str) -> tuple[int, str]:
    """``orch ARGS`` in-process, as the installed script runs it: (exit code, stderr)."""
    err = io.StringIO()
    argv, sys.argv = sys.argv, ["orch", *args]
    code: object = 0
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as ended:
        code = ended.code
    finally:
        sys.argv = argv
    return (code if isinstance(code, int) else 1), err.getvalue()


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["up"], "`orch up` needs the server install (missing "),
        (["demo"], "`orch demo` needs the server install (missing "),
        (["serve"], "`orch serve` needs the server install (missing "),
        (["sim", "trace.csv"], "`orch sim` needs the server install (missing "),
    ],
)
def test_a_server_command_in_the_light_install_refuses_in_one_line_and_starts_nothing(
    light: Path, command: list[str], says: str
) -> None:
    code, err = _run(*command)
    assert code == 2, err
    assert says in err and "pip install 'sla-orchestrator[server]'" in err  # not eaten as markup
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (light / "redis").exists()  # no Redis started (and left running)
    if command == ["demo"]:
        assert "a checkout's examples/ folder" in err


def test_the_demo_outside_a_checkout_says_where_its_examples_are(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # the server install, but no examples/ here
    monkeypatch.setenv("ORCH_DATA_DIR", str(tmp_path / "data"))
    code, err = _run("demo")
    assert code == 2, err
    assert "--examples examples holds no job files" in err
    assert "a checkout's examples/ folder" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "data" / "redis").exists()
