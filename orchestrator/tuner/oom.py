"""Out of memory: recognising it, and finding the largest micro-batch that fits.

Optuna has no notion of "this parameter and every larger one fail", so this is hand-written:
memory grows with the micro-batch at fixed precision, checkpointing, compile and sharding, so
one OOM at micro-batch ``b`` rules out every ``b' >= b`` with those settings, and one success
rules in every ``b' <= b``. :class:`FitFrontier` keeps that knowledge for the tuner's pruning;
the strategies walk the ladder by galloping, then bisect (``strategies/sla/``), as
DeepSpeed's autotuner does for ZeRO stages.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field

from orchestrator.tuner.space import Config

__all__ = ["FitFrontier", "is_oom", "memory_key"]

_OOM_WORDS = (
    "out of memory",
    "cuda error: out of memory",
    "cublas_status_alloc_failed",
    # torch's CPU allocator: "DefaultCPUAllocator: can't allocate memory: you tried to
    # allocate N bytes. Error code 12 (Cannot allocate memory)" ("not enough memory" on
    # platforms without posix_memalign)
    "defaultcpuallocator",
    "can't allocate memory",
)


def is_oom(err: BaseException) -> bool:
    """Whether ``err`` means the trial ran out of memory, on a GPU or on the CPU alike.

    ``torch.OutOfMemoryError`` (a ``RuntimeError`` subclass, also raised as
    ``torch.cuda.OutOfMemoryError``), any ``RuntimeError`` whose message says "out of memory"
    (CUDA's allocator and cuBLAS failures) or is torch's CPU allocator failing, Python's
    ``MemoryError`` and an ``OSError`` of ``ENOMEM`` (host RAM: a fork or a mapping refused),
    and the sandbox's ``OutOfMemoryError``, which is how a team's process killed by the
    kernel's OOM killer ends (``workers.sandbox.RunSandbox.check``: the run's cgroup counted
    the kill); for a command job's script, a failure whose last output names one of those.
    Checked by name so the control plane need not import torch or the workers.
    """
    for e in _chain(err):
        if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
            return True
        if isinstance(e, OSError) and e.errno == errno.ENOMEM:
            return True
        if isinstance(e, RuntimeError) and any(w in str(e).lower() for w in _OOM_WORDS):
            return True
        if type(e).__name__ == "CommandError" and _names_oom(str(e)):
            return True
    return False


def _names_oom(text: str) -> bool:
    """Whether a command job's failure (its message quotes the script's last output) was an
    out-of-memory error: torch's (CUDA's or the CPU allocator's), Python's ``MemoryError``, or
    ``ENOMEM`` ("Cannot allocate memory")."""
    low = text.lower()
    return (
        "outofmemoryerror" in low
        or "memoryerror:" in low
        or "cannot allocate memory" in low
        or any(w in low for w in _OOM_WORDS)
    )


def _chain(err: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def memory_key(config: Config) -> tuple[object, ...]:
    """What memory use depends on besides the micro-batch.

    Precision, checkpointing, compile and sharding (and the parallel plan), and the GPU count:
    with DDP each rank holds the whole model, but the count is kept because a memory limit
    measured per count (as the Pollux tables' caps on the global batch are) must not be carried
    to another count.
    Gradient accumulation is left out: it does not change the memory of a micro-batch.
    """
    return (
        config.precision,
        config.activation_checkpointing,
        config.compile,
        config.sharding,
        config.gpus,
        config.tp,  # the parallel plan: each shards memory its own way
        config.pp,
        config.zero,
        config.settings,  # a command job's script settings (a layer's width, say)
    )


@dataclass
class FitFrontier:
    """Known fits and OOMs per :func:`memory_key`: the micro-batches that need no trial."""

    _fits: dict[tuple[object, ...], int] = field(default_factory=dict)
    _ooms: dict[tuple[object, ...], int] = field(default_factory=dict)

    def record(self, config: Config, oom: bool) -> None:
        """Learn from a trial that ran (``oom=False``) or ran out of memory."""
        key, mb = memory_key(config), config.micro_batch
        if oom:
            self._ooms[key] = min(self._ooms.get(key, mb), mb)
        else:
            self._fits[key] = max(self._fits.get(key, mb), mb)

    def will_oom(self, config: Config) -> bool:
        """Whether a smaller micro-batch already ran out of memory with these settings."""
        limit = self._ooms.get(memory_key(config))
        return limit is not None and config.micro_batch >= limit

    def limit(self, config: Config) -> int | None:
        """The smallest micro-batch known not to fit with these settings, if any."""
        return self._ooms.get(memory_key(config))
