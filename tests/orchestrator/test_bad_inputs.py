"""The bad-input corpus: every file in ``bad_inputs/`` (and ``bad_jobs/``) given to the real CLI.

Each case runs ``orch``'s entry point in-process (``orchestrator.cli.main``, as the installed
script does, with a real Redis namespace), and must exit 2 with the expected problem on stderr,
no traceback, and nothing written to the store. ``bad_inputs/EXPECTED.txt`` holds, per file, a
piece of the message; the folder says which command reads it: ``jobs/`` ``orch submit``,
``teams/`` ``orch teams apply``, ``traces/`` ``orch sim``, ``nodes/`` ``orch sim --nodes``.
Cases that cannot live in git (a FIFO, ``/dev/zero``, files over the size limit) are made here.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import typer

from orchestrator import cli
from orchestrator.inputs import MAX_FILE_BYTES, MAX_NODES
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.teams import parse_teams

HERE = Path(__file__).parent
CORPUS = HERE / "bad_inputs"
OLD_CORPUS = HERE / "bad_jobs"
EXPECTED = dict(
    line.split(": ", 1) for line in (CORPUS / "EXPECTED.txt").read_text().splitlines() if line
)
GOOD_JOB = HERE.parents[1] / "examples" / "interactive-mlp.yaml"
GOOD_TEAMS = "teams:\n  - {name: vision, weight: 2, guaranteed_gpus: 1, max_gpus: 2}\n"
GOOD_TRACE = "name,submit_time,duration\na,0,60\n"

Run = Callable[..., tuple[int, str]]
State = Callable[[], dict[str, bytes | None]]


def _args(kind: str, path: Path, scratch: Path) -> list[str]:
    out = ["--out", str(scratch / "sim-out")]
    trace = scratch / "good.csv"
    return {
        "jobs": ["submit", str(path)],
        "teams": ["teams", "apply", str(path)],
        "traces": ["sim", str(path), *out],
        "nodes": ["sim", str(trace), "--nodes", str(path), *out],
    }[kind]


@pytest.fixture(scope="module")
def seeded(redis_url: str) -> Iterator[JobStore]:
    """A namespace holding a team config and a job, so that a bad input has something to
    overwrite; deleted at the end."""
    store = JobStore.from_url(redis_url, f"test-bad-{uuid.uuid4().hex[:8]}")
    store.put_teams(parse_teams({"teams": [{"name": "vision", "guaranteed_gpus": 1}]}))
    store.submit(parse_spec({**_good_job(), "team": "vision"}))
    yield store
    store.delete_namespace()
    store.client.close()


def _good_job() -> dict[str, object]:
    return {
        "name": "kept",
        "team": "t",
        "class": "interactive",
        "workload": "mlp",
        "sla": {"latency": {"max_ms": 100}},
        "run": {"steps": 5},
    }


@pytest.fixture(scope="module")
def state(seeded: JobStore, redis_url: str) -> Iterator[Callable[[], dict[str, bytes | None]]]:
    """Every key of the namespace with its serialized value (``DUMP``, bytes: a client that
    does not decode)."""
    with redis.Redis.from_url(redis_url) as raw:

        def read() -> dict[str, bytes | None]:
            keys = sorted(raw.scan_iter(match=seeded.keys.pattern))
            return {key.decode(): raw.dump(key) for key in keys}

        yield read


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for the good trace and the cases made at run time."""
    folder = tmp_path_factory.mktemp("bad-inputs")
    (folder / "good.csv").write_text(GOOD_TRACE)
    return folder


