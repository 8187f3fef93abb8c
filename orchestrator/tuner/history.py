"""What the tuner knows so far: every trial's config, measurement and verdict.

Strategies read it to decide the next config; the tuner writes it. It also holds the knowledge
that lets a trial be skipped without running: a repeated config (already measured), a
micro-batch at or above a known out-of-memory one, and a latency ceiling already missed beyond
measurement noise by a smaller micro-batch with the same other settings (step time does not
fall when the micro-batch grows, so the larger one misses too; a miss within the noise says
nothing where step time is flat across micro-batches). While the tuner runs a batch of trials
at once (``Tuner(free_gpus=k)``), ``pending`` holds the configs being measured, so that a strategy
proposes different ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.tuner.objective import Goal, Measurement, Verdict
from orchestrator.tuner.oom import FitFrontier
from orchestrator.tuner.space import Config, SearchSpace

__all__ = ["LATENCY_NOISE", "SERVING_TIE", "History", "Source", "TrialRecord"]

LATENCY_NOISE = 0.02
"""The least relative noise assumed of a measured latency percentile: a ceiling missed by less
prunes nothing (run-to-run variation of a profiled step on a shared machine is of that order;
see ``History.latency_noise``)."""

SERVING_TIE = 0.05
"""A service's configs whose cost (GPU-seconds per request) is within this fraction of the
cheapest's are equally cheap. At a fixed offered load every config that meets the ceiling
serves the whole load, so their costs differ by their replica counts (a third or more apart)
and by when a trial's last answer came (a percent or two), which says nothing of cost."""

