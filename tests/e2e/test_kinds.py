"""GPU kinds on virtual slots end to end (real Ray, real Redis): a node declares its kind with a
Ray resource, every view shows it, a job that requires a kind waits for it while other GPUs are
free, then runs there, and one that excludes it never goes there."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.store.states import JobState
from tests.e2e.conftest import Orch, kind_node
from tests.e2e.jobs import HOLDER, mlp_job


def _on_kind(name: str, kinds: dict[str, list[str]], **run: Any) -> Any:
    spec = mlp_job(name, gpus=2, **run)
    resources = spec.resources.model_copy(update=kinds)
    return spec.model_copy(update={"resources": resources})


def test_a_job_that_requires_a_kind_waits_for_it_and_runs_there(
    ray_cluster: Any, orch: Orch
) -> None:
    # a third node, of kind L4, as an operator declares virtual slots
    with kind_node(ray_cluster, orch, "L4", gpus=2, speed_pct=40):
        hold = orch.store.submit(
            _on_kind("l4-hold", {"gpu_kinds": ["L4"]}, workload=HOLDER, duration_s=900)
        ).id
        held = orch.wait(hold, {JobState.RUNNING})
        l4 = set(held.placement["nodes"]) if held.placement else set()
        assert len(l4) == 1, held.placement
        pool = orch.cli("pool")
        assert pool.returncode == 0, pool.stderr
        row = next(line for line in pool.stdout.splitlines() if next(iter(l4))[:12] in line)
        assert "L4 (CPU-backed), speed 0.4" in row, pool.stdout

        # the L4 GPUs are taken: a job that requires them waits, the other kind's 6 free
        avoids = orch.store.submit(
            _on_kind("no-l4", {"exclude_gpu_kinds": ["L4"]}, workload=HOLDER, duration_s=900)
        ).id
        running = orch.wait(avoids, {JobState.RUNNING})
        assert running.placement and not set(running.placement["nodes"]) & l4
        # (the e2e scheduler runs `gang`, in order: this one waits at the head of the queue)
        wants = orch.store.submit(_on_kind("wants-l4", {"gpu_kinds": ["L4"]}, steps=3)).id
        deadline = time.monotonic() + 30
        while "resources.gpu_kinds" not in orch.store.get(wants).message:
            assert time.monotonic() < deadline, [
                (e["event"], e.get("message")) for j in (wants, hold) for e in orch.store.events(j)
            ]
            time.sleep(0.2)
        assert orch.store.get(wants).state is JobState.QUEUED

        assert orch.cli("cancel", hold).returncode == 0
        assert orch.cli("cancel", avoids).returncode == 0
        ran = orch.wait(wants, {JobState.FINISHED, JobState.FAILED})
        assert ran.state is JobState.FINISHED, ran.message
        shown = orch.cli("show", wants)
        assert shown.returncode == 0 and "only L4" in shown.stdout, shown.stdout
