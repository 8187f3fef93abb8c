"""What each GPU count is worth to an elastic job: the throughput its runs showed there.

``{ns}:scaling:{job}`` is a hash GPU count -> samples/s (the latest run on a count replaces
older ones). The elastic policy's speedup curve is built from it (``orchestrator.elastic``).
"""

from __future__ import annotations

from typing import cast

from orchestrator.store.keys import KeyFamily

__all__ = ["ScalingStore"]


class ScalingStore(KeyFamily):
    """Throughput per GPU count of the jobs of one namespace."""

    def record(self, job_id: str, gpus: int, samples_per_s: float) -> None:
        """Remember the throughput the job showed on ``gpus`` GPUs (the latest replaces older);
        a throughput of zero or less is ignored (the run measured nothing)."""
        if samples_per_s > 0:
            self._client.hset(self._keys.scaling(job_id), str(gpus), f"{samples_per_s:.6g}")

    def read(self, job_id: str) -> dict[int, float]:
        """Throughput per GPU count the job has shown (empty when none)."""
        raw = cast(dict[str, str], self._client.hgetall(self._keys.scaling(job_id)))
        return {int(k): float(v) for k, v in raw.items()}
