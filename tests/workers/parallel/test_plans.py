"""Every parallel plan that 4 CPU ranks allow trains like one process, checkpoints cross plans,
and each higher ZeRO stage holds less model state per rank.

One spawn of 4 Gloo ranks for the module: each run below gets its own process group (met
through a file, so concurrent test runs cannot race for ports); the single-process references
run in the test process. Tolerance: relative 1e-5 on the loss and on the sum of absolute
parameter values, fp32 (the plans reduce in other orders than one process, nothing more).

SGD throughout: AdamW turns float noise on the attention key bias (its true gradient is 0)
into full-size updates, whatever the plan.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from orchestrator.tuner.planmodel import state_bytes
from orchestrator.tuner.space import Config
from tests.workers.spawn import spawn_fresh
from workers import distributed
from workers.config import HarnessConfig
from workers.harness import Harness
from workers.parallel import Plan, recipe
from workers.parallel.dims import ParallelDims
from workers.parallel.state import model_state_bytes
from workers.workloads.registry import build_workload

WORLD = 4
STOP_AT = 3
GPT = {"n_layer": 2, "d_model": 32, "n_head": 4, "seq_len": 16, "vocab": 64}


def _gpt(plan: Plan, micro_batch: int = 2, **overrides: Any) -> HarnessConfig:
    fields: dict[str, Any] = {
        "workload": "gpt",
        "workload_args": GPT,
        "micro_batch": micro_batch,
        "grad_accum": 2,
        "steps": 3,
        "warmup_steps": 1,
        "optimizer": "sgd",
        "lr": 0.05,
        "plan": plan.to_dict(),
    }
    return HarnessConfig(**{**fields, **overrides})


# name -> plan on 4 ranks; every one trains the global batch micro-batch 2 x accumulation 2 x dp
# (ZeRO 0 and 3 on data parallelism alone: tests/workers/test_sharding.py, on 2 ranks)
EQUAL: dict[str, Plan] = {
    "dp4_zero1": Plan(dp=4, zero=1),
    "dp4_zero2": Plan(dp=4, zero=2),
    "tp4": Plan(tp=4),
    "dp2_tp2_zero3": Plan(dp=2, tp=2, zero=3),
    "dp2_pp2_zero3": Plan(dp=2, pp=2, zero=3),
    "tp2_pp2": Plan(tp=2, pp=2),
}

# checkpoint crossings at one global batch of 8: (stopped run, resumed run, shared directory)
RESUMABLE = {"steps": 5, "checkpoint_every": 2}


# A job's profile as the tuner keeps it: trials on 2 ranks at the elastic job's global batch of
# 8, pipeline parallelism measured fastest there (the figures are made up for the choice).
_TRIAL = {"gpus": 2, "micro_batch": 2, "grad_accum": 4, "precision": "fp32", "status": "ok"}
PROFILE = {
    "curves": {
        "fp32": [
            {**_TRIAL, "tp": 2, "pp": 1, "zero": 0, "samples_per_s": 10.0, "p95_ms": 900.0},
            {**_TRIAL, "tp": 1, "pp": 2, "zero": 0, "samples_per_s": 30.0, "p95_ms": 300.0},
        ]
    }
}


def _elastic(gpus: int) -> HarnessConfig:
    """The harness config of a job with plan dp 2 x tp 2 (ZeRO 3) on 4 GPUs, resized by the
    scheduler's own path to ``gpus`` (``orchestrator.tuner.replan.replanned_spec``, as the
    control loop calls it: on 2 GPUs its profile's trials pick pipeline parallelism, where the
    old rule kept tp 2; the batch split follows, the global batch is kept)."""
    from orchestrator.runtime.harness_config import job_harness_config
    from orchestrator.spec import parse_spec
    from orchestrator.tuner.replan import replanned_spec

    spec = parse_spec(
        {
            "name": "e",
            "team": "t",
            "class": "bulk",
            "workload": {"name": "gpt", "args": GPT},
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": {"min": 2, "max": 4}},
            "run": {
                "micro_batch": 2,
                "grad_accum": 2,
                "data_parallel": 4,
                "plan": {"dp": 2, "tp": 2, "zero": 3},
                "warmup_steps": 1,
                **RESUMABLE,
            },
        }
    )
    sized = replanned_spec(spec, gpus, PROFILE).spec
    assert sized is not None
    config = HarnessConfig.from_dict(job_harness_config(sized))
    return dataclasses.replace(config, optimizer="sgd", lr=0.05)


CROSS: dict[str, tuple[HarnessConfig, str, bool]] = {
    # a resize from 4 GPUs to 2: dp 2 x tp 2 becomes pp 2 (the profile's best), accumulation 4
    "resize_stop": (_elastic(4), "c", True),
    "resize_resume": (_elastic(2), "c", False),
    "zero3_tp_stop": (_gpt(Plan(dp=2, tp=2, zero=3), **RESUMABLE), "a", True),
    "pp_tp_resume": (_gpt(Plan(tp=2, pp=2), micro_batch=4, **RESUMABLE), "a", False),
    "zero1_stop": (_gpt(Plan(dp=4, zero=1), micro_batch=1, **RESUMABLE), "b", True),
    "dp_pp_resume": (_gpt(Plan(dp=2, pp=2, zero=2), **RESUMABLE), "b", False),
}


def test_the_resize_runs_the_plan_its_trials_picked() -> None:
    plan = Plan.from_dict(CROSS["resize_resume"][0].plan or {})
    assert plan == Plan(pp=2)
    assert (CROSS["resize_resume"][0].micro_batch, CROSS["resize_resume"][0].grad_accum) == (2, 4)


def _stop_after(n_steps: int) -> Any:
    polls = iter(range(10_000))
    return lambda: next(polls) >= n_steps


def _memory(rank: int, out: Path, zero: int) -> dict[str, int]:
    """Model-state bytes on this rank under ZeRO ``zero`` on 4 replicas, AdamW: parameters as
    registered after the forward (what the backward will use), gradients after the backward,
    optimizer state after the step."""
    config = _gpt(Plan(dp=WORLD, zero=zero), optimizer="adamw", steps=1)
    plan = Plan.from_dict(config.plan or {})
    init = f"file://{out / f'mem{zero}.rendezvous'}"
    distributed.init_group(torch.device("cpu"), init, rank, WORLD)
    try:
        torch.manual_seed(0)
        workload = build_workload("gpt", GPT, 0)
        p = recipe.parallelize(
            workload, plan, config, 1e-3, ParallelDims(plan, rank, torch.device("cpu"))
        )
        loss = workload.loss(p.module, workload.make_batch(rank * 2, 2))
        held = {"params": model_state_bytes(p.model)["params"]}
        loss.backward()
        held["grads"] = model_state_bytes(p.model)["grads"]
        p.optimizer.step()
        held["optimizer"] = model_state_bytes(p.model, p.optimizer)["optimizer"]
        return held
    finally:
        distributed.shutdown_group()


def _rank_main(rank: int, out: Path) -> None:
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    runs = {n: (_gpt(plan), None, False) for n, plan in EQUAL.items()} | CROSS
    for name, (config, ckpt, stops) in runs.items():
        world = Plan.from_dict(config.plan or {}).world
        if rank >= world:  # a run on fewer ranks: the others sit it out
            continue
        harness = Harness(
            config,
            rank=rank,
            world_size=world,
            init_method=f"file://{out / f'{name}.rendezvous'}",
            device="cpu",
            checkpoint_dir=out / ckpt if ckpt else None,
            should_stop=_stop_after(STOP_AT) if stops else None,
        )
        results[name] = harness.run().to_dict()
    results["memory"] = {zero: _memory(rank, out, zero) for zero in (0, 1, 2, 3)}
    torch.save(results, out / f"rank{rank}.pt")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    (out,) = spawn_fresh(_rank_main, lambda: (tmp_path_factory.mktemp("plans"),), nprocs=WORLD)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def _one_process(config: HarnessConfig) -> Any:
    """``config`` run by one process with the same global batch and data."""
    plan = Plan.from_dict(config.plan or {})
    single = dataclasses.replace(config, micro_batch=config.micro_batch * plan.dp, plan=None)
    return Harness(single).run()


def _agrees(result: dict[str, Any], reference: Any, rel: float = 1e-5) -> None:
    assert result["param_fingerprint"] == pytest.approx(reference.param_fingerprint, rel=rel)
    assert result["loss"] == pytest.approx(reference.loss, rel=rel)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(EQUAL))
def test_each_plan_trains_like_one_process(ranks: list[dict[str, Any]], name: str) -> None:
    plan = EQUAL[name]
    reference = _one_process(_gpt(plan))
    for rank in ranks:
        result = rank[name]
        assert (result["status"], result["steps_done"]) == ("finished", 3)
        assert result["global_batch"] == 2 * 2 * plan.dp  # a plan never changes the batch
        _agrees(result, reference)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("stopped", "resumed"),
    [
        ("zero3_tp_stop", "pp_tp_resume"),
        ("zero1_stop", "dp_pp_resume"),
        ("resize_stop", "resize_resume"),
    ],
)
def test_a_checkpoint_resumes_under_another_plan(
    ranks: list[dict[str, Any]], stopped: str, resumed: str
) -> None:
    straight = _one_process(CROSS[resumed][0])
    for rank in ranks:
        assert (rank[stopped]["status"], rank[stopped]["steps_done"]) == ("stopped", STOP_AT)
    world = Plan.from_dict(CROSS[resumed][0].plan or {}).world
    for rank in ranks[:world]:
        end = rank[resumed]
        assert (end["status"], end["resumed_from_step"], end["steps_done"]) == (
            "finished",
            STOP_AT,
            5,
        )
        assert end["global_batch"] == 8
        _agrees(end, straight)


@pytest.mark.timeout(300)
def test_each_higher_zero_stage_holds_less_per_rank(ranks: list[dict[str, Any]]) -> None:
    for rank in ranks:
        m = rank["memory"]
        # ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 the parameters
        assert m[1]["optimizer"] < m[0]["optimizer"]
        assert (m[1]["grads"], m[1]["params"]) == (m[0]["grads"], m[0]["params"])
        assert m[2]["grads"] < m[1]["grads"] and m[2]["params"] == m[1]["params"]
        assert m[3]["params"] < m[2]["params"]
        totals = [sum(m[z].values()) for z in (0, 1, 2, 3)]
        assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4
        # the search's memory model (exact but for ZeRO-1's uneven split by whole parameters)
        params = sum(p.numel() for p in build_workload("gpt", GPT, 0).model.parameters())
        for zero, total in enumerate(totals):
            predicted = state_bytes(Config(2, gpus=WORLD, zero=zero), params, optimizer_states=2)
            assert total == pytest.approx(predicted, rel=0.1 if zero == 1 else 0.01), zero
