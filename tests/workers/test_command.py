"""Command mode on the worker (no Ray): the example script runs as the job's own user,
reports steps the harness's way, stops when asked and resumes to the same final loss; a
command not found, a failing script and a silent one each end with a clear error."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.workdir import pack
from workers.command import CHECKPOINT_DIR_ENV, run_command
from workers.errors import CommandError
from workers.result import REPORT_KEYS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "own_script"
SCRIPTS = Path(__file__).parent / "command_dir"


# This process's job id: the sandbox gives a job's ranks on a host one uid and returns the run
# folder to the worker when the job's last rank there ends, so two test processes (xdist
# workers) must not run "the same job" at once.
JOB = f"own-{uuid.uuid4().hex[:6]}"


def source(cfg: dict[str, Any], folder: Path) -> dict[str, bytes]:
    """``folder`` as the job's working directory: its digest in ``cfg``, its archive (the
    keyword ``run_command`` takes)."""
    packed = pack(folder)
    cfg["command"]["working_dir"] = packed.digest
    return {"archive": packed.data}


def config(argv: list[str], steps: int = 60, **command: Any) -> dict[str, Any]:
    return {
        "workload": " ".join(argv),
        "workload_args": command.pop("args", {}),
        "micro_batch": 16,
        "grad_accum": 2,
        "precision": "fp32",
        "steps": steps,
        "duration_s": None,
        "warmup_steps": 2,
        "checkpoint_every": 10,
        "seed": 3,
        "command": {"argv": argv, "settings": {"hidden": 24, "lr": 0.01}, **command},
    }


@pytest.fixture
def job_root() -> Iterator[Path]:
    """The worker's checkpoint root (each job's folder in it is lent to the job's uid)."""
    with tempfile.TemporaryDirectory(prefix="orch-cmd-test-") as folder:
        yield Path(folder)


def run(
    cfg: dict[str, Any],
    ckpt: Path | None,
    folder: Path = EXAMPLE,
    reports: list[dict[str, Any]] | None = None,
    stop: threading.Event | None = None,
    first_report_s: float | None = None,
) -> dict[str, Any]:
    if first_report_s is not None:
        cfg["command"]["first_report_s"] = first_report_s
    return run_command(
        cfg,
        job_id=JOB,
        rank=0,
        world_size=1,
        init_method=None,
        checkpoint_dir=str(ckpt) if ckpt else None,
        report=reports.append if reports is not None else None,
        report_every_s=0.0,
        should_stop=(stop or threading.Event()).is_set,
        fence=lambda: True,
        num_threads=1,
        **source(cfg, folder),
    )


def test_the_example_runs_and_reports_as_the_harness_does(job_root: Path) -> None:
    reports: list[dict[str, Any]] = []
    result = run(config(["python", "train.py"]), job_root / "own", reports=reports)
    assert result["status"] == "finished" and result["steps_done"] == 60
    assert result["measured_steps"] == 58  # the 2 warm-up steps left out
    assert result["samples_per_s"] > 0 and result["p95_ms"] >= result["p50_ms"] > 0
    assert result["global_batch"] == 32 and math.isfinite(result["loss"])
    final = reports[-1]
    assert final["status"] == "finished" and final["step"] == 60
    assert set(REPORT_KEYS) <= set(final) and final["window_steps"] > 0
    assert (job_root / "own" / "model.pt").is_file()  # its own checkpoint, in its folder


def test_a_stopped_run_resumes_to_the_loss_of_an_uninterrupted_one(job_root: Path) -> None:
    cfg = config(["python", "train.py"], steps=150, args={"pace_s": 0.01})
    whole = run(cfg, job_root / "whole")

    stop = threading.Event()
    reports: list[dict[str, Any]] = []

    def watch(report: dict[str, Any]) -> None:
        reports.append(report)
        if report["step"] >= 25:
            stop.set()

    first = run_command(
        cfg,
        job_id=JOB,
        rank=0,
        world_size=1,
        init_method=None,
        checkpoint_dir=str(job_root / "cut"),
        report=watch,
        report_every_s=0.0,
        should_stop=stop.is_set,
        fence=lambda: True,
        num_threads=1,
        **source(cfg, EXAMPLE),
    )
    assert first["status"] == "stopped" and 25 <= first["steps_done"] < 150
    resumed = run(cfg, job_root / "cut")
    assert resumed["status"] == "finished" and resumed["steps_done"] == 150
    assert resumed["resumed_from_step"] == first["steps_done"]
    # the measurements continue those of the first run (its warm-up and this one's left out)
    assert resumed["measured_steps"] == 150 - 2 - 2
    assert math.isclose(resumed["loss"], whole["loss"], rel_tol=1e-6), (resumed, whole)


