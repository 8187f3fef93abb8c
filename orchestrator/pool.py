"""The GPU pool: a Ray cluster (started locally or joined) and what each node has.

Without CUDA the local Ray instance is started with ``virtual_gpus`` GPU slots backed by the CPU
(Ray's ``GPU`` resource declared by hand), so gang placement, placement groups and every code
path run unchanged; every view labels such slots ``virtual``. With NVIDIA GPUs, a probe task on
each node reads the model, memory and utilisation through NVML.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config import Settings
from orchestrator.errors import PoolError
from orchestrator.kinds import VIRTUAL, node_kind

log = logging.getLogger(__name__)

FIRST_PROBE_S = 10.0
"""How long a round waits for a new node's first NVML probe (later probes are not waited on)."""

MEMORY_RESOURCE = "orch_gpu_memory_gb"
"""A Ray resource by which a node declares the memory of each of its GPU slots (GB), over what
NVML reads: how a node with virtual slots in a joined cluster (``ray start --num-gpus 2
--resources '{"orch_gpu_memory_gb": 24}'``) or a test cluster's node says how big they are.
Nothing asks for it: it is a label, as Ray's own ``accelerator_type:...`` resources are."""


@dataclass(frozen=True)
class GPUInfo:
    """One GPU as NVML sees it."""

    index: int
    model: str
    memory_mb: float
    util_pct: float | None = None


@dataclass(frozen=True)
class NodeInfo:
    """One node of the pool.

    Attributes:
        node_id: Ray's node id.
        address: the node's IP address.
        gpus: GPU slots Ray offers on the node.
        virtual: the slots are CPU-backed (no NVIDIA GPU answered NVML on the node).
        models: the NVML view of each physical GPU (empty when virtual).
        gpu_memory_gb: memory of each GPU slot in GB (10^9 bytes; the smallest GPU's), which
            placement holds jobs' ``resources.gpu_memory_gb`` to (see
            :func:`gpu_memory_gb`); ``None``: unknown, which holds back no job.
        kind: the kind of its GPUs (``orchestrator.kinds.node_kind``), which placement holds
            jobs' ``resources.gpu_kinds`` and ``exclude_gpu_kinds`` to.
        speed: the kind's speed per GPU (an A100 is 1.0; ``orchestrator.kinds``).
    """

    node_id: str
    address: str
    gpus: int
    virtual: bool
    models: tuple[GPUInfo, ...] = field(default_factory=tuple)
    gpu_memory_gb: float | None = None
    kind: str = VIRTUAL
    speed: float = 1.0

    def label(self) -> str:
        """A short description for tables, saying plainly when slots are virtual."""
        if self.virtual or not self.models:
            kind = "" if self.kind == VIRTUAL else f" of kind {self.kind}"
            return f"{self.gpus} virtual GPU slot(s) (CPU-backed){kind}"
        names = sorted({g.model for g in self.models})
        return f"{self.gpus} x {', '.join(names)} ({self.kind})"


def gpu_memory_gb(models: Sequence[GPUInfo], declared: float | None, virtual_gb: float) -> float:
    """The memory of each GPU slot of a node, in GB of 10^9 bytes as GPU makers count them (an
    "80 GB" card reads at least 80, though NVML reports less in MiB).

    Args:
        models: the node's GPUs as NVML reads them (empty: virtual slots).
        declared: what the node declares (:data:`MEMORY_RESOURCE`), which wins when given.
        virtual_gb: what a virtual slot has when the node declares nothing
            (``Settings.virtual_gpu_memory_gb``).
    """
    if declared:
        return float(declared)
    if models:  # a gang may get any of the node's GPUs: the smallest is what it can count on
        return min(g.memory_mb for g in models) * 2**20 / 1e9
    return virtual_gb


