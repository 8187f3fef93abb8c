"""The harness's data loader for a workload that gives a map-style dataset: resumable and exact.

**Which samples a step reads.** The job reads one stream of global sample positions
``0, 1, 2, ...``; position ``p`` is dataset index ``order_e[p - e*n]`` of epoch ``e = p // n``,
where ``order_e`` is a permutation of the ``n`` indices seeded by ``(seed, e)``
(:class:`SampleOrder`). As for a ``make_batch`` workload, the step that starts at position
``s`` gives rank ``r``'s micro-batch ``k`` positions ``s + (r * grad_accum + k) * micro_batch``
onwards. So the samples of a step depend only on ``s`` and the global batch, not on the
data-parallel degree or the split into micro-batches, and the loader's whole position is
``s``: the harness checkpoint's ``samples_seen``. A run resumed from a checkpoint, on any
number of ranks, reads exactly the samples an uninterrupted run would have.

**Why not torchdata's StatefulDataLoader.** It installs beside torch 2.13 and resumes a loader
on the same world size, but its state is per rank (each rank's sampler and worker positions):
resumed on another world size (tried: ``DistributedSampler`` on 2 ranks, state loaded on 1)
it skips by batches yielded and re-reads samples the two ranks had already seen. A
world-size-independent position needs the global order above, and with it a plain
``torch.utils.data.DataLoader`` over a deterministic batch sampler is all the state there is.

**Epochs.** One iteration of the ``DataLoader`` covers the steps that start in one epoch; the
next epoch iterates it again, which is where ``persistent_workers`` matters (the workers are
kept instead of started anew). Micro-batches come back in order.

**RAM cache** (``cache_mb``): decoded samples kept in shared memory, allocated here before the
workers start, so every worker (and a restarted one) reads what any of them decoded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from workers.errors import HarnessConfigError
from workers.loader_settings import LoaderSettings
from workers.workloads.base import Batch
from workers.workloads.data import epoch_generator

__all__ = ["RankLoader", "SampleCache", "SampleOrder", "dataset_batches", "open_loader"]

log = logging.getLogger(__name__)


class SampleOrder:
    """Global sample position -> dataset index: each epoch a permutation seeded by
    ``(seed, epoch)``, the same on every rank and every run."""

    def __init__(self, size: int, seed: int) -> None:
        if size < 1:
            raise HarnessConfigError("the workload's dataset is empty")
        self.size = size
        self.seed = seed
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        order = self._orders.get(epoch)
        if order is None:
            if len(self._orders) >= 2:  # a batch spans at most two epochs at a time
                self._orders.pop(min(self._orders))
            gen = epoch_generator(self.seed, epoch)
            order = self._orders[epoch] = torch.randperm(self.size, generator=gen).tolist()
        return order

    def index(self, position: int) -> int:
        """The dataset index at global ``position``."""
        epoch, offset = divmod(position, self.size)
        return self._order(epoch)[offset]

    def indices(self, first: int, count: int) -> list[int]:
        """The dataset indices at positions ``first .. first + count - 1``."""
        return [self.index(p) for p in range(first, first + count)]


class _RankBatches:
    """The ``DataLoader``'s batch sampler: rank ``rank``'s micro-batches (lists of dataset
    indices) of the steps that start in the epoch of ``next_start``, in order."""

    def __init__(
        self, order: SampleOrder, *, micro_batch: int, grad_accum: int, rank: int, world: int
    ) -> None:
        self.order = order
        self.micro_batch, self.grad_accum = micro_batch, grad_accum
        self.rank = rank
        self.global_batch = micro_batch * grad_accum * world
        self.next_start = 0

    def epoch_end(self, start: int) -> int:
        """The start of the first step after ``start`` that begins in a later epoch."""
        n, g = self.order.size, self.global_batch
        boundary = (start // n + 1) * n
        return start + -(-(boundary - start) // g) * g

    def __iter__(self) -> Iterator[list[int]]:
        start, end = self.next_start, self.epoch_end(self.next_start)
        for s in range(start, end, self.global_batch):
            for k in range(self.grad_accum):
                first = s + (self.rank * self.grad_accum + k) * self.micro_batch
                yield self.order.indices(first, self.micro_batch)


class SampleCache(Dataset[Any]):
    """``dataset`` with decoded samples kept in shared memory, up to ``cache_mb`` MiB.

    Samples must be a tensor or a tuple of tensors; the first sample fixes the shapes (a later
    one of another shape is served uncached). Slots are filled by whichever process decodes the
    sample first; a slot is marked filled after its data are written, and two processes
    filling one slot write the same bytes (a sample is a function of its index).
    """

    def __init__(self, dataset: Dataset[Any], cache_mb: int) -> None:
        self.dataset = dataset
        first = dataset[0]
        self.is_tuple = isinstance(first, tuple)
        fields = first if isinstance(first, tuple) else (first,)
        if not fields or not all(isinstance(t, torch.Tensor) for t in fields):
            raise HarnessConfigError(
                "loader.cache_mb needs samples that are a tensor or a tuple of tensors, got "
                f"{type(first).__name__}; set loader.cache_mb to 0"
            )
        per_sample = sum(t.numel() * t.element_size() for t in fields)
        size = len(dataset)  # type: ignore[arg-type]
        self.slots = min(size, cache_mb * 2**20 // max(1, per_sample))
        if self.slots < size:
            log.info("the RAM cache holds %d of %d samples (%d MiB)", self.slots, size, cache_mb)
        self.shapes = [(t.shape, t.dtype) for t in fields]
        self.store = [
            torch.empty((self.slots, *t.shape), dtype=t.dtype).share_memory_() for t in fields
        ]
        self.filled = torch.zeros(self.slots, dtype=torch.uint8).share_memory_()

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        if index < self.slots and self.filled[index]:
            fields = tuple(s[index] for s in self.store)
            return fields if self.is_tuple else fields[0]
        sample = self.dataset[index]
        fields = sample if self.is_tuple else (sample,)
        if index < self.slots and [(t.shape, t.dtype) for t in fields] == self.shapes:
            for s, t in zip(self.store, fields, strict=True):
                s[index].copy_(t)
            self.filled[index] = 1
        return sample

    @property
    def cached(self) -> int:
        """How many samples are in the cache now."""
        return int(self.filled.sum())


class RankLoader:
    """One rank's micro-batches of a dataset, from global position ``start`` on (see the
    module doc), with ``settings``' workers, prefetch, pinning and cache.

    Args:
        dataset: a map-style dataset (``__len__`` and ``__getitem__``).
        settings: the loader's knobs.
        seed: the job's seed (the sample order of every epoch).
        micro_batch, grad_accum, rank, world_size: this rank's share of a step.
        start: the global position of the next step (the checkpoint's ``samples_seen``).
        pin: whether ``settings.pin_memory`` applies (a CUDA device).
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        settings: LoaderSettings,
        *,
        seed: int,
        micro_batch: int,
        grad_accum: int,
        rank: int,
        world_size: int,
        start: int,
        pin: bool,
    ) -> None:
        self.order = SampleOrder(len(dataset), seed)  # type: ignore[arg-type]
        self.batches = _RankBatches(
            self.order, micro_batch=micro_batch, grad_accum=grad_accum, rank=rank, world=world_size
        )
        self.batches.next_start = start
        self.cache = SampleCache(dataset, settings.cache_mb) if settings.cache_mb else None
        extra: dict[str, Any] = {}
        if settings.num_workers:
            extra = {
                "prefetch_factor": settings.prefetch_factor,
                "persistent_workers": settings.persistent_workers,
            }
        self._loader: DataLoader[Any] | None = DataLoader(
            self.cache if self.cache is not None else dataset,
            batch_sampler=self.batches,
            num_workers=settings.num_workers,
            pin_memory=settings.pin_memory and pin,
            **extra,
        )
        self._it: Iterator[Batch] | None = None

    def next(self) -> Batch:
        """The next micro-batch of this rank (the stream never ends: epochs follow)."""
        assert self._loader is not None, "the loader is closed"
        while True:
            if self._it is None:
                self._it = iter(self._loader)
            try:
                return next(self._it)
            except StopIteration:
                self.batches.next_start = self.batches.epoch_end(self.batches.next_start)
                self._it = None

    def close(self) -> None:
        """Stop the worker processes (micro-batches prefetched and not taken are dropped)."""
        # The iterator's finaliser shuts its workers down; the DataLoader keeps a persistent
        # one, so both references go.
        self._it = None
        self._loader = None


def dataset_batches(dataset: Dataset[Any], seed: int) -> Any:
    """``make_batch(first, count)`` for a dataset workload: positions ``first ..
    first + count - 1`` of the global order, collated as the loader collates them (what the
    serving loop and tools that ask for one batch use)."""
    order = SampleOrder(len(dataset), seed)  # type: ignore[arg-type]

    def make_batch(first: int, count: int) -> Batch:
        return default_collate([dataset[i] for i in order.indices(first, count)])

    return make_batch


def open_loader(
    workload: Any, config: Any, rank: int, world_size: int, start: int, device: torch.device
) -> RankLoader | None:
    """The loader of ``workload`` (a :class:`~workers.workloads.base.Workload`) for one rank
    of a run under ``config`` (a ``HarnessConfig``), from global position ``start``; ``None``
    for a workload that makes its batches itself."""
    if workload.dataset is None:
        return None
    return RankLoader(
        workload.dataset,
        LoaderSettings.from_dict(config.loader),
        seed=config.seed,
        micro_batch=config.micro_batch,
        grad_accum=config.grad_accum,
        rank=rank,
        world_size=world_size,
        start=start,
        pin=device.type == "cuda",
    )
