"""Checkpoints: atomic commits, exact resumption, and the run time of a run for a set time."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workers.helpers import tiny
from workers import checkpoint
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


def test_writes_leave_the_record_and_the_last_step_only(tmp_path: Path) -> None:
    Harness(tiny("mlp", steps=4, checkpoint_every=1), checkpoint_dir=tmp_path).run()
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE, "step-000000004"]


class Preempted(BaseException):
    """The process dying mid-write (not an Exception: nothing may catch it)."""


def test_a_write_cut_short_leaves_the_previous_checkpoint_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tiny("mlp", steps=6, checkpoint_every=2)
    straight = Harness(config)
    straight.run()
    real_save = checkpoint.dcp.save

    def cut_short(state: dict[str, Any], **kw: Any) -> None:
        step_dir = Path(kw["storage_writer"].path)
        if step_dir.name != "step-000000004":
            real_save(state, **kw)
            return
        real_save(state, **kw)  # then the shards of step 4 are left half-written, no metadata
        (step_dir / ".metadata").unlink()
        for shard in step_dir.glob("*.distcp"):
            shard.write_bytes(shard.read_bytes()[:10])
        raise Preempted

    monkeypatch.setattr(checkpoint.dcp, "save", cut_short)
    with pytest.raises(Preempted):
        Harness(config, checkpoint_dir=tmp_path).run()
    monkeypatch.undo()
    assert (tmp_path / "step-000000004").exists()
    record = load_checkpoint(tmp_path, "mlp", config.workload_args)
    assert record is not None and (record.step, record.tensors) == (2, "step-000000002")

    resumed = Harness(config, checkpoint_dir=tmp_path)
    result = resumed.run()
    assert (result.resumed_from_step, result.steps_done) == (2, 6)
    assert same_params(straight.model, resumed.model)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE, "step-000000006"]


def test_a_run_for_a_set_time_resumes_with_what_is_left_of_it(tmp_path: Path) -> None:
    duration = 1.0
    config = tiny("mlp", steps=None, duration_s=duration)
    began: list[float] = []

    def halfway() -> bool:  # polled first as the step loop starts, then before every step
        now = time.perf_counter()
        began.append(began[0] if began else now)
        return now - began[0] >= duration / 2

    first = Harness(config, checkpoint_dir=tmp_path, should_stop=halfway).run()
    assert first.status == "stopped"
    done = load_checkpoint(tmp_path, "mlp", config.workload_args)
    assert done is not None and done.run_time_s >= duration / 2

    reports: list[dict[str, Any]] = []
    resumed = Harness(config, checkpoint_dir=tmp_path, report=reports.append, report_every_s=0)
    result = resumed.run()
    assert result.status == "finished" and result.resumed_from_step == first.steps_done
    # its deadline is what the checkpoint says is left, not a whole duration again
    assert reports[0]["time_left_s"] <= duration - done.run_time_s
    total = load_checkpoint(tmp_path, "mlp", config.workload_args)
    assert total is not None and total.run_time_s >= duration
    # the resumed run took what was left (plus a step): the old rule gave it all of ``duration``
    assert total.run_time_s - done.run_time_s < duration

    # its time is spent: a further run ends at once, without a step
    again = Harness(config, checkpoint_dir=tmp_path).run()
    assert again.status == "finished" and again.steps_done == result.steps_done


def test_a_corrupt_checkpoint_is_reported(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        Harness(tiny("mlp", steps=2), checkpoint_dir=tmp_path).run()
