"""The harness's loader: a resumed or resized run reads exactly the samples of an uninterrupted
one; the knobs are validated; the RAM cache serves what was decoded."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from tests.workers.spawn import spawn_ranks
from workers.distributed import find_free_port
from workers.errors import HarnessConfigError
from workers.harness import Harness, HarnessConfig
from workers.loader import RankLoader, SampleCache, SampleOrder
from workers.loader_settings import LoaderSettings

N = 10  # a dataset smaller than a few steps: the runs below cross epochs mid-step


class Indices(Dataset[torch.Tensor]):
    """Sample ``i`` is the tensor ``i``: a batch says which samples it holds."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor(i)


def steps_seen(
    steps: int,
    *,
    start: int,
    mb: int,
    accum: int,
    world: int,
    settings: LoaderSettings | None = None,
) -> list[list[int]]:
    """The dataset indices each of ``steps`` steps reads, from position ``start``, over every
    rank (rank 0's micro-batches, then rank 1's, as the harness orders a step's samples)."""
    loaders = [
        RankLoader(
            Indices(N),
            settings or LoaderSettings(),
            seed=7,
            micro_batch=mb,
            grad_accum=accum,
            rank=r,
            world_size=world,
            start=start,
            pin=False,
        )
        for r in range(world)
    ]
    try:
        return [
            [i for ld in loaders for _ in range(accum) for i in ld.next().tolist()]
            for _ in range(steps)
        ]
    finally:
        for ld in loaders:
            ld.close()


def test_each_epoch_is_a_seeded_permutation() -> None:
    order = SampleOrder(N, seed=7)
    epochs = [order.indices(e * N, N) for e in range(3)]
    assert all(sorted(e) == list(range(N)) for e in epochs)
    assert epochs[0] != epochs[1]  # reshuffled each epoch
    assert SampleOrder(N, seed=7).indices(0, 3 * N) == [i for e in epochs for i in e]
    assert SampleOrder(N, seed=8).indices(0, N) != epochs[0]


@pytest.mark.parametrize(
    ("mb", "accum", "world"),
    [(4, 2, 1), (4, 1, 2), (2, 2, 2), (8, 1, 1)],
    ids=["1 rank accum 2", "2 ranks", "2 ranks accum 2", "1 rank"],
)
def test_a_run_resumed_mid_epoch_on_any_world_size_reads_the_uninterrupted_samples(
    mb: int, accum: int, world: int
) -> None:
    # the uninterrupted run: one rank, global batch 8, six steps (4.8 epochs of 10 samples)
    whole = steps_seen(6, start=0, mb=8, accum=1, world=1)
    # interrupted after 2 steps (position 16: mid-epoch), resumed with another split
    head = steps_seen(2, start=0, mb=mb, accum=accum, world=world)
    tail = steps_seen(4, start=16, mb=mb, accum=accum, world=world)
    assert head + tail == whole
    order = SampleOrder(N, 7)
    assert whole == [order.indices(8 * s, 8) for s in range(6)]


def test_worker_processes_prefetch_and_cache_change_no_sample() -> None:
    plain = steps_seen(6, start=8, mb=2, accum=2, world=2)
    busy = LoaderSettings(num_workers=2, prefetch_factor=3, persistent_workers=True, cache_mb=1)
    assert steps_seen(6, start=8, mb=2, accum=2, world=2, settings=busy) == plain
    fresh = LoaderSettings(num_workers=1, cache_mb=1)  # workers restarted each epoch
    assert steps_seen(6, start=8, mb=2, accum=2, world=2, settings=fresh) == plain


def test_the_cache_serves_decoded_samples_up_to_its_size() -> None:
    class Tensors(Dataset[tuple[torch.Tensor, torch.Tensor]]):
        calls = 0

        def __len__(self) -> int:
            return 2000

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            Tensors.calls += 1
            return torch.full((256,), i, dtype=torch.int32), torch.tensor(i)

    cache = SampleCache(Tensors(), cache_mb=1)
    assert cache.slots == 2**20 // (256 * 4 + 8)  # 1016 of the 2000 samples fit in 1 MiB
    first = [cache[i] for i in (0, 5, 1015, 1016)]
    calls = Tensors.calls
    again = [cache[i] for i in (0, 5, 1015, 1016)]
    assert Tensors.calls == calls + 1  # only sample 1016, beyond the cache, decoded again
    assert all(torch.equal(a[0], b[0]) and a[1] == b[1] for a, b in zip(first, again, strict=True))
    assert cache.cached == 3


def test_the_cache_refuses_samples_that_are_not_tensors() -> None:
    class Dicts(Dataset[dict[str, int]]):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> dict[str, int]:
            return {"x": i}

    with pytest.raises(HarnessConfigError, match="cache_mb needs samples"):
        SampleCache(Dicts(), cache_mb=1)


