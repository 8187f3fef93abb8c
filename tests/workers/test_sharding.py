"""FSDP (``sharding: fsdp``, a ZeRO-3 plan): two sharded Gloo ranks train like DDP and like one
process, and checkpoints cross over (sharding and world size: saved on 2 ranks, resumed on 1,
and saved on 1, resumed on 2).

Every run below has two ranks in two processes (one spawn for the module, each run with its own
process group, met through a file rather than a TCP port, so concurrent test runs cannot race
for ports); the single-process references run in the test process.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.fsdp import FSDPModule

from tests.workers.helpers import tiny
from tests.workers.spawn import spawn_fresh
from workers.checkpoint import load_checkpoint
from workers.config import HarnessConfig
from workers.harness import Harness

WORLD = 2
STOP_AT = 3


def _equal(sharding: str, **overrides: Any) -> HarnessConfig:
    """GPT (sharded per block), accumulation 2, global batch 2 x 2 x 2 = 8.

    SGD: AdamW would turn the float noise on the attention key bias (its true gradient is 0:
    softmax ignores it) into full-size updates, under DDP as much as under FSDP.
    """
    fields: dict[str, Any] = {
        "micro_batch": 2,
        "grad_accum": 2,
        "steps": 3,
        "optimizer": "sgd",
        "lr": 0.05,
        "sharding": sharding,
    }
    return tiny("gpt", **{**fields, **overrides})


def _whole(sharding: str) -> HarnessConfig:
    """A workload without blocks: FSDP shards the whole model as one unit."""
    return HarnessConfig(
        workload="tests.workers.sample_workload:build",
        workload_args={"features": 8},
        micro_batch=2,
        grad_accum=2,
        steps=3,
        warmup_steps=1,
        sharding=sharding,
    )


def _resumable(sharding: str) -> HarnessConfig:
    """MLP with AdamW (moments and step counts in the checkpoint), 5 steps, checkpoint every 2."""
    return tiny("mlp", micro_batch=2, grad_accum=2, steps=5, checkpoint_every=2, sharding=sharding)


def _one_process(config: HarnessConfig, **overrides: Any) -> HarnessConfig:
    """``config`` for one process with the same global batch (and the same data)."""
    return dataclasses.replace(config, micro_batch=config.micro_batch * WORLD, **overrides)


def _stop_after(n_steps: int) -> Callable[[], bool]:
    polls = iter(range(10_000))
    return lambda: next(polls) >= n_steps


# name -> (config, checkpoint sub-directory or None, stops after STOP_AT steps)
RUNS: dict[str, tuple[HarnessConfig, str | None, bool]] = {
    "fsdp": (_equal("fsdp"), "fsdp", False),
    "ddp": (_equal("ddp"), "ddp", False),
    "fsdp_bf16": (_equal("fsdp", precision="bf16", activation_checkpointing=True), None, False),
    "ddp_bf16": (_equal("ddp", precision="bf16", activation_checkpointing=True), None, False),
    "fsdp_whole": (_whole("fsdp"), None, False),
    "fsdp_stop": (_resumable("fsdp"), "f2d", True),
    "ddp_resume": (_resumable("ddp"), "f2d", False),
    "ddp_stop": (_resumable("ddp"), "d2f", True),
    "fsdp_resume": (_resumable("fsdp"), "d2f", False),
    # the checkpoint of one process (written before the spawn), resumed sharded on two
    "fsdp_from_one": (_resumable("fsdp"), "12", False),
}


def _rank_main(rank: int, out: Path) -> None:
    torch.set_num_threads(1)
    results: dict[str, dict[str, Any]] = {}
    for name, (config, ckpt, stops) in RUNS.items():
        harness = Harness(
            config,
            rank=rank,
            world_size=WORLD,
            init_method=f"file://{out / f'{name}.rendezvous'}",
            device="cpu",
            checkpoint_dir=out / ckpt if ckpt else None,
            should_stop=_stop_after(STOP_AT) if stops else None,
        )
        results[name] = harness.run().to_dict()
        results[name]["fsdp_units"] = sum(
            isinstance(m, FSDPModule) for m in harness.model.modules()
        )
        if name == "fsdp_stop" and rank == 0:  # kept for a resume on one process
            shutil.copytree(out / "f2d", out / "f21")
    torch.save(results, out / f"rank{rank}.pt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:

    def fresh() -> tuple[Path]:
        out = tmp_path_factory.mktemp("fsdp")
        one = Harness(
            _one_process(_resumable("ddp")),
            checkpoint_dir=out / "12",
            should_stop=_stop_after(STOP_AT),
        ).run()
        assert (one.status, one.steps_done) == ("stopped", STOP_AT)
        return (out,)

    (out,) = spawn_fresh(_rank_main, fresh, nprocs=WORLD)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)], out


def _saved(out: Path, sub: str) -> dict[str, Any]:
    """The model and optimizer state of a checkpoint, gathered whole (DCP's own converter)."""
    ckpt = load_checkpoint(out / sub, "gpt", _equal("ddp").workload_args)
    assert ckpt is not None
    full = out / f"{sub}.pt"
    dcp_to_torch_save(out / sub / ckpt.tensors, full)
    data: dict[str, Any] = torch.load(full, weights_only=True)
    return data


def _agrees(result: dict[str, Any], reference: Any, rel: float = 1e-5) -> None:
    assert result["param_fingerprint"] == pytest.approx(reference.param_fingerprint, rel=rel)
    assert result["loss"] == pytest.approx(reference.loss, rel=rel)


@pytest.mark.timeout(240)
def test_fsdp_trains_like_ddp_and_like_one_process(
    runs: tuple[list[dict[str, Any]], Path],
) -> None:
    ranks, out = runs
    single = Harness(_one_process(_equal("ddp")))
    reference = single.run()
    for rank in ranks:
        assert (rank["fsdp"]["fsdp_units"], rank["ddp"]["fsdp_units"]) == (3, 0)  # 2 blocks + root
        for name in ("fsdp", "ddp"):
            assert rank[name]["world_size"] == WORLD and rank[name]["global_batch"] == 8
            _agrees(rank[name], reference)
    # The FSDP checkpoint holds the full weights and the same optimizer state layout as DDP's.
    fsdp, ddp = _saved(out, "fsdp"), _saved(out, "ddp")
    expected = single.model.state_dict()
    assert fsdp["model"].keys() == expected.keys()
    for key, value in fsdp["model"].items():
        assert torch.allclose(value, expected[key], atol=1e-6, rtol=1e-5), key
    # optimizer state flattened by parameter name (workers.parallel.state): the same under both
    momenta = {k for k in ddp["optimizer"] if k.endswith(".momentum_buffer")}
    assert momenta == {f"state.{name}.momentum_buffer" for name in expected}
    assert {k for k in fsdp["optimizer"] if k.endswith(".momentum_buffer")} == momenta
    for key in momenta:
        assert torch.allclose(fsdp["optimizer"][key], ddp["optimizer"][key], atol=1e-6, rtol=1e-5)


@pytest.mark.timeout(240)
def test_fsdp_keeps_mixed_precision_and_activation_checkpointing(
    runs: tuple[list[dict[str, Any]], Path],
) -> None:
    ranks, _ = runs
    single = Harness(_one_process(_equal("ddp", precision="bf16"))).run()
    for rank in ranks:
        ddp, fsdp = rank["ddp_bf16"], rank["fsdp_bf16"]
        assert fsdp["param_fingerprint"] == pytest.approx(ddp["param_fingerprint"], rel=1e-5)
        assert fsdp["loss"] == pytest.approx(ddp["loss"], rel=1e-5)
        _agrees(fsdp, single, rel=1e-2)  # bf16 rounds differently at micro-batch 2 and 4


@pytest.mark.timeout(240)
def test_fsdp_shards_a_model_without_blocks_whole(
    runs: tuple[list[dict[str, Any]], Path],
) -> None:
    ranks, _ = runs
    reference = Harness(_one_process(_whole("ddp"))).run()
    for rank in ranks:
        assert rank["fsdp_whole"]["fsdp_units"] == 1
        _agrees(rank["fsdp_whole"], reference)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("stopped", "resumed"), [("fsdp_stop", "ddp_resume"), ("ddp_stop", "fsdp_resume")]
)
def test_a_checkpoint_resumes_under_the_other_sharding(
    runs: tuple[list[dict[str, Any]], Path], stopped: str, resumed: str
) -> None:
    ranks, _ = runs
    straight = Harness(_one_process(_resumable("ddp"))).run()
    for rank in ranks:
        assert (rank[stopped]["status"], rank[stopped]["steps_done"]) == ("stopped", STOP_AT)
        end = rank[resumed]
        assert (end["status"], end["resumed_from_step"], end["steps_done"]) == (
            "finished",
            STOP_AT,
            5,
        )
        _agrees(end, straight)


@pytest.mark.timeout(240)
def test_a_checkpoint_of_one_process_resumes_sharded_on_two(
    runs: tuple[list[dict[str, Any]], Path],
) -> None:
    ranks, _ = runs
    straight = Harness(_one_process(_resumable("ddp"))).run()
    for rank in ranks:
        end = rank["fsdp_from_one"]
        assert (end["status"], end["resumed_from_step"], end["steps_done"]) == (
            "finished",
            STOP_AT,
            5,
        )
        _agrees(end, straight)


@pytest.mark.timeout(240)
def test_an_fsdp_checkpoint_resumes_on_one_process(runs: tuple[list[dict[str, Any]], Path]) -> None:
    _, out = runs
    # sharding fsdp on one process: accepted, and the model runs unsharded.
    straight = Harness(_one_process(_resumable("ddp"))).run()
    resumed = Harness(_one_process(_resumable("fsdp")), checkpoint_dir=out / "f21").run()
    assert (resumed.resumed_from_step, resumed.steps_done) == (STOP_AT, 5)
    assert resumed.param_fingerprint == pytest.approx(straight.param_fingerprint, rel=1e-5)
    assert resumed.loss == pytest.approx(straight.loss, rel=1e-5)
