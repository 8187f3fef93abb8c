"""Command mode for scripts that do not call ``orch`` (issue 38 item 1): a plain torchrun DDP
script (examples/torchrun_script) runs unchanged on two ranks through the worker's runner,
its throughput counted by the step hook, and a stop ends every rank as "stopped"."""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.spec import parse_spec
from orchestrator.workdir import pack
from tests.workers.test_command import JOB, job_root, source  # noqa: F401 (fixture)
from workers.command import _interpreted, run_command, torchrun_env

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = ROOT / "examples" / "torchrun_script"


def config(argv: list[str], micro_batch: int = 32, steps: int = 40) -> dict[str, Any]:
    return {
        "workload": " ".join(argv),
        "workload_args": {},
        "micro_batch": micro_batch,
        "grad_accum": 1,
        "precision": "fp32",
        "steps": steps,
        "duration_s": None,
        "warmup_steps": 2,
        "checkpoint_every": 0,
        "seed": 0,
        "command": {"argv": argv, "settings": {}},
    }


def ranks(
    cfg: dict[str, Any], folder: Path, ckpt: Path, stop_at: int | None = None, world: int = 2
) -> tuple[dict[int, Any], list[dict[str, Any]]]:
    """Run ``cfg`` on ``world`` ranks as a gang would; rank 0's reports stop all past
    ``stop_at``."""
    from workers.distributed import find_free_port

    results: dict[int, Any] = {}
    reports: list[dict[str, Any]] = []
    stop = threading.Event()
    address = f"tcp://127.0.0.1:{find_free_port()}"

    def watch(report: dict[str, Any]) -> None:
        reports.append(report)
        if stop_at is not None and report["step"] >= stop_at:
            stop.set()

    def rank(r: int) -> None:
        try:
            results[r] = run_command(
                cfg,
                job_id=JOB,
                rank=r,
                world_size=world,
                init_method=address if world > 1 else None,
                checkpoint_dir=str(ckpt),
                report=watch if r == 0 else None,
                report_every_s=0.0,
                should_stop=stop.is_set,
                fence=lambda: True,
                num_threads=1,
                **source(cfg, folder),
            )
        except Exception as err:  # the test reads it
            results[r] = err

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results, reports


def test_torchrun_variables_name_rank_zero_and_a_gpu_of_ones_own() -> None:
    env = torchrun_env(1, 4, "tcp://10.0.0.7:29500")
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "4"
    assert env["MASTER_ADDR"] == "10.0.0.7" and env["MASTER_PORT"] == "29500"
    assert env["LOCAL_RANK"] == "0" and env["LOCAL_WORLD_SIZE"] == "1"
    alone = torchrun_env(0, 1, None)
    assert alone["MASTER_ADDR"] == "127.0.0.1" and int(alone["MASTER_PORT"]) > 0


def test_python_scripts_and_modules_run_through_the_launcher() -> None:
    assert _interpreted(["python", "train.py", "--x"])[-4:] == [
        "-m",
        "workers.launch",
        "train.py",
        "--x",
    ]
    assert _interpreted(["python3", "-m", "pkg.train"])[-3:] == [
        "workers.launch",
        "-m",
        "pkg.train",
    ]
    assert _interpreted(["python", "-c", "print(1)"])[1:] == ["-c", "print(1)"]
    assert _interpreted(["./run.sh"]) == ["./run.sh"]


def test_the_example_job_file_validates() -> None:
    data = yaml.safe_load((TORCHRUN / "job.yaml").read_text())
    data["workload"]["working_dir"] = pack(TORCHRUN).digest  # what orch submit --working-dir adds
    assert parse_spec(data).workload.command is not None


def test_a_torchrun_script_runs_unchanged_on_two_ranks_measured_by_the_hook(
    job_root: Path,  # noqa: F811
) -> None:
    cfg = config(["python", "train.py", "--steps", "40", "--batch-size", "16"], micro_batch=16)
    results, reports = ranks(cfg, TORCHRUN, job_root / "tr")
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    first = results[0]
    assert first["status"] == results[1]["status"] == "finished"
    assert first["steps_done"] == 40 and first["measured_steps"] == 38  # its warm-up left out
    assert first["global_batch"] == 32 and first["samples_per_s"] > 0  # 16 x 1 x 2 ranks
    assert first["p95_ms"] >= first["p50_ms"] > 0
    assert reports[-1]["status"] == "finished" and reports[-1]["step"] == 40


def test_a_stop_ends_every_rank_of_a_script_that_cannot_checkpoint(job_root: Path) -> None:  # noqa: F811
    cfg = config(["python", "train.py", "--steps", "100000", "--batch-size", "16"], 16, 100000)
    results, _ = ranks(cfg, TORCHRUN, job_root / "ts", stop_at=5)
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    assert results[0]["status"] == results[1]["status"] == "stopped"
    assert 5 <= results[0]["steps_done"] < 100000
    assert results[0]["checkpoint_path"] is None  # nothing of its own told orch
    assert math.isfinite(results[0]["samples_per_s"])


RESUMING = """
import os, sys, time, torch
path = os.path.join(os.environ["ORCH_CHECKPOINT_DIR"], "state.pt")
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
if os.path.exists(path):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    step = state["step"]
    print(f"resumed from step {step}", flush=True)
while step < int(sys.argv[1]):
    loss = model(torch.ones(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    step += 1
    torch.save({"model": model.state_dict(), "step": step}, path + ".tmp")
    os.replace(path + ".tmp", path)
    time.sleep(0.05)
print(f"done at step {step}", flush=True)
"""


def test_a_script_that_never_calls_orch_resumes_from_the_folder_its_variable_names(
    job_root: Path,  # noqa: F811
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """``ORCH_CHECKPOINT_DIR`` is the job's checkpoint folder, kept across its runs: a torchrun
    script stopped (ended by a signal: it never asks) finds there what it saved."""
    folder = tmp_path / "script"
    folder.mkdir()
    (folder / "train.py").write_text(RESUMING)
    cfg = config(["python", "train.py", "60"], micro_batch=8, steps=60)
    first, _ = ranks(cfg, folder, job_root / "job", stop_at=5, world=1)
    assert first[0]["status"] == "stopped" and 5 <= first[0]["steps_done"] < 60, first
    assert (job_root / "job" / "state.pt").is_file()
    capfd.readouterr()
    again, _ = ranks(cfg, folder, job_root / "job", world=1)
    assert again[0]["status"] == "finished", again
    out = capfd.readouterr().out
    resumed = int(re.search(r"resumed from step (\d+)", out)[1])  # type: ignore[index]
    assert resumed >= first[0]["steps_done"] and "done at step 60" in out, out
