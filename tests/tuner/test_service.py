"""Tuning a job for real: the harness evaluator, Redis (study, cache, profile) and the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.tuner.evaluators import HarnessEvaluator
from orchestrator.tuner.objective import Goal
from orchestrator.tuner.profile import record_outcome
from orchestrator.tuner.service import tune_spec
from orchestrator.tuner.space import DeviceCaps, SearchSpace
from orchestrator.tuner.strategies import SLASearchStrategy
from orchestrator.tuner.tuner import Tuner

ROOT = Path(__file__).resolve().parents[2]
CPU = DeviceCaps(precisions=("fp32",), max_micro_batch=16)


def _spec(workload: Any, **extra: Any) -> Any:
    return parse_spec(
        {
            "name": "tune-me",
            "team": "t",
            "class": "interactive",
            "workload": workload,
            "sla": {"latency": {"max_ms": 5000}},
            "run": {"steps": 5},
            "tuning": {
                "enabled": True,
                "bounds": {
                    "micro_batch": {"min": 1, "max": 32},
                    "grad_accum": {"min": 1, "max": 32},
                    "activation_checkpointing": [False],
                },
            },
            **extra,
        }
    )


def _harness(workload: str, args: dict[str, Any]) -> HarnessEvaluator:
    # 20 ms a micro-batch: 8 samples beat 4 by 2x in throughput, whatever else the host runs
    return HarnessEvaluator(
        workload, {"step_ms": 20, **args}, caps=CPU, warmup_steps=1, measured_steps=3
    )


@pytest.mark.parametrize("kind", ["torch", "memory", "cpu"])
def test_oom_in_a_real_trial_is_infeasible_and_the_tuner_goes_on(kind: str) -> None:
    """A workload that allocates past a cap of 8 samples: the largest micro-batch found is 8.
    ``cpu``: torch's CPU allocator really fails (``DefaultCPUAllocator: can't allocate
    memory``), pruned as the CUDA OOM of ``torch`` is."""
    space = SearchSpace(micro_batches=(1, 2, 4, 8, 16, 32))
    ev = _harness("tests.tuner.oom_workload:build", {"cap": 8, "kind": kind})
    result = Tuner(space, Goal("latency", ceiling_ms=5000.0), ev, SLASearchStrategy()).run()
    ooms = [r for r in result.history.records if r.measurement.status == "oom"]
    assert ooms, "the search should have hit the cap"
    assert all(not r.verdict.feasible for r in ooms)
    assert all(r.config.micro_batch > 8 for r in ooms)
    # Doubling then bisection: each OOM is below the previous one, nothing above is retried.
    sizes = [r.config.micro_batch for r in ooms]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    assert result.status == "feasible" and result.best is not None
    assert result.best.config.micro_batch == 8


def test_tune_spec_stores_study_cache_profile_and_a_repeat_is_a_cache_hit(
    store: JobStore, redis_url: str
) -> None:
    spec = _spec({"entry": "tests.tuner.oom_workload:build", "args": {"cap": 8}})
    first = tune_spec(
        spec, store, redis_url, evaluator=_harness("tests.tuner.oom_workload:build", {"cap": 8})
    )
    assert first.cache == "miss" and first.result.trials > 0 and first.run
    assert first.result.best is not None and first.result.best.config.micro_batch == 8
    again = tune_spec(
        spec,
        store,
        redis_url,
        job="again",
        evaluator=_harness("tests.tuner.oom_workload:build", {"cap": 8}),
    )
    assert again.cache == "hit" and again.result.trials == 0
    assert again.result.best is not None
    assert again.result.best.config == first.result.best.config
    report = store.tune_reports.load("again")
    assert report is not None and report["cache"] == "hit"
    # A similar job (another cap) warm-starts from the cached best config.
    other = _spec({"entry": "tests.tuner.oom_workload:build", "args": {"cap": 4}})
    warm = tune_spec(
        other,
        store,
        redis_url,
        job="warm",
        evaluator=_harness("tests.tuner.oom_workload:build", {"cap": 4}),
    )
    assert warm.cache == "warm"
    assert warm.result.history.records[0].config.micro_batch == 8  # enqueued first
    # The profile, and the prediction error once the job has run.
    profile = store.profiles.load(spec.name)
    assert profile is not None and profile["curves"]["fp32"]
    assert profile["chosen"]["samples_per_s"] > 0
    measured = profile["chosen"]["samples_per_s"] * 0.9
    errors = record_outcome(store.profiles, spec.name, {"samples_per_s": measured})
    assert errors is not None and errors["samples_per_s"] == pytest.approx(1 / 0.9 - 1)


def test_every_trial_of_a_real_tuning_run_keeps_the_jobs_global_batch(
    store: JobStore, redis_url: str
) -> None:
    """Real harness trials of a job asking for micro-batch 32 on one GPU: the tuner trades
    micro-batch for accumulation (8 x 4 fits under the cap of 8), never the 32 samples a step
    the job learns with; the report's trials table shows it."""
    spec = _spec({"entry": "tests.tuner.oom_workload:build", "args": {"cap": 8}})
    ev = _harness("tests.tuner.oom_workload:build", {"cap": 8})
    report = tune_spec(spec, store, redis_url, use_cache=False, evaluator=ev)
    records = report.result.history.records
    assert len(records) >= 3 and {r.config.global_batch for r in records} == {32}
    assert {r.config.grad_accum for r in records} > {1}  # accumulation did the trading
    best = report.result.best
    assert best is not None and (best.config.micro_batch, best.config.grad_accum) == (8, 4)
    table = store.tune_reports.load(spec.name)["trials_table"]  # type: ignore[index]
    assert [t["global_batch"] for t in table] == [32] * len(records)


