"""Runs fenced like the scheduler (issue 28): a deposed run stops without a checkpoint or a
report, and two copies of one run never write or delete each other's checkpoint files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from workers.checkpoint import (
    CHECKPOINT_FILE,
    Checkpoint,
    load_checkpoint,
    run_tag,
    save_checkpoint,
)
from workers.config import HarnessConfig
from workers.harness import Harness

OLD, NEW = run_tag(3, 7), run_tag(4, 1)  # a later generation wins whatever the serial


def _config(**kw: Any) -> HarnessConfig:
    return HarnessConfig(workload="mlp", workload_args={"in_features": 4, "hidden": 4}, **kw)


def test_tags_sort_by_generation_then_launch() -> None:
    assert run_tag(3, 7) < run_tag(3, 8) < run_tag(4, 1) < run_tag(10, 0)


def test_a_deposed_run_stops_at_once_without_writing(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    Harness(_config(micro_batch=2, steps=4), checkpoint_dir=ckpt, run_tag=OLD).run()
    before = (ckpt / CHECKPOINT_FILE).read_bytes()
    calls, reports = 0, []

    def fence() -> bool:
        nonlocal calls
        calls += 1
        return calls <= 3  # deposed after its third step

    result = Harness(
        _config(micro_batch=2, steps=100, checkpoint_every=1),
        checkpoint_dir=ckpt,
        report=reports.append,
        report_every_s=1e9,
        fence=fence,
        run_tag=OLD,
    ).run()
    assert result.status == "fenced" and result.steps_done < 100
    # every checkpoint it tried after being deposed was left uncommitted
    assert (ckpt / CHECKPOINT_FILE).read_bytes() != before or result.steps_done == 4
    assert all(r["status"] == "running" for r in reports)  # no final report


def _save(location: Path, step: int, tag: str, may_commit: bool = True) -> str | None:
    ckpt = Checkpoint(step=step, samples_seen=step, workload="w", workload_args={})
    return save_checkpoint(
        location,
        ckpt,
        {"model": {"w": torch.full((1,), float(step))}},
        run_tag=tag,
        may_commit=lambda: may_commit,
    )


def test_a_deposed_copy_neither_commits_nor_deletes_the_new_runs_files(tmp_path: Path) -> None:
    new_dir = _save(tmp_path, 10, NEW)
    assert new_dir is not None
    # the old copy, still running, saves a later step: written apart, never committed
    assert _save(tmp_path, 12, OLD, may_commit=False) is None
    record = load_checkpoint(tmp_path, "w", {})
    assert record is not None and record.step == 10
    # even if it commits (it asked just before being deposed), it deletes nothing of the new run
    _save(tmp_path, 13, OLD)
    assert Path(new_dir).is_dir()
    # the new run's next save takes the record back and clears what older runs left
    _save(tmp_path, 11, NEW)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [CHECKPOINT_FILE, f"step-000000011-{NEW}"]
