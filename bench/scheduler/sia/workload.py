"""Read the Sia artifact's workloads, GPU kinds and per-kind profiles into plain Python values.

Sia (Jayaram Subramanya et al., SOSP'23) ships a simulator in `sia-simulator/` of
github.com/siasosp23/artifacts (see README.md beside this file). This module reads, without
importing the artifact or pandas:

- a workload CSV (`workloads/{philly,saturn}/workload-N.csv`): one job a row, `name, time,
  application, num_replicas, batch_size` (and an optional `category`);
- the simulated cluster from `simulator_config.py` (`cluster_nnodes`, `cluster_ngpus_per_node`,
  `cluster_max_physical_nnodes`, `SLOWDOWNS`), by `ast`, so the values are the artifact's own;
- each application's per-kind throughput profile (`traces/<app>/placements-<kind>.csv` and
  `scalability-<kind>.csv`: step and sync time per placement and per-GPU batch size) and its
  work (`traces/<app>/validation-<batch>.csv`: the progress at which a job completes).

Nothing here depends on `policies/` or `orchestrator/sim/`; it is the input side of a
kind-aware simulation, for the project's simulator to consume.
"""

from __future__ import annotations

import ast
import csv
from dataclasses import dataclass
from pathlib import Path

# Per-application facts the artifact states in code rather than data (sia-simulator/applications.py
# `max_epochs=` and `rescale_time`; sia.py `get_restart_penalty`). `rescale_s` is the
# checkpoint-restore delay the simulator charges on each (re)start; `restart_penalty_s` is what
# Sia's policy assumes in its re-allocation factor.
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "yolov3": 50, "ncf": 10}
RESCALE_S = {
    "bert": 120,
    "cifar10": 50,
    "deepspeech2": 25,
    "imagenet": 250,
    "yolov3": 80,
    "ncf": 15,
}
RESTART_PENALTY_S = {"bert": 120, "cifar10": 30, "deepspeech2": 25, "imagenet": 250, "yolov3": 45}

# applications.py: `if self.name == "deepspeech2" and cluster_suffix == "rtx": max_local_bsz = 57`.
MAX_LOCAL_BSZ_OVERRIDE = {("deepspeech2", "rtx"): 57}

# The paper's names for the simulator's kinds (section 4.2).
PAPER_NAMES = {"aws": "t4", "dgx-ext": "a100", "rtx": "rtx", "quad": "quad"}


@dataclass(frozen=True)
class SiaJob:
    """One row of a workload: a job as the trace submits it."""

    name: str
    submit_s: float
    application: str
    num_replicas: int  # the tuned GPU count (Gavel's TunedJobs; Sia and Pollux pick their own)
    batch_size: int  # the tuned global batch size
    category: str | None = None


@dataclass(frozen=True)
class ProfileRow:
    """One measured configuration on one kind: replicas per node, per-GPU batch, step times."""

    placement: tuple[int, ...]  # GPUs used on each node, e.g. (4, 4) = 8 GPUs on 2 nodes
    local_bsz: int
    step_s: float  # one optimizer step (compute plus all-reduce)
    sync_s: float  # the all-reduce part of it


@dataclass(frozen=True)
class ScaleRow:
    """A multi-node measurement given only by node and GPU counts (`scalability-<kind>.csv`)."""

    num_nodes: int
    num_replicas: int
    local_bsz: int
    step_s: float
    sync_s: float


