"""A hostile team against the pool (issue 35), one test per attack, on a real scheduler with
the embedded (password-protected) Redis and the session's Ray cluster; each asserts the attack
is blocked, and that it was tried (what it aimed at existed), so that it could have worked.

The session's workers were started as an operator would (``tests/conftest.py``): with a
folder of a team's packages (``ORCH_TEAM_CODE_PATH``) holding planted start-up hooks, and a
process bound of 512 tasks per run (``ORCH_SANDBOX_PIDS_MAX``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store.states import JobState
from orchestrator.teams import TeamConfig, TeamSpec
from orchestrator.workdir import pack
from tests.e2e.conftest import Orch, start_orch
from tests.e2e.hostile import command_tree, left, open_markers
from workers.contain import enforced

DONE = {JobState.FINISHED, JobState.FAILED}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the pool's workers run as root here")
HOST = enforced() if os.geteuid() == 0 else {}


def needs(what: str) -> pytest.MarkDecorator:
    """Skip, saying why, on a host that cannot enforce ``what`` (``orch up`` says it too)."""
    how = HOST.get(what, "not enforced")
    return pytest.mark.skipif(how.startswith("not enforced"), reason=f"{what}: {how}")


@pytest.fixture(scope="module")
def pool(ray_cluster: Any) -> Iterator[tuple[Orch, str, Path]]:
    """A scheduler shared by the attacks (teams ``e2e``, the attacker, and ``beta``), the
    digest of the hostile working directory, and the folder its hooks mark."""
    import uuid

    data = Path(tempfile.mkdtemp(prefix="orch-e2e-hostile-"))  # not under pytest's tmp tree
    data.chmod(0o755)
    markers = open_markers(data / "markers")
    orch = start_orch(ray_cluster.address, None, f"test-{uuid.uuid4().hex[:8]}", data / "orch")
    orch.store.put_teams(
        TeamConfig(
            teams=[TeamSpec(name="e2e"), TeamSpec(name="beta")],
            entry_modules=["tests", "teampkg"],
        )
    )
    digest = orch.store.working_dirs.put(pack(command_tree(data / "tree", markers)).data)
    try:
        yield orch, digest, markers
    finally:
        orch.close()
        shutil.rmtree(data, ignore_errors=True)


def spec(
    name: str, workload: dict[str, Any], team: str = "e2e", steps: int = 3, **resources: Any
) -> JobSpec:
    return parse_spec(
        {
            "name": name,
            "team": team,
            "class": "bulk",
            "workload": workload,
            "sla": {"throughput": {"min_samples_per_s": 0.01}},
            "resources": {"gpus": 1, **resources},
            "run": {"micro_batch": 4, "warmup_steps": 1, "steps": steps},
        }
    )


def attack(digest: str, *argv: str) -> dict[str, Any]:
    return {"command": ["python", "attack.py", *argv], "working_dir": digest}


def said(orch: Orch, job_id: str, what: str) -> dict[str, Any]:
    """The JSON the job's script printed after ``what`` (its log, through the store)."""
    for entry in orch.store.logs.tail(job_id):
        if entry.line.startswith(what + " "):
            return dict(json.loads(entry.line.split(" ", 1)[1]))
    raise AssertionError(f"{job_id} printed no {what!r} line")


