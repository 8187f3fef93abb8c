"""Measured performance profiles of the Pollux applications (OSDI'21 artifact data).

Reads ``apps/<app>/{placements,scalability,validation-*}.csv`` (see the README beside the data)
and answers the two questions the simulator asks, with the published simulator's semantics:

* step time of a placement and micro-batch: looked up in ``placements.csv`` (rotations of a
  placement are the same; linear in ``local_bsz``), else linear interpolation over
  (nodes, replicas, local_bsz) on the Delaunay triangulation of the per-point means of
  ``placements.csv`` together with ``scalability.csv`` (scipy, imported only then);
* statistical efficiency: progress per optimizer step at global batch ``B`` in epoch ``e``,
  ``gain = (var + sqr) / (var / scale + sqr)`` with ``scale = B / B0``, the gradient statistics
  interpolated linearly between the two nearest measured batch sizes.
"""

from __future__ import annotations

import bisect
import csv
import math
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from orchestrator.sim.errors import TraceError

if TYPE_CHECKING:
    from numpy.typing import NDArray

TRACES_ENV = "ORCH_POLLUX_TRACES"
BUNDLED_TRACES = Path(__file__).resolve().parents[2] / "bench" / "data" / "pollux"
"""The copy shipped in the repository (see its SOURCE.md and LICENSE)."""

MAX_EPOCHS = {
    "bert": 2,
    "cifar10": 100,
    "ncf": 10,
    "imagenet": 90,
    "deepspeech2": 80,
    "yolov3": 50,
}
MAX_LOCAL_BSZ = {"yolov3": 8}


def traces_dir() -> Path:
    """The Pollux data folder: ``$ORCH_POLLUX_TRACES``, else the copy in ``bench/data/pollux``.

    Raises:
        TraceError: the folder is missing (the message says how to point at it).
    """
    path = Path(os.environ.get(TRACES_ENV, BUNDLED_TRACES))
    if not (path / "apps").is_dir():
        raise TraceError(
            f"Pollux trace data not found at {path} (expected apps/ and workloads/ there); "
            f"set {TRACES_ENV} to the folder holding the OSDI'21 artifact's simulator data"
        )
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def canonical_placement(placement: tuple[int, ...]) -> tuple[int, ...]:
    """The lexicographically smallest rotation of a placement (GPUs per node, zeros dropped)."""
    p = tuple(x for x in placement if x)
    return min((p[i:] + p[:i] for i in range(len(p))), default=())


@dataclass
class _Curve:
    batch_size: int
    progress: list[float]
    grad_sqr: list[float]
    grad_var: list[float]


@dataclass
class AppProfile:
    """One application's measured throughput and statistical efficiency.

    Attributes:
        name: the application (``cifar10``, ...).
        init_batch_size: the smallest global batch with a training curve (``B0``).
        max_batch_size: the largest global batch with a training curve.
        min_local_bsz, max_local_bsz: the per-GPU micro-batch range.
        max_epochs: epochs to completion.
        target_progress: progress at which the job is complete.
        root: the data folder the profile was read from (``None``: :func:`traces_dir`).
    """

    name: str
    root: str | None
    curves: list[_Curve]
    measured: dict[tuple[int, ...], list[tuple[float, float, float]]]
    points: list[tuple[float, float, float, float, float]]
    max_epochs: int
    max_local_bsz: int
    min_local_bsz: int
    init_batch_size: int = field(init=False)
    max_batch_size: int = field(init=False)
    epoch_progress: list[float] = field(init=False)
    _nd: Any = field(default=None, init=False, repr=False)
    _step_cache: dict[tuple[tuple[int, ...], int], tuple[float, float]] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        self.curves.sort(key=lambda c: c.batch_size)
        self.init_batch_size = self.curves[0].batch_size
        self.max_batch_size = self.curves[-1].batch_size
        # progress at the end of epoch e (index e-1): the least over all batch sizes
        self.epoch_progress = [
            min(c.progress[e] for c in self.curves) for e in range(self.max_epochs)
        ]

    @property
    def target_progress(self) -> float:
        """Progress at which the job has finished its last epoch."""
        return self.epoch_progress[-1]

    # ---- throughput ------------------------------------------------------------------------

    def step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        """(step_time, sync_time) in seconds of one micro-batch step on ``placement``."""
        key = (canonical_placement(placement), local_bsz)
        hit = self._step_cache.get(key)
        if hit is not None:
            return hit
        rows = self.measured.get(key[0])
        if rows is not None:
            out = _interp1(rows, float(local_bsz))
        else:
            out = self._interp_nd(len(key[0]), sum(key[0]), local_bsz)
        self._step_cache[key] = out
        return out

    def _interpolator(self) -> Any:
        if self._nd is None:
            from scipy.interpolate import LinearNDInterpolator  # heavy: only when needed

            xs = [p[:3] for p in self.points]
            ys = [p[3:] for p in self.points]
            self._nd = LinearNDInterpolator(xs, ys)
        return self._nd

    def _interp_nd(self, nodes: int, replicas: int, local_bsz: int) -> tuple[float, float]:
        step, sync = self._interpolator()([[min(nodes, 16), replicas, local_bsz]])[0]
        if math.isnan(step):
            raise TraceError(
                f"{self.name}: no measurement near {nodes} nodes, {replicas} GPUs, "
                f"local batch {local_bsz}"
            )
        return float(step), float(sync)

    # ---- statistical efficiency ------------------------------------------------------------

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) in ``epoch`` at ``batch_size``, linear between measured sizes."""
        sizes = [c.batch_size for c in self.curves]
        b = min(max(batch_size, sizes[0]), sizes[-1])
        hi = bisect.bisect_left(sizes, b)
        upper = self.curves[hi]
        if upper.batch_size == b or hi == 0:
            return upper.grad_sqr[epoch], upper.grad_var[epoch]
        lower = self.curves[hi - 1]
        w = (b - lower.batch_size) / (upper.batch_size - lower.batch_size)
        sqr = lower.grad_sqr[epoch] + w * (upper.grad_sqr[epoch] - lower.grad_sqr[epoch])
        var = lower.grad_var[epoch] + w * (upper.grad_var[epoch] - lower.grad_var[epoch])
        return sqr, var

    def gains(self, batch_sizes: NDArray[np.float64], epoch: int) -> NDArray[np.float64]:
        """:meth:`gain` of many batch sizes at once (the same arithmetic, element-wise)."""
        sizes = np.array([c.batch_size for c in self.curves], dtype=np.float64)
        sqrs = np.array([c.grad_sqr[epoch] for c in self.curves])
        vars_ = np.array([c.grad_var[epoch] for c in self.curves])
        b = np.clip(batch_sizes, sizes[0], sizes[-1])
        hi = np.searchsorted(sizes, b, side="left")
        lo = np.maximum(hi - 1, 0)
        exact = (sizes[hi] == b) | (hi == 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(exact, 0.0, (b - sizes[lo]) / (sizes[hi] - sizes[lo]))
        sqr = np.where(exact, sqrs[hi], sqrs[lo] + w * (sqrs[hi] - sqrs[lo]))
        var = np.where(exact, vars_[hi], vars_[lo] + w * (vars_[hi] - vars_[lo]))
        scale = batch_sizes / self.init_batch_size
        out: NDArray[np.float64] = (var + sqr) / (var / scale + sqr)
        return out

    def gain(self, batch_size: float, epoch: int) -> float:
        """Progress per optimizer step at ``batch_size`` in ``epoch`` (1 at ``B0``)."""
        sqr, var = self.grad_stats(batch_size, epoch)
        scale = batch_size / self.init_batch_size
        return (var + sqr) / (var / scale + sqr)

    # ---- configurations --------------------------------------------------------------------

    def fixed_config(self, batch_size: int, replicas: int) -> tuple[int, int]:
        """(micro-batch, accumulation steps) for a fixed global batch on ``replicas`` GPUs."""
        local = math.ceil(batch_size / replicas - 1e-8)
        accum = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        if replicas == 1 and batch_size > self.init_batch_size:
            accum = max(1, accum)
        micro = math.ceil(local / (accum + 1) - 1e-8)
        micro = min(micro, int(self.max_batch_size / (replicas * (accum + 1))))
        return micro, accum

    def goodput(
        self, placement: tuple[int, ...], micro: int, accum: int, epoch: int
    ) -> tuple[float, int]:
        """(progress per second, global batch) of a configuration in ``epoch``."""
        replicas = sum(placement)
        step, sync = self.step_time(placement, micro)
        total = step + accum * (step - sync)
        batch = replicas * micro * (accum + 1)
        return self.gain(batch, epoch) / total, batch

    def best_config(self, placement: tuple[int, ...], epoch: int) -> tuple[int, int]:
        """(micro-batch, accumulation) maximising goodput on ``placement`` in ``epoch``.

        Searches micro-batches over the measured range and up to 15 accumulation steps, for a
        global batch between the initial and the maximum one (as Pollux's own batch-size
        optimisation does, but on the true profile instead of a fitted model).
        """
        return _best_config(self, canonical_placement(placement), epoch)


@cache
def _best_config_cached(
    name: str, root: str | None, placement: tuple[int, ...], epoch: int
) -> tuple[int, int]:
    app = load_app(name, root)
    micro, accum, total, batch = _candidates(name, root, placement)
    if not len(micro):  # more GPUs than the largest batch can use: the smallest micro-batch
        return app.min_local_bsz, 0
    rate = app.gains(batch, epoch) / total
    best = int(np.argmax(rate))  # the first best, in the order the candidates were listed
    return int(micro[best]), int(accum[best])


@cache
def _candidates(
    name: str, root: str | None, placement: tuple[int, ...]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Every (micro-batch, accumulation) :meth:`AppProfile.best_config` weighs on a placement,
    accumulation-major, with its optimizer-step time and global batch (the same for every
    epoch; only the statistical efficiency changes with the epoch)."""
    app = load_app(name, root)
    replicas = sum(placement)
    micros = sorted(
        {*range(app.min_local_bsz, app.max_local_bsz + 1, _stride(app))} | {app.max_local_bsz}
    )
    pairs: list[tuple[int, int]] = []
    for accum in range(16):
        for micro in micros:
            batch = replicas * micro * (accum + 1)
            if batch > app.max_batch_size:
                break
            if batch >= app.init_batch_size:
                pairs.append((micro, accum))
        if replicas * app.min_local_bsz * (accum + 2) > app.max_batch_size:
            break
    micros_ = np.array([m for m, _ in pairs], dtype=np.int64)
    accums = np.array([a for _, a in pairs], dtype=np.int64)
    times = [app.step_time(placement, m) for m, _ in pairs]
    step = np.array([t[0] for t in times], dtype=np.float64)
    sync = np.array([t[1] for t in times], dtype=np.float64)
    total = step + accums * (step - sync)
    batches = (replicas * micros_ * (accums + 1)).astype(np.float64)
    return micros_, accums, total, batches


