"""Output capture: the tee (``workers.logs``) and a worker actor whose workload prints, warns
and fails, its lines stored per rank through the orchestrator's real sink and Redis."""

from __future__ import annotations

import functools
import json
import pickle
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

import workers
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore, LogSink
from orchestrator.store.states import JobState
from orchestrator.teams import TeamConfig, TeamSpec
from tests.workers.helpers import tiny
from workers.actor import WorkerActor
from workers.errors import WorkerError, failure_line
from workers.logs import MAX_LINE_CHARS, MAX_PENDING, LogLine, OutputCapture

WORKLOAD = "tests.workers.printing_workload:build"


class Lines:
    """A sink that keeps what it is given (and may hold the sender until released)."""

    def __init__(self) -> None:
        self.lines: list[LogLine] = []
        self.calls = 0
        self.called = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def __call__(self, batch: Sequence[LogLine]) -> None:
        self.calls += 1
        self.called.set()
        self.release.wait()
        self.lines.extend(batch)


def test_lines_reach_the_sink_and_the_original_streams(capsys: pytest.CaptureFixture[str]) -> None:
    sink = Lines()
    with OutputCapture(sink):
        print("hello")
        print("to err", file=sys.stderr)
        sys.stdout.write("two\nlines\npartial")
    assert sink.lines == [
        ("out", "hello"),
        ("err", "to err"),
        ("out", "two"),
        ("out", "lines"),
        ("out", "partial"),  # the last line, without its newline
    ]
    seen = capsys.readouterr()
    assert seen.out == "hello\ntwo\nlines\npartial" and seen.err == "to err\n"
    assert sink.calls == 1  # batched: not one call per line


def test_warnings_and_a_traceback_are_captured() -> None:
    # In a fresh interpreter: pytest records warnings itself instead of printing them.
    code = """
import json, sys, warnings
from workers.logs import OutputCapture
lines = []
try:
    with OutputCapture(lines.extend):
        warnings.warn("careful", UserWarning, stacklevel=1)
        try:
            raise ValueError("bad value")
        except ValueError:
            import traceback; traceback.print_exc()
finally:
    sys.__stdout__.write(json.dumps(lines))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    lines = [tuple(x) for x in json.loads(done.stdout)]
    assert all(stream == "err" for stream, _ in lines)
    text = [line for _, line in lines]
    assert any("UserWarning: careful" in line for line in text)
    assert "Traceback (most recent call last):" in text and text[-1] == "ValueError: bad value"
    assert "UserWarning: careful" in done.stderr  # still written to the real stderr


def test_streams_are_restored_and_a_redraw_keeps_its_last_state() -> None:
    before = sys.stdout, sys.stderr
    sink = Lines()
    with OutputCapture(sink):
        sys.stderr.write("10%\r50%\r100%\n")
        print("x" * (MAX_LINE_CHARS * 3))
    assert (sys.stdout, sys.stderr) == before
    assert sink.lines[0] == ("err", "100%")
    long = sink.lines[1][1]
    assert len(long) == MAX_LINE_CHARS and long.endswith("[cut]")


def test_a_slow_sink_bounds_what_waits_and_says_what_was_dropped() -> None:
    sink = Lines()
    sink.release.clear()
    with OutputCapture(sink, flush_every_s=0.01):
        print("first")
        assert sink.called.wait(5)  # the sender is now held inside the sink
        for i in range(MAX_PENDING + 5):
            print(i)
        sink.release.set()
    assert len(sink.lines) == 1 + MAX_PENDING + 1
    assert sink.lines[-1] == ("err", "[orch] 5 lines dropped")


@pytest.mark.filterwarnings("ignore:a warning from the workload")
def test_the_actor_stores_a_ranks_prints_and_traceback(redis_url: str, store: JobStore) -> None:
    store.put_teams(TeamConfig(teams=[TeamSpec(name="t")], entry_modules=["tests"]))
    job_id = store.submit_many([_spec()])[0]
    factory = functools.partial(LogSink, redis_url, store.namespace, job_id)
    factory = pickle.loads(pickle.dumps(factory))  # as Ray ships it to a worker
    ok = tiny(WORKLOAD, steps=2).to_dict()
    WorkerActor(job_id, 0, 1, log_sink_factory=factory).run(ok, None, None)
    lines = store.logs.tail(job_id)
    assert {e.rank for e in lines} == {0}
    out = [e.line for e in lines if e.stream == "out"]
    err = [e.line for e in lines if e.stream == "err"]
    assert out[0] == "building with seed 0" and "batch from sample 0" in out
    assert "to stderr, mid-step" in err

    broken = tiny(WORKLOAD, workload_args={"fail_at": 4}, steps=5).to_dict()
    with pytest.raises(RuntimeError, match="broke at sample"):
        WorkerActor(job_id, 0, 1, log_sink_factory=factory).run(broken, None, None)
    err = [e.line for e in store.logs.tail(job_id) if e.stream == "err"]
    # the team's traceback: its own code's frames, then the one line that says why
    start = err.index("Traceback (most recent call last):")
    frames = [line for line in err[start:] if line.startswith("  File ")]
    assert frames and all("printing_workload.py" in line for line in frames), frames
    assert err[-2:] == [
        "RuntimeError: the workload broke at sample 4",
        "[orch] the run failed: RuntimeError: the workload broke at sample 4",
    ]
    assert not _server_paths(err)
    assert store.get(job_id).state is JobState.QUEUED  # output is not state


def _server_paths(lines: list[str]) -> list[str]:
    """The lines naming a file of the server's own code: the harness and worker (this
    checkout's ``workers`` package) or Python's install."""
    roots = {str(Path(workers.__file__).parent) + "/", sys.prefix, sys.base_prefix}
    return [line for line in lines if any(root in line for root in roots)]


def test_a_failed_runs_log_has_no_worker_traceback(redis_url: str, store: JobStore) -> None:
    """A built-in workload fails inside the harness: the log says why in one line, and holds
    no traceback of the worker's or the harness's (their frames name the server's paths)."""
    store.put_teams(TeamConfig(teams=[TeamSpec(name="t")], entry_modules=["tests"]))
    job_id = store.submit_many([_spec()])[0]
    factory = functools.partial(LogSink, redis_url, store.namespace, job_id)
    broken = tiny("mlp", workload_args={"no_such_arg": 1}, steps=2).to_dict()
    with pytest.raises(WorkerError) as failed:
        WorkerActor(job_id, 0, 1, log_sink_factory=factory).run(broken, None, None)
    lines = [e.line for e in store.logs.tail(job_id)]
    assert lines == [f"[orch] the run failed: {failure_line(failed.value)}"]
    assert "no_such_arg" in lines[0] and not _server_paths(lines)


def test_without_a_log_sink_nothing_is_captured() -> None:
    before = sys.stdout
    WorkerActor("job-x", 0, 1).run(tiny("mlp", steps=1).to_dict(), None, None)
    assert sys.stdout is before


def _spec() -> JobSpec:
    return parse_spec(
        {
            "name": "talker",
            "team": "t",
            "class": "bulk",
            "workload": WORKLOAD,
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": 1},
            "run": {"steps": 2, "warmup_steps": 1},
        }
    )
