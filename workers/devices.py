"""Where a rank runs: its torch device, that device's NVML UUID, and moving batches there."""

from __future__ import annotations

import torch

from workers.workloads.base import Batch

__all__ = ["device_facts", "device_uuid", "resolve_device", "to_device"]


def device_facts() -> dict[str, object]:
    """What this process can run on, as plain data the control plane can read without torch:
    ``kind`` (``cpu`` or ``cuda``), ``name`` (the GPU model or ``cpu``), ``major`` (CUDA compute
    capability, 0 on a CPU), ``count`` (visible CUDA devices) and, on CUDA, ``memory_bytes``
    (the first device's total memory: the tuner leaves out plans whose model state exceeds it)."""
    if not torch.cuda.is_available():
        return {"kind": "cpu", "name": "cpu", "major": 0, "count": 0}
    major, _ = torch.cuda.get_device_capability(0)
    return {
        "kind": "cuda",
        "name": torch.cuda.get_device_name(0),
        "major": int(major),
        "count": torch.cuda.device_count(),
        "memory_bytes": int(torch.cuda.get_device_properties(0).total_memory),
    }


def resolve_device(device: str | None, rank: int) -> torch.device:
    """``device`` if given, else ``cuda:rank % n_gpus`` when CUDA is present, else ``cpu``."""
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        # Under Ray each actor sees only its own GPU (CUDA_VISIBLE_DEVICES), so this is cuda:0.
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def device_uuid(device: torch.device) -> str | None:
    """The ``GPU-...`` UUID NVML knows a CUDA device by (``None`` for the CPU or if unknown)."""
    if device.type != "cuda":
        return None
    try:
        uuid = str(torch.cuda.get_device_properties(device).uuid)
    except Exception:  # older drivers/builds without the field: NVML stays unavailable
        return None
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def to_device(batch: Batch, device: torch.device) -> Batch:
    """``batch`` with the tensors found in its tuples, lists and dicts moved to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, tuple | list):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch
