"""Job performance models: how much work a job does per second on a placement.

Two kinds, one interface (:class:`JobModel`):

* :class:`ProfileJobModel` - a Pollux application's *measured* throughput and statistical
  efficiency (see :mod:`orchestrator.sim.profiles`); progress is in the app's units, the batch
  is fixed (hand-tuned, as baselines run) or adapted per epoch for the best goodput.
* :class:`ParametricJobModel` - a job of known duration on its requested GPUs and an Amdahl
  speedup ``s(n) = n / (1 + sigma (n - 1))`` on ``n`` GPUs (Philly jobs, interactive sessions).
"""

from __future__ import annotations

import abc
from functools import cache

from orchestrator.sim.profiles import AppProfile, load_app

DEFAULT_SIGMA = 0.05
"""Serial fraction of the parametric speedup: 16 GPUs give 9.1x, 64 GPUs 15.4x."""


class JobModel(abc.ABC):
    """The simulated performance of one job. Mutable: holds the job's progress.

    ``placement`` is the number of GPUs on each node the job uses, in allocation order.
    """

    speedup_changes = True
    """Whether ``speedup`` may change as the job progresses (if not, callers may ask once)."""
    speedup_absolute = False
    """Whether ``speedup`` is in an absolute unit (optimizer steps per second) that a policy
    may compare across jobs: then it is shown even for a rigid job (Gavel's throughputs)."""
    kind_bound = True
    """Whether its progress scales with the speed of the GPU kind it holds (``kinds`` of the
    :class:`~orchestrator.sim.engine.Simulator`)."""

    @abc.abstractmethod
    def advance(self, placement: tuple[int, ...], seconds: float) -> float | None:
        """Run ``seconds`` on ``placement``; return the seconds used if the job completed."""

    @abc.abstractmethod
    def state(self) -> tuple[float, int]:
        """An opaque checkpoint of the progress."""

    @abc.abstractmethod
    def restore(self, state: tuple[float, int]) -> None:
        """Go back to a checkpoint (work since then is lost)."""

    @abc.abstractmethod
    def speedup(self, max_gpus: int) -> tuple[float, ...]:
        """Goodput on 1..``max_gpus`` GPUs (packed placement), relative to 1 GPU now."""

    @abc.abstractmethod
    def remaining_time(self, placement: tuple[int, ...]) -> float:
        """Seconds to completion on ``placement`` (an estimate for multi-phase models)."""

    @property
    @abc.abstractmethod
    def fraction_done(self) -> float:
        """Progress as a fraction of the total work, 0..1."""

    def start_s(self, default: float) -> float:
        """Seconds a start, resize or resume costs it (GPUs held, no progress): ``default``,
        the simulator's ``restart_s``, unless the model knows its own."""
        return default

    def placed(self, kinds: tuple[str, ...], placement: tuple[int, ...], resize: bool) -> None:
        """The job now holds GPUs of ``kinds`` (one entry per GPU) on ``placement`` (GPUs per
        node), by a start (``resize`` false) or a resize or move. Only a model whose progress
        depends on the kind itself (``kind_bound`` false, e.g.
        :class:`~orchestrator.sim.kind_models.FixedBatchKindModel`) is told, before
        :meth:`start_s` is asked; the others ignore it."""
        return None


def packed(gpus: int, per_node: int = 4) -> tuple[int, ...]:
    """The placement of ``gpus`` GPUs packed onto nodes of ``per_node`` GPUs."""
    full, rest = divmod(gpus, per_node)
    return (per_node,) * full + ((rest,) if rest else ())


@cache
def amdahl(gpus: int, sigma: float) -> float:
    """Speedup on ``gpus`` GPUs with serial fraction ``sigma`` (Amdahl's law)."""
    return gpus / (1.0 + sigma * (gpus - 1)) if gpus > 0 else 0.0


class ParametricJobModel(JobModel):
    """A job that runs ``duration`` seconds on ``gpus`` GPUs and scales by Amdahl's law.

    Args:
        duration: seconds on ``gpus`` GPUs.
        gpus: the GPUs the duration was measured on.
        sigma: serial fraction (0 = linear).
    """

    speedup_changes = False

    def __init__(self, duration: float, gpus: int, sigma: float = DEFAULT_SIGMA) -> None:
        self.sigma = sigma
        self.work = duration * amdahl(gpus, sigma)
        self.done = 0.0
        self._on: tuple[int, ...] | None = None  # the placement ``_on_rate`` is for
        self._on_rate = 0.0

    def rate(self, gpus: int) -> float:
        """Work per second on ``gpus`` GPUs."""
        return amdahl(gpus, self.sigma)

    def advance(self, placement: tuple[int, ...], seconds: float) -> float | None:
        """See :meth:`JobModel.advance`."""
        if placement is not self._on:  # a job keeps its placement many rounds: cache the rate
            self._on, self._on_rate = placement, amdahl(sum(placement), self.sigma)
        rate = self._on_rate
        left = self.work - self.done
        if rate * seconds >= left - 1e-9:
            self.done = self.work
            return left / rate
        self.done += rate * seconds
        return None

    def state(self) -> tuple[float, int]:
        """See :meth:`JobModel.state`."""
        return (self.done, 0)

    def restore(self, state: tuple[float, int]) -> None:
        """See :meth:`JobModel.restore`."""
        self.done = state[0]

    def speedup(self, max_gpus: int) -> tuple[float, ...]:
        """See :meth:`JobModel.speedup`."""
        return _amdahl_table(max_gpus, self.sigma)

    def remaining_time(self, placement: tuple[int, ...]) -> float:
        """See :meth:`JobModel.remaining_time`."""
        if placement is not self._on:
            self._on, self._on_rate = placement, amdahl(sum(placement), self.sigma)
        return (self.work - self.done) / self._on_rate

    @property
    def fraction_done(self) -> float:
        """See :attr:`JobModel.fraction_done`."""
        return self.done / self.work


@cache
def _amdahl_table(max_gpus: int, sigma: float) -> tuple[float, ...]:
    return tuple(amdahl(n, sigma) for n in range(1, max_gpus + 1))


class ProfileJobModel(JobModel):
    """A Pollux application run from its measured profile, epoch by epoch.

    Mirrors the published simulator: within an epoch the goodput is constant; an epoch boundary
    is reached after ``round((next - progress) / goodput)`` seconds (whole seconds, as there);
    the configuration (micro-batch, accumulation) is recomputed at each boundary.

    Args:
        app: the application name.
        batch_size: a fixed global batch (baselines); 0 adapts it to the best goodput.
        root: the Pollux data folder (default: :func:`~orchestrator.sim.profiles.traces_dir`).
    """

    def __init__(self, app: str, batch_size: int = 0, root: str | None = None) -> None:
        self.app: AppProfile = load_app(app, root)
        self.batch_size = batch_size
        self.progress = 0.0
        self.epoch = 0

    def config(self, placement: tuple[int, ...]) -> tuple[int, int]:
        """(micro-batch, accumulation steps) the job uses on ``placement`` now."""
        if self.batch_size:
            return self.app.fixed_config(self.batch_size, sum(placement))
        return self.app.best_config(placement, self.epoch)

    def goodput(self, placement: tuple[int, ...]) -> float:
        """Progress per second on ``placement`` in the current epoch."""
        micro, accum = self.config(placement)
        return self.app.goodput(placement, micro, accum, self.epoch)[0]

    def advance(self, placement: tuple[int, ...], seconds: float) -> float | None:
        """See :meth:`JobModel.advance`."""
        used = 0.0
        app = self.app
        while seconds > 0:
            rate = self.goodput(placement)
            target = app.epoch_progress[self.epoch]
            if self.progress + rate * seconds < target:
                self.progress += rate * seconds
                return None
            delta = min(float(round((target - self.progress) / rate)), seconds)
            self.progress = target
            self.epoch += 1
            used += delta
            seconds -= delta
            if self.epoch >= app.max_epochs:
                return used
        return None

    def state(self) -> tuple[float, int]:
        """See :meth:`JobModel.state`."""
        return (self.progress, self.epoch)

    def restore(self, state: tuple[float, int]) -> None:
        """See :meth:`JobModel.restore`."""
        self.progress, self.epoch = state

    def speedup(self, max_gpus: int) -> tuple[float, ...]:
        """See :meth:`JobModel.speedup`, with the current epoch's gradient statistics.

        As Pollux's agent reports them: the statistical efficiency a job's goodput model uses
        is that of its latest steps, so a job whose gradient noise grows (yolov3, deepspeech2
        after their first epochs) is seen to scale as soon as it does.
        """
        return _speedups(self.app.name, self.app.root, self.batch_size, self.epoch, max_gpus)

    def remaining_time(self, placement: tuple[int, ...]) -> float:
        """See :meth:`JobModel.remaining_time` (current epoch's goodput throughout)."""
        return (self.app.target_progress - self.progress) / self.goodput(placement)

    @property
    def fraction_done(self) -> float:
        """See :attr:`JobModel.fraction_done`."""
        return self.progress / self.app.target_progress


@cache
def _speedups(
    app_name: str, root: str | None, batch_size: int, epoch: int, max_gpus: int
) -> tuple[float, ...]:
    model = ProfileJobModel(app_name, batch_size, root)
    model.epoch = epoch
    base = model.goodput((1,))
    return tuple(model.goodput(packed(n)) / base for n in range(1, max_gpus + 1))
