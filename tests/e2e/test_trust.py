"""The trust boundary around a team's code (issue 28), on a real scheduler with the embedded
(password-protected) Redis and a real Ray cluster: a team's entry point runs, but as a uid of
its own with nothing of the control plane's; a module the team may not name is refused."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store.states import JobState
from tests.e2e.conftest import start_orch
from workers.command import CHECKPOINT_DIR_ENV

DONE = {JobState.FINISHED, JobState.FAILED}


def job(name: str, workload: dict[str, Any], **resources: Any) -> JobSpec:
    return parse_spec(
        {
            "name": name,
            "team": "e2e",
            "class": "bulk",
            "workload": workload,
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": 1, **resources},
            "run": {"micro_batch": 4, "warmup_steps": 1, "steps": 3},
        }
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox uid needs a root worker")
def test_a_teams_code_runs_without_the_control_planes_secrets(
    ray_cluster: Any, namespace: str, tmp_path: Path
) -> None:
    orch = start_orch(ray_cluster.address, None, namespace, tmp_path / "data")  # embedded Redis
    try:
        other = orch.store.submit(job("other", {"name": "mlp"})).id
        assert orch.wait(other, DONE).state is JobState.FINISHED
        where = orch.store.client.connection_pool.connection_kwargs  # the embedded server
        data_dir = orch.settings.data_dir.resolve()
        args = {
            "password_file": str(data_dir / "redis" / "redis.password"),
            "data_dir": str(data_dir),
            "other_checkpoint": str(Path(str(orch.settings.checkpoint_dir)) / other),
            "redis_host": where["host"],
            "redis_port": where["port"],
        }
        entry = {"entry": "tests.workers.hostile_workload:build", "args": args}
        # with the network it declares (else it has none: tests/e2e/test_hostile.py)
        hostile = orch.store.submit(job("hostile", entry, network=True)).id
        rec = orch.wait(hostile, DONE)
        assert rec.state is JobState.FINISHED, rec.message
        out = orch.cli("logs", hostile)
        [line] = [ln for ln in out.stdout.splitlines() if "HOSTILE " in ln]
        found = json.loads(line.split("HOSTILE ", 1)[1])
        assert found["uid"] != 0  # its own user, not the worker's
        assert found["env"] == []  # no REDIS_URL, RAY_*, ORCH_*
        for probe in ("password", "data_dir", "other_checkpoint", "ray_token", "parent_environ"):
            assert found[probe].startswith("refused:PermissionError"), (probe, found[probe])
        assert "NOAUTH" in found["redis"]  # the store answers nothing without the password
        # its reports reached the store through the worker, under its own job's id
        metrics = orch.store.metrics(hostile)
        assert metrics["job_id"] == hostile and metrics["status"] == "finished", metrics

        # a module outside the operator's allow-list is refused at submission, nothing written
        before = len(orch.store.list())
        with pytest.raises(SpecError, match="module 'subprocess' is not one team 'e2e' may run"):
            orch.store.submit(job("shell", {"entry": "subprocess:call", "args": {}}))
        assert len(orch.store.list()) == before
    finally:
        orch.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox uid needs a root worker")
def test_a_hostile_command_mode_script_is_contained_too(ray_cluster: Any, namespace: str) -> None:
    from orchestrator.workdir import pack

    data = Path(tempfile.mkdtemp(prefix="orch-e2e-trust-"))  # not under pytest's tmp tree
    orch = start_orch(ray_cluster.address, None, namespace, data / "data")  # embedded Redis
    try:
        data_dir = orch.settings.data_dir.resolve()
        probes = {
            "password_file": str(data_dir / "redis" / "redis.password"),
            "data_dir": str(data_dir),
            "worker_home": str(Path.home()),  # where Ray keeps its token (~/.ray)
            "parent_environ": f"/proc/{os.getppid()}/environ",
        }
        scripts = Path(__file__).resolve().parents[1] / "workers" / "command_dir"
        digest = orch.store.working_dirs.put(pack(scripts).data)
        workload = {
            "command": ["python", "hostile.py", json.dumps(probes)],
            "working_dir": digest,
        }
        hostile = orch.store.submit(job("hostile-cmd", workload)).id
        rec = orch.wait(hostile, DONE)
        assert rec.state is JobState.FINISHED, rec.message
        out = orch.cli("logs", hostile)
        [line] = [ln for ln in out.stdout.splitlines() if "HOSTILE " in ln]
        found = json.loads(line.split("HOSTILE ", 1)[1])
        assert found["uid"] != 0
        # nothing of the store, Ray or the orchestrator; the one ORCH_ name a command sees is its
        # own checkpoint folder (workers.command.CHECKPOINT_DIR_ENV: a path of its own, no secret)
        leaked = [k for k in found["env"] if k.startswith(("REDIS", "RAY_", "ORCH_"))]
        assert leaked in ([], [CHECKPOINT_DIR_ENV]), found
        for probe in probes:
            assert found[probe].startswith("refused:PermissionError"), (probe, found[probe])
        metrics = orch.store.metrics(hostile)  # its step reached the store, under its own id
        assert metrics["job_id"] == hostile and metrics["status"] == "finished", metrics
    finally:
        orch.close()
        shutil.rmtree(data, ignore_errors=True)
