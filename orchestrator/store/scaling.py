"""What each GPU count is worth to an elastic job: the throughput its runs showed there.

``{ns}:scaling:{job}`` is a hash GPU count -> samples/s (the latest run on a count replaces
older ones). The elastic policy's speedup curve is built from it (``orchestrator.elastic``).
``{ns}:kinds:{job}`` is a hash GPU kind -> samples/s per GPU (the latest run on a kind): the
job's measured profile per kind (``orchestrator.kinds.job_speeds``), and ``KIND pNN`` -> the
step (request) time percentile ``NN`` in ms a run showed there (kind names hold no space).
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

    def record_kind(
        self, job_id: str, kind: str, per_gpu: float, latency: dict[int, float] | None = None
    ) -> None:
        """Remember the throughput per GPU the job showed on GPUs of ``kind``, and its step
        time percentiles there (``{95: ms}``); the latest replaces older, zero or less is
        ignored."""
        fields = {f"{kind} p{p}": f"{ms:.6g}" for p, ms in (latency or {}).items() if ms > 0}
        if per_gpu > 0:
            fields[kind] = f"{per_gpu:.6g}"
        if fields:
            self._client.hset(self._keys.kinds(job_id), mapping=fields)  # type: ignore[arg-type]

    def kinds(self, job_id: str) -> tuple[dict[str, float], dict[str, dict[int, float]]]:
        """Throughput per GPU the job has shown on each kind, and its step time percentiles
        per kind (``{kind: {95: ms}}``); empty when none."""
        raw = cast(dict[str, str], self._client.hgetall(self._keys.kinds(job_id)))
        rates: dict[str, float] = {}
        lats: dict[str, dict[int, float]] = {}
        for k, v in raw.items():
            kind, _, pct = k.partition(" p")
            if pct:
                lats.setdefault(kind, {})[int(pct)] = float(v)
            else:
                rates[k] = float(v)
        return rates, lats

    def read(self, job_id: str) -> dict[int, float]:
        """Throughput per GPU count the job has shown (empty when none)."""
        raw = cast(dict[str, str], self._client.hgetall(self._keys.scaling(job_id)))
        return {int(k): float(v) for k, v in raw.items()}
