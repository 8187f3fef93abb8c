"""Re-planned on resize (issue 23): the plan of an elastic job on a new GPU count comes from its
measured trials (a trial at that size wins), else the plan model, else the old rule, chosen by
the job's SLA, with its global batch kept. On the grid of plans recorded on CPU ranks
(bench/plans/data/cpu_plans.json: gpt, global batch 32, 1 and 2 ranks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.elastic import global_batch, resized_spec
from orchestrator.kinds import PRECISIONS, precisions
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.tuner.planmodel import PlanSample, fit_plan_model, state_bytes
from orchestrator.tuner.replan import candidates, replanned_spec
from orchestrator.tuner.space import Config
from workers.parallel.plan import Plan, split_problems

GRID = json.loads(
    (Path(__file__).parents[2] / "bench" / "plans" / "data" / "cpu_plans.json").read_text()
)
ROWS = GRID["workloads"][0]["rows"]
PROFILE = {"curves": {"fp32": [{**r["config"], **r["measurement"]} for r in ROWS]}}
THROUGHPUT = {"throughput": {"min_samples_per_s": 1}}


def _spec(
    plan: dict[str, int],
    micro: int,
    accum: int,
    gpus: int,
    sla: dict[str, Any] | None = None,
    lo: int = 1,
    hi: int = 4,
    tuning: dict[str, Any] | None = None,
) -> JobSpec:
    return parse_spec(
        {
            "name": "e",
            "team": "t",
            "class": "bulk",
            "workload": {"name": "gpt", "args": GRID["meta"]["workload_args"]},
            "sla": sla or THROUGHPUT,
            "resources": {"gpus": {"min": lo, "max": hi}},
            "run": {
                "steps": 10,
                "micro_batch": micro,
                "grad_accum": accum,
                "data_parallel": gpus,
                "plan": plan,
            },
            **({"tuning": tuning} if tuning else {}),
        }
    )


def _ran(spec: JobSpec) -> Config:
    """The config a spec runs, as the table keys it."""
    run, plan = spec.run, spec.run.plan
    assert plan is not None
    return Config(
        run.micro_batch, run.grad_accum, spec.gpus, tp=plan.tp, pp=plan.pp, zero=plan.zero
    )


def _valid(spec: JobSpec) -> None:
    """The plan runs on the spec's GPUs and the model splits it (the harness's own rules)."""
    plan = spec.run.plan
    assert plan is not None
    p = Plan(**plan.model_dump())
    shape = spec.model_shape()
    assert shape is not None
    assert p.problems(world=spec.gpus) == [] and split_problems(p, shape) == []


def _rate(c: Config) -> float:
    return next(
        float(r["measurement"]["samples_per_s"]) for r in ROWS if Config.from_dict(r["config"]) == c
    )


def test_a_measured_size_runs_the_measured_best() -> None:
    spec = _spec({"pp": 2}, 16, 2, 2)  # the table's optimum on 2 ranks, resized to 1
    got = replanned_spec(spec, 1, PROFILE)
    assert got.source == "measured" and got.spec is not None
    one_rank = [Config.from_dict(r["config"]) for r in ROWS if r["config"]["gpus"] == 1]
    assert _ran(got.spec) == max(one_rank, key=_rate)  # micro-batch 32: 173 samples/s
    assert global_batch(got.spec) == 32


def test_an_unmeasured_size_runs_the_models_choice() -> None:
    spec = _spec({"pp": 2}, 16, 2, 2)
    got = replanned_spec(spec, 4, PROFILE)  # no trial ran on 4 ranks
    assert got.source == "model" and got.spec is not None
    model = fit_plan_model(
        [
            PlanSample(c, 32 / _rate(c), float(r["measurement"]["p95_ms"]))
            for r in ROWS
            for c in [Config.from_dict(r["config"])]
        ]
    )
    assert model is not None
    within = [c for c in candidates(spec, 4) if c.micro_batch <= 16]
    # at one GPU count and one global batch, the fewest GPU-seconds per sample is the most
    # samples/s: the model's own best
    assert _ran(got.spec) == model.best(within)
    _valid(got.spec)
    assert global_batch(got.spec) == 32 and "predicted" in got.reason


def test_a_resize_that_changes_the_plan_keeps_the_batch() -> None:
    """4 -> 2 GPUs: the rule keeps tensor parallelism (tp 2 alone); the trials on 2 ranks say
    pipeline parallelism is best there, so the job runs pp 2."""
    spec = _spec({"dp": 2, "tp": 2, "zero": 3}, 8, 2, 4, lo=2, hi=4)
    ruled = resized_spec(spec, 2)
    assert ruled is not None and ruled.run.plan is not None and ruled.run.plan.tp == 2
    got = replanned_spec(spec, 2, PROFILE)
    assert got.source == "measured" and got.spec is not None and got.spec.run.plan is not None
    assert (got.spec.run.plan.tp, got.spec.run.plan.pp, got.spec.run.plan.dp) == (1, 2, 1)
    _valid(got.spec)
    assert global_batch(got.spec) == global_batch(spec) == 32
    assert got.spec.steps_for() == spec.steps_for()


def test_a_latency_and_a_throughput_sla_pick_differently() -> None:
    """Data parallelism only (tuning.bounds.plan), 1 -> 2 GPUs: ZeRO-1 at micro-batch 8 x 2
    has the most samples/s (94.5) but a p95 of 909 ms; under a 700 ms ceiling the best that
    meets it is ZeRO-1 at 2 x 8 (79.0/s, p95 691 ms)."""
    dp_only = {"bounds": {"plan": {"tp": [1], "pp": [1], "zero": [0, 1, 2, 3]}}}
    latency = {**THROUGHPUT, "latency": {"max_ms": 700}}
    fast = replanned_spec(_spec({}, 32, 1, 1, hi=2, tuning=dp_only), 2, PROFILE)
    short = replanned_spec(_spec({}, 32, 1, 1, latency, hi=2, tuning=dp_only), 2, PROFILE)
    assert fast.spec is not None and short.spec is not None
    assert _ran(fast.spec) == Config(8, 2, 2, zero=1)
    assert _ran(short.spec) == Config(2, 8, 2, zero=1)
    assert global_batch(fast.spec) == global_batch(short.spec) == 32


def test_plans_whose_state_does_not_fit_are_left_out() -> None:
    """Data parallelism only, 1 -> 2 GPUs, on GPUs that hold ZeRO-3's model state per rank
    but not ZeRO-2's: the best measured ZeRO-3 config runs, not ZeRO-1 (the fastest)."""
    dp_only = {"bounds": {"plan": {"tp": [1], "pp": [1], "zero": [0, 1, 2, 3]}}}
    spec = _spec({}, 32, 1, 1, hi=2, tuning=dp_only)
    shape = spec.model_shape()
    assert shape is not None and shape.params is not None
    memory = state_bytes(Config(16, 1, 2, zero=3), shape.params)
    assert memory < state_bytes(Config(16, 1, 2, zero=2), shape.params)
    got = replanned_spec(spec, 2, PROFILE, memory_bytes=memory)
    assert got.source == "measured" and got.spec is not None
    zero3 = [c for c in map(Config.from_dict, (r["config"] for r in ROWS)) if c.zero == 3]
    assert _ran(got.spec) == max(zero3, key=_rate)


