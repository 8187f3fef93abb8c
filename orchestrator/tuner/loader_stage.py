"""The tuner's second stage: the data loader's knobs, searched only when data wait matters.

The first stage tunes how the step computes (micro-batch, GPUs, precision, ...) with the job's
own loader settings. If the workload reads a dataset through the harness's loader (or a
command job's script reads its batches through ``job.loader``, and takes the loader's knobs
from ``ctx.dataloader_kwargs``) and the chosen config waits for data for at least
:data:`MATERIAL_SHARE` of its step, this stage
profiles that config with other loader settings (a grid: worker processes x prefetch depth,
pinned memory on a GPU), the job's own among them, and the best of them is chosen if it
beats the job's own by more than :data:`MARGIN` (5%, the noise of a short profiling run on a
quiet host; a single trial that wins by less may have won by chance).

The stage judges the job's rate at the wall clock: a run's ``samples_per_s`` counts its timed
steps alone (data wait is reported apart), which no loader setting changes, so the stage's
trials, the job's own settings among them, are judged by ``samples_per_s x (1 -
data_wait_share)``: the rate the job's work goes at (``orchestrator.control.facts`` reads a
run's progress the same way). Their rows in the trials table say so in their message.

Why a stage and not more dimensions of one space: the loader runs beside the step (other
processes, the host's cores), so its best settings depend on how fast the step consumes
samples, not on which split of the batch gives that speed; searched jointly, a handful of
loader settings would multiply every family the first stage walks. Why 10%: the step's
time is at least its compute, so loading fully hidden behind compute makes a step waiting a
share ``w`` of its time at most ``1 / (1 - w)`` faster: 1.11x at ``w`` = 0.1, which is
above the few percent a short profiling run's throughput varies by on a loaded host
(``bench/guard``) and so worth the stage's trials; below it the gain would be in the noise.

What is not searched: ``persistent_workers`` is on whenever there are workers (it only saves
starting them again each epoch; a short profiling run rarely reaches an epoch's end to
measure it), and ``cache_mb`` stays the job's (a cache pays from the second epoch on, which a
profiling run does not reach either, and its size is the job's memory to give).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.tuner.evaluators.base import Evaluator
from orchestrator.tuner.history import History
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace, power_ladder
from orchestrator.tuner.strategies.grid import GridSearchStrategy
from orchestrator.tuner.tuner import OnTrial, Tuner, TuneResult
from workers.loader_settings import LoaderSettings

if TYPE_CHECKING:
    import optuna

__all__ = [
    "MARGIN",
    "MATERIAL_SHARE",
    "WALL_CLOCK",
    "data_wait_material",
    "loader_candidates",
    "tune_loader",
    "wall_clock",
]

MATERIAL_SHARE = 0.10
MARGIN = 0.05
MAX_TUNED_WORKERS = 8


def data_wait_material(result: TuneResult, reads_dataset: bool) -> bool:
    """Whether the loader stage runs: the workload reads a dataset and the chosen config
    waited for data for at least :data:`MATERIAL_SHARE` of its step (a command job's script
    that reads no batches through ``job.loader`` measures no wait: never)."""
    chosen = result.chosen
    if not reads_dataset or chosen is None or chosen.measurement.status != "ok":
        return False
    share = chosen.measurement.data_wait_share
    return share is not None and share >= MATERIAL_SHARE


def loader_candidates(own: str, caps: DeviceCaps, cpus: int | None = None) -> tuple[str, ...]:
    """The loader settings the stage profiles: the job's own first, then worker counts on a
    doubling ladder up to the host's cores (at most :data:`MAX_TUNED_WORKERS`) with prefetch
    depth 2 and 4, persistent workers, and on a GPU pinned memory off and on; the job's cache
    kept."""
    base = LoaderSettings.from_token(own)
    cores = max(1, cpus if cpus is not None else (os.cpu_count() or 1))
    pins = (False, True) if caps.kind == "cuda" else (base.pin_memory,)
    out = [own]
    for workers in power_ladder(1, min(cores, MAX_TUNED_WORKERS)):
        for prefetch in (2, 4):
            for pin in pins:
                settings = dataclasses.replace(
                    base,
                    num_workers=workers,
                    prefetch_factor=prefetch,
                    pin_memory=pin,
                    persistent_workers=True,
                )
                out.append(settings.token())
    return tuple(dict.fromkeys(out))


def tune_loader(
    result: TuneResult,
    space: SearchSpace,
    goal: Goal,
    evaluator: Evaluator,
    *,
    study: optuna.Study | None = None,
    known: list[tuple[Config, Measurement]] | None = None,
    on_trial: OnTrial | None = None,
    cpus: int | None = None,
    seed: int = 0,
) -> TuneResult:
    """Profile the chosen config of ``result`` under :func:`loader_candidates` and return
    one result holding both stages' trials, the stage's best (at the wall clock) chosen. Call
    it only when :func:`data_wait_material` says so.

    Args:
        study: the stage's Optuna study (not the first stage's: there the compute
            parameters had other choices, which Optuna refuses within one study).
        known: measurements already made (a cache entry): not measured again.
    """
    chosen = result.chosen
    assert chosen is not None  # data_wait_material checked it
    c = chosen.config
    pinned = dataclasses.replace(
        space,
        micro_batches=(c.micro_batch,),
        grad_accums=(c.grad_accum,),
        gpus=(c.gpus,),
        shardings=(c.sharding,),
        precisions=(c.precision,),
        activation_checkpointing=(c.activation_checkpointing,),
        compile=(c.compile,),
        plans=None if space.plans is None else ((c.tp, c.pp, c.zero),),
        loaders=loader_candidates(c.loader, evaluator.caps, cpus),
    )
    stage = Tuner(
        pinned,
        goal,
        _WallClock(evaluator),
        GridSearchStrategy(seed),
        study=study,
        patience=None,
        # the job's own loader is measured again among the others: compared under the same
        # conditions, not against a measurement made minutes earlier
        known=[(k, m) for k, m in known or [] if m.message == WALL_CLOCK],
        on_trial=on_trial,
    ).run()
    best = stage.best
    own = stage.history.measured(c)
    if (
        best is not None
        and own is not None
        and own.verdict.feasible
        and not goal.better(best.verdict.value, own.verdict.value, by=MARGIN)
    ):
        best = own  # not better by more than a profiling run's noise: the job's own stays
    both = dataclasses.replace(space, loaders=tuple(dict.fromkeys(space.loaders + pinned.loaders)))
    history = History(both, goal)
    for rec in result.history.records:
        history.add(rec)
    for rec in stage.history.records:
        if rec.source != "cached" or history.measured(rec.config) is None:
            history.add(rec)  # (the job's own loader, re-judged, is in the table once)
    return TuneResult(
        stage.status,
        best,
        stage.closest,
        stage.reason,
        result.stopped,
        history,
        result.wall_s + stage.wall_s,
    )


WALL_CLOCK = "samples/s at the wall clock: data wait included"


def wall_clock(m: Measurement) -> Measurement:
    """``m`` with its rates at the wall clock (``x (1 - data_wait_share)``); as it is when it
    says so already or has no wait figure."""
    share = m.data_wait_share
    if m.status != "ok" or share is None or m.message == WALL_CLOCK:
        return m
    keep = 1.0 - share
    return dataclasses.replace(
        m,
        samples_per_s=None if m.samples_per_s is None else m.samples_per_s * keep,
        tokens_per_s=None if m.tokens_per_s is None else m.tokens_per_s * keep,
        message=WALL_CLOCK,
    )


class _WallClock(Evaluator):
    """``evaluator`` with every measurement at the wall clock (:func:`wall_clock`)."""

    def __init__(self, evaluator: Evaluator) -> None:
        self.inner = evaluator
        self.caps = evaluator.caps

    def evaluate(self, config: Config) -> Measurement:
        return wall_clock(self.inner.evaluate(config))

    def evaluate_batch(self, configs: Sequence[Config]) -> list[Measurement | BaseException]:
        return [
            m if isinstance(m, BaseException) else wall_clock(m)
            for m in self.inner.evaluate_batch(configs)
        ]