def _stride(app: AppProfile) -> int:
    return max(1, (app.max_local_bsz - app.min_local_bsz) // 24)


def _best_config(app: AppProfile, placement: tuple[int, ...], epoch: int) -> tuple[int, int]:
    return _best_config_cached(app.name, app.root, placement, epoch)


def _interp1(rows: list[tuple[float, float, float]], x: float) -> tuple[float, float]:
    xs = [r[0] for r in rows]
    if not xs[0] <= x <= xs[-1]:
        raise TraceError(f"local batch {x} outside the measured range {xs[0]}..{xs[-1]}")
    i = max(1, bisect.bisect_left(xs, x))
    i = min(i, len(xs) - 1)
    x0, x1 = xs[i - 1], xs[i]
    w = 0.0 if x1 == x0 else (x - x0) / (x1 - x0)
    a, b = rows[i - 1], rows[i]
    return a[1] + w * (b[1] - a[1]), a[2] + w * (b[2] - a[2])


@cache
def load_app(name: str, root: str | None = None) -> AppProfile:
    """Load one application's profile from the Pollux data folder (cached).

    Args:
        name: the application.
        root: the Pollux data folder (default :func:`traces_dir`); everything derived from the
            profile (best configurations, speedup tables) is read from the same folder.

    Raises:
        TraceError: unknown application or missing data.
    """
    if name not in MAX_EPOCHS:
        raise TraceError(f"unknown Pollux application {name!r}; known: {', '.join(MAX_EPOCHS)}")
    base = (Path(root) if root else traces_dir()) / "apps" / name
    return read_profile(base, name, root=root, max_local_bsz=MAX_LOCAL_BSZ.get(name))


def read_profile(
    base: Path,
    name: str,
    *,
    suffix: str = "",
    root: str | None = None,
    max_local_bsz: int | None = None,
) -> AppProfile:
    """One application's profile from its folder: ``placements{suffix}.csv``,
    ``scalability{suffix}.csv`` and the ``validation-*.csv`` curves (Pollux's layout, and
    Sia's with a ``-<kind>`` suffix per GPU kind: ``orchestrator.sim.kind_models``).

    Args:
        base: the application's folder.
        name: the application (its ``MAX_EPOCHS`` entry).
        suffix: added to the throughput files' names.
        root: recorded as :attr:`AppProfile.root` (what derived tables are read from).
        max_local_bsz: the largest micro-batch (``None``: the largest measured).

    Raises:
        TraceError: missing data.
    """
    placements = base / f"placements{suffix}.csv"
    if not placements.is_file():
        raise TraceError(f"no profile of {name!r} at {base} (expected {placements.name} there)")
    curves = []
    for path in sorted(base.glob("validation-*.csv")):
        rows = _rows(path)
        curves.append(
            _Curve(
                int(path.stem.split("-")[-1]),
                [float(r["progress"]) for r in rows],
                [float(r["grad_sqr"]) for r in rows],
                [float(r["grad_var"]) for r in rows],
            )
        )
    grouped: dict[tuple[int, int, int], list[tuple[float, float]]] = {}
    measured: dict[tuple[int, ...], list[tuple[float, float, float]]] = {}
    local_sizes = []
    for r in _rows(placements):
        placement = tuple(int(c) for c in r["placement"])
        bsz = int(r["local_bsz"])
        local_sizes.append(bsz)
        step, sync = float(r["step_time"]), float(r["sync_time"])
        measured.setdefault(placement, []).append((bsz, step, sync))
        grouped.setdefault((len(placement), sum(placement), bsz), []).append((step, sync))
    for runs in measured.values():
        runs.sort()
    points = [
        (float(n), float(r), float(b), _mean(v, 0), _mean(v, 1))
        for (n, r, b), v in sorted(grouped.items())
    ]
    for r in _rows(base / f"scalability{suffix}.csv"):
        points.append(
            (
                float(r["num_nodes"]),
                float(r["num_replicas"]),
                float(r["local_bsz"]),
                float(r["step_time"]),
                float(r["sync_time"]),
            )
        )
    return AppProfile(
        name=name,
        root=root,
        curves=curves,
        measured=measured,
        points=points,
        max_epochs=MAX_EPOCHS[name],
        max_local_bsz=max_local_bsz or max(local_sizes),
        min_local_bsz=min(local_sizes),
    )


def _mean(values: list[tuple[float, float]], i: int) -> float:
    return sum(v[i] for v in values) / len(values)