@pytest.fixture(scope="module")
def run(seeded: JobStore, scratch: Path, redis_url: str) -> Iterator[Run]:
    """Run ``orch ARGS`` in-process, as the installed script does; returns (exit code, what it
    printed on stderr and stdout)."""
    env = {
        "REDIS_URL": redis_url,
        "ORCH_NAMESPACE": seeded.namespace,
        "ORCH_DATA_DIR": str(scratch / "data"),
    }
    saved = {k: os.environ.get(k) for k in [*env, "ORCH_API_URL", "ORCH_TOKEN"]}
    # `app()` builds its click command on each call (half the time of a case here): build it
    # once; it is what `app()` runs.
    app = cli.app
    cli.app = typer.main.get_command(app)  # type: ignore[assignment]
    os.environ.update(env)
    for var in ("ORCH_API_URL", "ORCH_TOKEN"):
        os.environ.pop(var, None)

    def invoke(*args: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        argv, sys.argv = sys.argv, ["orch", *args]
        code: object = 0
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                cli.main()
        except SystemExit as ended:
            code = ended.code
        finally:
            sys.argv = argv
        return (code if isinstance(code, int) else 1), err.getvalue() + out.getvalue()

    yield invoke
    cli.app = app
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _check(run: Run, state: State, args: list[str], expected: str, name: str | None = None) -> None:
    before = state()
    code, text = run(*args)
    flat = " ".join(text.split())
    assert code == 2, (args, text)
    assert "Traceback" not in text
    assert " ".join(expected.split()) in flat, (expected, text)
    if name is not None:
        assert name in flat
    assert state() == before, "a refused input changed the store"


CASES = sorted(EXPECTED)


def test_the_corpus_and_its_expectations_agree() -> None:
    files = sorted(
        str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file() and p.parent != CORPUS
    )
    assert files == CASES
    assert len(CASES) + len(list(OLD_CORPUS.iterdir())) >= 100


@pytest.mark.parametrize("case", CASES)
def test_a_bad_input_exits_2_naming_the_problem_and_writes_nothing(
    case: str, run: Run, state: State, scratch: Path
) -> None:
    path = CORPUS / case
    _check(run, state, _args(path.parent.name, path, scratch), EXPECTED[case], path.name)


@pytest.mark.parametrize("path", sorted(OLD_CORPUS.iterdir()), ids=lambda p: p.name)
def test_the_old_bad_jobs_too(path: Path, run: Run, state: State) -> None:
    _check(run, state, ["submit", str(path)], "problem", path.name)


# ---- cases made at run time --------------------------------------------------------------------


def _too_large(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("teams:\n" + "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    return path


def _fifo(folder: Path, name: str) -> Path:
    path = folder / name
    os.mkfifo(path)
    return path


def _dev_zero(folder: Path, name: str) -> Path:
    path = folder / name
    path.symlink_to("/dev/zero")
    return path


def _directory(folder: Path, name: str) -> Path:
    path = folder / name
    path.mkdir()
    return path


def _deep_json(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text('{"name": "j", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    return path


def _many_values(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("name: j\nargs: [" + ",".join(["1"] * MAX_NODES) + "]\n")
    return path


def _long_name(folder: Path, name: str) -> Path:
    path = folder / name
    job = GOOD_JOB.read_text().replace("name: mlp-eval", "name: " + "a" * 100_000)
    path.write_text(job)
    return path


def _huge_args(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text(
        "name: j\nteam: t\nclass: interactive\nsla: {latency: {max_ms: 100}}\n"
        f"run: {{steps: 5}}\nworkload: {{name: mlp, args: {{text: '{'x' * 70_000}'}}}}\n"
    )
    return path


def _wide_csv(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_text("name,submit_time,duration\n" + "a" * 200_000 + ",0,60\n")
    return path


MADE: list[tuple[str, Callable[[Path, str], Path], str, str]] = [
    ("jobs", _too_large, "big.yaml", f"larger than {MAX_FILE_BYTES:,} bytes"),
    ("teams", _too_large, "big.yaml", f"larger than {MAX_FILE_BYTES:,} bytes"),
    ("jobs", _fifo, "pipe.yaml", "not a regular file (a FIFO (named pipe))"),
    ("teams", _fifo, "pipe.yaml", "not a regular file (a FIFO (named pipe))"),
    ("traces", _fifo, "pipe.csv", "not a regular file (a FIFO (named pipe))"),
    ("nodes", _fifo, "pipe.yaml", "not a regular file (a FIFO (named pipe))"),
    ("jobs", _dev_zero, "zero.yaml", "not a regular file (a character device)"),
    ("teams", _dev_zero, "zero.yaml", "not a regular file (a character device)"),
    ("traces", _dev_zero, "zero.csv", "not a regular file (a character device)"),
    ("jobs", _directory, "folder.yaml", "not a regular file (a directory)"),
    ("teams", _directory, "folder.yaml", "not a regular file (a directory)"),
    ("traces", _directory, "folder.csv", "not a regular file (a directory)"),
    ("jobs", _deep_json, "deep.json", "nested more than 32 levels deep"),
    ("jobs", _many_values, "many.yaml", f"more than {MAX_NODES:,} values in one file"),
    ("jobs", _long_name, "long-name.yaml", "name must be 1-63 lowercase letters"),
    ("jobs", _huge_args, "huge-args.yaml", "65,536 allowed"),
    ("traces", _wide_csv, "wide.csv", "not a valid CSV trace: field larger than field limit"),
    ("jobs", lambda folder, name: folder / name, "missing.yaml", "file not found"),
    ("teams", lambda folder, name: folder / name, "missing.yaml", "file not found"),
    ("traces", lambda folder, name: folder / name, "missing.csv", "file not found"),
]


@pytest.mark.parametrize(("kind", "make", "name", "expected"), MADE, ids=lambda x: str(x)[:20])
def test_inputs_that_are_made_at_run_time(
    kind: str,
    make: Callable[[Path, str], Path],
    name: str,
    expected: str,
    run: Run,
    state: State,
    tmp_path: Path,
    scratch: Path,
) -> None:
    path = make(tmp_path, name)
    _check(run, state, _args(kind, path, scratch), expected, name)


def test_the_good_files_pass_the_same_way(run: Run, seeded: JobStore, tmp_path: Path) -> None:
    # The harness is not refusing everything: the good inputs it builds on are accepted.
    teams = tmp_path / "teams.yaml"
    teams.write_text(GOOD_TEAMS)
    code, text = run("teams", "apply", str(teams))
    assert code == 0, text
    code, text = run("submit", str(GOOD_JOB))
    assert code == 0, text
    assert len(seeded.list()) == 2