@dataclass(frozen=True)
class KindProfile:
    """An application's measurements on one GPU kind."""

    kind: str
    rows: tuple[ProfileRow, ...]
    scale_rows: tuple[ScaleRow, ...] = ()
    max_local_bsz_override: int | None = None

    @property
    def one_gpu_throughput(self) -> float:
        """Examples/s on one GPU, as the simulator bootstraps kinds a job has not run on.

        `Cluster.compute_throughputs`: the largest 1-GPU batch over the longest 1-GPU step.
        The ratio of two kinds' values scales a fitted model from one kind to the other.
        """
        one = [r for r in self.rows if sum(r.placement) == 1]
        return max(r.local_bsz for r in one) / max(r.step_s for r in one)

    @property
    def local_bsz_range(self) -> tuple[int, int]:
        """Smallest and largest per-GPU batch measured (the largest is the memory limit)."""
        sizes = [r.local_bsz for r in self.rows]
        return min(sizes), self.max_local_bsz_override or max(sizes)

    def step_time(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float] | None:
        """The simulator's true (step, sync) seconds for a placement and per-GPU batch.

        As `applications.py::Application.get_throughput`: the placement is turned to its
        smallest rotation; a measured placement is interpolated linearly in the batch; any
        other is interpolated linearly over (nodes, GPUs, batch) of the placements' means and
        the scalability rows (nodes capped at 16). None where the artifact returns (-1, -1):
        outside the measured range.
        """
        import numpy as np
        from scipy.interpolate import LinearNDInterpolator

        parts = tuple(p for p in placement if p)
        key = min(parts[i:] + parts[:i] for i in range(len(parts)))
        exact = sorted((r.local_bsz, r.step_s, r.sync_s) for r in self.rows if r.placement == key)
        if exact:
            xs = [b for b, _, _ in exact]
            if not xs[0] <= local_bsz <= xs[-1]:
                return None
            step = float(np.interp(local_bsz, xs, [s for _, s, _ in exact]))
            sync = float(np.interp(local_bsz, xs, [y for _, _, y in exact]))
            return step, sync
        groups: dict[tuple[int, int, int], list[tuple[float, float]]] = {}
        for r in self.rows:
            groups.setdefault((len(r.placement), sum(r.placement), r.local_bsz), []).append(
                (r.step_s, r.sync_s)
            )
        points = [list(k) for k in groups] + [
            [r.num_nodes, r.num_replicas, r.local_bsz] for r in self.scale_rows
        ]
        values = [
            [float(np.mean([v[0] for v in vs])), float(np.mean([v[1] for v in vs]))]
            for vs in groups.values()
        ]
        values += [[r.step_s, r.sync_s] for r in self.scale_rows]
        query = [min(len(key), 16), sum(key), local_bsz]
        out = LinearNDInterpolator(np.array(points, dtype=float), np.array(values))([query])[0]
        if np.isnan(out).any():
            return None
        return float(out[0]), float(out[1])


