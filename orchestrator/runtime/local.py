"""A runtime whose runs exist only in this process: a test decides when each starts and ends.

It lets the control loop be tested on a real store without Ray or torch: launches are recorded,
``STARTED`` is reported at once (or when the test says), and a run ends when the test calls
:meth:`LocalRuntime.end` (or, by default, as soon as it is asked to stop, having written its
checkpoint: a small record in the launch's checkpoint folder, as the runtime contract in
``tests/runtime/`` asks of every runtime). A service with an endpoint is resized in place
(:meth:`LocalRuntime.resize`): ``RESIZED`` is reported at once (or when the test says).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.pool import NodeInfo
from orchestrator.runtime.base import (
    EventKind,
    Launch,
    Outcome,
    OutcomeKind,
    RunEvent,
    in_place,
)

__all__ = ["LocalRuntime"]


class LocalRuntime:
    """A :class:`~orchestrator.runtime.base.Runtime` driven by its caller.

    Args:
        nodes: ``(node_id, gpus)`` per node (virtual slots).
        auto_start: report ``STARTED`` as soon as a gang is launched.
        stop_ends: a stop request ends the run at once (``STOPPED``, checkpoint written).
        resize_ends: a resize is done at once (``RESIZED``); else when :meth:`resized` says.

    Attributes:
        launches: every launch, in order.
        stops: job ids in the order stops were asked for.
        killed: those of them asked to stop at once (no step done).
        resizes: ``(job id, nodes)`` of every resize asked for, in order.
    """

    def __init__(
        self,
        nodes: Sequence[tuple[str, int] | NodeInfo],
        *,
        auto_start: bool = True,
        stop_ends: bool = True,
        resize_ends: bool = True,
    ) -> None:
        self._nodes = [
            n if isinstance(n, NodeInfo) else NodeInfo(n[0], "127.0.0.1", n[1], virtual=True)
            for n in nodes
        ]
        self.auto_start = auto_start
        self.stop_ends = stop_ends
        self.resize_ends = resize_ends
        self.on_event: Callable[[], None] | None = None  # its events come when a test says
        self.launches: list[Launch] = []
        self.stops: list[str] = []
        self.killed: list[str] = []
        self.resizes: list[tuple[str, tuple[str, ...]]] = []
        self._live: dict[str, Launch] = {}
        self._resizing: dict[str, tuple[str, ...]] = {}
        self._events: list[RunEvent] = []

    # ---- the Runtime protocol --------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """See :meth:`Runtime.nodes`."""
        return list(self._nodes)

    def set_nodes(self, nodes: Sequence[NodeInfo]) -> None:
        """The pool from now on (a node leaves or joins, as a test says)."""
        self._nodes = list(nodes)

    def launch(self, launch: Launch) -> None:
        """See :meth:`Runtime.launch`."""
        if launch.job_id in self._live:
            raise RuntimeError(f"{launch.job_id} launched twice")
        self.launches.append(launch)
        self._live[launch.job_id] = launch
        if self.auto_start:
            self.start(launch.job_id)

    def stop(self, job_id: str, *, at_once: bool = False) -> None:
        """See :meth:`Runtime.stop` (``at_once`` is recorded in :attr:`killed`)."""
        if job_id not in self._live:
            return
        self.stops.append(job_id)
        if at_once:
            self.killed.append(job_id)
        if self.stop_ends:
            if not at_once:
                _checkpoint(self._live[job_id])
            self.end(job_id, OutcomeKind.STOPPED, "stopped on request", {"status": "stopped"})

    def resize(self, job_id: str, nodes: tuple[str, ...]) -> None:
        """See :meth:`Runtime.resize`."""
        launch = self._live.get(job_id)
        if launch is None or not in_place(launch):
            raise ValueError(f"{job_id}: no run of a service with an endpoint to resize")
        if job_id in self._resizing:
            raise ValueError(f"{job_id}: a resize is still under way")
        self.resizes.append((job_id, tuple(nodes)))
        self._resizing[job_id] = tuple(nodes)
        if self.resize_ends:
            self.resized(job_id)

    def poll(self) -> list[RunEvent]:
        """See :meth:`Runtime.poll`."""
        events, self._events = self._events, []
        return events

    def alive(self) -> set[str]:
        """See :meth:`Runtime.alive`."""
        return set(self._live)

    def warm_workers(self) -> dict[str, tuple[int, int]]:
        """See :meth:`Runtime.warm_workers`: local runs keep no warm workers."""
        return {}

    def close(self) -> None:
        """See :meth:`Runtime.close` (nothing is kept between runs here)."""

    # ---- driving runs ----------------------------------------------------------------------

    def start(self, job_id: str) -> None:
        """Report that the job's workers are up."""
        launch = self._live[job_id]
        self._events.append(RunEvent(job_id, EventKind.STARTED, time.time(), launch.serial))

    def resized(self, job_id: str) -> None:
        """Report that the job's resize is done: its run holds the nodes it was resized to."""
        nodes = self._resizing.pop(job_id)
        launch = self._live[job_id] = dataclasses.replace(self._live[job_id], nodes=nodes)
        self._events.append(
            RunEvent(job_id, EventKind.RESIZED, time.time(), launch.serial, nodes=nodes)
        )

    def end(
        self,
        job_id: str,
        kind: OutcomeKind = OutcomeKind.FINISHED,
        message: str = "",
        result: dict[str, Any] | None = None,
    ) -> None:
        """End the job's run with this outcome (its GPUs are free from now on)."""
        launch = self._live.pop(job_id)
        self._resizing.pop(job_id, None)
        outcome = Outcome(kind, message, dict(result or {}))
        self._events.append(RunEvent(job_id, EventKind.ENDED, time.time(), launch.serial, outcome))


def _checkpoint(launch: Launch) -> None:
    """What a local run keeps on a graceful stop: a record of the stop in the launch's
    checkpoint folder (a local path; a URL's folder is left alone: local runs touch no remote
    storage). A local run has no model state: the record stands for its checkpoint."""
    if launch.checkpoint_dir.is_url:
        return
    folder = Path(launch.checkpoint_dir.uri)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"job_id": launch.job_id, "launch": launch.serial, "at": time.time()}
    (folder / f"local-stop-{launch.serial}.json").write_text(json.dumps(record))
