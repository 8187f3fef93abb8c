"""Goodput = throughput x statistical efficiency, on a hand-made profile computed by hand.

The profile (an app named ``bert``, two epochs) has training curves at global batches 64 (the
initial one, ``B0``) and 256, and step times on one GPU and on two GPUs of one node:

* epoch 0: ``grad_sqr, grad_var`` = (1, 3) at 64 and (2, 6) at 256;
* step time on ``1``: 0.10 s at micro-batch 32, 0.16 s at 64 (no sync);
  on ``2``: 0.12 s at 32 and 0.18 s at 64, 0.02 s of it sync.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from orchestrator.sim import profiles
from orchestrator.sim.profiles import AppProfile, load_app


def _write(path: Path, header: str, rows: list[str]) -> None:
    path.write_text("\n".join([header, *rows]) + "\n")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[AppProfile]:
    base = tmp_path / "apps" / "bert"
    base.mkdir(parents=True)
    curve = "progress,iteration,metric,grad_sqr,grad_var"
    _write(base / "validation-64.csv", curve, ["10,10,0.5,1,3", "20,20,0.6,1,3"])
    _write(base / "validation-256.csv", curve, ["12,3,0.5,2,6", "25,6,0.6,2,6"])
    _write(
        base / "placements.csv",
        "placement,local_bsz,step_time,sync_time",
        ["1,32,0.10,0.0", "1,64,0.16,0.0", "2,32,0.12,0.02", "2,64,0.18,0.02"],
    )
    _write(
        base / "scalability.csv",
        "num_nodes,num_replicas,local_bsz,step_time,sync_time",
        ["2,2,32,0.2,0.1"],
    )
    profiles.load_app.cache_clear()
    profiles._best_config_cached.cache_clear()
    profiles._candidates.cache_clear()
    yield load_app("bert", str(tmp_path))
    profiles.load_app.cache_clear()
    profiles._best_config_cached.cache_clear()
    profiles._candidates.cache_clear()


def test_statistical_efficiency(app: AppProfile) -> None:
    assert (app.init_batch_size, app.max_batch_size) == (64, 256)
    # gain = (var + sqr) / (var / scale + sqr), scale = B / B0: progress per optimizer step
    assert app.gain(64, 0) == pytest.approx(1.0)
    assert app.gain(256, 0) == pytest.approx(8 / 3.5)  # (6 + 2) / (6 / 4 + 2)
    # 128: the statistics interpolated a third of the way, (4/3, 4): (16/3) / (4/2 + 4/3)
    assert app.grad_stats(128, 0) == pytest.approx((4 / 3, 4.0))
    assert app.gain(128, 0) == pytest.approx(1.6)
    # beyond the measured sizes the statistics stay those of the nearest one
    assert app.grad_stats(512, 1) == pytest.approx((2.0, 6.0))
    sizes = np.array([64.0, 96.0, 128.0, 200.0, 256.0])
    assert app.gains(sizes, 0).tolist() == [app.gain(b, 0) for b in sizes]


def test_goodput_is_throughput_times_efficiency(app: AppProfile) -> None:
    assert app.step_time((1,), 48) == pytest.approx((0.13, 0.0))  # linear in the micro-batch
    # 2 GPUs, micro-batch 32, 1 accumulation step: 0.12 + 1 x (0.12 - 0.02) = 0.22 s per
    # optimizer step of global batch 2 x 32 x 2 = 128, gain 1.6
    rate, batch = app.goodput((2,), 32, 1, 0)
    assert batch == 128
    assert rate == pytest.approx(1.6 / 0.22)


def test_batch_configurations(app: AppProfile) -> None:
    # a fixed batch of 256 on one GPU: 4 micro-batches of 64 (3 accumulation steps)
    assert app.fixed_config(256, 1) == (64, 3)
    assert app.fixed_config(128, 2) == (64, 0)
    # the best on one GPU in epoch 0: (64, 0) makes 1 / 0.16 = 6.25 per second; (32, 1) makes
    # 1 / 0.2 = 5, (64, 1) makes 1.6 / 0.32 = 5, (64, 3) makes 2.29 / 0.64 = 3.57
    assert app.best_config((1,), 0) == (64, 0)
    assert app.goodput((1,), 64, 0, 0)[0] == pytest.approx(6.25)
