"""Checkpoints: atomic writes and exact resumption."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.workers.helpers import tiny
from workers.checkpoint import CHECKPOINT_FILE, load_checkpoint
from workers.errors import CheckpointError
from workers.harness import Harness
from workers.latency import LatencySketch


def stop_after(n_steps: int) -> Callable[[], bool]:
    """A should_stop that says stop when polled before step ``n_steps + 1``."""
    polls = iter(range(10_000))
    return lambda: next(polls) >= n_steps


def same_params(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize(
    ("name", "precision", "optimizer"),
    [("mlp", "fp32", "adamw"), ("gpt", "bf16", "adamw"), ("cnn", "fp32", "sgd")],
)
def test_stop_and_resume_equals_an_uninterrupted_run(
    tmp_path: Path, name: str, precision: str, optimizer: str
) -> None:
    config = tiny(name, steps=7, checkpoint_every=2, precision=precision, optimizer=optimizer)
    straight = Harness(config)
    straight.run()

    first = Harness(config, checkpoint_dir=tmp_path, should_stop=stop_after(3))
    stopped = first.run()
    assert stopped.status == "stopped" and stopped.steps_done == 3

    second = Harness(config, checkpoint_dir=tmp_path)
    resumed = second.run()
    assert resumed.status == "finished"
    assert resumed.resumed_from_step == 3
    assert resumed.steps_done == 7
    assert same_params(straight.model, second.model)


def test_resume_after_a_shorter_run_by_steps(tmp_path: Path) -> None:
    straight = Harness(tiny("mlp", steps=6))
    straight.run()
    Harness(tiny("mlp", steps=4, checkpoint_every=2), checkpoint_dir=tmp_path).run()
    second = Harness(tiny("mlp", steps=6, checkpoint_every=2), checkpoint_dir=tmp_path)
    result = second.run()
    assert result.resumed_from_step == 4 and result.steps_done == 6
    assert same_params(straight.model, second.model)


def test_resume_with_another_batch_split_reads_the_next_samples(tmp_path: Path) -> None:
    # Elastic resizing changes the split of the global batch, not the data stream.
    straight = Harness(tiny("mlp", micro_batch=8, steps=4))
    straight.run()
    Harness(tiny("mlp", micro_batch=8, steps=2), checkpoint_dir=tmp_path).run()
    second = Harness(tiny("mlp", micro_batch=4, grad_accum=2, steps=4), checkpoint_dir=tmp_path)
    second.run()
    for x, y in zip(straight.model.parameters(), second.model.parameters(), strict=True):
        assert torch.allclose(x, y, atol=1e-6, rtol=1e-5)


def test_latency_samples_survive_a_resume(tmp_path: Path) -> None:
    Harness(tiny("mlp", steps=4, warmup_steps=1), checkpoint_dir=tmp_path).run()
    result = Harness(tiny("mlp", steps=7, warmup_steps=1), checkpoint_dir=tmp_path).run()
    assert result.measured_steps == (4 - 1) + (3 - 1)


def test_the_checkpoint_keeps_a_sketch_of_the_latencies_not_each_one(tmp_path: Path) -> None:
    result = Harness(tiny("mlp", steps=6, warmup_steps=1), checkpoint_dir=tmp_path).run()
    ckpt = load_checkpoint(tmp_path, "mlp", tiny("mlp").workload_args)
    assert ckpt is not None
    sketch = LatencySketch.from_state(ckpt.latency)
    assert sketch.count == result.measured_steps == 5
    assert sketch.quantile(0.95) == result.p95_ms


def test_a_finished_job_resumes_to_nothing(tmp_path: Path) -> None:
    Harness(tiny("mlp", steps=3), checkpoint_dir=tmp_path).run()
    result = Harness(tiny("mlp", steps=3), checkpoint_dir=tmp_path).run()
    assert result.status == "finished" and result.steps_done == 3
    assert result.resumed_from_step == 3


def test_checkpoint_of_another_workload_is_refused(tmp_path: Path) -> None:
    Harness(tiny("mlp", steps=1), checkpoint_dir=tmp_path).run()
    with pytest.raises(CheckpointError, match="is for workload 'mlp'"):
        Harness(tiny("gpt", steps=2), checkpoint_dir=tmp_path).run()


def test_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    Harness(tiny("mlp", steps=4, checkpoint_every=1), checkpoint_dir=tmp_path).run()
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_FILE]


def test_a_corrupt_checkpoint_is_reported(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        Harness(tiny("mlp", steps=2), checkpoint_dir=tmp_path).run()
