"""A training step's time in parts: compute, communication, optimizer and the rest (issue 37).

The harness's timed step (``compute_ms``, its data wait apart: ``data_wait_ms``) is split by
marks the step loop sets between its phases (:class:`StepClock`): clearing the gradients, each
micro-batch's forward and backward, the optimizer's step. On CUDA a mark is a CUDA event
(``torch.cuda.Event(enable_timing=True)``: no synchronisation inside the step; the spans are
read after the step's own closing synchronisation), on the CPU ``time.perf_counter``.

What each part is (:func:`split`):

- ``compute``: the micro-batches' forward and backward, less the exposed communication;
- ``comm``: the gradient synchronisation's **exposed** time (what backward's overlap did not
  hide). Data parallelism syncs only on a step's last micro-batch (``no_sync`` before it), so
  with accumulation the last micro-batch's time over the mean of the others is that exposed
  sync. Without accumulation nothing separates the two on one step: ``comm`` is then ``None``
  (unknown, counted in ``compute``); on one replica it is 0. FSDP's all-gathers run in every
  micro-batch's forward and stay in ``compute``; a pipeline's sends in its schedule's
  (``compute`` there is the whole schedule);
- ``optimizer``: the optimizer's step (and the gradient scaler's);
- ``other``: the rest of the timed step (clearing the gradients, the loss read back), so the
  parts add up to the step by construction; a large ``other`` says a phase is not marked.

``torch.profiler`` would name kernels too, at a cost per step that a profiling trial cannot pay
on every step; these marks cost a few microseconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

__all__ = ["StepClock", "StepParts", "split"]


@dataclass(frozen=True)
class StepParts:
    """One step's seconds by part (see the module doc); ``comm`` ``None``: not separable."""

    compute: float
    comm: float | None
    optimizer: float
    other: float


class StepClock:
    """The marks of one step, on ``device``'s clock (CUDA events, else ``perf_counter``)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._marks: list[tuple[str, float | torch.cuda.Event]] = []
        self.mark("start")

    def mark(self, name: str) -> None:
        """The phase ``name`` ends now (``start`` opens the step)."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append((name, event))
        else:
            self._marks.append((name, time.perf_counter()))

    def spans(self) -> list[tuple[str, float]]:
        """Each phase and its seconds, in order; on CUDA only once the step's work is done
        (after its closing synchronisation)."""
        out = []
        for (_, a), (name, b) in zip(self._marks, self._marks[1:], strict=False):
            if isinstance(a, torch.cuda.Event) and isinstance(b, torch.cuda.Event):
                out.append((name, a.elapsed_time(b) / 1000.0))
            else:
                assert isinstance(a, float) and isinstance(b, float)
                out.append((name, b - a))
        return out


def split(spans: list[tuple[str, float]], step_s: float) -> StepParts:
    """The parts of a step of ``step_s`` seconds from its marked ``spans``: ``micro`` (a
    micro-batch without a gradient sync), ``synced`` (the one with it), ``one`` (a micro-batch
    on a single replica), ``pipeline`` (a pipeline's whole schedule), ``optimizer``; any
    other span counts as ``other``."""
    micro = [s for name, s in spans if name == "micro"]
    synced = [s for name, s in spans if name == "synced"]
    alone = sum(s for name, s in spans if name in ("one", "pipeline"))
    optimizer = sum(s for name, s in spans if name == "optimizer")
    comm: float | None
    if synced and micro:
        comm = max(0.0, synced[-1] - sum(micro) / len(micro))
        compute = sum(micro) + synced[-1] - comm
    elif synced:
        comm, compute = None, synced[-1]
    else:  # one replica: nothing to sync; a pipeline's sends are inside its schedule
        compute = sum(micro) + alone
        comm = None if any(name == "pipeline" for name, _ in spans) else 0.0
    other = max(0.0, step_s - compute - (comm or 0.0) - optimizer)
    return StepParts(compute, comm, optimizer, other)
