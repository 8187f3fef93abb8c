"""Preemption: which running bulk jobs give way when GPUs are needed now."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from policies.registry import Registry
from policies.snapshot import RunningJob


class Preemption(abc.ABC):
    """Chooses victims among running bulk jobs to free at least ``need`` GPUs.

    Contract: pure and deterministic. ``choose`` returns a subset of ``candidates`` (never an
    interactive job) whose GPUs sum to at least ``need``, or ``None`` when all of them together
    free too few. Jobs that started less than ``min_runtime_s`` ago are protected: they are
    chosen only when the unprotected ones cannot free enough (a start always beats a wait
    while preemptible capacity exists; protection only orders the victims).

    Args:
        min_runtime_s: the minimum-runtime protection.
    """

    def __init__(self, min_runtime_s: float = 300.0) -> None:
        self.min_runtime_s = min_runtime_s

    def choose(
        self, candidates: Sequence[RunningJob], need: int, now: float
    ) -> list[RunningJob] | None:
        """Victims freeing at least ``need`` GPUs, unprotected first; ``None`` if impossible."""
        pool = [c for c in candidates if not c.interactive]
        if need <= 0:
            return []
        if sum(c.gpus for c in pool) < need:
            return None
        young = [c for c in pool if now - c.started_at < self.min_runtime_s]
        old = [c for c in pool if now - c.started_at >= self.min_runtime_s]
        if sum(c.gpus for c in old) >= need:
            return self.pick(old, need, now)
        rest = need - sum(c.gpus for c in old)
        return old + self.pick(young, rest, now)

    @abc.abstractmethod
    def pick(self, pool: Sequence[RunningJob], need: int, now: float) -> list[RunningJob]:
        """Victims from ``pool`` (which can free ``need``) freeing at least ``need`` GPUs."""


PREEMPTIONS: Registry[Preemption] = Registry("preemption")


def lost_work(job: RunningJob, now: float) -> float:
    """GPU-seconds of work lost if ``job`` stops now (run since its last checkpoint)."""
    return job.gpus * max(0.0, now - max(job.checkpoint_at, job.started_at))


def trim(chosen: list[RunningJob], need: int) -> list[RunningJob]:
    """Drop victims that are not needed (last chosen first)."""
    total = sum(c.gpus for c in chosen)
    for c in reversed(list(chosen)):
        if total - c.gpus >= need:
            chosen.remove(c)
            total -= c.gpus
    return chosen
