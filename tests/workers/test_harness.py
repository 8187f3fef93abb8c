"""The harness loop: precision, accumulation, activation checkpointing, compile, measurement."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workers.helpers import TINY_ARGS, tiny
from workers.config import HarnessConfig
from workers.errors import HarnessConfigError
from workers.harness import Harness
from workers.result import REPORT_KEYS, RunResult
from workers.workloads.registry import BUILTIN_WORKLOADS


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def all_close(
    a: list[torch.Tensor], b: list[torch.Tensor], atol: float = 1e-6, rtol: float = 1e-5
) -> bool:
    return len(a) == len(b) and all(
        torch.allclose(x, y, atol=atol, rtol=rtol) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("name", BUILTIN_WORKLOADS)
def test_each_builtin_runs_a_few_steps(name: str) -> None:
    result = Harness(tiny(name)).run()
    assert result.status == "finished"
    assert result.steps_done == 3
    assert result.measured_steps == 2
    assert result.p50_ms is not None and result.p50_ms > 0
    assert result.samples_per_s is not None and result.samples_per_s > 0
    assert (result.loss is None) == (name == "infer")
    assert (result.tokens_per_s is not None) == (name in ("gpt", "infer"))
    json.dumps(result.to_dict(), allow_nan=False)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_each_precision_runs_on_cpu(name: str, precision: str) -> None:
    # CPU autocast supports fp16 in torch 2.x, so fp16 runs (unscaled: GradScaler is CUDA-only
    # here) rather than failing.
    result = Harness(tiny(name, precision=precision), device="cpu").run()
    assert result.status == "finished"
    assert result.loss is not None and torch.isfinite(torch.tensor(result.loss))


def test_low_precision_changes_the_forward_dtype() -> None:
    harness = Harness(tiny("mlp", precision="bf16"), device="cpu")
    with harness._autocast():
        out = harness.model(torch.randn(2, 16))
    assert out.dtype == torch.bfloat16


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fp16_on_cuda_uses_a_grad_scaler() -> None:
    harness = Harness(tiny("gpt", precision="fp16"), device="cuda")
    assert harness._scaler is not None
    result = harness.run()
    assert result.status == "finished" and result.device.startswith("cuda")
    assert result.peak_mem_mb > 0


def test_accumulation_equals_one_bigger_batch() -> None:
    big = Harness(tiny("mlp", micro_batch=16, grad_accum=1, steps=1))
    big.run()
    split = Harness(tiny("mlp", micro_batch=8, grad_accum=2, steps=1))
    split.run()
    assert all_close(grads(big.model), grads(split.model), atol=1e-6, rtol=1e-5)
    assert all_close(params(big.model), params(split.model), atol=1e-6, rtol=1e-5)


def test_accumulation_stays_equal_over_several_steps() -> None:
    big = Harness(tiny("mlp", micro_batch=12, steps=4)).run()
    split = Harness(tiny("mlp", micro_batch=4, grad_accum=3, steps=4)).run()
    assert big.param_fingerprint == pytest.approx(split.param_fingerprint, rel=1e-6)
    assert big.loss == pytest.approx(split.loss, rel=1e-5)


def test_activation_checkpointing_gives_the_same_loss_and_grads() -> None:
    plain = Harness(tiny("gpt", steps=1))
    plain_result = plain.run()
    ckpt = Harness(tiny("gpt", steps=1, activation_checkpointing=True))
    ckpt_result = ckpt.run()
    # The harness (its plan's recipe), not the workload, wrapped every block's forward.
    assert all(hasattr(b.forward, "__wrapped__") for b in ckpt.workload.blocks)
    assert ckpt_result.loss == pytest.approx(plain_result.loss, rel=1e-6)
    assert all_close(grads(plain.model), grads(ckpt.model), atol=1e-6, rtol=1e-5)
    assert plain.model.state_dict().keys() == ckpt.model.state_dict().keys()


@pytest.mark.slow  # inductor compiles C++ on the CPU: about 30 s on 2 cores with a cold cache
def test_compile_matches_eager() -> None:
    eager = Harness(tiny("mlp", steps=2)).run()
    compiled = Harness(tiny("mlp", steps=2, compile=True)).run()
    assert compiled.loss == pytest.approx(eager.loss, rel=1e-5)


def test_report_is_called_with_the_documented_keys() -> None:
    reports: list[dict[str, Any]] = []
    result = Harness(tiny("gpt", steps=4), report=reports.append, report_every_s=0.0).run()
    assert len(reports) == 5  # one per step (interval 0) and the final one
    for r in reports:
        assert set(REPORT_KEYS) <= set(r)
        json.dumps(r, allow_nan=False)
    assert [r["step"] for r in reports] == [1, 2, 3, 4, 4]
    assert reports[0]["status"] == "running"
    assert all(r["reads_dataset"] is False for r in reports)  # gpt generates its batches
    final = reports[-1]
    assert final["status"] == "finished"
    assert final["total_steps"] == 4
    assert final["nvml"] == "unavailable"
    assert final["device"] == "cpu"
    assert final["loss"] == pytest.approx(result.loss)
    assert final["tokens_per_s"] == pytest.approx(final["samples_per_s"] * 16)
    assert final["p50_ms"] <= final["p95_ms"] <= final["p99_ms"]
    assert 0.0 <= final["data_wait_share"] <= 1.0
    assert final["compute_ms"] > 0 and final["data_wait_ms"] > 0
    # no accelerator on the CPU: its busy share and energy are absent, not made up
    assert final["gpu_busy_share"] is None and final["energy_per_sample_j"] is None


def test_reports_are_throttled() -> None:
    reports: list[dict[str, Any]] = []
    Harness(tiny("mlp", steps=5), report=reports.append, report_every_s=3600.0).run()
    # The first step reports (nothing was reported yet), then only the final report.
    assert [r["status"] for r in reports] == ["running", "finished"]


def test_first_step_is_reported_at_once_with_its_wall_clock_time() -> None:
    reports: list[tuple[float, dict[str, Any]]] = []
    before = time.time()
    result = Harness(
        tiny("mlp", steps=5),
        report=lambda r: reports.append((time.time(), r)),
        report_every_s=3600.0,
    ).run()
    # However rarely reports are sent, step 1 is reported right away, with when it ended.
    (sent, first), (_, final) = reports
    assert first["step"] == 1 and first["status"] == "running"
    assert before < first["first_step_at"] <= sent
    assert final["first_step_at"] == first["first_step_at"] == result.first_step_at


def test_first_step_at_is_none_without_a_step(tmp_path: Path) -> None:
    result = Harness(tiny("mlp"), checkpoint_dir=tmp_path, should_stop=lambda: True).run()
    assert result.steps_done == 0
    assert result.first_step_at is None


def test_checkpoint_write_time_is_reported(tmp_path: Path) -> None:
    assert Harness(tiny("mlp")).run().checkpoint_write_s is None  # no checkpoint directory
    reports: list[dict[str, Any]] = []
    polls = iter(range(100))
    result = Harness(
        tiny("mlp", steps=50, checkpoint_every=2),
        checkpoint_dir=tmp_path,
        should_stop=lambda: next(polls) >= 3,
        report=reports.append,
        report_every_s=0.0,
    ).run()
    assert result.status == "stopped" and result.steps_done == 3
    # Step 1 wrote nothing yet; step 2 wrote the periodic checkpoint; the stop wrote step 3's.
    assert [r["checkpoint_write_s"] is None for r in reports] == [True, False, False, False]
    assert result.checkpoint_write_s is not None and result.checkpoint_write_s > 0
    assert reports[-1]["status"] == "stopped"
    assert reports[-1]["checkpoint_write_s"] == result.checkpoint_write_s


def test_a_failing_report_sink_does_not_stop_the_run() -> None:
    def broken(_: dict[str, Any]) -> None:
        raise ConnectionError("redis is down")

    assert Harness(tiny("mlp"), report=broken, report_every_s=0.0).run().status == "finished"


def test_warmup_steps_are_not_measured() -> None:
    result = Harness(tiny("mlp", steps=5, warmup_steps=3)).run()
    assert result.measured_steps == 2
    none_measured = Harness(tiny("mlp", steps=2, warmup_steps=3)).run()
    assert none_measured.measured_steps == 0
    assert none_measured.p95_ms is None and none_measured.samples_per_s is None


def test_duration_bounds_the_run() -> None:
    result = Harness(tiny("mlp", steps=None, duration_s=0.2)).run()
    assert result.status == "finished"
    assert result.steps_done > 0


def test_work_in_tokens_becomes_steps() -> None:
    seq_len = TINY_ARGS["gpt"]["seq_len"]
    # 4 samples per step; 10 steps' worth of tokens, plus one token more: 11 steps.
    harness = Harness(tiny("gpt", steps=None, work_tokens=10 * 4 * seq_len + 1))
    assert harness.config.steps == 11
    assert harness.run().steps_done == 11
    with pytest.raises(HarnessConfigError, match="needs a workload that counts tokens"):
        Harness(tiny("mlp", steps=None, work_tokens=100))
    with pytest.raises(HarnessConfigError, match="exactly one of steps, duration_s and work"):
        tiny("gpt", steps=3, work_tokens=100)


def test_should_stop_stops_and_checkpoints(tmp_path: Path) -> None:
    polls = iter(range(100))
    result = Harness(
        tiny("mlp", steps=50), checkpoint_dir=tmp_path, should_stop=lambda: next(polls) >= 2
    ).run()
    assert result.status == "stopped"
    assert result.steps_done == 2
    assert (tmp_path / "checkpoint.pt").exists()
    assert result.checkpoint_path == str(tmp_path / "step-000000002")  # its tensors


def test_peak_memory_is_this_runs_not_an_earlier_runs() -> None:
    # The case: in one worker process, a small trial after a large one read the large
    # one's peak. Each run's peak is restarted (CUDA peak stats; on the CPU the RSS high-water
    # mark), so the small run reads what it reads alone.
    def peak(micro_batch: int) -> float:
        result = Harness(HarnessConfig(workload="gpt", micro_batch=micro_batch, steps=2)).run()
        assert result.peak_mem_scope == "run"
        return result.peak_mem_mb

    alone = peak(4)
    large = peak(256)
    after = peak(4)
    gap = large - alone
    assert gap > 40  # MiB: the large run does need more (else this test shows nothing)
    assert after < large - 0.8 * gap
    # within a fifth of the gap: the allocator may keep some of the large run's pages mapped
    # (under a loaded suite 32 MiB of a 278 MiB gap once), never the large run's peak
    assert after == pytest.approx(alone, abs=max(10.0, 0.2 * gap))


def test_making_data_is_data_wait_not_step_time() -> None:
    sleep_s = 0.5  # per micro-batch, in the workload's make_batch
    config = HarnessConfig(
        workload="tests.workers.sample_workload:slow_data",
        workload_args={"features": 4, "sleep_s": sleep_s},
        micro_batch=4,
        grad_accum=2,
        steps=2,
        warmup_steps=1,
    )
    result = Harness(config).run()
    assert result.measured_steps == 1
    assert result.data_wait_ms is not None and result.data_wait_ms >= 2 * sleep_s * 1000
    assert result.compute_ms == pytest.approx(result.p50_ms)  # one measured step
    # Made inside the clock, the step would be >= 1 s by construction; a 4-feature linear
    # model's step is far under the sleep.
    assert result.p50_ms is not None and result.p50_ms < result.data_wait_ms
    wait, compute = result.data_wait_ms, result.compute_ms
    assert compute is not None
    assert result.data_wait_share == pytest.approx(wait / (wait + compute))


def test_inference_runs_forward_only() -> None:
    harness = Harness(tiny("infer", steps=3))
    result = harness.run()
    assert result.loss is None and result.tokens_per_s is not None
    assert all(p.grad is None for p in harness.model.parameters())


def test_run_twice_is_refused() -> None:
    harness = Harness(tiny("mlp", steps=1))
    harness.run()
    with pytest.raises(RuntimeError, match="once"):
        harness.run()


def test_user_workload_runs() -> None:
    config = HarnessConfig(
        workload="tests.workers.sample_workload:build",
        workload_args={"features": 4},
        micro_batch=4,
        steps=3,
    )
    result = Harness(config).run()
    assert result.status == "finished" and result.loss is not None


def test_result_is_json_serialisable() -> None:
    result = Harness(tiny("mlp")).run()
    again = RunResult(**json.loads(json.dumps(result.to_dict(), allow_nan=False)))
    assert again == result


class TestConfigValidation:
    @pytest.mark.parametrize(
        ("overrides", "expected"),
        [
            ({"steps": None}, "exactly one of steps, duration_s and work_tokens"),
            ({"duration_s": 1.0}, "exactly one of steps, duration_s and work_tokens"),
            ({"micro_batch": 0}, "micro_batch must be an integer >= 1"),
            ({"grad_accum": 0}, "grad_accum must be an integer >= 1"),
            ({"precision": "fp8"}, "precision must be one of fp32, bf16, fp16"),
            ({"optimizer": "lamb"}, "optimizer must be one of adamw, sgd"),
            ({"sharding": "bogus"}, "sharding must be one of ddp, fsdp, got 'bogus'"),
            ({"lr": -1.0}, "lr must be a finite number > 0"),
        ],
    )
    def test_bad_values_are_explained(self, overrides: dict[str, Any], expected: str) -> None:
        with pytest.raises(HarnessConfigError, match=expected):
            tiny("mlp", **overrides)

    def test_round_trip_through_a_dict(self) -> None:
        config = tiny("gpt", precision="bf16", grad_accum=2)
        assert HarnessConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config

    def test_unknown_keys_are_refused(self) -> None:
        with pytest.raises(HarnessConfigError, match="unknown harness config keys \\['batch'\\]"):
            HarnessConfig.from_dict({"workload": "mlp", "batch": 8, "steps": 1})

    def test_accumulation_on_inference_is_refused(self) -> None:
        with pytest.raises(HarnessConfigError, match="grad_accum must be 1"):
            Harness(tiny("infer", grad_accum=2))

    def test_data_parallel_needs_an_init_method(self) -> None:
        with pytest.raises(HarnessConfigError, match="init_method"):
            Harness(tiny("mlp"), rank=0, world_size=2)

    def test_rank_must_be_below_world_size(self) -> None:
        with pytest.raises(HarnessConfigError, match="rank must be in"):
            Harness(tiny("mlp"), rank=2, world_size=2, init_method="tcp://127.0.0.1:1")


@pytest.mark.parametrize(
    ("rule", "factor"),
    [("none", 1.0), ("linear", 4.0), ("sqrt", 2.0)],
)
def test_the_learning_rate_follows_the_global_batch_by_the_jobs_rule(
    rule: str, factor: float
) -> None:
    """A run at global batch 32 whose learning rate was set for 8: the optimizer gets it
    scaled by the rule (x4 linear, x2 square root), and the training really changes."""
    cfg = tiny("mlp", micro_batch=16, grad_accum=2, steps=2, lr_scaling=rule, base_global_batch=8)
    h = Harness(cfg)
    result = h.run()
    assert h.lr == pytest.approx(cfg.lr * factor)
    same_lr = Harness(tiny("mlp", micro_batch=16, grad_accum=2, steps=2, lr=cfg.lr * factor))
    assert result.param_fingerprint == pytest.approx(same_lr.run().param_fingerprint, rel=1e-9)
    unscaled = Harness(tiny("mlp", micro_batch=16, grad_accum=2, steps=2)).run()
    moved = result.param_fingerprint != pytest.approx(unscaled.param_fingerprint, rel=1e-9)
    assert moved == (rule != "none")


def test_script_scaling_is_the_workloads_own_rule() -> None:
    entry = "tests.workers.sample_workload:build_scaled"
    h = Harness(tiny(entry, micro_batch=32, lr_scaling="script", base_global_batch=2))
    assert h.lr == pytest.approx(h.config.lr * 2.0)  # (32 / 2) ** 0.25
    with pytest.raises(HarnessConfigError, match="has no scale_lr"):
        Harness(tiny("tests.workers.sample_workload:build", lr_scaling="script"))


def test_a_run_says_whether_its_workload_is_forward_only() -> None:
    entry = "tests.workers.sample_workload:build_inference"
    assert Harness(tiny(entry, steps=1, warmup_steps=0)).run().forward_only is True
    assert Harness(tiny("tests.workers.sample_workload:build", steps=1)).run().forward_only is False
