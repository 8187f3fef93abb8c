"""The search space of a job: bounds from the spec, precisions from the device."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import TuneError
from orchestrator.spec import parse_spec
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace, power_ladder, space_for

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
    assert cpu.micro_batches == power_ladder(1, 256)
    assert cpu.grad_accums == (1, 2, 4)
    assert space_for(_spec(), VOLTA).precisions == ("fp32", "fp16")  # no bf16 before Ampere
    gpu = space_for(_spec(resources={"gpus": {"min": 1, "max": 4}}), AMPERE)
    assert gpu.gpus == (1, 2, 3, 4) and gpu.shardings == ("ddp", "fsdp")
    assert gpu.compile == (False, True)


def test_bounds_pin_and_narrow() -> None:
    spec = _spec(
        resources={"gpus": {"min": 2, "max": 8}},
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
    assert s.micro_batches == (3, 4, 8, 16, 20)
    assert s.gpus == (2, 3, 4)  # within resources and bounds
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
    assert SearchSpace.params(Config(1)) == {
        k: v for k, v in Config(1).to_dict().items() if k != "sharding"
    }


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
