"""Which failure a multi-rank trial reports, and what stops the tuner (pure: no Ray)."""

from __future__ import annotations

import pytest
import torch

from orchestrator.tuner.evaluators.base import Evaluator, EvaluatorLost
from orchestrator.tuner.evaluators.gang import telling_error
from orchestrator.tuner.objective import Goal, Measurement
from orchestrator.tuner.oom import is_oom
from orchestrator.tuner.space import Config, DeviceCaps, SearchSpace
from orchestrator.tuner.strategies import STRATEGIES
from orchestrator.tuner.tuner import Tuner


class DistBackendError(RuntimeError):
    """Stands in for ``torch.distributed.DistBackendError`` (matched by name)."""


def test_an_oom_on_any_rank_wins_over_a_peers_broken_collective() -> None:
    """The rank that ran out of memory tears its group down; rank 0 may fail first with a
    closed connection. The trial must still read as out of memory."""
    peer = DistBackendError("Connection closed by peer")
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_oom(telling_error([peer, oom]))
    crash = ValueError("bad shape")
    assert telling_error([peer, crash]) is crash  # the cause, not the symptom
    assert telling_error([peer]) is peer


class _Broken(Evaluator):
    caps = DeviceCaps()

    def __init__(self) -> None:
        self.calls = 0

    def evaluate(self, config: Config) -> Measurement:
        self.calls += 1
        if self.calls == 2:
            raise EvaluatorLost("the tuning gang does not answer")
        return Measurement("ok", p95_ms=1.0, samples_per_s=100.0 * config.micro_batch, cost_s=1)


def test_a_lost_evaluator_stops_the_tuner_without_recording_the_config() -> None:
    ev = _Broken()
    tuner = Tuner(
        SearchSpace(micro_batches=(1, 2, 4, 8)),
        Goal("throughput", floor=1.0),
        ev,
        STRATEGIES.create("sla"),
    )
    with pytest.raises(EvaluatorLost):
        tuner.run()
    finished = [t for t in tuner.study.trials if t.state.is_finished()]
    assert len(finished) == 1  # the first trial; nothing recorded for the one that was lost
