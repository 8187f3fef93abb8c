"""Precision, activation checkpointing, compilation and the learning rate's batch rule, applied
the same way to every workload.

The workload never sees these: the harness calls the functions here on the workload's model
and blocks, which is what lets the tuner search them for any model (rule 3).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from workers.config import HarnessConfig
from workers.errors import HarnessConfigError

__all__ = [
    "apply_activation_checkpointing",
    "autocast_context",
    "checkpointed_blocks",
    "make_grad_scaler",
    "scaled_lr",
]

_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_context(precision: str, device: torch.device) -> Callable[[], Any]:
    """A factory of the context that runs forward passes in ``precision`` on ``device``.

    fp32 is a no-op context. bf16 and fp16 use ``torch.autocast``: parameters and optimizer
    state stay fp32 and eligible ops run in the low precision.

    Raises:
        HarnessConfigError: autocast does not support this precision on this device type.
    """
    if precision == "fp32":
        return contextlib.nullcontext
    dtype = _DTYPES[precision]
    try:
        # Autocast checks device support when the context is created; probe once here so an
        # unsupported combination fails with a clear message instead of deep inside the loop.
        with torch.autocast(device_type=device.type, dtype=dtype):
            pass
    except (RuntimeError, ValueError) as exc:
        needs = " (fp16 needs CUDA)" if precision == "fp16" else ""
        raise HarnessConfigError(
            f"precision {precision} is not supported on {device.type}{needs}: {exc}"
        ) from exc
    return functools.partial(torch.autocast, device_type=device.type, dtype=dtype)


def make_grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for fp16 on CUDA, where fp16 gradients underflow without loss scaling.

    bf16 has fp32's exponent range and needs none; on CPU, fp16 autocast runs unscaled.
    """
    if precision == "fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None


def checkpointed_blocks(
    blocks: Sequence[torch.nn.Module], setting: bool | float
) -> list[torch.nn.Module]:
    """The blocks a checkpointing setting recomputes: all (``True``), none (``False``), or the
    first ``ceil(share x len(blocks))`` of them for a share in (0, 1). The first blocks'
    activations are the ones kept longest (from their forward to the end of the backward), so
    they are the ones to give up first; each block frees the same memory whichever it is."""
    if setting is True:
        return list(blocks)
    if setting is False or not blocks:
        return []
    return list(blocks[: math.ceil(float(setting) * len(blocks))])


def apply_activation_checkpointing(blocks: Iterable[torch.nn.Module]) -> int:
    """Make each block recompute its activations in backward instead of storing them.

    The block's ``forward`` is replaced on the instance by a wrapper that calls
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``; the module tree and the
    ``state_dict`` keys are unchanged, so checkpoints stay interchangeable with runs without it.
    Without grad (inference) checkpoint simply runs the forward.

    Returns:
        The number of blocks wrapped.
    """
    count = 0
    for block in blocks:
        block.forward = _checkpointed(block.forward)
        count += 1
    return count


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return wrapper


def scaled_lr(
    config: HarnessConfig,
    global_batch: int,
    rule: Callable[[float, int, int], float] | None = None,
) -> float:
    """The learning rate at ``global_batch`` (see ``HarnessConfig.lr_scaling``): ``config.lr``
    is set for ``config.base_global_batch`` (default: ``global_batch`` itself, factor 1).

    Args:
        rule: the workload's own ``scale_lr``, for ``script``.

    Raises:
        HarnessConfigError: ``script`` without a ``rule``, or a rule that gave no finite
            positive number.
    """
    base = config.base_global_batch or global_batch
    if config.lr_scaling == "linear":
        return config.lr * global_batch / base
    if config.lr_scaling == "sqrt":
        return config.lr * math.sqrt(global_batch / base)
    if config.lr_scaling != "script":
        return config.lr
    if rule is None:
        raise HarnessConfigError(
            f"lr_scaling script: workload {config.workload!r} has no scale_lr "
            "(give its Workload a scale_lr, or use linear, sqrt or none)"
        )
    lr = rule(config.lr, global_batch, base)
    if not (isinstance(lr, int | float) and math.isfinite(lr) and lr > 0):
        raise HarnessConfigError(f"{config.workload!r} scale_lr gave {lr!r}, not a number > 0")
    return float(lr)
