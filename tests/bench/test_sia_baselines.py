"""The Gavel and Sia baselines the simulator reproduces Sia's artifact with: their pieces, on
small cases whose answer is known (the reproduction itself needs the artifact's data and is a
benchmark: bench/scheduler/sia/README.md)."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from policies import DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"sia_{name}", ROOT / f"bench/scheduler/sia/{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


gavel = _load("gavel")
sia = _load("sia_policy")


def test_identical_jobs_get_equal_shares_as_an_interior_point_solver_gives() -> None:
    # three identical jobs, one GPU of each kind, 3x faster on the second: every optimum fills
    # both kinds; ECOS (the artifact's solver) returns the symmetric one
    shares = gavel._shares([[1.0, 3.0]] * 3, [1, 1, 1], [1, 1])
    assert shares == [[0.33333, 0.33333]] * 3
    # a job alone gets its fastest kind whole
    assert gavel._shares([[1.0, 3.0]], [1], [1, 1]) == [[0.0, 1.0]]


def test_gavel_time_shares_a_gpu_between_two_equal_jobs() -> None:
    policy = gavel.GavelPolicy(interval_s=360.0)
    jobs = {
        j: QueuedJob(j, "bulk", "t", 1, seq, 0.0, speedup=(2.0,), kind_speed=(("k", 1.0),))
        for seq, j in enumerate("ab")
    }
    runs = []
    running: RunningJob | None = None
    for _ in range(4):
        queue = tuple(q for j, q in jobs.items() if running is None or j != running.job_id)
        free = 1 if running is None else 0
        snap = Snapshot((NodeView("k-0", 1, free, kind="k"),), queue, (running,) if running else ())
        decisions = policy.decide(snap)
        started = [d for d in decisions if d.kind is DecisionKind.START]
        assert len(started) == 1 and started[0].nodes == ("k-0",)
        if running is not None:  # the other job's turn: the running one stops
            assert [d.job_id for d in decisions if d.kind is DecisionKind.PREEMPT] == [
                running.job_id
            ]
        runs.append(started[0].job_id)
        running = RunningJob(started[0].job_id, "bulk", "t", ("k-0",), seq=0, speedup=(2.0,))
    assert runs == ["a", "b", "a", "b"]


def test_sia_packs_multi_node_jobs_on_whole_nodes_first() -> None:
    # alloc_to_placement_fast on three 8-GPU nodes: the 16-GPU job takes two whole nodes, the
    # others fill the third from the pointer where the first stopped
    placed = sia._pack({"small": (1, 2), "big": (2, 16), "mid": (1, 4)}, [8, 8, 8])
    assert placed == {"big": [0] * 8 + [1] * 8, "mid": [2] * 4, "small": [2] * 2}


def test_sia_integer_programme_finds_the_optimum_and_holds_a_restoring_job() -> None:
    policy = sia.SiaPolicy(models={}, kinds=(("k", 1, 4),), one_gpu={})
    assert [c[2] for c in policy.configs] == [1, 2, 4]
    rng = np.random.default_rng(3)
    rows = np.round(rng.uniform(0.3, 1.5, size=(3, 3)), 2)
    chosen = policy._solve(rows, {})

    def cost(pick: tuple[int | None, ...]) -> float:
        return sum(rows[j, c] - policy.lambda_n for j, c in enumerate(pick) if c is not None)

    options = [None, 0, 1, 2]
    best = min(
        cost(pick)
        for pick in itertools.product(options, repeat=3)
        if sum(policy.configs[c][2] for c in pick if c is not None) <= 4
    )
    got = tuple(chosen.get(j) for j in range(3))
    assert sum(policy.configs[c][2] for c in got if c is not None) <= 4
    assert cost(got) == pytest.approx(best)
    # a job in its checkpoint-restore keeps its configuration, whatever it costs
    held = policy._solve(np.array([[3000.0, 3000.0, 3000.0], [0.1, 0.1, 0.1]]), {0: 2})
    assert held[0] == 2 and 1 not in held
