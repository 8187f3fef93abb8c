"""The Hugging Face integration (issue 38 item 2): the tuned settings arrive in the Trainer's
own ``TrainingArguments``, the global batch is kept whatever the split, a preempted Trainer
resumes to the loss of an uninterrupted run, a crash quotes the script's own last output, and
a missing ``transformers`` names the extra; all through the worker's runner, on real
processes (examples/hf_causal_lm)."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml

from orchestrator.spec import parse_spec
from orchestrator.workdir import pack
from tests.workers.test_command import job_root  # noqa: F401 (fixture)
from tests.workers.test_command_torchrun import config, ranks
from workers.errors import CommandError

pytest.importorskip("transformers", reason="the [hf] extra (make test installs it)")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "hf_causal_lm"
PROBES = Path(__file__).parent / "integration_dir"
os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded: models from configs, data made here


def final_losses(text: str) -> list[float]:
    return [float(v) for v in re.findall(r"final loss (\S+)", text)]


def example(micro_batch: int, grad_accum: int, steps: int) -> dict[str, object]:
    cfg = config(["python", "train.py", "--lines", "1500"], micro_batch=micro_batch, steps=steps)
    cfg["grad_accum"] = grad_accum
    return cfg


@pytest.mark.parametrize(("world", "sharding"), [(1, "ddp"), (2, "ddp"), (2, "fsdp")])
def test_the_tuned_settings_reach_the_trainers_arguments(
    job_root: Path,  # noqa: F811
    world: int,
    sharding: str,
) -> None:
    cfg = config(["python", "hf_probe.py"], micro_batch=8, steps=3)
    cfg.update(grad_accum=2, precision="bf16", sharding=sharding)
    cfg["loader"] = {"num_workers": 1, "persistent_workers": True}
    results, reports = ranks(cfg, PROBES, job_root / "p", world=world)
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    assert results[0]["status"] == "finished" and results[0]["steps_done"] == 3
    assert results[0]["global_batch"] == 16 * world and reports[-1]["step"] == 3
    for rank in range(world):
        seen = json.loads((job_root / "p" / f"probe-{rank}.json").read_text())
        assert seen["per_device_train_batch_size"] == seen["loader_batch"] == 8  # not its 4
        assert seen["gradient_accumulation_steps"] == 2 and seen["max_steps"] == 3
        assert seen["bf16"] is True and seen["fp16"] is False
        assert seen["dataloader_num_workers"] == 1 and seen["dataloader_persistent_workers"]
        assert seen["output_dir"] == str(job_root / "p") and seen["world_size"] == world
        assert seen["fsdp_asked"] is (sharding == "fsdp")
        # Accelerate builds its FSDP plugin for GPU-like devices only: on CPU the Trainer
        # trains with DDP (docs/user-guide.md says so)
        assert seen["fsdp"] is (sharding == "fsdp" and torch.cuda.is_available())


def test_the_global_batch_is_kept_whatever_the_split(
    job_root: Path,  # noqa: F811
    capfd: pytest.CaptureFixture[str],
) -> None:
    ranks(example(16, 1, 12), EXAMPLE, job_root / "one", world=1)
    alone = final_losses(capfd.readouterr().out)
    results, _ = ranks(example(8, 2, 12), EXAMPLE, job_root / "split", world=1)
    assert results[0]["global_batch"] == 16 and results[0]["tokens_per_s"] > 0, results
    split = final_losses(capfd.readouterr().out)
    assert len(alone) == len(split) == 1
    # the same 16 sequences a step, their token-mean loss summed in another order: float
    # rounding alone (1e-4 of a loss near 2)
    assert math.isclose(split[0], alone[0], rel_tol=1e-4), (alone, split)


def test_a_preempted_trainer_resumes_to_the_loss_of_an_uninterrupted_one(
    job_root: Path,  # noqa: F811
    capfd: pytest.CaptureFixture[str],
) -> None:
    cfg = example(8, 1, 16)
    ranks(cfg, EXAMPLE, job_root / "whole", world=1)
    whole = final_losses(capfd.readouterr().out)
    first, _ = ranks(cfg, EXAMPLE, job_root / "cut", stop_at=5, world=1)
    assert first[0]["status"] == "stopped" and 5 <= first[0]["steps_done"] < 16, first
    stopped_at = first[0]["steps_done"]
    assert (job_root / "cut" / f"checkpoint-{stopped_at}").is_dir()  # the Trainer's own
    capfd.readouterr()
    resumed, _ = ranks(cfg, EXAMPLE, job_root / "cut", world=1)
    assert resumed[0]["status"] == "finished" and resumed[0]["steps_done"] == 16
    assert resumed[0]["resumed_from_step"] == stopped_at
    again = final_losses(capfd.readouterr().out)
    # the Trainer restores the weights, optimizer, scheduler, RNG and data position (the same
    # seed, the same sample order, no dropout): the same float operations on CPU, so only
    # the checkpoint's fp32 round trip could differ (none: safetensors keeps fp32 exactly)
    assert math.isclose(again[0], whole[0], rel_tol=1e-6), (again, whole)


def test_a_crash_is_reported_with_the_scripts_own_last_output(job_root: Path) -> None:  # noqa: F811
    cfg = config(["python", "hf_probe.py", "--crash"], micro_batch=4, steps=5)
    results, _ = ranks(cfg, PROBES, job_root / "c", world=1)
    err = results[0]
    assert isinstance(err, CommandError), results
    # its own traceback's last lines (the launcher's frames left out: workers/launch.py)
    assert "exited with code 1: python hf_probe.py --crash; last output:" in str(err)
    assert "RuntimeError: shard 7 is corrupt: bad header" in str(err), err


def test_without_transformers_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "workers.integrations.hf", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'sla-orchestrator\[hf\]'"):
        importlib.import_module("workers.integrations.hf")


@pytest.mark.parametrize("name", ["job.yaml", "job-latency.yaml"])
def test_the_example_job_files_validate(name: str) -> None:
    data = yaml.safe_load((EXAMPLE / name).read_text())
    data["workload"]["working_dir"] = pack(EXAMPLE).digest
    assert parse_spec(data).workload.command is not None


def test_two_ranks_stop_at_one_step_and_save_together(job_root: Path) -> None:  # noqa: F811
    """The stop reaches each rank's process on its own: every rank must save (a collective)
    and leave at the same step (workers/integrations/lifecycle.py)."""
    cfg = config(["python", "hf_probe.py"], micro_batch=4, steps=400)
    results, _ = ranks(cfg, PROBES, job_root / "two", stop_at=3, world=2)
    assert results[0]["status"] == results[1]["status"] == "stopped", results
    step = results[0]["steps_done"]
    assert results[1]["steps_done"] == step < 400
    assert (job_root / "two" / f"checkpoint-{step}").is_dir()
