"""The launcher a command job's Python script runs under (:mod:`workers.launch`): a script that
finished but left its ``torch.distributed`` group (as Lightning's and the Trainer's DDP do) has
it left for it at exit, after its own exit handlers, so Gloo's threads cannot abort a finished
rank while the interpreter is torn down."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import atexit, os, sys
import torch.distributed as dist

leave = dist.destroy_process_group
def told():
    print("left", flush=True)
    leave()
dist.destroy_process_group = told  # the launcher looks it up on the module at exit

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
atexit.register(lambda: print("own handler sees the group:", dist.is_initialized(), flush=True))
if sys.argv[1] == "fail":
    raise RuntimeError("boom")
if sys.argv[1] == "exit3":
    sys.exit(3)
if sys.argv[1] == "leaves":
    leave()
"""


def launch(tmp_path: Path, how: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return subprocess.run(
        [sys.executable, "-P", "-m", "workers.launch", str(script), how],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_finished_script_s_group_is_left_after_its_own_exit_handlers(tmp_path: Path) -> None:
    done = launch(tmp_path, "ok")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["own handler sees the group: True", "left"]


def test_a_script_that_left_its_group_is_not_made_to_leave_twice(tmp_path: Path) -> None:
    done = launch(tmp_path, "leaves")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["own handler sees the group: False"]


def test_a_failed_script_keeps_its_exit_and_is_not_made_to_leave(tmp_path: Path) -> None:
    failed = launch(tmp_path, "fail")
    assert failed.returncode == 1 and "RuntimeError: boom" in failed.stderr
    assert "left" not in failed.stdout
    exited = launch(tmp_path, "exit3")
    assert exited.returncode == 3 and "left" not in exited.stdout
