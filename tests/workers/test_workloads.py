"""The workload protocol, the built-ins and the registry."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
import torch

from workers.errors import WorkloadError
from workers.workloads.base import Workload
from workers.workloads.data import sample_generator
from workers.workloads.registry import BUILTIN_WORKLOADS, build_workload, resolve_builder


@pytest.mark.parametrize("name", BUILTIN_WORKLOADS)
class TestBuiltinContract:
    """Every built-in honours the data contract the harness relies on."""

    def test_builds_a_workload(self, name: str) -> None:
        workload = build_workload(name, {}, seed=0)
        assert isinstance(workload, Workload)
        assert len(workload.blocks) > 0

    def test_samples_depend_only_on_seed_and_index(self, name: str) -> None:
        workload = build_workload(name, {}, seed=3)
        whole = workload.make_batch(10, 6)
        halves = [workload.make_batch(10, 3), workload.make_batch(13, 3)]
        for field, a, b in zip(whole, halves[0], halves[1], strict=True):
            assert torch.equal(field, torch.cat([a, b]))
        again = build_workload(name, {}, seed=3).make_batch(10, 6)
        assert all(torch.equal(x, y) for x, y in zip(whole, again, strict=True))
        other_seed = build_workload(name, {}, seed=4).make_batch(10, 6)
        assert not torch.equal(whole[0], other_seed[0])

    def test_loss_runs_on_a_batch(self, name: str) -> None:
        workload = build_workload(name, {}, seed=0)
        out = workload.loss(workload.model, workload.make_batch(0, 2))
        if workload.train:
            assert out.dim() == 0 and torch.isfinite(out)
        else:
            assert out.shape[0] == 2


def test_language_models_report_tokens() -> None:
    assert build_workload("gpt", {"seq_len": 16}, 0).tokens_per_sample == 16
    assert build_workload("infer", {"model": "gpt", "seq_len": 16}, 0).tokens_per_sample == 16
    assert build_workload("mlp", {}, 0).tokens_per_sample == 0


def test_infer_is_forward_only_in_eval_mode() -> None:
    for model in ("gpt", "mlp"):
        workload = build_workload("infer", {"model": model}, 0)
        assert workload.train is False
        assert workload.model.training is False


def test_user_entry_point_builds() -> None:
    workload = build_workload("tests.workers.sample_workload:build", {"features": 4}, 0)
    x, y = workload.make_batch(0, 5)
    assert x.shape == (5, 4) and y.shape == (5,)


def test_unknown_name_lists_builtins() -> None:
    with pytest.raises(WorkloadError) as err:
        resolve_builder("resnet")
    for name in BUILTIN_WORKLOADS:
        assert name in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("no_such_package.mod:build", "cannot import module 'no_such_package.mod'"),
        ("tests.workers.sample_workload:missing", "does not exist"),
        ("tests.workers.sample_workload:NOT_CALLABLE", "is not callable"),
        ("tests.workers.sample_workload:", "package.module:function"),
        (":build", "package.module:function"),
    ],
)
def test_bad_entry_point_is_explained(name: str, expected: str) -> None:
    with pytest.raises(WorkloadError, match=re.escape(expected)):
        resolve_builder(name)


def test_builder_returning_wrong_type_is_explained() -> None:
    with pytest.raises(WorkloadError, match=r"must return .*Workload, got str"):
        build_workload("tests.workers.sample_workload:returns_wrong_type", {}, 0)


def test_builder_crash_names_the_workload() -> None:
    with pytest.raises(
        WorkloadError,
        match=re.escape(
            "'tests.workers.sample_workload:broken' failed to build: RuntimeError: boom"
        ),
    ):
        build_workload("tests.workers.sample_workload:broken", {}, 0)


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("gpt", {"n_layers": 2}, "does not take 'n_layers'; its arguments are: d_model"),
        ("gpt", {"n_layer": "two"}, "'n_layer' must be int"),
        ("gpt", {"n_layer": 2.5}, "'n_layer' must be int"),
        ("gpt", {"d_model": 30, "n_head": 4}, "divisible by n_head"),
        ("mlp", {"hidden": 0}, "'hidden' must be > 0"),
        ("mlp", {"pace_ms": -1}, "'pace_ms' must be in 0 .. 10000, got -1.0"),
        ("mlp", {"pace_ms": 60_000}, "'pace_ms' must be in 0 .. 10000, got 60000.0"),
        ("cnn", {"image_size": 30}, "divisible by 2\\*\\*n_layer"),
        ("infer", {"model": "bert"}, "model must be one of gpt, mlp"),
    ],
)
def test_bad_arguments_are_explained(name: str, args: dict[str, object], expected: str) -> None:
    with pytest.raises(WorkloadError, match=expected):
        build_workload(name, dict(args), 0)


def test_a_paced_mlp_makes_the_same_data_late() -> None:
    plain = build_workload("mlp", {}, 0).make_batch(8, 4)
    paced = build_workload("mlp", {"pace_ms": 50}, 0)
    start = time.monotonic()
    batch = paced.make_batch(8, 4)
    assert time.monotonic() - start >= 0.05
    assert all(torch.equal(a, b) for a, b in zip(plain, batch, strict=True))


def test_string_arguments_are_converted() -> None:
    workload = build_workload("gpt", {"n_layer": "1"}, 0)
    assert len(workload.blocks) == 1


def test_light_modules_do_not_import_torch() -> None:
    # The control plane imports these; torch must stay out (it takes seconds to import).
    code = (
        "import sys, workers, workers.workloads.registry, workers.config, workers.actor, "
        "workers.result; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_sample_generators_differ_across_seeds_and_indices() -> None:
    def draw(seed: int, index: int) -> torch.Tensor:
        return torch.randn(4, generator=sample_generator(seed, index))

    pairs = [(0, 0), (0, 1), (1, 0), (0, 2**32), (2**32, 0)]
    draws = [draw(*p) for p in pairs]
    for i in range(len(draws)):
        for j in range(i + 1, len(draws)):
            assert not torch.equal(draws[i], draws[j]), (pairs[i], pairs[j])
    assert torch.equal(draw(5, 7), draw(5, 7))
