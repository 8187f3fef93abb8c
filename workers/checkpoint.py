"""Checkpoints: everything a run needs to continue exactly where it stopped.

One file per job, ``checkpoint.pt`` in the job's checkpoint directory, replaced atomically
(written to a temporary file in the same directory, flushed, then ``os.replace``d) so a crash or
preemption mid-write leaves the previous checkpoint intact. Every rank reads it on resume, so the
directory must be shared by the job's ranks (it is on one node; across nodes use shared storage).
"""

from __future__ import annotations

import os
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from workers.errors import CheckpointError
from workers.latency import LatencySketch

__all__ = [
    "CHECKPOINT_FILE",
    "Checkpoint",
    "load_checkpoint",
    "restore_rng",
    "rng_state",
    "save_checkpoint",
]

CHECKPOINT_FILE = "checkpoint.pt"


@dataclass
class Checkpoint:
    """The state saved between runs of one job.

    Attributes:
        step: optimizer steps completed.
        samples_seen: global samples consumed; the next step starts at this sample index, so
            a resume with a different data-parallel degree still reads the next unseen data.
        workload: the workload name, checked on resume.
        workload_args: the workload arguments, checked on resume.
        model: the unwrapped model's ``state_dict``.
        optimizer: the optimizer's ``state_dict``.
        scaler: the GradScaler's ``state_dict`` (empty when none is used).
        rng: RNG states (see :func:`rng_state`).
        latency: the sketch of measured (post-warm-up) step latencies so far
            (:meth:`workers.latency.LatencySketch.state`: a few hundred counters at most,
            whatever the step count).
        measured_samples: global samples processed in measured steps.
        measured_time_s: wall time of measured steps.
    """

    step: int
    samples_seen: int
    workload: str
    workload_args: dict[str, Any]
    model: dict[str, Any]
    optimizer: dict[str, Any]
    scaler: dict[str, Any] = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=lambda: LatencySketch().state())
    measured_samples: int = 0
    measured_time_s: float = 0.0


def rng_state() -> dict[str, Any]:
    """The Python and torch (CPU and, when initialised, CUDA) RNG states of this process."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Restore states saved by :func:`rng_state` (CUDA only if saved and still present)."""
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents with mode 0700 (existing ones are kept)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)


def save_checkpoint(directory: Path, ckpt: Checkpoint) -> Path:
    """Write ``ckpt`` atomically to ``directory/checkpoint.pt`` (mode 0600, as ``mkstemp``
    creates it, in folders created 0700: weights are the team's own) and return that path."""
    _private_dirs(directory)
    target = directory / CHECKPOINT_FILE
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=".checkpoint-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(ckpt.__dict__, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return target


def load_checkpoint(
    directory: Path, workload: str, workload_args: dict[str, Any]
) -> Checkpoint | None:
    """Load the checkpoint in ``directory``, or ``None`` when there is none.

    Raises:
        CheckpointError: the checkpoint belongs to another workload or other workload arguments
            (resuming would load mismatched weights), or it cannot be read.
    """
    path = directory / CHECKPOINT_FILE
    if not path.exists():
        return None
    try:
        # weights_only: the file holds only tensors and plain containers, so refuse anything else.
        data = torch.load(path, map_location="cpu", weights_only=True)
        ckpt = Checkpoint(**data)
    except Exception as exc:
        raise CheckpointError(
            f"cannot read checkpoint {path}: {type(exc).__name__}: {exc}"
        ) from exc
    if ckpt.workload != workload or ckpt.workload_args != workload_args:
        raise CheckpointError(
            f"checkpoint {path} is for workload {ckpt.workload!r} {ckpt.workload_args}, "
            f"not {workload!r} {workload_args}; use another checkpoint directory"
        )
    return ckpt
