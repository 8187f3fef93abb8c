"""`orch load SERVICE`: the command end to end, in the light client (a fresh interpreter with the
server extra's packages hidden) against a real local server that keeps the service endpoint's
contract; and each mistake in its flags, or direct mode, refused in one line with exit 2."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import cli
from orchestrator.cli.install import SERVER_MODULES
from tests.orchestrator.service_stub import JOB_ID, TOKEN, ServiceStub, serving

ROOT = Path(__file__).resolve().parents[2]
# `orch` as the light install runs it: importing a package of the server extra fails
LIGHT_ORCH = (
    "import sys\n"
    f"sys.modules.update(dict.fromkeys({sorted(SERVER_MODULES)!r}))\n"
    "from orchestrator.cli import main\n"
    "sys.argv = ['orch', *sys.argv[1:]]\n"
    "main()\n"
)


def _light(stub: ServiceStub, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_API", "ORCH_TOKEN"))}
    env |= {"ORCH_API_URL": stub.url, "ORCH_TOKEN": TOKEN, "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, "-c", LIGHT_ORCH, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_orch_load_runs_in_the_light_client_and_reports(tmp_path: Path) -> None:
    with serving(script=("ok", "ok", "ok", "503")) as stub:
        done = _light(stub, "load", "scorer", "--rate", "100", "--duration", "1", "-o", "json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["service"] == JOB_ID  # the name, resolved by the API
        assert set(stub.paths) == {f"/v1/services/{JOB_ID}/infer"}
        assert sum(report["statuses"].values()) == report["requests"] == stub.count > 0
        assert report["statuses"]["503"] == stub.count // 4
        assert report["seed"] == 0 and report["connections"] == 100
        assert set(report["latency_ms"]) == {"p50", "p95", "p99", "max"}
        assert report["offered_rps"] == pytest.approx(report["requests"] / 1.0)

        table = _light(stub, "load", JOB_ID, "--trace", _trace(tmp_path, "0 0.1 0.2\n0.3\n"))
        assert table.returncode == 0, table.stderr
        assert f"load on {JOB_ID}: 4 requests over 0.3 s" in table.stdout
        for row in ("offered", "achieved", "answers", "latency (200s)", "sent late by"):
            assert row in table.stdout

        unknown = _light(stub, "load", "nobody", "--rate", "1", "--duration", "1")
        assert unknown.returncode == 2 and "HTTP 404" in unknown.stderr
        assert "Traceback" not in unknown.stderr


def test_a_service_with_no_ready_replica_is_loaded_and_says_so() -> None:
    with serving(ready_replicas=0, advertised={"shape": [3], "dtype": "float32"}) as stub:
        done = _light(stub, "load", JOB_ID, "--rate", "20", "--duration", "0.5", "-o", "yaml")
    assert done.returncode == 0, done.stderr
    assert f"{JOB_ID} has no ready replica" in done.stderr
    assert "statuses:" in done.stdout


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


def _trace(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trace.txt"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "--rate or --trace: give one"),
        (["--rate", "5", "--trace", "{trace}"], "--rate and --trace: give one of them, not both"),
        (["--rate", "0", "--duration", "1"], "--rate must be a number > 0, got 0"),
        (["--rate", "nan", "--duration", "1"], "--rate must be a number > 0, got nan"),
        (["--rate", "5"], "--duration is needed with --rate"),
        (["--rate", "5", "--duration", "-1"], "--duration must be a number > 0, got -1"),
        (
            ["--rate", "1000", "--duration", "1001"],
            "--rate x --duration is 1,001,000 requests; at most 1,000,000 in one run",
        ),
        (["--trace", "{trace}", "--timeout", "0"], "--timeout must be a number > 0, got 0"),
        (["--trace", "{trace}", "--connections", "0"], "--connections must be from 1 to 10,000"),
        (["--trace", "{missing}"], "--trace cannot read '{missing}': No such file or directory"),
        (
            ["--trace", "{bad}"],
            "--trace {bad}: trace line 2: expected an arrival time in seconds, got 'soon'",
        ),
        (["--trace", "{zeros}", "--duration", "5"], "--trace {zeros}: every arrival of the trace"),
    ],
)
def test_a_bad_flag_is_refused_in_one_line_naming_it(
    args: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_API_URL", "http://127.0.0.1:9")  # never reached: flags come first
    monkeypatch.setenv("ORCH_TOKEN", TOKEN)
    files = {
        "trace": _trace(tmp_path, "0 1\n"),
        "missing": str(tmp_path / "absent.txt"),
        "bad": str(tmp_path / "bad.txt"),
        "zeros": str(tmp_path / "zeros.txt"),
    }
    Path(files["bad"]).write_text("0\n1 soon\n")
    Path(files["zeros"]).write_text("2\n2\n")
    code, err = _run("load", JOB_ID, *(a.format(**files) for a in args))
    assert code == 2, err
    assert says.format(**files) in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_direct_mode_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ORCH_API_URL", "ORCH_TOKEN", "ORCH_CONTEXT"):
        monkeypatch.delenv(var, raising=False)
    code, err = _run("load", JOB_ID, "--rate", "5", "--duration", "1")
    assert code == 2, err
    assert "orch load needs the API (ORCH_API_URL and ORCH_TOKEN, or `orch login`)" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
