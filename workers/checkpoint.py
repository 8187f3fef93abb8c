"""Checkpoints: everything a run needs to continue exactly where it stopped, on any world size.

A job's checkpoint location is a local (or shared) path, or an fsspec URL such as
``s3://bucket/prefix/job-1`` (``s3fs`` installed; endpoint and credentials from the usual AWS
variables or ``FSSPEC_S3_*``). In it:

- ``step-000000042/``: the model and optimizer state at step 42, written by
  ``torch.distributed.checkpoint`` (DCP): every rank writes its own FSDP shards in parallel (a
  replicated tensor once), and a later run loads them resharded onto its own ranks, so a job
  saved on 4 GPUs resumes on 1 or 8, under DDP or FSDP.
- ``checkpoint.pt``: the commit record, small and written last by rank 0 in one atomic step
  (a file replaced with ``os.replace``, an object put whole): which step directory is current,
  and the state that is not the model's tensors (:class:`Checkpoint`: step, samples seen, RNG
  states, the latency sketch, the run time so far).

A preemption mid-write leaves a partial step directory that no record names: the previous
checkpoint stays the current one, and the partial directory goes with the next save, which
deletes the step directories it does not commit.

**Two copies of a run never corrupt each other.** A run carries a *run tag* (the scheduler's
lease generation and its launch serial, zero-padded so that later runs sort higher): its step
directories are ``step-000000042-<tag>`` and its half-written records ``.checkpoint-<tag>-*``,
so two copies never write the same path; a save deletes only what runs up to its own tag left
(a copy from a deposed scheduler never deletes the new run's files); and the commit, the one
atomic promote, happens only while ``may_commit()`` says the run is still current (the worker
asks its fence: see ``orchestrator.store.sink.RunFence``). Local folders are created 0700 and the
record 0600 (weights are the team's own). Every rank reads the same location on resume, so it
must be shared by the job's ranks (it is on one node; across nodes use shared storage or a URL).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

# DCP's fsspec storage: public classes (its ``__all__``) that the package does not re-export
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

from workers.errors import CheckpointError
from workers.latency import LatencySketch

__all__ = [
    "CHECKPOINT_FILE",
    "Checkpoint",
    "load_checkpoint",
    "load_tensors",
    "restore_rng",
    "rng_state",
    "run_tag",
    "save_checkpoint",
]

CHECKPOINT_FILE = "checkpoint.pt"
_STEP_PREFIX = "step-"
_TMP_PREFIX = ".checkpoint-"
# a run tag (see run_tag): compared as strings, so of one fixed width
_TAG_RE = re.compile(r"[0-9]{12}\.[0-9]{12}")


def run_tag(generation: int, serial: int) -> str:
    """The tag of the run a scheduler of lease ``generation`` launched as ``serial``: a later
    run (a later generation, or a later launch of the same one) has a larger tag."""
    return f"{generation:012d}.{serial:012d}"


@dataclass
class Checkpoint:
    """The state saved between runs of one job besides the model and optimizer tensors.

    Attributes:
        step: optimizer steps completed.
        samples_seen: global samples consumed; the next step starts at this sample index, so
            a resume with a different data-parallel degree still reads the next unseen data.
        workload: the workload name, checked on resume.
        workload_args: the workload arguments, checked on resume.
        tensors: the step directory (in the checkpoint location) holding the model and
            optimizer state in DCP's format; set by :func:`save_checkpoint`.
        scaler: the GradScaler's ``state_dict`` (empty when none is used).
        rng: RNG states of rank 0 (see :func:`rng_state`).
        latency: the sketch of measured (post-warm-up) step latencies so far
            (:meth:`workers.latency.LatencySketch.state`: a few hundred counters at most,
            whatever the step count).
        measured_samples: global samples processed in measured steps.
        measured_time_s: wall time of measured steps.
        run_time_s: wall time of the step loops of every run so far: what a run for a set time
            (``duration_s``) has already done.
    """

    step: int
    samples_seen: int
    workload: str
    workload_args: dict[str, Any]
    tensors: str = ""
    scaler: dict[str, Any] = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, Any] = field(default_factory=lambda: LatencySketch().state())
    measured_samples: int = 0
    measured_time_s: float = 0.0
    run_time_s: float = 0.0


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


def _is_url(location: str) -> bool:
    return "://" in location


def _join(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}" if _is_url(location) else str(Path(location) / name)


def _private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents with mode 0700 (existing ones are kept)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)


def _in_group() -> bool:
    return dist.is_available() and dist.is_initialized()


def _is_writer() -> bool:
    """Whether this process commits records: rank 0, or the only process."""
    return not _in_group() or dist.get_rank() == 0


@contextlib.contextmanager
def _one_process_is_fine() -> Iterator[None]:
    """DCP warns on every save and load without a process group, even when told ``no_dist``;
    a one-rank job has none by design, so its worker log is spared the line."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        yield


