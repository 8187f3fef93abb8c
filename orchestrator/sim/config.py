"""The simulator's settings (:class:`SimConfig`), read by the engine and the step that
applies decisions (``orchestrator.sim.apply``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SimConfig"]


@dataclass(frozen=True)
class SimConfig:
    """Simulator settings.

    Attributes:
        interval_s: seconds between scheduling rounds.
        restart_s: seconds a start, resize or resume costs (GPUs held, no progress).
        every_round: run every round (published semantics) or only rounds with events.
        max_idle_s: with ``every_round=False``, the longest gap between rounds while jobs wait.
        seed: passed to the policy in every snapshot.
        horizon_s: stop at this simulated time (``None``: when every job is done).
        time_decisions: record the wall time of every ``policy.decide`` call.
        sigma: serial fraction of the parametric speedup of duration-based jobs.
        stuck_rounds: stop with :class:`StuckSimulation` after this many rounds in a row in
            which jobs were queued or running and none did any work (GPUs idle or restarting
            the whole interval); 0 never stops.
        log_decisions: keep every applied start, preemption and resize, with its time, in
            :attr:`Simulator.applied` (to compare a simulated run with a live one).
        atomic_moves: the jobs a round moves (``RESIZE`` to other GPUs) all let go of their
            GPUs before any decision takes GPUs, as the published simulators move GPU ids at
            once (Sia's artifact, where Gavel swaps jobs between kinds every round); the
            default, as the live loop, applies decisions one after another, so a cycle of
            moves is refused. For reproductions only: no live scheduler works so.
        plan_admission: judge deadline jobs against a plan as the live loop does
            (:class:`~policies.scheduling.admission.AdmissionDesk`), the verdicts kept in
            :attr:`Simulator.admissions`; off by default (a plan per round with new jobs).
    """

    interval_s: float = 60.0
    restart_s: float = 30.0
    every_round: bool = True
    max_idle_s: float = 600.0
    seed: int = 0
    horizon_s: float | None = None
    time_decisions: bool = False
    sigma: float = 0.05
    stuck_rounds: int = 1000
    log_decisions: bool = False
    plan_admission: bool = False
    atomic_moves: bool = False