@dataclass(frozen=True)
class Application:
    """A model of the trace: its work, batch limits and per-kind profiles."""

    name: str
    init_batch_size: int  # smallest validated global batch
    max_batch_size: int  # largest validated global batch
    work: float  # progress (examples at the initial batch's efficiency) to complete
    max_epochs: int
    rescale_s: int
    slowdown: float  # the simulator divides goodput by this (calibration to real runs)
    profiles: dict[str, KindProfile]

    def max_gpus(self, kind: str) -> int:
        """The most GPUs Sia may give it on a kind: 64, and no fewer than min_local per GPU."""
        return min(64, self.max_batch_size // self.profiles[kind].local_bsz_range[0])


@dataclass(frozen=True)
class Cluster:
    """The simulated cluster: per kind, nodes and GPUs per node."""

    nodes: dict[str, int]
    gpus_per_node: dict[str, int]
    max_physical_nodes: dict[str, int]  # profiled nodes: placements beyond are folded onto these

    @property
    def gpus(self) -> dict[str, int]:
        """Total GPUs of each kind."""
        return {k: n * self.gpus_per_node[k] for k, n in self.nodes.items()}


def read_workload(path: Path) -> list[SiaJob]:
    """Read one workload CSV, in file order (which is submission order)."""
    with path.open(newline="") as f:
        return [
            SiaJob(
                name=row["name"],
                submit_s=float(row["time"]),
                application=row["application"],
                num_replicas=int(row["num_replicas"]),
                batch_size=int(row["batch_size"]),
                category=row.get("category") or None,
            )
            for row in csv.DictReader(f)
        ]


def _config_literals(simulator_dir: Path) -> dict[str, object]:
    """Top-level literal assignments of simulator_config.py (the last one of a name wins)."""
    tree = ast.parse((simulator_dir / "simulator_config.py").read_text())
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    values[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    return values


def read_cluster(simulator_dir: Path) -> Cluster:
    """The artifact's default heterogeneous cluster (t4 6x4, a100 2x8, rtx 3x8: 64 GPUs)."""
    cfg = _config_literals(simulator_dir)
    nodes = dict(cfg["cluster_nnodes"])  # type: ignore[call-overload]
    per_node = dict(cfg["cluster_ngpus_per_node"])  # type: ignore[call-overload]
    physical = dict(cfg["cluster_max_physical_nnodes"])  # type: ignore[call-overload]
    return Cluster(
        nodes=nodes,
        gpus_per_node={k: per_node[k] for k in nodes},
        max_physical_nodes={k: physical[k] for k in nodes},
    )


def read_slowdowns(simulator_dir: Path) -> dict[str, float]:
    """Per-application calibration slowdowns (`SLOWDOWNS` in simulator_config.py)."""
    return {k: float(v) for k, v in dict(_config_literals(simulator_dir)["SLOWDOWNS"]).items()}  # type: ignore[call-overload]


def _read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def read_profile(trace_dir: Path, kind: str) -> KindProfile:
    """An application's placements and scalability measurements on one kind.

    A placement is written as digits, one per node (`13` = 1 GPU on one node, 3 on another).
    """
    rows = tuple(
        ProfileRow(
            placement=tuple(int(c) for c in r["placement"]),
            local_bsz=int(r["local_bsz"]),
            step_s=float(r["step_time"]),
            sync_s=float(r["sync_time"]),
        )
        for r in _read_rows(trace_dir / f"placements-{kind}.csv")
    )
    scale_rows = tuple(
        ScaleRow(
            num_nodes=int(r["num_nodes"]),
            num_replicas=int(r["num_replicas"]),
            local_bsz=int(r["local_bsz"]),
            step_s=float(r["step_time"]),
            sync_s=float(r["sync_time"]),
        )
        for r in _read_rows(trace_dir / f"scalability-{kind}.csv")
    )
    override = MAX_LOCAL_BSZ_OVERRIDE.get((trace_dir.name, kind))
    return KindProfile(kind=kind, rows=rows, scale_rows=scale_rows, max_local_bsz_override=override)


def read_application(simulator_dir: Path, name: str, kinds: list[str]) -> Application:
    """An application's work and batch limits from its validation curves, and its profiles.

    The simulator ends a job when it finishes epoch `max_epochs - 1`, i.e. when its progress
    reaches the smallest, over validated batch sizes, of the progress after `max_epochs` epochs.
    """
    trace_dir = simulator_dir / "traces" / name
    max_epochs = MAX_EPOCHS[name]
    progress_at_end: list[float] = []
    batches: list[int] = []
    for path in sorted(trace_dir.glob("validation-*.csv")):
        batches.append(int(path.stem.split("-")[-1]))
        rows = _read_rows(path)
        progress_at_end.append(float(rows[max_epochs - 1]["progress"]))
    return Application(
        name=name,
        init_batch_size=min(batches),
        max_batch_size=max(batches),
        work=min(progress_at_end),
        max_epochs=max_epochs,
        rescale_s=RESCALE_S[name],
        slowdown=read_slowdowns(simulator_dir)[name],
        profiles={k: read_profile(trace_dir, k) for k in kinds},
    )


def read_trace(
    simulator_dir: Path, workload: Path
) -> tuple[list[SiaJob], Cluster, dict[str, Application]]:
    """A workload, the cluster it runs on, and the applications its jobs use."""
    jobs = read_workload(workload)
    cluster = read_cluster(simulator_dir)
    kinds = list(cluster.nodes)
    apps = {
        a: read_application(simulator_dir, a, kinds) for a in sorted({j.application for j in jobs})
    }
    return jobs, cluster, apps
