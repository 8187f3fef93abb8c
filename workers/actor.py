"""The Ray worker actor: one per rank of a running job.

``WorkerActor`` is a plain class; the orchestrator wraps it with ``ray.remote(...)`` (with
``max_concurrency=2`` so :meth:`WorkerActor.request_stop` runs while :meth:`WorkerActor.run`
is busy) and places one per GPU of the job's placement group. Ray and torch are imported only
inside methods, so this module is cheap to import in the control plane.

Metrics leave through ``reporter_factory``: a picklable callable, supplied by the orchestrator,
that returns the report sink (for instance one that writes to Redis). Output leaves the same way:
``log_sink_factory(rank)`` returns the sink of that rank's captured stdout and stderr (see
:mod:`workers.logs`). The data plane never talks to Redis itself.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.logs import LogSink

__all__ = ["WorkerActor"]

ReporterFactory = Callable[[], Callable[[dict[str, Any]], None]]
LogSinkFactory = Callable[[int], "LogSink"]


class WorkerActor:
    """Runs the harness for one rank of one job and relays stop requests to it.

    Args:
        job_id: the job this rank belongs to (added to every report).
        rank: data-parallel rank.
        world_size: number of ranks of the job.
        reporter_factory: builds the report sink on rank 0 (other ranks do not report, which
            keeps one writer per fact); ``None`` disables reporting.
        report_every_s: minimum seconds between two reports.
        log_sink_factory: builds, for a rank, the sink of its captured stdout and stderr (every
            rank has one); ``None`` leaves output uncaptured.
        num_threads: CPU threads for torch (1 per virtual GPU slot on a CPU-only pool).
    """

    def __init__(
        self,
        job_id: str,
        rank: int,
        world_size: int,
        *,
        reporter_factory: ReporterFactory | None = None,
        report_every_s: float = 1.0,
        log_sink_factory: LogSinkFactory | None = None,
        num_threads: int | None = None,
    ) -> None:
        self.job_id = job_id
        self.rank = rank
        self.world_size = world_size
        self._reporter_factory = reporter_factory
        self._report_every_s = report_every_s
        self._log_sink_factory = log_sink_factory
        self._num_threads = num_threads
        self._stop = threading.Event()

    def node_address(self) -> tuple[str, int]:
        """This node's IP and a free TCP port; rank 0's answer becomes ``tcp://ip:port``."""
        import ray.util

        from workers.distributed import find_free_port

        return ray.util.get_node_ip_address(), find_free_port()

    def device_facts(self) -> dict[str, object]:
        """This rank's device (``workers.devices.device_facts``): the tuner shapes its search
        space by it, since the control plane may see no GPU."""
        from workers.devices import device_facts

        return device_facts()

    def run(
        self,
        config_dict: dict[str, Any],
        init_method: str | None,
        checkpoint_dir: str | None,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> dict[str, Any]:
        """Run the harness for ``config_dict`` (see ``HarnessConfig.from_dict``).

        ``rank`` and ``world_size`` override the actor's own for this run: a tuning gang runs
        trials on a prefix of its actors (a 2-GPU trial on ranks 0 and 1 of a 4-GPU gang).

        Returns:
            ``RunResult.to_dict()``.

        What the run prints (its warnings, and its traceback if it fails) goes to the rank's log
        sink as well as to the process's own streams, when there is a log sink.

        Raises:
            HarnessConfigError, WorkloadError, CheckpointError: the job cannot run as given.
        """
        rank = self.rank if rank is None else rank
        if self._log_sink_factory is None:
            return self._run(config_dict, init_method, checkpoint_dir, rank, world_size)
        from workers.logs import OutputCapture

        with OutputCapture(self._log_sink_factory(rank)):
            try:
                return self._run(config_dict, init_method, checkpoint_dir, rank, world_size)
            except BaseException:
                traceback.print_exc()  # to the captured stderr: Ray reports it elsewhere
                raise

    def _run(
        self,
        config_dict: dict[str, Any],
        init_method: str | None,
        checkpoint_dir: str | None,
        rank: int,
        world_size: int | None,
    ) -> dict[str, Any]:
        from workers.config import HarnessConfig
        from workers.harness import Harness

        _release_memory()  # what the last run's traceback held is unreferenced by now
        report = self._make_report()
        harness = Harness(
            HarnessConfig.from_dict(config_dict),
            rank=rank,
            world_size=self.world_size if world_size is None else world_size,
            init_method=init_method,
            checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
            report=report,
            report_every_s=self._report_every_s,
            should_stop=self._stop.is_set,
            num_threads=self._num_threads,
        )
        try:
            return harness.run().to_dict()
        finally:
            _release_memory()

    def request_stop(self) -> None:
        """Ask the running harness to checkpoint and return at the next step (idempotent;
        a request made before :meth:`run` starts stops it before its first step)."""
        self._stop.set()

    def _make_report(self) -> Callable[[dict[str, Any]], None] | None:
        if self.rank != 0 or self._reporter_factory is None:
            return None
        sink = self._reporter_factory()
        job_id = self.job_id

        def report(data: dict[str, Any]) -> None:
            sink({"job_id": job_id, **data})

        return report


def _release_memory() -> None:
    """Free what a run left behind (an OOM leaves tensors referenced from its traceback), so
    the next run in this actor (a tuning gang runs one trial after another) starts clean."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
