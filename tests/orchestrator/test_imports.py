"""Heavy imports stay lazy: the CLI's help and the policies never import torch or Ray."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "ray", "optuna")


def _loaded_after(code: str) -> set[str]:
    probe = (
        f"{code}\nimport sys\nprint('LOADED:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("LOADED:")]
    return {m for m in line.removeprefix("LOADED:").split(",") if m}


def test_orch_help_imports_no_torch_or_ray() -> None:
    code = (
        "import sys\nfrom orchestrator.cli import app\n"
        "try:\n    app(['--help'], prog_name='orch')\nexcept SystemExit:\n    pass"
    )
    assert _loaded_after(code) == set()


def test_the_cli_loads_no_client_library_until_a_command_runs() -> None:
    # `orch --version` and `--help` start in typer and rich alone: the store's redis-py, the
    # models' pydantic, YAML and httpx load inside the command that needs them
    probe = (
        "import sys\nfrom orchestrator.cli import app\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'redis', 'pydantic', 'yaml', 'httpx', 'fastapi', 'numpy'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_policies_import_nothing_heavy_nor_the_orchestrator() -> None:
    loaded = _loaded_after("import policies")
    assert loaded == set()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import policies, sys; print([m for m in sys.modules "
            "if m.split('.')[0] in ('orchestrator', 'workers', 'redis')])",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"


def test_spec_validation_imports_no_torch() -> None:
    assert _loaded_after("import orchestrator.spec") == set()