@pytest.mark.parametrize(
    "profile", [None, {"curves": {}}, {"curves": {"bf16": PROFILE["curves"]["fp32"]}}]
)
def test_without_trials_the_rule_decides_and_says_so(profile: dict[str, Any] | None) -> None:
    spec = _spec({"dp": 2, "tp": 2, "zero": 3}, 8, 2, 4, lo=2, hi=4)
    got = replanned_spec(spec, 2, profile)
    assert got.source == "rule" and got.spec == resized_spec(spec, 2)
    assert "by rule" in got.reason and ("no profile" in got.reason or "no trial" in got.reason)


def test_sizes_outside_the_range_have_no_spec() -> None:
    spec = _spec({"pp": 2}, 16, 2, 2, lo=2, hi=4)
    assert replanned_spec(spec, 1, PROFILE).spec is None


def _row(c: Config, rate: float, p95: float = 50.0) -> dict[str, Any]:
    return {**c.to_dict(), "status": "ok", "samples_per_s": rate, "p95_ms": p95}


def _plain(gpus: int = 1, hi: int = 2, **extra: Any) -> JobSpec:
    """An elastic job with no parallel plan, tuned to one GPU at micro-batch 32 (global
    batch 32)."""
    return parse_spec(
        {
            "name": "p",
            "team": "t",
            "class": "bulk",
            "workload": {"name": "mlp"},
            "sla": THROUGHPUT,
            "resources": {"gpus": {"min": 1, "max": hi}},
            "run": {"steps": 10, "micro_batch": 32 // gpus, "data_parallel": gpus},
            **extra,
        }
    )


# a one-GPU optimum (a cost goal picks it) and four measured 2-GPU configs of its batch
NO_PLAN = {
    "curves": {
        "fp32": [
            _row(Config(32, 1, 1), 265.0),
            _row(Config(16, 1, 2), 150.0),
            _row(Config(8, 2, 2), 180.0),
            _row(Config(4, 4, 2), 90.0),
            _row(Config(16, 1, 2, sharding="fsdp"), 120.0),
            _row(Config(16, 1, 2, activation_checkpointing=True), 400.0),  # not its setting
        ]
    }
}


def test_a_job_tuned_to_one_gpu_and_given_two_runs_the_best_measured_two_gpu_config() -> None:
    """Issue 37: without ``run.plan`` the rule used to decide (plain DDP, micro-batch 8 on 2
    replicas: 72 samples/s) although the profile held measured 2-GPU configs of its batch."""
    spec = _plain()
    got = replanned_spec(spec, 2, NO_PLAN)
    assert got.source == "measured" and got.spec is not None
    run = got.spec.run
    assert (run.micro_batch, run.grad_accum, got.spec.gpus, run.sharding) == (8, 2, 2, "ddp")
    assert run.plan is None  # data parallelism alone: no parallel plan is imposed
    assert global_batch(got.spec) == 32 and "measured" in got.reason and "180.0" in got.reason
    # the rule alone splits the batch otherwise (16 x 1), which the trials say is slower
    ruled = resized_spec(spec, 2)
    assert ruled is not None and (ruled.run.micro_batch, ruled.run.grad_accum) == (16, 1)


def test_a_trial_at_other_settings_than_the_job_runs_is_not_its_measurement() -> None:
    """The 400 samples/s trial ran with checkpointing; the job runs without it."""
    got = replanned_spec(_plain(), 2, NO_PLAN)
    assert got.spec is not None and not got.spec.run.activation_checkpointing
    assert "400" not in got.reason


def test_without_a_trial_on_the_size_a_plain_job_runs_the_rule_and_says_so() -> None:
    spec = _plain(hi=4)
    got = replanned_spec(spec, 4, {"curves": {"fp32": [_row(Config(32, 1, 1), 265.0)]}})
    assert got.source in ("rule", "model") and got.spec is not None
    assert global_batch(got.spec) == 32 and got.spec.run.plan is None


# ---- GPUs without the job's precision (issue 40: a kind's precisions) --------------------


def _bf16(**extra: Any) -> JobSpec:
    spec = _plain(hi=1, **extra)
    run = spec.run.model_copy(update={"precision": "bf16"})
    return JobSpec.model_validate({**spec.model_dump(by_alias=True), "run": run.model_dump()})


def test_on_gpus_without_its_precision_the_best_measured_one_they_have_runs() -> None:
    # tuned to bf16 (fastest), placed on a T4: the best fp16 or fp32 trial at its size runs
    profile = {
        "curves": {
            "bf16": [_row(Config(32, 1, 1), 500.0)],
            "fp16": [_row(Config(32, 1, 1), 300.0), _row(Config(16, 2, 1), 350.0)],
            "fp32": [_row(Config(32, 1, 1), 200.0)],
        }
    }
    got = replanned_spec(_bf16(), 1, profile, precisions=("fp16", "fp32"))
    assert got.source == "measured" and got.spec is not None
    assert got.spec.run.precision == "fp16"
    assert (got.spec.run.micro_batch, got.spec.run.grad_accum) == (16, 2)
    assert "these GPUs have no bf16" in got.reason and "350.0" in got.reason
    assert got.was == "bf16"
    # where they have it, nothing changes
    same = replanned_spec(_bf16(), 1, profile, precisions=("bf16", "fp16", "fp32"))
    assert same.source == "requested" and same.spec is not None
    assert same.spec.run.precision == "bf16"


def test_with_nothing_measured_there_it_runs_the_first_they_have_and_says_so() -> None:
    got = replanned_spec(_bf16(), 1, None, precisions=("fp16", "fp32"))
    assert got.spec is not None and got.spec.run.precision == "fp16"
    assert got.source == "rule" and got.was == "bf16"
    assert "these GPUs have no bf16: runs fp16, not measured" in got.reason
    assert got.spec.run.micro_batch == 32  # its own config otherwise


def test_a_kinds_precisions() -> None:
    assert precisions("T4") == precisions("V100") == ("fp16", "fp32")
    assert precisions("Tesla-P100-PCIE-16GB") == ("fp16", "fp32")  # a model outside the catalogue
    assert precisions("H100") == precisions("L4") == precisions("virtual") == PRECISIONS
    assert precisions("GT4X") == PRECISIONS  # a name that only contains one
