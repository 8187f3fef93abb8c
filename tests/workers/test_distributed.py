"""Data parallelism: two Gloo ranks in two processes equal one process with the same batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workers.helpers import tiny
from tests.workers.spawn import spawn_ranks
from workers.distributed import find_free_port
from workers.harness import Harness

WORLD = 2
STEPS = 3


def _rank_main(rank: int, ports: tuple[int, int], out: Path) -> None:
    """One rank: an equivalence run, then a run where only rank 1 asks to stop."""
    torch.set_num_threads(1)
    equal = Harness(
        tiny("mlp", micro_batch=4, grad_accum=2, steps=STEPS, checkpoint_every=2),
        rank=rank,
        world_size=WORLD,
        init_method=f"tcp://127.0.0.1:{ports[0]}",
        device="cpu",
        checkpoint_dir=out / "ckpt",
    )
    result = equal.run()
    params = [p.detach().clone() for p in equal.model.parameters()]

    polls = iter(range(10_000))
    stopping = Harness(
        tiny("mlp", steps=1000),
        rank=rank,
        world_size=WORLD,
        init_method=f"tcp://127.0.0.1:{ports[1]}",
        device="cpu",
        should_stop=(lambda: next(polls) >= 2) if rank == 1 else (lambda: False),
    )
    stopped = stopping.run()
    torch.save(
        {"params": params, "result": result.to_dict(), "stopped": stopped.to_dict()},
        out / f"rank{rank}.pt",
    )


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("ddp")
    spawn_ranks(_rank_main, args=((find_free_port(), find_free_port()), out), nprocs=WORLD)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)] + [
        {"ckpt_files": sorted(p.name for p in (out / "ckpt").iterdir())}
    ]


@pytest.mark.timeout(180)
def test_two_ranks_equal_one_process_with_the_same_global_batch(
    ranks: list[dict[str, Any]],
) -> None:
    single = Harness(tiny("mlp", micro_batch=8, grad_accum=2, steps=STEPS))
    single_result = single.run()
    for rank in ranks[:WORLD]:
        for mine, theirs in zip(rank["params"], single.model.parameters(), strict=True):
            assert torch.allclose(mine, theirs, atol=1e-6, rtol=1e-5)
        result = rank["result"]
        assert result["world_size"] == WORLD and result["global_batch"] == 16
        assert result["loss"] == pytest.approx(single_result.loss, rel=1e-5)
    # one record (committed by rank 0) and the last step's tensors (written by both ranks)
    assert ranks[WORLD]["ckpt_files"] == ["checkpoint.pt", "step-000000003"]


@pytest.mark.timeout(180)
def test_two_ranks_with_accumulation_tell_the_gradient_sync_apart(
    ranks: list[dict[str, Any]],
) -> None:
    """Each rank's timed step in parts (``workers.step_parts``): the sync's exposed time is
    measured (the last micro-batch over the one before it), and the parts add up."""
    for rank in ranks[:WORLD]:
        result = rank["result"]
        keys = ("fwd_bwd_ms", "comm_ms", "optimizer_ms", "step_other_ms")
        parts = [result[k] for k in keys]
        assert all(p is not None and p >= 0 for p in parts), parts
        assert sum(parts) == pytest.approx(result["compute_ms"], rel=1e-6)


@pytest.mark.timeout(180)
def test_a_stop_on_one_rank_stops_every_rank_at_the_same_step(
    ranks: list[dict[str, Any]],
) -> None:
    stopped = [r["stopped"] for r in ranks[:WORLD]]
    assert [s["status"] for s in stopped] == ["stopped", "stopped"]
    assert [s["steps_done"] for s in stopped] == [2, 2]


def test_find_free_port_gives_a_bindable_port() -> None:
    import socket

    port = find_free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
