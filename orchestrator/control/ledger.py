"""Who holds which GPUs: the loop's runs, physically and as far as the policy is concerned.

The two views differ while runs stop: a preempted run holds its GPUs until its checkpoint is
written and its gang is gone, but the policy already counts them as free (it gave them away);
a resizing run holds its old GPUs and, as far as the policy goes, its new ones (a service
resized in place too: until its runtime says the replicas it drained gave their GPUs back). A
decision is applied (reserved) only when the GPUs it takes are physically free; otherwise it
waits a round.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.control.transitions import StopReason
from orchestrator.pool import NodeInfo
from orchestrator.runtime.base import Launch
from orchestrator.store.states import HOLDING
from policies import NodeView

__all__ = ["ACTIVE", "Run", "physically_free", "policy_nodes", "reserve"]

ACTIVE = HOLDING
"""States of a job that a loop holds GPUs for."""


@dataclass
class Run:
    """The loop's record of a run it launched (the runtime does the running).

    Attributes:
        launch: what was launched, where.
        launched_at: when (wall clock).
        started: its workers are up.
        stop: why the loop asked it to stop (``None``: it did not).
        stop_note: the reason given with the stop.
        resize_to: the GPUs a resizing run restarts on, or a service resized in place holds
            once its runtime reports the resize done (:meth:`resized`).
        stepped: its workers reported a first step (a run that has not is stopped at once).
        retune: what the SLA guard measured when it stopped the run to re-tune it (the tuned
            config and its measured figures), written with the job's requeue.
        gpu_s: GPU-seconds of the GPUs it held before its last resize in place.
        resized_at: when it last finished a resize in place (``None``: never).
        most_gpus: the most GPUs it held at once.
    """

    launch: Launch
    launched_at: float
    started: bool = False
    stop: StopReason | None = None
    stop_note: str = ""
    resize_to: tuple[str, ...] | None = None
    stepped: bool = False
    retune: dict[str, Any] | None = None
    gpu_s: float = 0.0
    resized_at: float | None = None
    most_gpus: int = 0

    def __post_init__(self) -> None:
        self.most_gpus = max(self.most_gpus, len(self.launch.nodes))

    @property
    def job_id(self) -> str:
        """The job."""
        return self.launch.job_id

    @property
    def nodes(self) -> tuple[str, ...]:
        """The node of each GPU it holds."""
        return self.launch.nodes

    def held_gpu_s(self, at: float) -> float:
        """GPU-seconds it held from its launch to ``at``, its GPUs before each resize in place
        counted for as long as it held them."""
        since = self.launched_at if self.resized_at is None else self.resized_at
        return self.gpu_s + max(0.0, at - since) * len(self.nodes)

    def resized(self, launch: Launch, at: float) -> None:
        """A resize in place is done at ``at``: it holds ``launch.nodes`` from now on."""
        self.gpu_s = self.held_gpu_s(at)
        self.resized_at = at
        self.launch = launch
        self.resize_to = None
        self.most_gpus = max(self.most_gpus, len(launch.nodes))

    @property
    def leaving(self) -> bool:
        """Its GPUs are given away: preempted, cancelled or shutting down (not resizing)."""
        return self.stop is not None and self.stop is not StopReason.RESIZE

    @property
    def policy_nodes(self) -> tuple[str, ...]:
        """The GPUs it holds as far as the policy goes (its new ones while resizing)."""
        return self.resize_to or self.launch.nodes


def physically_free(nodes: Sequence[NodeInfo], runs: Iterable[Run]) -> dict[str, int]:
    """GPUs per node that no run holds now: a resizing run holds its old and new GPUs."""
    free = {n.node_id: n.gpus for n in nodes}
    for run in runs:
        for node, n in (Counter(run.nodes) | Counter(run.resize_to or ())).items():
            free[node] = free.get(node, 0) - n
    return free


def policy_nodes(nodes: Sequence[NodeInfo], runs: Iterable[Run]) -> tuple[NodeView, ...]:
    """The pool as the policy sees it: runs that are leaving hold nothing."""
    held = Counter(n for run in runs if not run.leaving for n in run.policy_nodes)
    return tuple(
        NodeView(
            n.node_id, n.gpus, n.gpus - held.get(n.node_id, 0), n.gpu_memory_gb, n.kind, n.speed
        )
        for n in nodes
    )


def reserve(free: dict[str, int], nodes: Iterable[str]) -> bool:
    """Take ``nodes`` from ``free`` if every one is physically free (else take nothing)."""
    need = Counter(nodes)
    if any(free.get(node, 0) < n for node, n in need.items()):
        return False
    for node, n in need.items():
        free[node] -= n
    return True