def test_an_allowed_range_is_searched_within_and_the_goal_says_so(
    store: JobStore, redis_url: str
) -> None:
    bounds = {"global_batch": {"min": 16, "max": 64}, "lr_scaling": "linear"}
    spec = _spec(
        {"entry": "tests.tuner.oom_workload:build", "args": {"cap": 8}},
        tuning={
            "enabled": True,
            "budget": {"trials": 8},
            "bounds": {**bounds, "grad_accum": {"min": 1, "max": 8}},
        },
    )
    ev = _harness("tests.tuner.oom_workload:build", {"cap": 8})
    report = tune_spec(spec, store, redis_url, use_cache=False, evaluator=ev)
    assert {r.config.global_batch for r in report.result.history.records} <= {16, 32, 64}
    assert "global batch 16-64, learning rate linear" in report.to_dict()["goal"]


def test_a_user_inference_workload_is_known_by_what_it_is_not_by_its_name(
    store: JobStore, redis_url: str
) -> None:
    """An entry: workload with train=False (not the built-in `infer`): the evaluator's probe
    finds it forward-only, so the space has accumulation 1 only and no trial fails (each
    accumulation > 1 was a harness error before)."""
    entry = "tests.workers.sample_workload:build_inference"
    spec = parse_spec(
        {
            "name": "score",
            "team": "t",
            "class": "interactive",
            "workload": {"entry": entry},
            "sla": {"latency": {"max_ms": 5000}},
            "run": {"steps": 5},
            "tuning": {"enabled": True, "budget": {"trials": 6}},
        }
    )
    ev = HarnessEvaluator(entry, caps=CPU, warmup_steps=1, measured_steps=3)
    assert ev.forward_only()
    report = tune_spec(spec, store, redis_url, use_cache=False, evaluator=ev)
    records = report.result.history.records
    assert records and {r.config.grad_accum for r in records} == {1}
    assert all(r.measurement.ok for r in records), [r.measurement.message for r in records]
    assert not HarnessEvaluator("tests.workers.sample_workload:build", caps=CPU).forward_only()


