"""The job-context API a command-mode script imports (``workers.job``): what it reads and
what it sends, over the real pipes, in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys
from workers import job
ctx = job.context()
print(json.dumps({"micro_batch": ctx.micro_batch, "resume_step": ctx.resume_step,
                  "settings": ctx.settings, "global_batch": ctx.global_batch}), flush=True)
job.report(samples=4, loss=0.5)
job.report(samples=4, tokens=40, loss=0.25)
print(json.dumps({"checkpoint": job.should_checkpoint(), "stop": job.should_stop()}), flush=True)
sys.stdin.readline()  # the test sends stop now
import time
while not job.should_stop():
    time.sleep(0.01)
print(json.dumps({"checkpoint": job.should_checkpoint(), "stop": job.should_stop()}), flush=True)
job.checkpointed()
"""


def _start(env: dict[str, str], pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        pass_fds=pass_fds,
    )


def test_the_context_reads_its_settings_and_sends_steps_and_checkpoints(tmp_path: Path) -> None:
    context = tmp_path / "context.json"
    context.write_text(
        json.dumps(
            {
                "micro_batch": 2,
                "grad_accum": 2,
                "world_size": 3,
                "checkpoint_every": 12,
                "resume": True,
                "resume_step": 10,
                "settings": {"hidden": 64},
                "unknown_later_field": 1,  # a newer worker's field: ignored
            }
        )
    )
    msg_r, msg_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    child = _start(
        {
            "ORCH_JOB_CONTEXT": str(context),
            "ORCH_JOB_FD": str(msg_w),
            "ORCH_JOB_CONTROL_FD": str(ctl_r),
        },
        (msg_w, ctl_r),
    )
    os.close(msg_w)
    os.close(ctl_r)
    assert child.stdout is not None and child.stdin is not None
    read = json.loads(child.stdout.readline())
    assert read == {
        "micro_batch": 2,
        "resume_step": 10,
        "settings": {"hidden": 64},
        "global_batch": 12,
    }
    # step 12 (10 + 2 reports) is a multiple of checkpoint_every: checkpoint, no stop yet
    assert json.loads(child.stdout.readline()) == {"checkpoint": True, "stop": False}
    with os.fdopen(ctl_w, "w") as control:
        control.write(json.dumps({"stop": True}) + "\n")
        control.flush()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert json.loads(child.stdout.readline()) == {"checkpoint": True, "stop": True}
        assert child.wait(timeout=30) == 0
    with os.fdopen(msg_r) as messages:
        sent = [json.loads(line) for line in messages]
    steps = [m["step"] for m in sent if "step" in m]
    assert [(s["step"], s["samples"], s["tokens"], s["loss"]) for s in steps] == [
        (11, 4, None, 0.5),
        (12, 4, 40, 0.25),
    ]
    assert all(s["s"] >= 0 for s in steps)
    assert sent[-1] == {"checkpointed": 12}


def test_without_orch_the_script_runs_on_defaults_and_reports_go_nowhere() -> None:
    child = _start({})
    assert child.stdout is not None and child.stdin is not None
    read = json.loads(child.stdout.readline())
    assert read == {"micro_batch": 8, "resume_step": None, "settings": {}, "global_batch": 8}
    assert json.loads(child.stdout.readline()) == {"checkpoint": False, "stop": False}
    child.kill()
    child.wait()


def test_a_script_whose_worker_is_gone_ends(tmp_path: Path) -> None:
    ctl_r, ctl_w = os.pipe()
    child = _start({"ORCH_JOB_CONTROL_FD": str(ctl_r)}, (ctl_r,))
    os.close(ctl_r)
    assert child.stdout is not None
    child.stdout.readline()
    os.close(ctl_w)  # the worker died: nobody supervises the run any more
    assert child.wait(timeout=30) == 143


def test_outside_orch_job_loader_only_iterates_and_the_loader_is_torchs_default() -> None:
    from workers import job

    assert list(job.loader(x for x in (1, 2, 3))) == [1, 2, 3]
    assert job.JobContext().dataloader_kwargs == {"num_workers": 0, "pin_memory": False}
    given = job.JobContext(loader_settings={"num_workers": 2, "prefetch_factor": 4, "cache_mb": 9})
    assert given.dataloader_kwargs == {
        "num_workers": 2,
        "pin_memory": False,
        "prefetch_factor": 4,
        "persistent_workers": False,
    }
