"""The sandbox a team's code runs in (``workers.sandbox``): a child process of its own uid,
whose reports the worker checks and whose errors come back as the job's."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workers.actor import WorkerActor
from workers.sandbox import SandboxError, clean_report, needs_sandbox
from workers.uids import claim_uid

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox uid needs a root worker")


def test_only_a_teams_code_is_sandboxed() -> None:
    assert needs_sandbox("tests.workers.sample_workload:build")
    assert not needs_sandbox("mlp")


def test_a_report_is_kept_only_flat_small_and_without_a_job_id() -> None:
    assert clean_report({"step": 3, "loss": math.nan, "status": "running"}) == {
        "step": 3,
        "loss": None,  # a diverged loss is unknown, not a reason to drop the report
        "status": "running",
    }
    assert clean_report({"job_id": "someone-else", "step": 1}) is None
    assert clean_report({"step": {"nested": 1}}) is None
    assert clean_report({"status": "x" * 257}) is None
    assert clean_report({f"k{i}": 1 for i in range(129)}) is None
    assert clean_report(["not", "a", "dict"]) is None


@root_only
def test_jobs_on_one_host_get_their_own_uids_and_ranks_of_a_job_share_one(tmp_path: Path) -> None:
    registry = tmp_path / "claims.json"
    with claim_uid("job-a", registry=registry) as a, claim_uid("job-b", registry=registry) as b:
        with claim_uid("job-a", registry=registry) as a_again:
            assert a == a_again and a != b
        assert set(json.loads(registry.read_text())) == {str(a), str(b)}
    assert json.loads(registry.read_text()) == {}  # released: the uids are free again


@root_only
def test_a_hard_link_in_a_jobs_folder_gives_nothing_away(tmp_path: Path) -> None:
    """A file of root's, hard-linked into the job's folder (where the kernel allows it), stays
    root's when the folder is lent to the job's uid."""
    precious = tmp_path / "precious"
    precious.write_text("root's")
    folder = tmp_path / "checkpoints" / "job-h"
    folder.mkdir(parents=True)
    os.link(precious, folder / "link")
    with claim_uid("job-h", folder, registry=tmp_path / "claims.json") as uid:
        assert folder.stat().st_uid == uid
        assert precious.stat().st_uid == 0


@root_only
def test_a_jobs_folder_is_its_uids_only_while_it_runs(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints" / "job-a"
    with claim_uid("job-a", folder, registry=tmp_path / "claims.json") as uid:
        assert folder.stat().st_uid == uid and folder.stat().st_mode & 0o777 == 0o700
        (folder / "link").symlink_to("/etc/hostname")  # left by the team's code
    assert folder.stat().st_uid == os.geteuid()
    assert Path("/etc/hostname").stat().st_uid == 0  # the link was not followed


def _run(workload: str, args: dict[str, Any], tmp_path: Path) -> tuple[dict[str, Any], list[Any]]:
    reports: list[dict[str, Any]] = []
    actor = WorkerActor("job-s", 0, 1, reporter_factory=lambda: reports.append)
    config = {"workload": workload, "workload_args": args, "micro_batch": 4, "steps": 3}
    result = actor.run(config, None, str(tmp_path / "ckpt"))
    return result, reports


def test_a_teams_workload_runs_in_a_child_and_reports_through_the_worker(tmp_path: Path) -> None:
    result, reports = _run("tests.workers.sample_workload:build", {}, tmp_path)
    assert result["status"] == "finished" and result["steps_done"] == 3
    assert reports and all(r["job_id"] == "job-s" for r in reports)
    assert reports[-1]["status"] == "finished"


def test_the_childs_error_is_the_jobs_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="RuntimeError: the workload broke at sample 4"):
        _run("tests.workers.printing_workload:build", {"fail_at": 4}, tmp_path)


def test_the_worker_of_a_sandboxed_run_never_imports_torch(tmp_path: Path) -> None:
    # a fresh process (this one has torch): the child builds the model, so torch in the worker
    # would only add its import to the run's start (a service's relaunch waits on it)
    script = (
        "import sys; from workers.actor import WorkerActor; "
        "config = {'workload': 'tests.workers.sample_workload:build', 'workload_args': {}, "
        "'micro_batch': 4, 'steps': 2}; "
        f"result = WorkerActor('job-t', 0, 1).run(config, None, {str(tmp_path)!r}); "
        "print(result['status'], 'torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["finished", "False"]


NOT_ROOT = """
import json, sys
from workers.actor import WorkerActor
from workers.sandbox import SandboxError, isolation_report
config = {"workload": "tests.workers.sample_workload:build", "workload_args": {},
          "micro_batch": 4, "steps": 2}
try:
    result = WorkerActor("job-n", 0, 1).run(config, None, None)
    print(json.dumps({"status": result["status"], "report": isolation_report()}))
except SandboxError as err:
    print(json.dumps({"refused": str(err), "report": isolation_report()}))
"""


@root_only
@pytest.mark.parametrize("allowed", [False, True])
def test_a_worker_that_is_not_root_refuses_team_code_unless_the_operator_allows_it(
    allowed: bool,
) -> None:
    """A non-root operator's worker cannot give a team's code a uid of its own: the code is
    refused, naming the setting, unless the operator set it; ``orch up``'s report says which."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "ORCH_ALLOW_UNISOLATED"}
    env.update(PYTHONPATH=str(root), HOME="/tmp")
    if allowed:
        env["ORCH_ALLOW_UNISOLATED"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", NOT_ROOT],
        capture_output=True,
        text=True,
        env=env,
        cwd="/tmp",
        user=65534,  # nobody: an operator's own user
        group=65534,
        extra_groups=[],
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    report = " | ".join(found["report"])
    assert "user not enforced: the worker" in report and "uid 65534" in report, report
    if allowed:
        assert found["status"] == "finished", found
        assert "runs anyway, as the worker's user (ORCH_ALLOW_UNISOLATED)" in report, report
    else:
        assert "ORCH_ALLOW_UNISOLATED=1" in found["refused"], found
        assert "uid 65534, not root" in found["refused"], found
        assert "refused on this host's workers" in report, report


@root_only
def test_a_jobs_leftover_processes_end_with_its_last_hold_of_the_uid(tmp_path: Path) -> None:
    """Where no cgroup ends a run's processes (Kubernetes), releasing the job's uid does:
    nothing of the job's runs on when the uid goes to the next job."""
    from workers.contain import launcher

    registry = tmp_path / "claims.json"
    daemon = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        print(os.getpid(), flush=True); os.close(1); os.close(2)\n"
        "        time.sleep(600); os._exit(0)\n"
        "    os._exit(0)\n"
    )
    with claim_uid("job-d", registry=registry) as uid:
        child = subprocess.run(
            [sys.executable, "-c", daemon],
            capture_output=True,
            text=True,
            cwd="/",
            preexec_fn=launcher(uid, None, True),  # no cgroup
            timeout=60,
        )
        pid = int(child.stdout.split()[0])
        assert Path(f"/proc/{pid}").exists()  # detached, alive while the job holds the uid
    status = Path(f"/proc/{pid}/status")
    assert not status.exists() or "zombie" in status.read_text()
