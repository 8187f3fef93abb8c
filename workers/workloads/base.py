"""The workload protocol: what a workload gives the harness, and nothing more.

A workload owns only the model. It is built by a *builder*, a function
``build(args: dict[str, Any], seed: int) -> Workload``; the harness owns everything else
(precision, accumulation, activation checkpointing, torch.compile, data parallelism, timing).

Contract for the data (the harness relies on it for exactness):

* ``make_batch(first, count)`` returns the samples with global indices ``first .. first+count-1``
  and each sample is a deterministic function of ``(seed, index)`` only. So two micro-batches of
  8 equal one batch of 16, data-parallel ranks read disjoint slices of the same stream, and a run
  resumed from a checkpoint sees exactly the data an uninterrupted run would have seen.
* Or ``dataset``: a map-style dataset (``__len__``, ``__getitem__``; each sample a function of
  its index). The harness then builds the loader (:mod:`workers.loader`: worker processes,
  prefetch, pinned memory, a RAM cache), reads the dataset in a seeded order per epoch, and
  gives the same exactness: a step's samples depend only on where in the stream it starts.
  ``make_batch`` is then derived from the dataset (the registry does it).
* ``loss(model, batch)`` calls ``model(...)`` (never a method of it: the harness may hand in a
  DistributedDataParallel or compiled wrapper) and returns the *mean* loss over the batch, so
  that averaging over micro-batches and ranks gives the loss of the global batch. For an
  inference workload (``train=False``) it returns the model output instead.

This module does not import torch at run time: the control plane imports the registry (and so
this module) to validate job specs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from workers.errors import WorkloadError

if TYPE_CHECKING:
    import torch

__all__ = [
    "Batch",
    "Builder",
    "Layout",
    "Workload",
    "WorkloadError",
    "no_batches",
    "require_positive",
    "take_args",
]

# A batch is whatever the workload's ``loss`` accepts: typically a tuple of tensors. The harness
# moves tensors found in tuples, lists and dicts to the device and leaves the rest alone.
Batch: TypeAlias = Any


def no_batches(first: int, count: int) -> Batch:
    """The ``make_batch`` of a workload that gives none (the registry refuses it, or derives
    one from the workload's ``dataset``)."""
    raise WorkloadError("this workload gives no make_batch")


@dataclass(frozen=True)
class Layout:
    """Where a model's layers are, so the harness can split them (tensor and pipeline
    parallelism: :mod:`workers.parallel`). A workload without one runs data-parallel only.

    Attributes:
        blocks: the model attribute holding its repeated blocks, an ``nn.ModuleDict`` keyed
            ``"0"``, ``"1"``, ... (a pipeline stage deletes the blocks it does not run, and the
            others keep their names, so checkpoints of every plan share parameter names; a
            ``ModuleDict`` names its parameters as a ``ModuleList`` does).
        first: model attributes that run before the blocks (embeddings): only the first
            pipeline stage keeps them; the others set them to ``None``.
        last: model attributes that run after the blocks (final norm, head): only the last
            stage keeps them. The model's ``forward`` must skip an attribute that is ``None``
            and run its blocks in key order.
        tensor_parallel: inside each block, submodule path -> ``"colwise"`` or ``"rowwise"``
            (Megatron-LM's split, Shoeybi et al. 2019: a column-wise linear feeds a row-wise
            one, one all-reduce per pair). The block's code must read its widths from its
            tensors (a column-wise layer yields ``1/tp`` of its features on each rank).
        tp_divides: every tensor-parallel degree must divide this (attention heads).
        split: ``batch -> (model input, target)``: what a pipeline feeds the first stage and
            the loss.
        loss: ``(model output, target) -> mean loss``, the workload's ``loss`` after the model.
    """

    blocks: str
    first: tuple[str, ...]
    last: tuple[str, ...]
    tensor_parallel: Mapping[str, str]
    tp_divides: int
    split: Callable[[Batch], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Workload:
    """A model, its loss and its data, as built for one configuration.

    Attributes:
        model: the module to train (or run); the harness moves it to the device.
        loss: forward plus loss for one micro-batch, returning the mean over its samples
            (for ``train=False``: forward only, returning the output).
        make_batch: ``(first_sample_index, count) -> batch``; deterministic per sample index
            (left out when ``dataset`` is given: the registry derives it from the dataset).
        tokens_per_sample: tokens in one sample (> 0 for language models: tokens/s is reported).
        train: ``False`` for a forward-only inference workload (one step = one request batch).
        blocks: submodules the harness may wrap in activation checkpointing; each must be
            called through ``module(...)`` inside ``model``'s forward.
        scale_lr: ``(lr, global_batch, base_global_batch) -> lr``, the workload's own
            learning-rate rule for a job that lets the tuner change its global batch with
            ``tuning.bounds.lr_scaling: script``; ``lr`` is the one set for
            ``base_global_batch``.
        layout: where the model's layers are (``None``: data parallelism only).
        dataset: a map-style dataset the harness's loader reads instead of ``make_batch``
            (samples collated with ``torch.utils.data.default_collate``).
    """

    model: torch.nn.Module
    loss: Callable[[torch.nn.Module, Batch], torch.Tensor]
    make_batch: Callable[[int, int], Batch] = no_batches
    tokens_per_sample: int = 0
    train: bool = True
    blocks: Sequence[torch.nn.Module] = ()
    scale_lr: Callable[[float, int, int], float] | None = None
    layout: Layout | None = None
    dataset: Any = None


Builder: TypeAlias = Callable[[dict[str, Any], int], Workload]


def take_args(
    workload: str, args: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """Merge user ``args`` over ``defaults``, refusing names the workload does not know.

    Each value is converted to the type of its default, so ``{"n_layer": "4"}`` from a YAML
    file or CLI flag works and ``{"n_layer": "x"}`` fails with a message naming the field.

    Raises:
        WorkloadError: an unknown argument, or a value of the wrong type.
    """
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        allowed = ", ".join(sorted(defaults))
        raise WorkloadError(
            f"workload {workload!r} does not take {', '.join(map(repr, unknown))}; "
            f"its arguments are: {allowed}"
        )
    merged = dict(defaults)
    for name, value in args.items():
        kind = type(defaults[name])
        # bool("false") is True and int(2.5) is 2: such values are refused, not converted.
        if kind is bool or isinstance(value, bool) or (kind is int and isinstance(value, float)):
            ok = isinstance(value, kind) and (kind is bool) == isinstance(value, bool)
        else:
            try:
                value = kind(value)
                ok = True
            except (TypeError, ValueError):
                ok = False
        if not ok:
            raise WorkloadError(
                f"workload {workload!r}: argument {name!r} must be {kind.__name__}, got {value!r}"
            )
        merged[name] = value
    return merged


def require_positive(workload: str, values: Mapping[str, Any], names: Sequence[str]) -> None:
    """Raise :class:`WorkloadError` unless every named argument is > 0."""
    for name in names:
        if values[name] <= 0:
            raise WorkloadError(
                f"workload {workload!r}: argument {name!r} must be > 0, got {values[name]!r}"
            )