def save_checkpoint(
    location: Path | str,
    ckpt: Checkpoint,
    state: dict[str, Any],
    *,
    run_tag: str = "",
    may_commit: Callable[[], bool] | None = None,
) -> str | None:
    """Save ``state`` (model and optimizer state dicts, sharded or not: see
    :func:`workers.parallel.state.state_dicts`) and ``ckpt`` as the job's current checkpoint; return
    the step directory written, or ``None`` when ``may_commit`` refused the commit.

    Every rank of the job calls it with its own ``state`` (the write is a collective: each rank
    writes its shards); rank 0 then commits the record and deletes older step directories.
    A step is saved once: saving the step of the current checkpoint again would overwrite it.

    Args:
        run_tag: this run's tag (see the module doc): later runs must have larger tags.
        may_commit: asked by rank 0 just before the commit; ``False`` (this run has been
            deposed) leaves the current record as it is, and the step directory just written
            for the next save to delete.
    """
    if run_tag and not _TAG_RE.fullmatch(run_tag):
        raise CheckpointError(f"run_tag must match {_TAG_RE.pattern}, got {run_tag!r}")
    location = str(location)
    ckpt.tensors = f"{_STEP_PREFIX}{ckpt.step:09d}" + (f"-{run_tag}" if run_tag else "")
    target = _join(location, ckpt.tensors)
    if _is_url(location):
        writer: dcp.FileSystemWriter = FsspecWriter(target)
    else:
        # created here, 0700, so DCP's own mkdir (umask modes) finds it and the shards inside
        # are as private as the record
        _private_dirs(Path(target))
        writer = dcp.FileSystemWriter(target)
    with _one_process_is_fine():
        dcp.save(state, storage_writer=writer, no_dist=not _in_group())
    # DCP's save returns on every rank once its metadata is written, so the step directory is
    # complete here: committing now cannot name a partial one.
    if _is_writer():
        if may_commit is not None and not may_commit():
            return None
        _commit(location, ckpt, run_tag)
    return target


def _commit(location: str, ckpt: Checkpoint, run_tag: str) -> None:
    """Write the record atomically, then delete the step directories it no longer names."""
    buf = io.BytesIO()
    torch.save(asdict(ckpt), buf)
    data = buf.getvalue()
    if _is_url(location):
        fs, root = fsspec.core.url_to_fs(location)
        # written beside and moved over: one object put (or rename) makes the new record whole
        tmp = f"{root.rstrip('/')}/{_TMP_PREFIX}{run_tag}-{uuid.uuid4().hex}.tmp"
        fs.pipe_file(tmp, data)
        fs.mv(tmp, f"{root.rstrip('/')}/{CHECKPOINT_FILE}")
        fs.invalidate_cache(root)  # list what is there now, not what this process saw before
        for path in fs.ls(root, detail=False):
            name = path.rstrip("/").rsplit("/", 1)[-1]
            if _stale(name, ckpt.tensors, run_tag):
                fs.rm(path, recursive=True)
        return
    directory = Path(location)
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f"{_TMP_PREFIX}{run_tag}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, directory / CHECKPOINT_FILE)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    for path in directory.iterdir():
        if _stale(path.name, ckpt.tensors, run_tag):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _stale(name: str, current: str, run_tag: str) -> bool:
    """A step directory other than ``current``, or a record a crash left half-written, that a
    run up to ``run_tag`` wrote (a later run's files are that run's to delete)."""
    if name.startswith(_STEP_PREFIX) and name != current:
        _, _, tag = name[len(_STEP_PREFIX) :].partition("-")
    elif name.startswith(_TMP_PREFIX):
        tag, _, _ = name[len(_TMP_PREFIX) :].partition("-")
    else:
        return False
    return tag <= run_tag


def load_checkpoint(
    location: Path | str, workload: str, workload_args: dict[str, Any]
) -> Checkpoint | None:
    """The current checkpoint's record in ``location``, or ``None`` when there is none; the
    tensors are loaded afterwards by :func:`load_tensors`.

    Raises:
        CheckpointError: the checkpoint belongs to another workload or other workload arguments
            (resuming would load mismatched weights), or it cannot be read.
    """
    location = str(location)
    path = _join(location, CHECKPOINT_FILE)
    try:
        if _is_url(location):
            fs, root = fsspec.core.url_to_fs(path)
            data = fs.cat_file(root)
        else:
            data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    try:
        # weights_only: the record holds only tensors and plain containers; refuse anything else
        ckpt = Checkpoint(**torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))
    except Exception as exc:
        raise CheckpointError(
            f"cannot read checkpoint {path}: {type(exc).__name__}: {exc}"
        ) from exc
    if ckpt.workload != workload or ckpt.workload_args != workload_args:
        raise CheckpointError(
            f"checkpoint {path} is for workload {ckpt.workload!r} {ckpt.workload_args}, "
            f"not {workload!r} {workload_args}; use another checkpoint location"
        )
    return ckpt


def load_tensors(location: Path | str, ckpt: Checkpoint, state: dict[str, Any]) -> str:
    """Load the model and optimizer tensors of ``ckpt`` in place into ``state`` (this rank's
    state dicts, as :func:`workers.parallel.state.state_dicts` gives them: DCP reshards the saved
    shards onto them) and return the step directory read. Every rank of the job calls it.

    Raises:
        CheckpointError: the step directory cannot be read or does not match ``state``.
    """
    location = str(location)
    source = _join(location, ckpt.tensors)
    reader: dcp.FileSystemReader = (
        FsspecReader(source) if _is_url(location) else dcp.FileSystemReader(source)
    )
    try:
        with _one_process_is_fine():
            dcp.load(state, storage_reader=reader, no_dist=not _in_group())
    except Exception as exc:
        raise CheckpointError(
            f"cannot load the tensors of checkpoint {source}: {type(exc).__name__}: {exc}"
        ) from exc
    return source