def test_a_command_not_found_says_so(job_root: Path) -> None:
    with pytest.raises(CommandError, match=r"command not found: \./missing\.sh"):
        run(config(["./missing.sh"]), job_root / "a", SCRIPTS)
    # a program of the folder that runs one that does not exist (shell exit code 127)
    with pytest.raises(CommandError, match=r"command not found: \./run\.sh.*no-such-program"):
        run(config(["./run.sh"]), job_root / "b", SCRIPTS)


def test_a_failing_script_ends_with_its_code_and_last_output(job_root: Path) -> None:
    with pytest.raises(
        CommandError, match=r"exited with code 1: python fail\.py; last output: loading the data"
    ) as err:
        run(config(["python", "fail.py"]), job_root / "c", SCRIPTS)
    assert "disk full: cannot write the shard" in str(err.value)


def test_a_script_that_never_reports_is_ended_with_a_clear_error(job_root: Path) -> None:
    # 5 s, not 1: under the full suite's load the script's interpreter took over a second to
    # print its first line, and the error then had no output to quote
    with pytest.raises(CommandError, match=r"no step report within 5 s .*last output: thinking"):
        run(config(["python", "silent.py"]), job_root / "d", SCRIPTS, first_report_s=5)


@pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox uid needs a root worker")
def test_a_hostile_script_runs_as_its_own_user_and_reads_nothing_else(job_root: Path) -> None:
    secrets = Path(tempfile.mkdtemp(prefix="orch-data-"))  # 0700 root: like the data dir
    (secrets / "redis.password").write_text("hunter2")
    (secrets / "redis.password").chmod(stat.S_IRUSR)
    other = job_root / "other-job"  # another job's checkpoints: the worker's, 0700
    other.mkdir(mode=0o700)
    (other / "model.pt").write_bytes(b"weights")
    probes = {
        "password_file": str(secrets / "redis.password"),
        "data_dir": str(secrets),
        "other_checkpoint": str(other / "model.pt"),
        "worker_home": str(Path.home()),  # where Ray keeps its token (~/.ray)
        "parent_environ": f"/proc/{os.getpid()}/environ",
    }
    os.environ["REDIS_URL"] = "redis://:hunter2@127.0.0.1:1/0"  # what a worker may hold
    try:
        result = run(config(["python", "hostile.py", json.dumps(probes)]), job_root / "h", SCRIPTS)
    finally:
        del os.environ["REDIS_URL"]
    assert result["status"] == "finished"
    found = json.loads((job_root / "h" / "found.json").read_text())
    assert found["uid"] != 0
    # nothing of the store, Ray or the orchestrator; the one ORCH_ name a command sees is its
    # own checkpoint folder (workers.command.CHECKPOINT_DIR_ENV: a path of its own, no secret)
    leaked = [k for k in found["env"] if k.startswith(("REDIS", "RAY_", "ORCH_"))]
    assert leaked in ([], [CHECKPOINT_DIR_ENV]), found
    for probe in probes:
        assert found[probe].startswith("refused:PermissionError"), (probe, found[probe])
    assert (job_root / "h").stat().st_uid == os.geteuid()  # back to the worker after the run


def test_a_runs_peak_memory_is_its_own_not_an_earlier_bigger_runs(job_root: Path) -> None:
    """Issue 37: the peak was the largest child the worker ever reaped (a 330 MB trial read
    1,728.7 MB after a 1.5 GB one). Each run reads its own processes' peak: its cgroup's
    where the host gives it a memory controller (as here, as root), else its process tree
    sampled (tests/workers/test_run_memory.py)."""

    def holding(mb: int) -> dict[str, Any]:
        cfg = config(["python", "hold.py"], steps=3)
        cfg["command"]["settings"] = {"mb": mb}
        return cfg

    reports: list[dict[str, Any]] = []
    big = run(holding(400), job_root / "big", SCRIPTS)
    small = run(holding(16), job_root / "small", SCRIPTS, reports=reports)
    assert big["peak_mem_mb"] >= 400
    assert 16 <= small["peak_mem_mb"] < big["peak_mem_mb"] - 300, (small, big)
    assert small["peak_mem_scope"] == reports[-1]["peak_mem_scope"] == "run"
    assert 16 <= reports[-1]["peak_mem_mb"] < big["peak_mem_mb"] - 300