def probe_nvml() -> list[dict[str, Any]]:
    """NVML inventory of this host's GPUs; empty when there is no NVIDIA driver or GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: a CPU host, not an error
        return []
    try:
        out: list[dict[str, Any]] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            try:
                util: float | None = float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:  # some devices (MIG) do not report utilisation
                util = None
            out.append(
                {
                    "index": i,
                    "model": name.decode() if isinstance(name, bytes) else str(name),
                    "memory_mb": mem.total / 2**20,
                    "util_pct": util,
                }
            )
        return out
    finally:
        pynvml.nvmlShutdown()


class GPUPool:
    """Starts or joins Ray and reports the pool's nodes.

    Args:
        settings: ``ray_address`` to join a cluster; otherwise a local instance is started
            with ``virtual_gpus`` slots when this host has no NVIDIA GPU.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._probes: dict[str, list[dict[str, Any]]] = {}
        self._told: set[tuple[str, str]] = set()  # (node, problem) warnings given
        self._probed_at = 0.0
        self._pending: dict[str, Any] = {}  # node id -> the probe's object ref, not answered
        self.started_ray = False
        self._reaper: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Connect to Ray (or start it). Safe to call when Ray is already initialised.

        Raises:
            PoolError: Ray could not be started or reached.
        """
        import ray

        if ray.is_initialized():
            private_ray_token()
            return
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "configure_logging": False,
            "namespace": f"orch-{self.settings.namespace}",
        }
        try:
            if self.settings.ray_address:
                ray.init(address=self.settings.ray_address, **kwargs)
            else:
                if not probe_nvml():
                    kwargs["num_gpus"] = self.settings.virtual_gpus
                kwargs["num_cpus"] = max(2, os.cpu_count() or 2)
                # "local": always a new instance; a bare ray.init() would join any cluster
                # already running on this host (someone else's) when RAY_ADDRESS is unset.
                ray.init(address="local", **kwargs)
                self.started_ray = True
                # its agents outlive a SIGKILL of this process otherwise (orchestrator.reaper)
                from orchestrator.reaper import start_reaper

                self._reaper = start_reaper()
        except Exception as err:
            where = self.settings.ray_address or "a local Ray instance"
            raise PoolError(f"cannot start or join Ray at {where}: {err}") from err
        private_ray_token()

    def stop(self) -> None:
        """Shut down Ray if this pool started it."""
        import ray

        if self.started_ray and ray.is_initialized():
            ray.shutdown()
        self.started_ray = False
        if self._reaper is not None:  # its stdin closes: it ends (nothing of Ray is left)
            with contextlib.suppress(OSError):
                self._reaper.stdin.close()  # type: ignore[union-attr]
            self._reaper = None

    def nodes(self, refresh_probe_s: float = 30.0) -> list[NodeInfo]:
        """Alive nodes that offer GPU slots, in a stable order (by node id)."""
        import ray

        alive = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) > 0]
        alive.sort(key=lambda n: n["NodeID"])
        self._refresh_probes([n["NodeID"] for n in alive], refresh_probe_s)
        out = []
        for n in alive:
            probe = self._probes.get(n["NodeID"], [])
            models = tuple(GPUInfo(**g) for g in probe)
            declared = n["Resources"].get(MEMORY_RESOURCE)
            memory = gpu_memory_gb(models, declared, self.settings.virtual_gpu_memory_gb)
            kind = node_kind(n["Resources"], [g.model for g in models])
            for problem in kind.problems:  # an operator's declaration, told once per node
                if len(self._told) > 10_000:  # node ids churn: forget, and tell again
                    self._told.clear()
                if (n["NodeID"], problem) not in self._told:
                    self._told.add((n["NodeID"], problem))
                    log.warning("node %s %s", n["NodeID"], problem)
            out.append(
                NodeInfo(
                    node_id=n["NodeID"],
                    address=n.get("NodeManagerAddress", "?"),
                    gpus=int(n["Resources"]["GPU"]),
                    virtual=not probe,
                    models=models,
                    gpu_memory_gb=memory,
                    kind=kind.name,
                    speed=kind.speed,
                )
            )
        return out

    def _refresh_probes(self, node_ids: list[str], max_age_s: float) -> None:
        """Run the NVML probe on nodes not probed yet (waiting up to ``FIRST_PROBE_S`` for
        their answers) and, every ``max_age_s``, again on all of them without waiting: the
        answers are collected by later calls. A round never waits on a known node's probe, so
        a node that dies just after a probe was sent to it does not stall the scheduler."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._collect_probes(0.0)
        stale = time.monotonic() - self._probed_at > max_age_s
        todo = [n for n in node_ids if (stale or n not in self._probes) and n not in self._pending]
        if stale:
            self._probed_at = time.monotonic()
        if not todo:
            return
        probe = ray.remote(num_cpus=0)(probe_nvml)
        for node in todo:
            self._pending[node] = probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote()
        if any(n not in self._probes for n in todo):
            self._collect_probes(FIRST_PROBE_S, only={n for n in todo if n not in self._probes})

    def _collect_probes(self, wait_s: float, only: set[str] | None = None) -> None:
        """Take the probe answers that are in (waiting up to ``wait_s`` for those of ``only``,
        or of every pending node); a node that did not answer in time is shown without NVML
        data (virtual) until it does."""
        import ray

        if not self._pending:
            return
        waiting = {n: r for n, r in self._pending.items() if only is None or n in only}
        if wait_s > 0 and waiting:
            ray.wait(list(waiting.values()), num_returns=len(waiting), timeout=wait_s)
        done, _ = ray.wait(list(self._pending.values()), num_returns=len(self._pending), timeout=0)
        finished = set(done)
        for node, ref in list(self._pending.items()):
            if ref in finished:
                del self._pending[node]
                try:
                    self._probes[node] = ray.get(ref)
                except Exception as err:  # an unreachable node is shown without NVML data
                    log.warning("NVML probe on node %s failed: %s", node[:8], err)
                    self._probes[node] = []
            elif node in waiting and wait_s > 0:
                self._probes.setdefault(node, [])


def nodes_to_json(nodes: list[NodeInfo]) -> list[dict[str, Any]]:
    """Serialisable form of the pool view (published to Redis for `orch pool`)."""
    return [asdict(n) for n in nodes]


def private_ray_token() -> None:
    """Make Ray's token file readable by its owner only.

    Ray (2.59 on) turns token authentication on for a local instance and saves the token it
    generates in ``~/.ray/auth_token`` (or ``RAY_AUTH_TOKEN_PATH``), readable by every user
    (0644 in 2.60). With it, any process on the host could join the cluster and run code as
    the Ray workers' user; the sandboxed code of a team (``workers.sandbox``) must not.
    """
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    with contextlib.suppress(OSError):  # no token file: the token came from the environment
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