@pytest.mark.parametrize(
    ("loader", "message"),
    [
        ({"num_workers": -1}, r"loader.num_workers must be an integer in \[0, 64\], got -1"),
        ({"num_workers": 2, "prefetch_factor": 0}, r"loader.prefetch_factor must be"),
        ({"persistent_workers": True}, "persistent_workers needs num_workers > 0"),
        ({"cache_mb": True}, "loader.cache_mb must be an integer"),
        ({"pin_memory": 1}, "loader.pin_memory must be true or false"),
        ({"workers": 2}, r"unknown loader settings \['workers'\]"),
    ],
)
def test_bad_loader_settings_are_refused_naming_the_knob(
    loader: dict[str, Any], message: str
) -> None:
    with pytest.raises(HarnessConfigError, match=message):
        HarnessConfig(workload="images", steps=1, loader=loader)


def test_a_token_round_trips() -> None:
    s = LoaderSettings(num_workers=4, prefetch_factor=3, pin_memory=True, cache_mb=512)
    assert LoaderSettings.from_token(s.token()) == s
    assert s.token() == "workers=4,prefetch=3,pin=1,persistent=0,cache_mb=512"
    with pytest.raises(HarnessConfigError, match="not a loader token"):
        LoaderSettings.from_token("workers=four")


# ---- the harness reading a dataset workload ------------------------------------------------

IMAGES = {"images": 24, "image_size": 8, "channels": 4, "n_layer": 1}


def images(tmp: Path, **fields: Any) -> HarnessConfig:
    base: dict[str, Any] = {
        "workload": "images",
        "workload_args": {**IMAGES, "root": str(tmp / "data")},
        "micro_batch": 4,
        "grad_accum": 2,
        "steps": 6,
        "warmup_steps": 1,
        "checkpoint_every": 3,
    }
    return HarnessConfig(**{**base, **fields})


def _rank_main(rank: int, port: int, tmp: Path) -> None:
    torch.set_num_threads(1)
    cfg = images(tmp, micro_batch=2, steps=3, loader={"num_workers": 1})
    Harness(
        cfg,
        rank=rank,
        world_size=2,
        init_method=f"tcp://127.0.0.1:{port}",
        device="cpu",
        checkpoint_dir=tmp / "resized",
    ).run()


def test_the_decoding_workload_learns(tmp_path: Path) -> None:
    # 2 classes, 4 epochs of 24 images: the loss falls well below chance (ln 2)
    args = {**IMAGES, "classes": 2}
    cfg = images(tmp_path, workload_args={**args, "root": str(tmp_path / "data")}, steps=12)
    reports: list[dict[str, Any]] = []
    result = Harness(
        dataclasses.replace(cfg, lr=1e-2, checkpoint_every=0), report=reports.append
    ).run()
    assert result.loss is not None and result.loss < 0.5 * math.log(2)
    # its data wait is its own loader's: SLA checks judge it at the wall clock
    assert reports[-1]["reads_dataset"] is True
    assert result.data_wait_p95_ms is not None and result.data_wait_ms is not None


def test_a_dataset_run_resumed_mid_epoch_ends_as_an_uninterrupted_one(tmp_path: Path) -> None:
    whole = Harness(images(tmp_path)).run()
    assert whole.dataset and whole.loss is not None and whole.data_wait_share is not None
    # stopped after step 3 (mid-epoch: 24 samples, 8 a step), resumed with loader workers
    Harness(images(tmp_path, steps=3), checkpoint_dir=tmp_path / "resumed").run()
    cfg = images(tmp_path, loader={"num_workers": 1})
    resumed = Harness(cfg, checkpoint_dir=tmp_path / "resumed").run()
    assert resumed.resumed_from_step == 3
    assert resumed.param_fingerprint == pytest.approx(whole.param_fingerprint, rel=1e-6)
    assert resumed.loss == pytest.approx(whole.loss, rel=1e-5)


@pytest.mark.slow  # two spawned ranks: a minute on a loaded 2-core VM (the default timeout)
def test_a_dataset_run_resumed_on_another_world_size_ends_as_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    whole = Harness(images(tmp_path)).run()
    # the first three steps on two ranks (micro-batch 2 x accumulation 2 each), then one rank
    spawn_ranks(_rank_main, args=(find_free_port(), tmp_path), nprocs=2)
    resized = Harness(images(tmp_path), checkpoint_dir=tmp_path / "resized").run()
    assert resized.resumed_from_step == 3
    assert resized.param_fingerprint == pytest.approx(whole.param_fingerprint, rel=1e-5)
    assert resized.loss == pytest.approx(whole.loss, rel=1e-4)
