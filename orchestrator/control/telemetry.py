"""What the control loop records for ``/metrics``: round durations, waits to start, SLA
verdicts, preemptions, resizes, tuning trials, dropped decisions and GPU-seconds per team.

Each call only adds to an in-memory :class:`~orchestrator.store.telemetry.TelemetryBuffer`;
the buffer reaches Redis in one pipelined round trip at the end of a round at most once per
``flush_every_s`` (and when the loop stops), so a round pays nothing per event and one round
trip a second at most: the control plane's round budget is milliseconds.
"""

from __future__ import annotations

import time

from orchestrator.store.records import JobRecord
from orchestrator.store.telemetry import (
    ROUND_SECONDS,
    WAIT_SECONDS,
    TelemetryBuffer,
    TelemetryStore,
)

__all__ = ["LoopTelemetry"]


class LoopTelemetry:
    """The loop's recorder of counters and histograms.

    Args:
        store: where the counts go.
        flush_every_s: the most often they are written (0: at the end of every round).
    """

    def __init__(self, store: TelemetryStore, flush_every_s: float = 1.0) -> None:
        self.store = store
        self.flush_every_s = flush_every_s
        self.buffer = TelemetryBuffer()
        self._flushed = time.monotonic()

    def round_took(self, seconds: float) -> None:
        """A round ended after ``seconds`` (recorded in memory only)."""
        self.buffer.observe(ROUND_SECONDS, seconds)

    def maybe_flush(self) -> None:
        """Write what was gathered if it is time to: the loop calls it between rounds, so the
        write never delays a decision."""
        now = time.monotonic()
        if now - self._flushed >= self.flush_every_s:
            self._flushed = now
            self.flush()

    def flush(self) -> None:
        """Write what was gathered (kept for the next flush if Redis does not answer)."""
        self.store.add(self.buffer)

    def used(self, team: str, gpu_s: float) -> None:
        """A run of one of ``team``'s jobs ended after holding ``gpu_s`` GPU-seconds (tuning
        runs included: the pool was held for them)."""
        self.buffer.add("gpu_seconds", gpu_s, team)

    def placed(self, rec: JobRecord) -> None:
        """A job was placed: its wait to start, if this is its first placement (never run,
        never tuned, never preempted; a run lost before it started counts again)."""
        if rec.attempts or "tuned" in rec.fields or rec.history.preempted_at is not None:
            return
        waited = max(0.0, rec.updated_at - rec.submitted_at)  # both Redis server time
        self.buffer.observe(WAIT_SECONDS, waited, rec.job_class)

    def finished(self, job_class: str, met: bool | None) -> None:
        """A job finished with this SLA verdict (``None``: nothing was measured)."""
        verdict = {True: "met", False: "violated", None: "unmeasured"}[met]
        self.buffer.count(f"sla_{verdict}", job_class)

    def preempted(self) -> None:
        """A run was asked to stop for another job."""
        self.buffer.count("preemptions")

    def resized(self) -> None:
        """A running elastic job was asked to restart on another number of GPUs."""
        self.buffer.count("resizes")

    def tuned(self, trials: object) -> None:
        """A tuning run ended, having run ``trials`` trials (its answer's count)."""
        if isinstance(trials, int) and trials > 0:
            self.buffer.count("tuning_trials", by=trials)

    def guarded(self, what: str, check: str) -> None:
        """The SLA guard found a check ``at-risk``, ``violated`` or ``recovered``, or acted
        (``retune``; ``scale-up``, ``scale-down`` of a service), on ``check`` (``latency``,
        ``throughput``, ``deadline``, ``profile``; ``replicas``)."""
        self.buffer.count(f"guard_{what.replace('-', '_')}", check)

    def dropped(self, decisions: int) -> None:
        """The policy's decisions dropped for breaking the contract."""
        self.buffer.count("policy_violations", by=decisions)
