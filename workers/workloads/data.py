"""Deterministic synthetic data: every sample is a function of ``(seed, sample index)`` only.

Generating each sample from its own generator costs a few microseconds per sample, far below a
training step, and buys the exactness the harness promises: batch composition, accumulation,
data-parallel sharding and resumption cannot change which data a sample index denotes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_MASK64 = 2**64 - 1
# separate streams, so constants and epoch orders never share a sample's generator
_SAMPLES, _CONSTANTS, _EPOCHS = 0, 1, 2


def _splitmix64(x: int) -> int:
    # SplitMix64's finaliser (Steele, Lea and Flood 2014): a bijective 64-bit mix in which every
    # input bit affects every output bit, so nearby (seed, index) pairs get unrelated seeds.
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _generator(seed: int, stream: int, index: int) -> torch.Generator:
    key = _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ stream) ^ (index & _MASK64))
    # torch's CPU generator (mt19937) keeps only the low 32 bits of its seed, so the pair is
    # hashed into them rather than packed: packing as seed * 2**32 + index would drop the seed.
    return torch.Generator().manual_seed(key & 0xFFFFFFFF)


def sample_generator(seed: int, index: int) -> torch.Generator:
    """A CPU generator for sample ``index`` of the dataset of ``seed``."""
    return _generator(seed, _SAMPLES, index)


def dataset_generator(seed: int) -> torch.Generator:
    """A CPU generator for dataset-wide constants (a teacher network, class templates)."""
    return _generator(seed, _CONSTANTS, 0)


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A CPU generator for the sample order of ``epoch`` of a dataset read with ``seed``."""
    return _generator(seed, _EPOCHS, epoch)


def stack_samples(
    seed: int,
    first: int,
    count: int,
    sample: Callable[[torch.Generator], tuple[torch.Tensor, ...]],
) -> tuple[torch.Tensor, ...]:
    """Draw samples ``first .. first+count-1`` with ``sample`` and stack each field.

    Args:
        seed: the dataset seed.
        first: global index of the first sample.
        count: number of samples.
        sample: draws one sample (a tuple of tensors) from the generator it is given.
    """
    rows = [sample(sample_generator(seed, first + i)) for i in range(count)]
    return tuple(torch.stack(field) for field in zip(*rows, strict=True))
