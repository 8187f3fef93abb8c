"""The arithmetic of a run's reported figures, kept pure (no torch) so that they are tested with
numbers, on machines without a GPU, and shared by the harness (:mod:`workers.runstats`) and a
command job's steps (:mod:`workers.steps`), which the tuner's process reads without torch.
"""

from __future__ import annotations

__all__ = ["busy_share", "data_wait_share", "energy_per_sample_j", "mean_ms"]


def energy_per_sample_j(start_mj: int | None, end_mj: int | None, samples: int) -> float | None:
    """Joules per sample from two readings of NVML's total-energy counter (millijoules).

    ``None`` when either reading is missing (no NVML, a GPU without the counter), no sample
    was processed, or the counter went backwards (a driver reload restarts it).
    """
    if start_mj is None or end_mj is None or samples <= 0 or end_mj < start_mj:
        return None
    return (end_mj - start_mj) / 1000.0 / samples


def busy_share(busy_s: float, wall_s: float) -> float | None:
    """The share of ``wall_s`` the device spent computing (``busy_s``), in [0, 1].

    ``None`` when no wall time passed. Clamped at 1: two clocks read around the same interval
    can disagree by microseconds.
    """
    if wall_s <= 0:
        return None
    return min(1.0, max(0.0, busy_s / wall_s))


def data_wait_share(wait_s: float, compute_s: float) -> float | None:
    """The share of the step that was waiting for data: ``wait / (wait + compute)``;
    ``None`` before any step."""
    total = wait_s + compute_s
    if total <= 0:
        return None
    return wait_s / total


def mean_ms(total_s: float, steps: int) -> float | None:
    """Milliseconds per step of ``total_s`` seconds over ``steps`` steps (``None`` for none)."""
    return total_s * 1000.0 / steps if steps > 0 else None