def test_a_script_reading_through_job_loader_reports_its_data_wait(job_root: Path) -> None:
    """loads.py waits 15 ms for each batch through ``job.loader`` (30 ms over the one loader
    worker its ``ctx.dataloader_kwargs`` gives it) and computes 10 ms: the wait is reported
    apart from the step (which it was part of, unknown, before ``job.loader``)."""
    cfg = config(["python", "loads.py"], steps=12)
    cfg["loader"] = {"num_workers": 1, "prefetch_factor": 4, "persistent_workers": True}
    reports: list[dict[str, Any]] = []
    result = run(cfg, job_root / "l", SCRIPTS, reports=reports)
    assert result["status"] == "finished" and result["measured_steps"] == 10
    assert result["dataset"] and result["data_wait_ms"] >= 15 and result["compute_ms"] >= 10
    assert 0 < result["data_wait_share"] < 1
    assert result["p50_ms"] >= 10  # the step without its wait
    final = reports[-1]
    assert final["reads_dataset"] is True and final["data_wait_share"] is not None
    given = json.loads((job_root / "l" / "loader.json").read_text())
    assert given == {
        "num_workers": 1,
        "pin_memory": False,
        "prefetch_factor": 4,
        "persistent_workers": True,
    }


def _two_ranks(cfg: dict[str, Any], ckpt: Path, stop_at: int | None) -> dict[int, Any]:
    from workers.distributed import find_free_port

    results: dict[int, dict[str, Any]] = {}
    stop = threading.Event()
    address = f"tcp://127.0.0.1:{find_free_port()}"

    def rank(r: int) -> None:
        reports: list[dict[str, Any]] = []

        def watch(report: dict[str, Any]) -> None:  # rank 0's: stop both after ``stop_at``
            reports.append(report)
            if stop_at is not None and report["step"] >= stop_at:
                stop.set()

        results[r] = run_command(
            cfg,
            job_id=JOB,
            rank=r,
            world_size=2,
            init_method=address,
            checkpoint_dir=str(ckpt),
            report=watch if r == 0 else None,
            report_every_s=0.0,
            should_stop=stop.is_set,
            fence=lambda: True,
            num_threads=1,
            **source(cfg, EXAMPLE),
        )

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def test_two_ranks_train_as_one_and_resume_together(job_root: Path) -> None:
    """What an elastic resize hands the script: its world size, rank and rank 0's address;
    the example then trains as one rank with the whole batch, and both ranks resume from
    rank 0's checkpoint."""
    one = config(["python", "train.py"], steps=40, args={"pace_s": 0.01})
    alone = run(one, job_root / "alone")
    two = config(["python", "train.py"], steps=40, args={"pace_s": 0.01})
    two["micro_batch"] = one["micro_batch"] // 2  # the same global batch over two ranks
    first = _two_ranks(two, job_root / "pair", stop_at=10)
    assert first[0]["status"] == first[1]["status"] == "stopped"
    cut = first[0]["steps_done"]
    assert 10 <= cut < 40 and first[1]["steps_done"] == cut  # the ranks agreed on the step
    done = _two_ranks(two, job_root / "pair", stop_at=None)
    assert done[0]["world_size"] == 2 and done[0]["global_batch"] == 32
    assert done[0]["steps_done"] == done[1]["steps_done"] == 40
    assert done[0]["resumed_from_step"] == done[1]["resumed_from_step"] == cut
    # gradients and the loss averaged over the ranks: the same training as one rank's
    assert math.isclose(done[0]["loss"], alone["loss"], rel_tol=1e-4), (done, alone)


def test_a_process_the_script_leaves_behind_does_not_outlive_the_run(job_root: Path) -> None:
    result = run(config(["python", "straggler.py"]), job_root / "s", SCRIPTS)
    assert result["status"] == "finished" and result["steps_done"] == 1
    pid = int((job_root / "s" / "straggler.pid").read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # killed; reaped by init
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


WORKER = """
import sys, threading
from orchestrator.workdir import pack
from workers.command import run_command
from tests.workers.test_command import config, source, JOB, SCRIPTS
cfg = config(["python", "silent.py"])
run_command(cfg, job_id=JOB, rank=0, world_size=1,
    init_method=None, checkpoint_dir=None, report=None, report_every_s=1.0,
    should_stop=lambda: False, fence=lambda: True, num_threads=1, **source(cfg, SCRIPTS))
"""


def test_a_script_dies_with_its_worker() -> None:
    """A worker killed (a stop's grace period over, its node lost) takes its script along,
    even one that never imports the job context (silent.py)."""
    import psutil

    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER], env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    try:
        deadline = time.monotonic() + 60
        scripts: list[psutil.Process] = []
        while not scripts and time.monotonic() < deadline:
            time.sleep(0.2)
            scripts = [
                p for p in psutil.Process(worker.pid).children() if "silent.py" in p.cmdline()
            ]
        assert scripts, "the script did not start"
        worker.kill()
        worker.wait()
        _, alive = psutil.wait_procs(scripts, timeout=10)
        assert not alive, alive
    finally:
        worker.kill()
        worker.wait()