def wait_said(orch: Orch, job_id: str, what: str, timeout_s: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return said(orch, job_id, what)
        except AssertionError:
            if time.monotonic() > deadline or orch.store.get(job_id).state in DONE:
                raise
            time.sleep(0.2)


def test_start_up_hooks_in_a_working_dir_never_run_as_root(
    pool: tuple[Orch, str, Path],
) -> None:
    """sitecustomize.py, usercustomize.py, a .pth file and a module shadowing ``redis`` (which
    the worker imports) in a command job's working directory: the worker never runs them."""
    orch, digest, markers = pool
    rec = orch.wait(orch.store.submit(spec("hooks", attack(digest, "none"))).id, DONE)
    assert rec.state is JobState.FINISHED, rec.message  # the shadow redis broke no sink
    assert not [m for m in left(markers) if "-uid0-" in m], left(markers)


def test_start_up_hooks_in_an_allowed_package_run_only_in_the_sandbox(
    pool: tuple[Orch, str, Path],
) -> None:
    """The same hooks in the operator's folder of a team's packages, from which the team's
    allowed module ``teampkg`` is imported: they run in the team's process (its uid), which
    shows they are live, and never in the worker (uid 0)."""
    orch, _, _ = pool
    folder = Path(os.environ["ORCH_TEAM_CODE_PATH"])
    markers = folder.parent / "markers"
    job = spec("pkg", {"entry": "teampkg.work:build", "args": {"features": 4}})
    rec = orch.wait(orch.store.submit(job).id, DONE)
    assert rec.state is JobState.FINISHED, rec.message
    found = left(markers)
    assert [m for m in found if m.startswith("sitecustomize-uid")], found  # in the sandbox
    assert not [m for m in found if "-uid0-" in m], found


def test_a_team_cannot_change_or_read_another_teams_code_logs_or_checkpoints(
    pool: tuple[Orch, str, Path],
) -> None:
    """While team beta's script runs, team e2e's tries to plant code in beta's unpacked
    folder and read it, to read Ray's logs (every job's output) and to list the jobs'
    checkpoints; beta's job then runs its own code to the end."""
    orch, digest, markers = pool
    flag = markers / "probed"  # the attacker's "done", in a folder every uid may write
    script = {"command": ["python", "victim.py", str(flag)], "working_dir": digest}
    victim = orch.store.submit(spec("victim", script, team="beta", steps=1000)).id
    orch.wait(victim, {JobState.RUNNING} | DONE)
    while not orch.store.metrics(victim).get("step"):  # its folder is unpacked by now
        assert orch.store.get(victim).state not in DONE
        time.sleep(0.2)
    ckpt_root = Path(str(orch.settings.checkpoint_dir))
    others = {
        "ray_logs": "/tmp/ray/session_latest/logs",
        "checkpoints": str(ckpt_root),
        "victim_checkpoint": str(ckpt_root / victim),
    }
    probe = attack(digest, "probe", json.dumps(others), str(flag))
    attacker = orch.store.submit(spec("probe", probe)).id
    rec = orch.wait(attacker, DONE)
    assert rec.state is JobState.FINISHED, rec.message
    found = said(orch, attacker, "PROBE")
    assert found["uid"] != 0
    # a run folder of another test's job may be gone between the look and the try
    allowed = {"refused:PermissionError", "refused:FileNotFoundError"}
    for kind in ("list", "plant"):
        assert found[kind].get("refused:PermissionError"), found  # beta's folder was there
        assert set(found[kind]) <= allowed, found
    for what, got in found.items():
        if what not in ("uid", "list", "plant"):
            assert got == "refused:PermissionError", (what, got)
    rec = orch.wait(victim, DONE)
    assert rec.state is JobState.FINISHED, rec.message
    lines = [e.line for e in orch.store.logs.tail(victim)]
    assert "VICTIM original" in lines and "PLANTED" not in lines


def test_a_double_forked_daemon_is_gone_when_its_job_ends(pool: tuple[Orch, str, Path]) -> None:
    orch, digest, _ = pool
    job = orch.store.submit(spec("daemon", attack(digest, "daemon"))).id
    rec = orch.wait(job, DONE)
    assert rec.state is JobState.FINISHED, rec.message
    pid = said(orch, job, "DAEMON")["pid"]
    # the run's cgroup is emptied before the run returns (and the uid is released)
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[1].startswith("Z"), pid


@needs("processes")
def test_a_fork_bomb_hits_its_bound_is_reported_and_spares_its_neighbour(
    pool: tuple[Orch, str, Path],
) -> None:
    orch, digest, _ = pool
    neighbour = orch.store.submit(spec("neighbour", attack(digest, "none"))).id
    bomb = orch.store.submit(spec("bomb", attack(digest, "forks"))).id
    rec = orch.wait(bomb, DONE)
    assert rec.state is JobState.FINISHED, rec.message  # the script goes on, bounded
    forks = said(orch, bomb, "FORKS")
    assert forks["error"] == "BlockingIOError" and forks["made"] < 512, forks
    lines = [e.line for e in orch.store.logs.tail(bomb)]
    assert any("reached their bound of 512 tasks" in line for line in lines), lines[-5:]
    assert orch.wait(neighbour, DONE).state is JobState.FINISHED


@needs("memory")
def test_a_memory_hog_is_killed_reported_as_out_of_memory_and_spares_its_neighbour(
    pool: tuple[Orch, str, Path],
) -> None:
    orch, digest, _ = pool
    neighbour = orch.store.submit(spec("neighbour2", attack(digest, "none"))).id
    hog = orch.store.submit(spec("hog", attack(digest, "hog"), memory_gb=0.3)).id
    rec = orch.wait(hog, DONE)
    assert rec.state is JobState.FAILED
    assert "out of memory" in rec.message and "286 MiB" in rec.message, rec.message
    assert orch.wait(neighbour, DONE).state is JobState.FINISHED


@needs("network")
def test_a_job_that_declared_no_network_has_none(pool: tuple[Orch, str, Path]) -> None:
    """Its listener cannot be reached from the host, and it cannot reach the host's Redis."""
    orch, digest, _ = pool
    job = orch.store.submit(spec("listen", attack(digest, "listen", "5"))).id
    listening = wait_said(orch, job, "LISTEN")
    assert listening["redis"].startswith("refused:"), listening
    # the host tries the job's port; whether it reached the job is the job's to say (its
    # accept): the port number is the job's namespace's, and a host process of its own (one of
    # Ray's, another test's) may listen on the same number and answer (seen once in a suite)
    with contextlib.suppress(OSError):
        socket.create_connection(("127.0.0.1", listening["port"]), timeout=2).close()
    rec = orch.wait(job, DONE)
    assert rec.state is JobState.FINISHED, rec.message
    assert said(orch, job, "ACCEPTED")["got"].startswith("refused:"), "a connection came in"
