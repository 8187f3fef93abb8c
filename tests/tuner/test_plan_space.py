"""Plans that cannot run are left out of the search space, each with its reason: those the
built-in model cannot split (the harness's rule) and the layouts whose model state per rank
does not fit the pool's GPUs (``orchestrator.tuner.plan_space``)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import TuneError
from orchestrator.spec import parse_spec
from orchestrator.tuner.job_space import space_for
from orchestrator.tuner.planmodel import state_bytes
from orchestrator.tuner.space import DeviceCaps, SearchSpace
from workers.workloads.shapes import builtin_shape

GPT = {"n_layer": 2, "n_head": 4, "d_model": 64}
P = builtin_shape("gpt", GPT).params  # type: ignore[union-attr]


def _gpu(memory_bytes: float | None) -> DeviceCaps:
    return DeviceCaps(
        name="GPU",
        kind="cuda",
        precisions=("fp32",),
        shardings=("ddp", "fsdp"),
        max_gpus=4,
        memory_bytes=memory_bytes,
    )


def _space(plan: dict[str, Any] | None, caps: DeviceCaps, gpus: int = 4) -> SearchSpace:
    bounds: dict[str, Any] = {"compile": [False], "activation_checkpointing": [False]}
    if plan is not None:
        bounds["plan"] = plan
    spec = parse_spec(
        {
            "name": "j",
            "team": "t",
            "class": "bulk",
            "workload": {"name": "gpt", "args": GPT},
            "sla": {"throughput": {"min_samples_per_s": 10}},
            "resources": {"gpus": {"min": 1, "max": gpus}},
            "run": {"steps": 5, "micro_batch": 4, "grad_accum": 4},  # global batch 16
            "tuning": {"enabled": True, "bounds": bounds},
        }
    )
    return space_for(spec, caps)


def _layouts(s: SearchSpace) -> set[tuple[int, int, int, int]]:
    return {(c.gpus, c.tp, c.pp, c.zero) for c in s.configs()}


def test_plans_the_model_cannot_split_are_dropped_with_the_reason() -> None:
    s = _space({"tp": [1, 2, 3], "pp": [1, 2, 4], "zero": [0, 3]}, _gpu(None))
    assert {(tp, pp) for _, tp, pp, _ in _layouts(s)} == {(1, 1), (2, 1), (1, 2), (2, 2)}
    assert s.plans is not None and not any(tp == 3 or pp == 4 for tp, pp, _ in s.plans)
    assert (
        "tp 3 x pp 1 left out: tuning.bounds.plan.tp must divide the model's 4 attention heads, "
        "got 3 (allowed: 1, 2, 4)" in s.dropped
    )
    assert any("pp must divide the model's 2 blocks, got 4" in d for d in s.dropped)


def test_layouts_whose_model_state_does_not_fit_the_gpu_are_never_tried() -> None:
    # fp32 AdamW holds 16 bytes a parameter: 16P on one GPU. On a GPU of 10P bytes only
    # layouts that shard enough fit: dp 2 from ZeRO 2 on (4P + 2P + 4P), dp 4 from ZeRO 1 on
    # (4P + 4P + 2P), tp 2 or pp 2 alone (8P), and any split over 4 GPUs.
    memory = 10.0 * P
    s = _space({"tp": [1, 2], "pp": [1, 2], "zero": [0, 1, 2, 3]}, _gpu(memory))
    assert _layouts(s) == {
        (2, 1, 1, 2), (2, 1, 1, 3), (2, 2, 1, 0), (2, 1, 2, 0),
        (4, 1, 1, 1), (4, 1, 1, 2), (4, 1, 1, 3), (4, 2, 1, 2), (4, 2, 1, 3),
        (4, 1, 2, 2), (4, 1, 2, 3), (4, 2, 2, 0),
    }  # fmt: skip
    assert all(state_bytes(c, P) <= memory for c in s.configs())
    assert not any(s.contains(c) for c in _space(None, _gpu(None)).configs() if c.gpus == 1)
    assert any(d.startswith("one GPU left out: its model state") for d in s.dropped)
    assert any(d.startswith("tp 1 x pp 1, zero 1 on 2 GPUs left out") for d in s.dropped)
    assert s.to_dict()["excluded"][0] == [1, 1, 1, 0]


def test_data_parallel_spaces_are_filtered_too() -> None:
    s = _space(None, _gpu(10.0 * P))  # ddp holds 16P a rank anywhere, FSDP 8P on 2 GPUs
    assert {(c.gpus, c.sharding) for c in s.configs()} == {(2, "fsdp"), (4, "fsdp")}


def test_unknown_memory_filters_nothing() -> None:
    plan = {"tp": [1, 2], "pp": [1, 2], "zero": [0, 1, 2, 3]}
    unknown = _space(plan, _gpu(None))
    assert not unknown.dropped and not unknown.excluded and (1, 1, 1, 0) in _layouts(unknown)
    assert _space(plan, _gpu(1e12)) == unknown
    assert "excluded" not in unknown.to_dict()  # the cache's fingerprint of such a space stays


def test_a_model_that_fits_no_layout_says_so() -> None:
    with pytest.raises(TuneError, match="no GPU layout of the job fits the GPU's memory"):
        _space({"tp": [1, 2], "zero": [3]}, _gpu(1.0 * P))


def test_the_gpu_memory_comes_from_the_workers_probe() -> None:
    facts = {"kind": "cuda", "name": "H100", "major": 9, "count": 1, "memory_bytes": 8e10}
    assert DeviceCaps.from_facts(facts).memory_bytes == 8e10
    assert DeviceCaps.from_facts({**facts, "memory_bytes": None}).memory_bytes is None
    assert DeviceCaps.from_facts({"kind": "cpu", "count": 0}).memory_bytes is None


def test_what_was_left_out_is_shown_with_the_tuning() -> None:
    from rich.console import Console

    from orchestrator.cli.tune import show_tuning

    s = _space({"tp": [1, 3], "pp": [1, 2], "zero": [2, 3]}, _gpu(10.0 * P))
    report = {
        "status": "feasible",
        "goal": "throughput",
        "cache": "miss",
        "trials": 0,
        "profiling_s": 0.0,
        "stopped": "budget",
        "dropped": list(s.dropped),
    }
    console = Console(record=True, width=400)
    console.print(show_tuning(report))
    text = console.export_text()
    assert "left out of the search: tp 3 x pp 1 left out: tuning.bounds.plan.tp must divide" in text
    assert "(allowed: 1, 2, 4)" in text and "over the GPU's" in text


def test_optuna_suggests_only_layouts_that_fit() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = _space(None, _gpu(10.0 * P))  # DDP fits nowhere, FSDP on 2 and 4 GPUs
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(20):
        trial = study.ask()
        c = s.suggest(trial)
        assert s.contains(c) and c.sharding == "fsdp", c
        study.tell(trial, float(c.micro_batch))
    target = next(c for c in s.configs() if c.gpus == 4)
    study.enqueue_trial(s.params(target))
    assert s.suggest(study.ask()) == target
