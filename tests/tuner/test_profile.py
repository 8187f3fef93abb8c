"""The job's profile prices each GPU count as the job would run there."""

from __future__ import annotations

from orchestrator.elastic import split_batch
from orchestrator.tuner.objective import Goal
from orchestrator.tuner.profile import build_profile
from orchestrator.tuner.space import Config
from orchestrator.tuner.strategies import STRATEGIES
from orchestrator.tuner.tuner import Tuner
from tests.tuner.conftest import batch_space, batch_table


def test_each_gpu_count_is_priced_at_the_split_an_elastic_resize_runs() -> None:
    """A job keeping a global batch of 16: on each GPU count the profile's point is the split
    ``elastic.split_batch`` gives (never the chosen micro-batch times more GPUs, a batch the job
    would not run), measured where the grid ran it."""
    space = batch_space(16, max_gpus=4)
    goal = Goal("throughput", floor=100.0)
    result = Tuner(space, goal, batch_table(space), STRATEGIES.create("grid"), patience=None).run()
    assert result.best is not None
    chosen = result.best.config
    profile = build_profile(result.history, chosen)
    points = profile["chosen"]["by_gpus"]
    assert [p["gpus"] for p in points] == [1, 2, 4]
    for p in points:
        split = split_batch(16, p["gpus"], chosen.micro_batch)
        assert split is not None
        measured = result.history.measured(Config(split[0], split[1], p["gpus"]))
        assert measured is not None and p["measured"] is True
        assert p["samples_per_s"] == measured.measurement.samples_per_s
