"""The search space of a job: bounds from the spec, precisions from the device."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import TuneError
from orchestrator.spec import parse_spec
from orchestrator.tuner.job_space import space_for
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace, power_ladder

CPU = DeviceCaps()
AMPERE = DeviceCaps(
    name="A100",
    kind="cuda",
    precisions=("fp32", "bf16", "fp16"),
    shardings=("ddp", "fsdp"),
    max_gpus=8,
    compile=True,
)
VOLTA = DeviceCaps(name="V100", kind="cuda", precisions=("fp32", "fp16"), max_gpus=8)


def _spec(**extra: Any) -> Any:
    data = {
        "name": "j",
        "team": "t",
        "class": "bulk",
        "workload": "gpt",
        "sla": {"throughput": {"min_samples_per_s": 10}},
        "run": {"steps": 5},
        **extra,
    }
    return parse_spec(data)


def test_defaults_follow_the_device() -> None:
    cpu = space_for(_spec(), CPU)
    assert cpu.precisions == ("fp32", "bf16")  # no fp16 without CUDA
    assert cpu.compile == (False,)
    # the job's global batch (32 x 1 x 1 GPU) split as 32, 16 x 2 and 8 x 4
    assert cpu.global_batches == (32,)
    assert cpu.micro_batches == (8, 16, 32) and cpu.grad_accums == (1, 2, 4)
    inference = space_for(_spec(), CPU, forward_only=True)
    assert inference.micro_batches == power_ladder(1, 256) and inference.grad_accums == (1,)
    assert inference.global_batches is None
    assert space_for(_spec(), VOLTA).precisions == ("fp32", "fp16")  # no bf16 before Ampere
    gpu = space_for(_spec(resources={"gpus": {"min": 1, "max": 4}}), AMPERE)
    assert gpu.gpus == (1, 2, 4) and gpu.shardings == ("ddp", "fsdp")  # 3 GPUs cannot split 32
    assert gpu.compile == (False, True)


def test_bounds_pin_and_narrow() -> None:
    spec = _spec(
        resources={"gpus": {"min": 2, "max": 8}},
        run={"steps": 5, "micro_batch": 8},  # global batch 8 x 1 x 2 GPUs = 16
        tuning={
            "bounds": {
                "micro_batch": {"min": 3, "max": 20},
                "gpus": {"min": 1, "max": 4},
                "precision": ["bf16"],
                "activation_checkpointing": [False],
                "sharding": ["ddp"],
                "grad_accum": {"min": 1, "max": 1},
            }
        },
    )
    s = space_for(spec, AMPERE)
    assert s.micro_batches == (4, 8)  # 16 on 2 or 4 GPUs; 3 GPUs cannot split it
    assert s.gpus == (2, 4)  # within resources and bounds
    assert {c.global_batch for c in s.configs()} == {16}
    free = space_for(spec, AMPERE, forward_only=True)
    assert free.micro_batches == (3, 4, 8, 16, 20) and free.gpus == (2, 3, 4)
    assert (s.precisions, s.activation_checkpointing, s.shardings, s.grad_accums) == (
        ("bf16",),
        (False,),
        ("ddp",),
        (1,),
    )


def test_impossible_bounds_say_why() -> None:
    with pytest.raises(TuneError, match=r"precision.*fp16.*supported here"):
        space_for(_spec(tuning={"bounds": {"precision": ["fp16"]}}), CPU)
    with pytest.raises(TuneError, match="no GPU count fits"):
        space_for(_spec(resources={"gpus": 4}), CPU)


def test_one_gpu_configs_have_no_sharding_and_appear_once() -> None:
    s = SearchSpace(micro_batches=(1, 2), gpus=(1, 2), shardings=("ddp", "fsdp"))
    configs = list(s.configs())
    assert len(configs) == len(set(configs)) == 2 + 4
    assert Config(1, gpus=1, sharding="fsdp") == Config(1, gpus=1)
    own = {k: v for k, v in Config(1).to_dict().items() if k != "sharding"}
    assert s.params(Config(1)) == {**own, "loader": Config(1).loader}  # suggested every trial


def test_tuned_spec_runs_the_chosen_config() -> None:
    from orchestrator.runtime.harness_config import tuned_spec

    spec = _spec(resources={"gpus": {"min": 1, "max": 4}})
    out = tuned_spec(spec, Config(48, grad_accum=2, gpus=2, precision="bf16", compile=True))
    r = out.run
    assert (r.micro_batch, r.grad_accum, r.precision, r.compile, out.gpus) == (
        48,
        2,
        "bf16",
        True,
        2,
    )
    assert r.sharding == "ddp"
    fsdp = tuned_spec(spec, Config(8, gpus=2, sharding="fsdp"))
    assert (fsdp.run.sharding, fsdp.gpus) == ("fsdp", 2)


def test_tuned_spec_keeps_the_jobs_sharding_for_a_one_gpu_config() -> None:
    from orchestrator.runtime.harness_config import tuned_spec

    spec = _spec(resources={"gpus": {"min": 1, "max": 4}}, run={"steps": 5, "sharding": "fsdp"})
    out = tuned_spec(spec, Config(8, gpus=1))
    assert (out.run.sharding, out.gpus) == ("fsdp", 1)


@pytest.mark.parametrize(
    ("facts", "precisions", "compile_"),
    [
        ({"kind": "cpu", "name": "cpu", "major": 0, "count": 0}, ("fp32", "bf16"), False),
        ({"kind": "cuda", "name": "Tesla V100", "major": 7, "count": 8}, ("fp32", "fp16"), True),
        ({"kind": "cuda", "name": "H100", "major": 9, "count": 1}, ("fp32", "bf16", "fp16"), True),
    ],
)
def test_caps_from_a_workers_device_facts(
    facts: dict[str, object], precisions: tuple[str, ...], compile_: bool
) -> None:
    """A tuning gang's space follows the device its workers report (bf16 on a CPU and on
    Ampere or newer, fp16 on CUDA only), with the gang's size as the GPU limit."""
    caps = DeviceCaps.from_facts(facts, max_gpus=4, shardings=("ddp", "fsdp"))
    assert caps.precisions == precisions and caps.compile is compile_
    assert caps.max_gpus == 4 and caps.shardings == ("ddp", "fsdp")
    assert caps.name == facts["name"]


