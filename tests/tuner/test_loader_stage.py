"""The loader stage: loader knobs are searched only when the workload reads a dataset and
waits for it for a material share of its step; what it chooses is what the job runs with."""

from __future__ import annotations

import os
from typing import Any

import pytest

from orchestrator.errors import SpecError
from orchestrator.runtime.harness_config import job_harness_config, tuned_spec
from orchestrator.spec import parse_spec
from orchestrator.store import JobStore
from orchestrator.tuner.evaluators import TableEvaluator
from orchestrator.tuner.loader_stage import MATERIAL_SHARE, WALL_CLOCK, loader_candidates
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.service import tune_spec
from orchestrator.tuner.space import Config, DeviceCaps
from workers.loader_settings import DEFAULT_TOKEN, LoaderSettings

CPU = DeviceCaps(precisions=("fp32",), max_micro_batch=16)
GPU = DeviceCaps(name="synthetic", kind="cuda", precisions=("fp32",))
FAST = LoaderSettings(num_workers=2, prefetch_factor=4, persistent_workers=True).token()


def _spec(**run: Any) -> Any:
    return parse_spec(
        {
            "name": "loader-job",
            "team": "t",
            "class": "bulk",
            "workload": "images",
            "sla": {"throughput": {"min_samples_per_s": 10}},
            "run": {"steps": 5, "micro_batch": 8, **run},
            "tuning": {
                "enabled": True,
                "bounds": {
                    "micro_batch": {"min": 4, "max": 8},
                    "grad_accum": {"min": 1, "max": 2},
                    "activation_checkpointing": [False],
                },
            },
        }
    )


class DatasetTable(TableEvaluator):
    """A table whose workload reads a dataset (or not): the probe's answer, declared."""

    def __init__(self, rows: dict[Config, Measurement], *, dataset: bool) -> None:
        super().__init__(rows, CPU)
        self.dataset = dataset

    def reads_dataset(self) -> bool:
        return self.dataset


def _table(wait_share: float, *, dataset: bool = True, gain: float = 1.0) -> DatasetTable:
    """Micro-batch 8 is best with the job's loader; with loader workers the step stops
    waiting, and two workers with prefetch 4 are the fastest (``gain`` x what hiding the wait
    entirely would give)."""
    rows: dict[Config, Measurement] = {}
    for m, a in ((8, 1), (4, 2)):
        base = 100.0 if m == 8 else 80.0
        rows[Config(m, a)] = Measurement(
            "ok", samples_per_s=base, p95_ms=80, data_wait_share=wait_share, cost_s=1
        )
        for token in loader_candidates(DEFAULT_TOKEN, CPU):
            if token != DEFAULT_TOKEN:
                sps = base / (1 - wait_share) * gain * (1.0 if token == FAST else 0.9)
                rows[Config(m, a, loader=token)] = Measurement(
                    "ok", samples_per_s=sps, p95_ms=80, data_wait_share=0.01, cost_s=1
                )
    return DatasetTable(rows, dataset=dataset)


def test_a_material_data_wait_searches_the_loader_and_the_job_runs_the_winner(
    store: JobStore, redis_url: str
) -> None:
    spec = _spec()
    report = tune_spec(spec, store, redis_url, evaluator=_table(0.5), use_cache=False)
    best = report.result.best
    assert best is not None and best.config == Config(8, 1, loader=FAST)
    tried = {r.config.loader for r in report.result.history.records if r.source == "measured"}
    assert tried == set(loader_candidates(DEFAULT_TOKEN, CPU))  # the grid, once each
    # only the chosen compute config was profiled under other loaders
    others = {(r.config.micro_batch, r.config.grad_accum) for r in report.result.history.records}
    assert {(m, a) for m, a in others if m == 4} == {(4, 2)}
    assert all(
        r.config.micro_batch == 8
        for r in report.result.history.records
        if r.config.loader != DEFAULT_TOKEN
    )
    # judged at the wall clock: the step's rate less its data wait (the table's 200/s x 0.99)
    assert best.measurement.samples_per_s == pytest.approx(198.0)
    assert best.measurement.message == WALL_CLOCK
    run = job_harness_config(tuned_spec(spec, best.config))
    assert run["loader"] == LoaderSettings.from_token(FAST).to_dict()