Source = Literal["measured", "repeat", "pruned", "cached"]


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the tuner saw it.

    Attributes:
        number: the Optuna trial number.
        config: what ran.
        measurement: what it measured (a pruned trial measures nothing).
        verdict: the measurement judged against the SLA.
        source: ``measured`` (a real profiling run), ``repeat`` (the config was measured
            before: its result reused at no cost), ``pruned`` (skipped: known to be infeasible),
            ``cached`` (read back from a resumed study).
    """

    number: int
    config: Config
    measurement: Measurement
    verdict: Verdict
    source: Source = "measured"

    @property
    def cost_s(self) -> float:
        """Profiling seconds this trial cost (zero unless it ran)."""
        return self.measurement.cost_s if self.source == "measured" else 0.0


@dataclass
class History:
    """Every trial so far, with indexes the strategies need.

    Attributes:
        pending: configs being measured in the running batch (written by the tuner only; empty
            when trials run one at a time).
    """

    space: SearchSpace
    goal: Goal
    records: list[TrialRecord] = field(default_factory=list)
    frontier: FitFrontier = field(default_factory=FitFrontier)
    pending: set[Config] = field(default_factory=set)
    _by_config: dict[Config, TrialRecord] = field(default_factory=dict)

    def add(self, record: TrialRecord) -> None:
        """Append a trial and learn from it."""
        self.records.append(record)
        if record.source in ("measured", "cached") and record.config not in self._by_config:
            self._by_config[record.config] = record
            m = record.measurement
            if m.status in ("ok", "oom"):
                self.frontier.record(record.config, oom=m.status == "oom")

    def __len__(self) -> int:
        return len(self.records)

    def measured(self, config: Config) -> TrialRecord | None:
        """The trial that measured ``config``, if any."""
        return self._by_config.get(config)

    def untried(self, config: Config) -> bool:
        """Neither measured nor being measured now (in the running batch)."""
        return config not in self._by_config and config not in self.pending

    def points(self) -> Iterator[TrialRecord]:
        """One record per distinct measured config."""
        return iter(self._by_config.values())

    @property
    def cost_s(self) -> float:
        """Profiling seconds spent so far."""
        return sum(r.cost_s for r in self.records)

    @property
    def best(self) -> TrialRecord | None:
        """The best feasible trial, or ``None``.

        For a service, of the equally cheap feasible trials (:data:`SERVING_TIE`) the one with
        the most room under its latency ceiling: its trial is a short load test, and a pick
        that met the ceiling with little room misses it on the next stream as often as not
        (``bench/serving/README.md``: a pick at 11.1 ms in its trial measured 25.2 ms on a
        re-run against 20 ms, while a config of the same cost measured 5.7 ms)."""
        best = self.cheapest
        if best is None or not self.goal.serving:
            return best
        # a service's goal is a cost, minimised: within the tie of the cheapest
        limit = best.verdict.value * (1.0 + SERVING_TIE)
        ties = [r for r in self._by_config.values() if r.verdict.feasible]
        return min((r for r in ties if r.verdict.value <= limit), key=self._room_key)

    @property
    def cheapest(self) -> TrialRecord | None:
        """The feasible trial of the best objective value, ties aside (``None``: none): what
        the search's progress is measured by (``tuner._progress_mark``)."""
        best: TrialRecord | None = None
        for r in self._by_config.values():
            if r.verdict.feasible and (
                best is None or self.goal.better(r.verdict.value, best.verdict.value)
            ):
                best = r
        return best

    def _room_key(self, r: TrialRecord) -> tuple[float, float]:
        """Most room under the ceiling first (its latency), then the cheaper."""
        lat = self.goal.latency(r.measurement)
        return (math.inf if lat is None else lat, r.verdict.value)

    @property
    def closest(self) -> TrialRecord | None:
        """The measured trial closest to feasible (smallest total violation), or ``None``."""
        ran = [r for r in self._by_config.values() if r.measurement.ok]
        pool = ran or list(self._by_config.values())
        if not pool:
            return None
        return min(pool, key=lambda r: (r.verdict.violation, -r.config.micro_batch))

    def latency_noise(self) -> float:
        """How far a latency measurement may be off: at least :data:`LATENCY_NOISE`, or the
        largest inversion seen on a line (a larger micro-batch measured faster than a smaller
        one with the same other settings, which only noise explains)."""
        lines: dict[Config, list[tuple[int, float]]] = {}
        for r in self._by_config.values():
            lat = self.goal.latency(r.measurement) if r.measurement.ok else None
            if lat:
                line = dataclasses.replace(r.config, micro_batch=0)  # its other settings
                lines.setdefault(line, []).append((r.config.micro_batch, lat))
        worst = LATENCY_NOISE
        for points in lines.values():
            points.sort()
            for i, (_, slow) in enumerate(points):
                for _, fast in points[i + 1 :]:
                    worst = max(worst, slow / fast - 1.0)
        return worst

    def latency_misses(self) -> list[Config]:
        """The measured configs whose latency missed the ceiling by more than the noise
        (:meth:`latency_noise`): only such a miss says a larger micro-batch misses too (none
        without a ceiling)."""
        ceiling = self.goal.ceiling_ms
        if ceiling is None or self.goal.serving:  # a service's tail may fall as its batch grows
            return []
        limit = ceiling * (1.0 + self.latency_noise())
        out = []
        for r in self._by_config.values():
            lat = self.goal.latency(r.measurement) if r.measurement.ok else None
            if lat is not None and lat > limit:
                out.append(r.config)
        return out

    def prune_reason(self, config: Config) -> str | None:
        """Why ``config`` needs no trial (it cannot be feasible), or ``None``."""
        if self.frontier.will_oom(config):
            return f"micro-batch {self.frontier.limit(config)} already ran out of memory"
        for c in self.latency_misses():
            if (
                c.micro_batch <= config.micro_batch
                and (c.gpus, c.grad_accum, c.sharding, c.precision)
                == (config.gpus, config.grad_accum, config.sharding, config.precision)
                and (c.activation_checkpointing, c.compile, c.tp, c.pp, c.zero, c.settings)
                == (
                    config.activation_checkpointing,
                    config.compile,
                    config.tp,
                    config.pp,
                    config.zero,
                    config.settings,  # a command's script settings may change the model
                )
            ):
                m = self._by_config[c].measurement
                return (
                    f"p{self.goal.percentile} {self.goal.latency(m):.1f} ms at micro-batch "
                    f"{c.micro_batch} already exceeds {self.goal.ceiling_ms:g} ms beyond noise"
                )
        return None