def _space_of(run: dict[str, Any], **extra: Any) -> SearchSpace:
    return space_for(_spec(run={"steps": 5, **run}, **extra), AMPERE)


@settings(max_examples=60, deadline=None)
@given(
    micro=st.integers(1, 96),
    accum=st.integers(1, 6),
    gpus=st.tuples(st.integers(1, 4), st.integers(0, 4)),
)
def test_every_config_keeps_the_jobs_global_batch(
    micro: int, accum: int, gpus: tuple[int, int]
) -> None:
    """Whatever the job's batch geometry, every point of its space (and so every config any
    strategy may propose) has its global batch, and its own config is one of them."""
    lo, extra = gpus
    spec = _spec(
        run={"steps": 5, "micro_batch": micro, "grad_accum": accum},
        resources={"gpus": {"min": lo, "max": lo + extra}},
    )
    s = space_for(spec, AMPERE)
    own = micro * accum * lo
    assert s.global_batches == (own,)
    assert {c.global_batch for c in s.configs()} == {own}
    if micro <= AMPERE.max_micro_batch:
        assert s.contains(Config(micro, accum, lo, precision="fp32"))
    for c in s.configs():  # a line keeps it too
        assert all(p.global_batch == own for p in s.line(c))


def test_a_global_batch_range_needs_its_rule_and_is_searched_within() -> None:
    s = _space_of(
        {"micro_batch": 24},
        tuning={"bounds": {"global_batch": {"min": 16, "max": 64}, "lr_scaling": "sqrt"}},
    )
    assert s.global_batches == (16, 24, 32, 64)  # powers of two, both ends and its own
    assert {c.global_batch for c in s.configs()} == {16, 24, 32, 64}


def test_no_split_of_the_batch_says_what_to_widen() -> None:
    with pytest.raises(TuneError, match=r"no split of the global batch 32 fits.*global_batch"):
        _space_of({}, tuning={"bounds": {"micro_batch": {"min": 1, "max": 4}}})