def test_a_loader_better_by_less_than_the_margin_leaves_the_jobs_own(
    store: JobStore, redis_url: str
) -> None:
    # hiding the wait would double the rate; the best candidate gets 1.03x the job's own
    table = _table(0.5, gain=0.25 * 1.03 / 0.99)
    report = tune_spec(_spec(), store, redis_url, evaluator=table, use_cache=False)
    best = report.result.best
    assert best is not None and best.config == Config(8, 1)  # the job's own loader
    assert best.measurement.message == WALL_CLOCK  # as measured among the candidates
    assert len({r.config.loader for r in report.result.history.records}) > 1


@pytest.mark.parametrize(
    ("share", "dataset"),
    [(MATERIAL_SHARE / 2, True), (0.5, False)],
    ids=["data wait below the share", "batches made by the workload"],
)
def test_the_loader_is_left_alone_unless_it_can_matter(
    store: JobStore, redis_url: str, share: float, dataset: bool
) -> None:
    report = tune_spec(
        _spec(), store, redis_url, evaluator=_table(share, dataset=dataset), use_cache=False
    )
    assert {r.config.loader for r in report.result.history.records} == {DEFAULT_TOKEN}


def test_candidates_start_with_the_jobs_own_and_pin_only_on_a_gpu() -> None:
    own = LoaderSettings(num_workers=1, cache_mb=256).token()
    cpu = [LoaderSettings.from_token(t) for t in loader_candidates(own, CPU, cpus=4)]
    assert cpu[0] == LoaderSettings.from_token(own)
    assert {(s.num_workers, s.prefetch_factor) for s in cpu[1:]} == {
        (w, p) for w in (1, 2, 4) for p in (2, 4)
    }
    assert all(s.persistent_workers and s.cache_mb == 256 and not s.pin_memory for s in cpu[1:])
    gpu = [LoaderSettings.from_token(t) for t in loader_candidates(own, GPU, cpus=64)]
    assert max(s.num_workers for s in gpu) == 8
    assert {s.pin_memory for s in gpu[1:]} == {False, True}
    assert len(loader_candidates(own, CPU, cpus=os.cpu_count())) > 1


@pytest.mark.parametrize(
    ("loader", "message"),
    [
        ({"num_workers": 100}, "run.loader.num_workers"),
        ({"persistent_workers": True}, "persistent_workers needs num_workers > 0"),
        ({"prefetch_factor": 4}, "prefetch_factor applies to worker processes"),
        ({"cache_mb": -1}, "run.loader.cache_mb"),
        ({"workers": 2}, "run.loader.workers"),
        ({"pin_memory": "yes"}, "run.loader.pin_memory"),
    ],
)
def test_bad_loader_knobs_are_refused_at_the_spec_edge(
    loader: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        _spec(loader=loader)


def test_the_jobs_own_loader_reaches_the_harness_and_the_space() -> None:
    spec = _spec(loader={"num_workers": 2, "pin_memory": True, "cache_mb": 64})
    assert job_harness_config(spec)["loader"] == {
        "num_workers": 2,
        "prefetch_factor": 2,
        "pin_memory": True,
        "persistent_workers": False,
        "cache_mb": 64,
    }
    from orchestrator.tuner.job_space import space_for

    assert space_for(spec, CPU).loaders == (spec.run.loader.token(),)


def test_the_probe_says_whether_the_harness_read_a_dataset(tmp_path: Any) -> None:
    from orchestrator.tuner.evaluators import HarnessEvaluator

    tiny = {"images": 8, "image_size": 8, "channels": 2, "n_layer": 1, "root": str(tmp_path)}
    assert HarnessEvaluator("images", tiny, caps=CPU).reads_dataset()
    assert not HarnessEvaluator("mlp", {"hidden": 8}, caps=CPU).reads_dataset()
