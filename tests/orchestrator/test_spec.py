"""Job spec: the examples validate; each bad file fails with the message a user needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import JobSpec, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.*"))
BAD = Path(__file__).parent / "bad_jobs"

EXPECTED = {
    "wrong-class.yaml": "class must be one of 'bulk' or 'interactive', got 'batch'",
    "negative-latency.yaml": "sla.latency.max_ms must be > 0",
    "unknown-workload.yaml": "workload.name: unknown built-in workload 'resnet9'; built-ins: mlp",
    "typo-field.yaml": "run.micro_bach: unknown field; allowed: micro_batch, grad_accum",
    "bad-precision.yaml": "run.precision must be one of 'fp32', 'bf16' or 'fp16', got 'fp8'",
    "bad-sharding.yaml": "run.sharding must be one of 'ddp' or 'fsdp', got 'bogus'",
    "gpus-reversed.yaml": "resources.gpus: max (2) must be >= min (4)",
    "dp-out-of-range.yaml": "run.data_parallel must be within resources.gpus [1, 2], got 4",
    "work-without-deadline.yaml": "sla.throughput: deadline_s is required with work_samples",
    "no-run-length.yaml": "give exactly one run length: run.steps, run.duration_s",
    "bulk-without-throughput.yaml": "sla.throughput is required for class bulk",
    "missing-team.yaml": "team is required",
    "bad-name.yaml": "name must be 1-63 lowercase letters",
    "bad-entry.yaml": "workload.entry must be an entry point 'package.module:function'",
    "not-yaml.yaml": "not valid YAML",
    "not-a-mapping.yaml": "the job must be a mapping of fields, got list",
    "string-floor.json": "sla.throughput.min_samples_per_s must be a number, got 'fast'",
    "bad-objective.yaml": "tuning.objective must be one of 'gpu_seconds' or 'energy', got 'joules'",
    "energy-under-latency.yaml": "tuning.objective 'energy' needs a throughput SLA without",
    "workload-arg-typo.yaml": "workload: args: workload 'mlp' does not take 'hiden'; its "
    "arguments are: classes, hidden, in_features, n_layer, pace_ms",
}


def test_there_are_examples_of_both_classes() -> None:
    classes = [load_spec(p).job_class for p in EXAMPLES]
    assert classes.count("bulk") >= 2 and classes.count("interactive") >= 2


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates(path: Path) -> None:
    spec = load_spec(path)
    again = JobSpec.model_validate(spec.model_dump(mode="json", by_alias=True))
    assert again == spec


def test_every_bad_file_has_an_expectation() -> None:
    assert sorted(p.name for p in BAD.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_file_fails_with_message(name: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(BAD / name)
    assert any(EXPECTED[name] in p for p in info.value.problems), info.value.problems
    assert info.value.exit_code == 2
    assert str(BAD / name) in str(info.value)


def test_all_problems_are_reported_together() -> None:
    data = {
        "name": "a",
        "team": "t",
        "class": "batch",
        "workload": "mlp",
        "sla": {"latency": {"max_ms": 0}},
        "run": {"steps": 0, "precision": "fp8"},
    }
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert len(info.value.problems) == 4


def test_missing_file_and_wrong_suffix() -> None:
    with pytest.raises(SpecError, match="file not found"):
        load_spec(BAD / "nope.yaml")
    with pytest.raises(SpecError, match=r"end in \.yaml, \.yml or \.json"):
        load_spec(ROOT / "README.md")


def test_shorthands_and_defaults() -> None:
    spec = parse_spec(
        {
            "name": "a",
            "team": "t",
            "class": "bulk",
            "workload": "pkg.mod:build",
            "sla": {"throughput": {"work_samples": 1000, "deadline_s": 60}},
            "resources": {"gpus": 2},
            "run": {"micro_batch": 10, "grad_accum": 5},
        }
    )
    assert spec.workload.entry == "pkg.mod:build" and spec.workload.ref == "pkg.mod:build"
    assert (spec.resources.gpus.min, spec.resources.gpus.upper, spec.gpus) == (2, 2, 2)
    assert spec.sla.latency is None and spec.run.precision == "fp32"
    assert spec.run.sharding == "ddp"
    # 1000 samples at 10 x 5 x 2 = 100 per step.
    assert spec.steps_for() == 10


def test_bounds_that_would_only_fail_after_placement_are_caught_at_submit() -> None:
    base = {
        "name": "a",
        "team": "t",
        "class": "interactive",
        "workload": "mlp",
        "sla": {"latency": {"max_ms": 10}},
    }
    with pytest.raises(SpecError, match=r"run.seed must be < 9223372036854775808"):
        parse_spec({**base, "run": {"steps": 5, "seed": 2**70}})
    with pytest.raises(
        SpecError, match=r"run.steps \(5\) must be greater than run.warmup_steps \(5\)"
    ):
        parse_spec({**base, "run": {"steps": 5, "warmup_steps": 5}})


@pytest.mark.parametrize("steps", [1, 3])
def test_steps_within_the_default_warm_up_are_refused_at_submit(steps: int) -> None:
    """The default warm-up counts as a given one: ``steps: 1`` was accepted, then refused
    when the spec was written out whole (tuned settings at placement, ``orch show``)."""
    base = {
        "name": "a",
        "team": "t",
        "class": "interactive",
        "workload": "mlp",
        "sla": {"latency": {"max_ms": 10}},
    }
    with pytest.raises(SpecError) as refused:
        parse_spec({**base, "run": {"steps": steps}})
    assert refused.value.problems == [
        f"run.steps ({steps}) must be greater than run.warmup_steps (3): warm-up steps are not "
        "measured (raise run.steps or lower run.warmup_steps)"
    ]
    ok = parse_spec({**base, "run": {"steps": 4}})
    assert JobSpec.model_validate(ok.model_dump(by_alias=True)) == ok  # written out whole
    assert parse_spec({**base, "run": {"steps": 1, "warmup_steps": 0}}).run.steps == 1


def test_run_sharding_reaches_the_harness_config() -> None:
    from orchestrator.runtime.harness_config import job_harness_config
    from workers.config import HarnessConfig

    base = {
        "name": "a",
        "team": "t",
        "class": "bulk",
        "workload": "mlp",
        "sla": {"throughput": {"min_samples_per_s": 10}},
        "resources": {"gpus": 2},
    }
    fsdp = parse_spec({**base, "run": {"steps": 5, "sharding": "fsdp"}})
    assert HarnessConfig.from_dict(job_harness_config(fsdp)).sharding == "fsdp"
    default = parse_spec({**base, "run": {"steps": 5}})
    assert HarnessConfig.from_dict(job_harness_config(default)).sharding == "ddp"


def _tuned_job(bounds: dict[str, object], workload: str = "gpt", **run: object) -> JobSpec:
    return parse_spec(
        {
            "name": "j",
            "team": "t",
            "class": "bulk",
            "workload": workload,
            "sla": {"throughput": {"min_samples_per_s": 10}},
            "run": {"steps": 5, "micro_batch": 8, **run},
            "tuning": {"enabled": True, "bounds": bounds},
        }
    )


def test_a_global_batch_range_needs_a_learning_rate_rule() -> None:
    with pytest.raises(
        SpecError, match=r"tuning.bounds: a global_batch range changes what the job learns"
    ):
        _tuned_job({"global_batch": {"min": 8, "max": 64}})
    with pytest.raises(SpecError, match=r"lr_scaling must be one of 'linear', 'sqrt', 'none'"):
        _tuned_job({"global_batch": {"min": 8, "max": 64}, "lr_scaling": "cubic"})
    with pytest.raises(SpecError, match="lr_scaling goes with a global_batch range"):
        _tuned_job({"lr_scaling": "linear"})
    spec = _tuned_job({"global_batch": {"min": 8, "max": 64}, "lr_scaling": "sqrt"})
    assert spec.tuning.bounds.lr_scaling == "sqrt"
    # a range of one value is the fixed batch: no rule needed
    assert _tuned_job({"global_batch": {"min": 8, "max": 8}}).tuning.bounds.global_batch


def test_a_global_batch_range_holds_the_jobs_own_batch() -> None:
    with pytest.raises(SpecError, match=r"\[16, 64\] must hold the job's own global batch 8"):
        _tuned_job({"global_batch": {"min": 16, "max": 64}, "lr_scaling": "linear"})


def test_script_scaling_needs_the_jobs_own_code() -> None:
    bounds = {"global_batch": {"min": 8, "max": 64}, "lr_scaling": "script"}
    with pytest.raises(SpecError, match="lr_scaling script needs a workload given by entry"):
        _tuned_job(bounds)
    assert _tuned_job(bounds, workload="tests.workers.sample_workload:build")


def test_the_learning_rate_rule_reaches_the_harness_from_the_submitted_batch() -> None:
    """A tuned spec keeps the global batch it was submitted with as the learning rate's base,
    so the harness scales from it (and a fixed batch scales by 1)."""
    from orchestrator.runtime.harness_config import job_harness_config, tuned_spec
    from orchestrator.tuner.space import Config
    from workers.config import HarnessConfig
    from workers.optimizations import scaled_lr

    spec = _tuned_job({"global_batch": {"min": 8, "max": 64}, "lr_scaling": "linear"})
    tuned = tuned_spec(spec, Config(16, grad_accum=2))
    cfg = HarnessConfig.from_dict(job_harness_config(tuned))
    assert (cfg.lr_scaling, cfg.base_global_batch) == ("linear", 8)
    assert scaled_lr(cfg, 32) == pytest.approx(4 * cfg.lr)
    fixed = HarnessConfig.from_dict(job_harness_config(tuned_spec(_tuned_job({}), Config(4, 2))))
    assert (fixed.lr_scaling, fixed.base_global_batch) == ("none", 8)
    assert scaled_lr(fixed, 8) == fixed.lr


def _planned(plan: dict[str, object], gpus: object = 4, **extra: object) -> JobSpec:
    return parse_spec(
        {
            "name": "p",
            "team": "t",
            "class": "bulk",
            "workload": {"name": "gpt", "args": {"n_layer": 2, "n_head": 4}},
            "sla": {"throughput": {"work_samples": 160, "deadline_s": 600}},
            "resources": {"gpus": gpus},
            "run": {"micro_batch": 4, "grad_accum": 2, "plan": plan},
            **extra,
        }
    )


def test_run_plan_reaches_the_harness_and_sets_the_global_batch() -> None:
    from orchestrator.elastic import global_batch
    from orchestrator.runtime.harness_config import job_harness_config
    from workers.config import HarnessConfig

    spec = _planned({"dp": 2, "tp": 2, "zero": 3})
    config = HarnessConfig.from_dict(job_harness_config(spec))
    assert config.plan == {"dp": 2, "tp": 2, "pp": 1, "zero": 3, "offload": False}
    # 4 GPUs, 2 replicas: the global batch is micro-batch x accumulation x dp
    assert (spec.replicas, global_batch(spec), spec.steps_for()) == (2, 16, 10)


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"dp": 2, "tp": 3}, r"run.plan: dp x tp x pp must equal the GPU count 4, got 2 x 3 x 1"),
        ({"dp": 2, "pp": 2, "zero": 1}, r"run.plan.zero must be 2 or 3 when dp > 1"),
        ({"dp": 4, "zero": 2, "offload": True}, r"run.plan.offload needs zero 3"),
        ({"dp": 4, "zero": 5}, r"run.plan.zero must be <= 3, got 5"),
        # the harness's own rule, on the built-in model's shape (workers.parallel.plan)
        ({"pp": 4}, r"run.plan.pp must divide the model's 2 blocks, got 4 \(allowed: 1, 2\)"),
        ({"dp": 2, "tp": 2, "zero": 3, "pp": 1}, None),
        ({"tp": 4}, None),
        (
            {"dp": 4, "tensor": 2},
            "run.plan.tensor: unknown field; allowed: dp, tp, pp, zero, offload",
        ),
    ],
)
def test_a_bad_plan_is_refused_at_submit_naming_the_field(
    plan: dict[str, object], message: str | None
) -> None:
    if message is None:
        assert _planned(plan).run.plan is not None
        return
    with pytest.raises(SpecError, match=message):
        _planned(plan)


def test_a_plan_the_harness_refuses_at_start_is_refused_at_submit() -> None:
    with pytest.raises(SpecError, match=r"run.plan.tp must divide the model's 4 attention heads"):
        _planned({"tp": 8}, gpus=8, workload={"name": "gpt", "args": {"d_model": 64}})
    with pytest.raises(SpecError, match="'cnn' does not: use dp and zero only"):
        _planned({"pp": 2}, gpus=2, workload="cnn")
    # a user's model is checked at start (its shape is unknown here); a built-in's bad
    # arguments are refused here, whatever the plan
    assert _planned({"pp": 4}, workload="pkg.mod:build").run.plan is not None
    with pytest.raises(SpecError, match="d_model 30 must be divisible by n_head 4"):
        _planned({"pp": 4}, workload={"name": "gpt", "args": {"d_model": 30}})


def _tuned_plans(bounds: dict[str, object], gpus: object, **args: object) -> JobSpec:
    return _planned(
        {"dp": 1, "tp": 1},
        gpus=gpus,
        workload={"name": "gpt", "args": args},
        tuning={"enabled": True, "bounds": {"plan": bounds}},
    )


def test_plan_bounds_are_refused_only_when_none_of_them_can_run() -> None:
    with pytest.raises(SpecError, match=r"no plan of tuning.bounds.plan can run: .*pp must divide"):
        _tuned_plans({"pp": [3]}, {"min": 1, "max": 6}, n_layer=4)
    with pytest.raises(SpecError, match=r"tp 8 x pp 1 \(zero \[3\]\) is a plan for no GPU"):
        _tuned_plans({"tp": [8], "zero": [3]}, {"min": 1, "max": 8}, n_head=8, d_model=64)
    # one plan of them can: the others are left out of the search, not refused
    assert _tuned_plans({"tp": [1, 3], "pp": [1, 3]}, {"min": 1, "max": 4}, n_layer=2)