def test_a_forward_only_workload_refuses_accumulation_and_a_batch_range() -> None:
    spec = _spec(tuning={"bounds": {"grad_accum": {"min": 1, "max": 2}}})
    with pytest.raises(TuneError, match="grad_accum must be 1"):
        space_for(spec, CPU, forward_only=True)
    assert space_for(spec, CPU).grad_accums == (1, 2)  # a training job may accumulate


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_optuna_only_suggests_configs_that_keep_the_batch(sampler: str) -> None:
    """The conditional parameters (micro-batch per GPU count and global batch) leave no
    sampler a way out of the space, and an enqueued config comes back as itself."""
    import optuna

    s = _space_of(
        {"micro_batch": 16},
        resources={"gpus": {"min": 1, "max": 4}},
        tuning={"bounds": {"global_batch": {"min": 16, "max": 64}, "lr_scaling": "linear"}},
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    chosen = optuna.samplers.TPESampler(seed=1) if sampler == "tpe" else None
    study = optuna.create_study(sampler=chosen or optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for i in range(40):
        trial = study.ask()
        c = s.suggest(trial)
        assert s.contains(c), c
        seen.add(c.global_batch)
        study.tell(trial, float(c.micro_batch + i % 3))
    assert seen == {16, 32, 64}
    target = Config(4, grad_accum=2, gpus=4, sharding="fsdp")
    study.enqueue_trial(s.params(target))
    assert s.suggest(study.ask()) == target


PLANS = {"tp": [1, 2], "pp": [1, 2], "zero": [0, 1, 2, 3]}


def _planned_space() -> SearchSpace:
    return space_for(
        _spec(
            resources={"gpus": {"min": 1, "max": 4}},
            run={"steps": 5, "micro_batch": 4, "grad_accum": 4},  # global batch 16 on 1 GPU
            tuning={"bounds": {"plan": PLANS, "precision": ["fp32"], "compile": [False]}},
        ),
        AMPERE,
    )


def test_plans_in_the_space_keep_the_batch_over_replicas_and_are_valid() -> None:
    from workers.parallel import Plan

    s = _planned_space()
    layouts = {(c.gpus, c.tp, c.pp, c.zero) for c in s.configs()}
    # 4 GPUs: dp 4 at every ZeRO stage; dp 2 x (tp 2 or pp 2) at ZeRO 2 and 3 only; tp 2 x pp 2
    assert {(tp, pp, z) for g, tp, pp, z in layouts if g == 4} == {
        (1, 1, 0), (1, 1, 1), (1, 1, 2), (1, 1, 3),
        (2, 1, 2), (2, 1, 3), (1, 2, 2), (1, 2, 3), (2, 2, 0),
    }  # fmt: skip
    assert not any(g == 3 for g, *_ in layouts)  # 3 replicas cannot split a batch of 16
    for c in s.configs():
        assert c.global_batch == 16 and s.contains(c)
        plan = c.plan()
        if plan is not None:
            assert not Plan(**plan).problems(world=c.gpus), c
    assert s.to_dict()["plans"][0] == [1, 1, 0]


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_optuna_suggests_plans_that_fit_and_an_enqueued_plan_comes_back(sampler: str) -> None:
    import optuna

    s = _planned_space()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    chosen = optuna.samplers.TPESampler(seed=2) if sampler == "tpe" else None
    study = optuna.create_study(sampler=chosen or optuna.samplers.RandomSampler(seed=2))
    seen = set()
    for i in range(40):
        trial = study.ask()
        c = s.suggest(trial)
        assert s.contains(c) and c.global_batch == 16, c
        seen.add((c.tp, c.pp))
        study.tell(trial, float(c.micro_batch + i % 3))
    assert len(seen) > 1
    for target in (Config(2, grad_accum=4, gpus=4, tp=2, zero=3), Config(4, gpus=4, zero=1)):
        study.enqueue_trial(s.params(target))
        assert s.suggest(study.ask()) == target


def test_tuned_spec_runs_the_chosen_plan() -> None:
    from orchestrator.elastic import global_batch
    from orchestrator.runtime.harness_config import job_harness_config, tuned_spec
    from workers.config import HarnessConfig

    spec = _spec(resources={"gpus": {"min": 1, "max": 4}}, run={"steps": 5, "micro_batch": 16})
    out = tuned_spec(spec, Config(4, grad_accum=2, gpus=4, tp=2, pp=1, zero=2))
    assert out.run.plan is not None and out.run.plan.model_dump() == {
        "dp": 2, "tp": 2, "pp": 1, "zero": 2, "offload": False,
    }  # fmt: skip
    assert (out.gpus, global_batch(out)) == (4, 16)
    assert HarnessConfig.from_dict(job_harness_config(out)).plan == out.run.plan.model_dump()
    plain = tuned_spec(out, Config(16, gpus=1))
    assert plain.run.plan is None and global_batch(plain) == 16


def test_a_config_of_data_parallelism_alone_keeps_its_old_form() -> None:
    assert Config(8, gpus=2, sharding="fsdp").to_dict() == {
        "micro_batch": 8, "grad_accum": 1, "gpus": 2, "sharding": "fsdp", "precision": "fp32",
        "activation_checkpointing": False, "compile": False,
    }  # fmt: skip
    assert Config(8, gpus=2, zero=3) == Config(8, gpus=2, sharding="fsdp")
    assert Config(8, gpus=2, tp=2, zero=3).zero == 0  # one replica: nothing to shard
    assert Config.from_dict(Config(8, gpus=4, pp=2, zero=2).to_dict()).plan() == {
        "dp": 2, "tp": 1, "pp": 2, "zero": 2, "offload": False,
    }  # fmt: skip


def test_selective_checkpointing_shares_are_points_of_the_space() -> None:
    """Issue 37: a job's bounds may name shares of the blocks to recompute; the space holds
    them as values of their own, and a config says its share."""
    spec = _spec(tuning={"bounds": {"activation_checkpointing": [False, 0.5, True]}})
    s = space_for(spec, CPU)
    assert s.activation_checkpointing == (False, 0.5, True)
    half = [c for c in s.configs() if c.activation_checkpointing == 0.5]
    assert half and all(s.contains(c) for c in half)
    assert "ckpt 50%" in half[0].describe()
    assert Config.from_dict(half[0].to_dict()) == half[0]


@pytest.mark.parametrize("bad", [1.5, -0.2])
def test_a_share_outside_zero_to_one_names_the_field(bad: float) -> None:
    from orchestrator.errors import SpecError

    with pytest.raises(SpecError, match=r"run\.activation_checkpointing: must be true"):
        _spec(run={"steps": 5, "activation_checkpointing": bad})
    with pytest.raises(SpecError, match=r"tuning\.bounds\.activation_checkpointing"):
        _spec(tuning={"bounds": {"activation_checkpointing": [False, bad]}})


def test_zero_and_one_are_off_and_on() -> None:
    spec = _spec(run={"steps": 5, "activation_checkpointing": 1})
    assert spec.run.activation_checkpointing is True
    assert (
        _spec(run={"steps": 5, "activation_checkpointing": 0.0}).run.activation_checkpointing
        is False
    )


def test_a_command_jobs_bounds_may_ask_for_what_job_prepare_applies() -> None:
    """Sharding, checkpointing and compile reach a script through ``job.prepare``: searched
    when the bounds name them, off otherwise; a plan stays refused."""
    from orchestrator.errors import SpecError

    command = {
        "command": ["python", "train.py"],
        "working_dir": "sha256:" + "0" * 64,
    }
    asked = _spec(
        workload=command,
        resources={"gpus": {"min": 1, "max": 2}},
        tuning={
            "enabled": True,
            "bounds": {
                "sharding": ["ddp", "fsdp"],
                "activation_checkpointing": [False, 0.5],
                "compile": [False, True],
            },
        },
    )
    s = space_for(asked, AMPERE)
    assert (s.shardings, s.activation_checkpointing, s.compile) == (
        ("ddp", "fsdp"),
        (False, 0.5),
        (False, True),
    )
    plain = space_for(_spec(workload=command, tuning={"enabled": True}), AMPERE)
    assert (plain.shardings, plain.activation_checkpointing, plain.compile) == (
        ("ddp",),
        (False,),
        (False,),
    )
    with pytest.raises(SpecError, match=r"tuning\.bounds\.plan: a command job's script"):
        _spec(workload=command, tuning={"enabled": True, "bounds": {"plan": {"tp": [1, 2]}}})
