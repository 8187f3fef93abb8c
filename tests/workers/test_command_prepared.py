"""``job.prepare`` (issue 38 item 1's second half): a plain loop gets the run's settings in its
own framework objects, keeps the job's global batch whatever the split, and a stop then a
resume ends at the loss of an uninterrupted run; all through the worker's runner, on real
processes (Gloo)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.spec import parse_spec
from orchestrator.workdir import pack
from tests.workers.test_command import SCRIPTS, job_root  # noqa: F401 (fixture)
from tests.workers.test_command_torchrun import config, ranks

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / "examples" / "prepared_loop"


def final_losses(text: str) -> list[float]:
    return [float(v) for v in re.findall(r"final loss (\S+)", text)]


@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_the_tuned_settings_reach_the_frameworks_objects(
    job_root: Path,  # noqa: F811
    sharding: str,
) -> None:
    cfg = config(["python", "prepared_probe.py"], micro_batch=8, steps=4)
    cfg.update(grad_accum=2, precision="bf16", sharding=sharding)
    cfg["loader"] = {"num_workers": 1, "persistent_workers": True}
    results, _ = ranks(cfg, SCRIPTS, job_root / sharding)
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    assert results[0]["status"] == "finished" and results[0]["steps_done"] == 4
    assert results[0]["global_batch"] == 32  # 8 x 2 x 2 ranks
    for rank in (0, 1):
        seen = json.loads((job_root / sharding / f"probe-{rank}.json").read_text())
        assert seen["ddp"] is (sharding == "ddp") and seen["fsdp"] is (sharding == "fsdp")
        assert seen["autocast"] == "torch.bfloat16" and seen["output"] == "torch.float32"
        assert seen["loader_batch"] == seen["batch"] == 8 and seen["workers"] == 1
        assert seen["sampler"] == "_ResumableSampler"


def test_the_global_batch_is_kept_whatever_the_split(
    job_root: Path,  # noqa: F811
    capfd: pytest.CaptureFixture[str],
) -> None:
    one = config(["python", "train.py"], micro_batch=32, steps=30)
    ranks(one, LOOP, job_root / "one", world=1)
    alone = final_losses(capfd.readouterr().out)
    split = config(["python", "train.py"], micro_batch=8, steps=30)
    split["grad_accum"] = 2
    results, reports = ranks(split, LOOP, job_root / "split")
    assert results[0]["status"] == "finished" and results[0]["global_batch"] == 32
    assert results[0]["samples_per_s"] > 0 and reports[-1]["step"] == 30  # the hook's count
    both = final_losses(capfd.readouterr().out)
    assert len(alone) == 1 and len(both) == 2
    assert all(math.isclose(v, alone[0], rel_tol=1e-4) for v in both), (alone, both)


def test_a_stopped_prepared_loop_resumes_to_the_loss_of_an_uninterrupted_one(
    job_root: Path,  # noqa: F811
    capfd: pytest.CaptureFixture[str],
) -> None:
    cfg = config(["python", "train.py"], micro_batch=16, steps=40)
    cfg["grad_accum"] = 2
    ranks(cfg, LOOP, job_root / "whole", world=1)
    whole = final_losses(capfd.readouterr().out)
    first, _ = ranks(cfg, LOOP, job_root / "cut", stop_at=8, world=1)
    assert first[0]["status"] == "stopped" and 8 <= first[0]["steps_done"] < 40
    assert first[0]["checkpoint_path"] is not None  # job.prepare saved it, not the script
    capfd.readouterr()
    resumed, _ = ranks(cfg, LOOP, job_root / "cut", world=1)
    assert resumed[0]["status"] == "finished" and resumed[0]["steps_done"] == 40
    assert resumed[0]["resumed_from_step"] == first[0]["steps_done"]
    again = final_losses(capfd.readouterr().out)
    assert math.isclose(again[0], whole[0], rel_tol=1e-5), (again, whole)


def test_the_example_job_file_validates() -> None:
    data = yaml.safe_load((LOOP / "job.yaml").read_text())
    data["workload"]["working_dir"] = pack(LOOP).digest
    assert parse_spec(data).workload.command is not None
