"""What an integration's callback does after an optimizer step: save, stop, or go on; decided
the same on every rank.

A framework's save is collective (the Trainer's barriers, DDP/FSDP state gathers), so every
rank must save at the same step or the ranks that do wait forever for the others. Each rank's
view can differ for a moment: a stop request reaches each rank's process on its own, and may
arrive between two reads of it. So each rank reads its flags once, they are combined over the
ranks (an element-wise OR, :func:`workers.distributed.agree_any`), and every rank acts on the
combined values: stop when any rank was asked (or ran out of time), save when a stop or the
``checkpoint_every`` period says so, unless any rank was deposed (fenced: a newer run of the
job owns the checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers import job

__all__ = ["StepDecision", "decide"]


@dataclass(frozen=True)
class StepDecision:
    """What to do after a step: ``save`` a checkpoint, then ``stop`` training."""

    save: bool
    stop: bool


def decide(step: int, late: bool, device: Any) -> StepDecision:
    """This step's decision, the same on every rank (``late``: this rank's duration is over;
    ``device``: where the ranks' collective runs)."""
    from workers.distributed import agree_any

    every = job.context().checkpoint_every
    asked = job.should_stop()
    # stop is set before should_checkpoint() is read: once asked, it is false only when fenced
    fenced = asked and not job.should_checkpoint()
    periodic = every > 0 and step > 0 and step % every == 0
    asked, late, periodic, fenced = agree_any([asked, late, periodic, fenced], device)
    return StepDecision(save=(asked or periodic) and not fenced, stop=asked or late)
