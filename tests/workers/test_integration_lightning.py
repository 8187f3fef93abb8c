"""The Lightning integration (issue 38 item 3): the tuned settings arrive in the Trainer's own
arguments (one rank, and two ranks whose world Lightning reads from orch's torchrun-style
variables), the global batch is kept whatever the split, a preempted Trainer resumes to the
loss of an uninterrupted run, a crash quotes the script's own last output, and a missing
``lightning`` names the extra; all through the worker's runner, on real processes (Gloo;
examples/lightning_module)."""

from __future__ import annotations

import importlib
import json
import math
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

pytest.importorskip("lightning", reason="the [lightning] extra (make test installs it)")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lightning_module"
PROBES = Path(__file__).parent / "integration_dir"


def final_losses(text: str) -> list[float]:
    return [float(v) for v in re.findall(r"final loss (\S+)", text)]


def example(micro_batch: int, grad_accum: int, steps: int) -> dict[str, object]:
    cfg = config(["python", "train.py", "--lines", "1000"], micro_batch=micro_batch, steps=steps)
    cfg["grad_accum"] = grad_accum
    return cfg


@pytest.mark.parametrize(("world", "sharding"), [(1, "ddp"), (2, "ddp"), (2, "fsdp")])
def test_the_tuned_settings_reach_the_trainers_arguments(
    job_root: Path,  # noqa: F811
    world: int,
    sharding: str,
) -> None:
    cfg = config(["python", "lightning_probe.py"], micro_batch=8, steps=3)
    cfg.update(grad_accum=2, precision="bf16", sharding=sharding)
    results, reports = ranks(cfg, PROBES, job_root / "p", world=world)
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    assert results[0]["status"] == "finished" and results[0]["steps_done"] == 3
    assert results[0]["global_batch"] == 16 * world and reports[-1]["step"] == 3
    for rank in range(world):
        seen = json.loads((job_root / "p" / f"probe-{rank}.json").read_text())
        assert seen["precision"] == "bf16-mixed" and seen["accumulate_grad_batches"] == 2
        assert seen["loader_batch"] == 8 and seen["max_steps"] == 3  # not the script's 4, 100
        assert seen["world_size"] == seen["num_nodes"] == world and seen["global_rank"] == rank
        # Lightning refuses FSDP on CPU: there the run trains with DDP (as Accelerate's)
        fsdp = sharding == "fsdp" and torch.cuda.is_available()
        ddp = "FSDPStrategy" if fsdp else "DDPStrategy"
        assert seen["strategy"] == (ddp if world > 1 else "SingleDeviceStrategy")
        assert seen["root"] == str(job_root / "p")


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
    # the same 16 sequences a step; Lightning scales each micro-batch's mean loss by 1/2, so
    # the gradient is the same mean summed in another order: float rounding alone
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
    assert (job_root / "cut" / f"step-{stopped_at}.ckpt").is_file()  # the Trainer's own
    capfd.readouterr()
    resumed, _ = ranks(cfg, EXAMPLE, job_root / "cut", world=1)
    assert resumed[0]["status"] == "finished" and resumed[0]["steps_done"] == 16
    assert resumed[0]["resumed_from_step"] == stopped_at
    again = final_losses(capfd.readouterr().out)
    # the checkpoint holds the weights and optimizer exactly (fp32), the resumed run drops the
    # batches the stopped one had taken (same seed, same order, no dropout): the same float
    # operations on CPU, so the same loss up to nothing but the order of a sum
    assert math.isclose(again[0], whole[0], rel_tol=1e-6), (again, whole)


def test_a_crash_is_reported_with_the_scripts_own_last_output(job_root: Path) -> None:  # noqa: F811
    cfg = config(["python", "lightning_probe.py", "--crash"], micro_batch=4, steps=5)
    results, _ = ranks(cfg, PROBES, job_root / "c", world=1)
    err = results[0]
    assert isinstance(err, CommandError), results
    assert "exited with code 1: python lightning_probe.py --crash; last output:" in str(err)
    assert "RuntimeError: shard 7 is corrupt: bad header" in str(err), err


def test_without_lightning_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "workers.integrations.lightning", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'sla-orchestrator\[lightning\]'"):
        importlib.import_module("workers.integrations.lightning")


@pytest.mark.parametrize("name", ["job.yaml", "job-latency.yaml"])
def test_the_example_job_files_validate(name: str) -> None:
    data = yaml.safe_load((EXAMPLE / name).read_text())
    data["workload"]["working_dir"] = pack(EXAMPLE).digest
    assert parse_spec(data).workload.command is not None


def test_two_ranks_stop_at_one_step_save_together_and_resume_to_the_same_loss(
    job_root: Path,  # noqa: F811
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The stop reaches each rank's process on its own; a rank that saved while the other did
    not would wait in Lightning's save barrier forever (it did, before the decision was
    agreed over the ranks: workers/integrations/lifecycle.py)."""
    cfg = example(8, 1, 10)
    ranks(cfg, EXAMPLE, job_root / "whole", world=2)
    whole = final_losses(capfd.readouterr().out)
    first, _ = ranks(cfg, EXAMPLE, job_root / "cut", stop_at=3, world=2)
    assert first[0]["status"] == first[1]["status"] == "stopped", first
    assert first[0]["steps_done"] == first[1]["steps_done"] < 10
    assert (job_root / "cut" / f"step-{first[0]['steps_done']}.ckpt").is_file()
    capfd.readouterr()
    resumed, _ = ranks(cfg, EXAMPLE, job_root / "cut", world=2)
    assert resumed[0]["status"] == "finished" and resumed[0]["steps_done"] == 10, resumed
    again = final_losses(capfd.readouterr().out)
    # rank 0 prints; gradients averaged over 2 ranks by an all-reduce on Gloo (the same sum in
    # the same order each run): as exact as one rank
    assert len(whole) == len(again) == 1 and math.isclose(again[0], whole[0], rel_tol=1e-6)