def test_study_is_read_back_by_a_separate_optuna_process(store: JobStore, redis_url: str) -> None:
    spec = _spec({"entry": "tests.tuner.oom_workload:build", "args": {"cap": 8}})
    report = tune_spec(
        spec,
        store,
        redis_url,
        use_cache=False,
        evaluator=_harness("tests.tuner.oom_workload:build", {"cap": 8}),
    )
    code = (
        "import json, sys, optuna\n"
        "from optuna.storages import JournalStorage\n"
        "from optuna.storages.journal import JournalRedisBackend\n"
        "s = JournalStorage(JournalRedisBackend(sys.argv[1], prefix=sys.argv[2]))\n"
        "names = [x.study_name for x in optuna.get_all_study_summaries(s)]\n"
        "st = optuna.load_study(study_name=sys.argv[3], storage=s)\n"
        "b = st.best_trial\n"
        "print(json.dumps({'names': names, 'n': len(st.trials), 'params': b.params,\n"
        "  'constraints': b.constraints, 'direction': st.direction.name}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, redis_url, store.keys.optuna_journal, report.study],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert report.study in got["names"]
    assert got["n"] == len(report.result.history.records)
    assert report.result.best is not None
    # the job's global batch (32 on one GPU) kept: the micro-batch is its own parameter there
    assert got["params"]["global_batch_1gpu"] == 32
    assert got["params"]["micro_batch_1gpu_32"] == report.result.best.config.micro_batch
    assert all(v <= 0 for v in got["constraints"].values())
    assert got["direction"] == "MAXIMIZE"


def test_orch_tune_prints_the_trials_and_the_chosen_config(
    redis_url: str, store: JobStore, tmp_path: Path
) -> None:
    import typer
    from typer.testing import CliRunner

    from orchestrator.cli.tune import tune_command

    app = typer.Typer()
    app.command(name="tune")(tune_command)
    app.command(name="noop")(lambda: None)
    job = ROOT / "tests" / "tuner" / "jobs" / "mlp-latency.yaml"
    env = {"REDIS_URL": redis_url, "ORCH_NAMESPACE": store.namespace, "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["tune", str(job)], env=env)
    assert result.exit_code == 0, result.output
    assert "meets SLA" in result.output and "chosen config: micro-batch" in result.output
    assert "cache: miss" in result.output
    # each trial's step in parts: data wait / forward-backward / sync / optimizer / rest (ms)
    assert "data/fwd-bwd/comm/opt/rest" in result.output
    assert re.search(r"\b\d+\.\d/\d+\.\d/0\.0/\d+\.\d/\d+\.\d\b", result.output)
    again = CliRunner().invoke(app, ["tune", str(job)], env=env)
    assert "cache: hit" in again.output and "trials: 0" in again.output


def test_benchmark_runs_in_smoke_mode() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "bench.tuner.run", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    for name in ("sla", "tpe", "random", "heuristic", "grid"):
        assert f"| pollux-yolov3 | {name} |" in out.stdout
    assert "Median trials at stop" in out.stdout


def test_a_second_goal_on_the_same_job_reuses_every_measurement(
    store: JobStore, redis_url: str
) -> None:
    """Issue 37: the same job under a second SLA (and other bounds) was profiled again from
    nothing. Measurements are keyed by what was measured (workload, arguments, device,
    versions), not by the goal or the bounds: the second tuning starts from the first's trials
    within its own bounds, and a goal they settle runs none."""
    workload = {"entry": "tests.tuner.oom_workload:build", "args": {"cap": 8}}
    latency = _spec(workload)
    first = tune_spec(
        latency, store, redis_url, evaluator=_harness("tests.tuner.oom_workload:build", {"cap": 8})
    )
    measured = {r.config for r in first.result.history.records if r.source == "measured"}
    assert first.cache == "miss" and first.result.trials == len(measured) > 0
    # a throughput floor instead of a latency ceiling, and narrower micro-batch bounds
    data = latency.model_dump(by_alias=True, exclude_none=True)
    data["class"] = "bulk"
    data["sla"] = {"throughput": {"min_samples_per_s": 1}}
    data["tuning"]["bounds"]["micro_batch"] = {"min": 2, "max": 16}
    throughput = parse_spec(data)
    second = tune_spec(
        throughput,
        store,
        redis_url,
        job="second",
        evaluator=_harness("tests.tuner.oom_workload:build", {"cap": 8}),
    )
    assert second.cache == "hit"
    known = {r.config for r in second.result.history.records if r.source != "measured"}
    assert known and known <= measured  # the first job's trials, read back
    assert all(2 <= c.micro_batch <= 16 for c in known)  # within the second job's bounds
    again = {r.config for r in second.result.history.records if r.source == "measured"}
    assert not again & measured  # nothing measured twice
