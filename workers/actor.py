"""The Ray worker actor: one per rank of a running job.

``WorkerActor`` is a plain class; the orchestrator wraps it with ``ray.remote(...)`` (with
``max_concurrency=2`` so :meth:`WorkerActor.request_stop` runs while :meth:`WorkerActor.run`
is busy) and places one per GPU of the job's placement group. Ray and torch are imported only
inside methods, so this module is cheap to import in the control plane.

A warm worker pool (``orchestrator.runtime.warm``) starts actors before any job needs them:
:meth:`WorkerActor.warm_up` imports torch and the harness and runs one tiny step, and
:meth:`WorkerActor.bind` later gives the warm actor to a job (its reports then say
``warm_start``). A job's actor, warm or fresh, runs one job and is killed after it.

Metrics leave through ``reporter_factory``: a picklable callable, supplied by the orchestrator,
that returns the report sink (for instance one that writes to Redis). Output leaves the same way:
``log_sink_factory(rank)`` returns the sink of that rank's captured stdout and stderr (see
:mod:`workers.logs`). The data plane never talks to Redis itself.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.config import HarnessConfig
    from workers.contain import Limits
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
            keeps one writer per fact); ``None`` disables reporting (a service's replica may
            be handed one later: :meth:`hand_reports`).
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
        self._warm = False  # warmed up before it was given a job (see warm_up)
        self._set_up = threading.Event()  # a run's harness is built (see is_set_up)
        self._working_dir: bytes | None = None  # a command job's archive (see run)
        self._requests: Any = None  # a service endpoint's queue, handed to its run
        self._sink_of: ReporterFactory | None = None  # the factory _sink_now was built by
        self._sink_now: Callable[[dict[str, Any]], None] | None = None
        _close_ray_logs()

    def warm_up(self, imports: tuple[str, ...] = (), *, gpuless: bool = False) -> dict[str, float]:
        """Get this process ready for a job before there is one: import torch, the harness
        and the built-in workloads, and run one tiny training step on this rank's device
        (autograd, the optimizer and CUDA initialise lazily, on a first step). That is what
        takes a fresh worker seconds (``BENCHMARKS.md``: 2.3 of a 3.1 s start); a job handed
        this actor afterwards (:meth:`bind`) starts its first step at once.

        Args:
            imports: more modules to import now: those the orchestrator's report and log
                sinks are unpickled into when :meth:`bind` receives them.
            gpuless: this actor holds no GPU yet (*GPU-less*, kept where every GPU is busy):
                the step runs on the CPU and CUDA stays uninitialised, so that :meth:`bind`
                can still choose the GPU this process will see.

        Returns:
            ``{"pid": ..., "warm_up_s": ...}`` of this worker process.
        """
        import importlib

        from workers.config import HarnessConfig
        from workers.harness import Harness
        from workers.workloads.registry import BUILTIN_WORKLOADS

        began = time.perf_counter()
        if gpuless:
            # torch.cuda.is_available() asks NVML, which reads CUDA_VISIBLE_DEVICES at each
            # call, rather than the CUDA runtime, which would fix the devices it sees for good
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        for name in (*(f"workers.workloads.{n}" for n in BUILTIN_WORKLOADS), *imports):
            importlib.import_module(name)
        config = HarnessConfig(
            workload="mlp",
            workload_args={"in_features": 8, "hidden": 8},
            micro_batch=2,
            steps=2,  # the second step runs the optimizer's steady-state path
            warmup_steps=1,
        )
        Harness(config, device="cpu" if gpuless else None, num_threads=self._num_threads).run()
        _release_memory()
        # What is alive now (torch, the modules) lives as long as the process: out of the
        # collector's reach, the collection a run starts with scans only what came after
        # (a full collection took ~0.18 s of a warm start on a 2-core dev machine)
        gc.freeze()
        self._warm = True
        return {"pid": os.getpid(), "warm_up_s": time.perf_counter() - began}

    def bind(
        self,
        job_id: str,
        *,
        reporter_factory: ReporterFactory | None,
        log_sink_factory: LogSinkFactory | None,
        num_threads: int | None,
        gpu_ids: tuple[str, ...] | None = None,
    ) -> int:
        """Give this actor (warmed up, no job yet) to rank 0 of a job's 1-GPU gang: what a
        fresh actor gets when it is made. Returns this worker's pid.

        Args:
            gpu_ids: for a GPU-less warm worker (see :meth:`warm_up`), the GPUs of the job's
                placement group bundle, as Ray gives them to an actor placed there: this
                process sees only those from now on (``CUDA_VISIBLE_DEVICES``, which CUDA reads
                once, when it initialises).

        Raises:
            RuntimeError: ``gpu_ids`` given, but CUDA is initialised in this process already
                (it would keep seeing the devices it saw then).
        """
        if gpu_ids is not None:
            import torch

            if torch.cuda.is_initialized():
                raise RuntimeError("CUDA is initialised already: this worker cannot take a GPU")
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
        self.job_id = job_id
        self.rank, self.world_size = 0, 1
        self._reporter_factory = reporter_factory
        self._log_sink_factory = log_sink_factory
        self._num_threads = num_threads
        return os.getpid()

    def is_set_up(self) -> bool:
        """Whether a run has built its harness (torch imported, model built): until then the
        orchestrator warms no other worker on this host, whose start would compete with this
        one for the host's CPUs. Answers at once (it runs beside :meth:`run`)."""
        return self._set_up.is_set()

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
        fence: Callable[[], bool] | None = None,
        run_tag: str = "",
        working_dir: bytes | None = None,
        requests: Any = None,
    ) -> dict[str, Any]:
        """Run the harness for ``config_dict`` (see ``HarnessConfig.from_dict``).

        ``rank`` and ``world_size`` override the actor's own for this run: a tuning gang runs
        trials on a prefix of its actors (a 2-GPU trial on ranks 0 and 1 of a 4-GPU gang).
        ``fence`` and ``run_tag``: see :class:`workers.harness.Harness` (rank 0 gets the
        fence; a report is written only while it holds).

        A team's code (an entry point, not a built-in) runs in a sandboxed child process as an
        unprivileged user (:mod:`workers.sandbox`); this actor relays its reports, output and
        stop requests. A command job's script runs the same way (:mod:`workers.command`),
        from ``working_dir``, its archive as stored (checked against its digest there).
        ``requests``: a service endpoint's request queue (``serve.endpoint``), held by this
        trusted worker (it carries the store's address): its run takes requests from it.

        Returns:
            ``RunResult.to_dict()``.

        What the run prints (its warnings; a team's own code, the traceback of its failure)
        goes to the rank's log sink as well as to the process's own streams, when there is a
        log sink. A failure ends the log with one line saying why (``[orch] the run failed:
        ...``), never this worker's traceback: its frames name the server's install paths,
        and the team has its own code's frames and the reason (Ray reports the whole error
        to the orchestrator).

        Raises:
            HarnessConfigError, WorkloadError, CheckpointError: the job cannot run as given.
        """
        rank = self.rank if rank is None else rank
        args = (config_dict, init_method, checkpoint_dir, rank, world_size, fence, run_tag)
        self._working_dir = working_dir
        self._requests = requests
        if self._log_sink_factory is None:
            return self._run(*args)
        from workers.logs import OutputCapture

        with OutputCapture(self._log_sink_factory(rank)):
            try:
                return self._run(*args)
            except BaseException as err:
                from workers.errors import failure_line

                print(f"[orch] the run failed: {failure_line(err)}", file=sys.stderr)
                raise

    def _run(
        self,
        config_dict: dict[str, Any],
        init_method: str | None,
        checkpoint_dir: str | None,
        rank: int,
        world_size: int | None,
        fence: Callable[[], bool] | None,
        run_tag: str,
    ) -> dict[str, Any]:
        from workers.config import HarnessConfig
        from workers.sandbox import needs_sandbox, run_sandboxed

        _release_memory()  # what the last run's traceback held is unreferenced by now
        report = self._make_report(fence)
        world = self.world_size if world_size is None else world_size
        config = HarnessConfig.from_dict(config_dict)
        if config.command is not None:
            self._set_up.set()  # the script builds its own model: nothing to wait for here
            return self._run_command(config, init_method, checkpoint_dir, rank, world, fence)
        if needs_sandbox(config.workload):
            self._set_up.set()  # the child builds its harness: nothing to wait for here
            return run_sandboxed(
                config_dict,
                job_id=self.job_id,
                rank=rank,
                world_size=world,
                init_method=init_method,
                checkpoint_dir=checkpoint_dir or None,
                report=report,
                report_every_s=self._report_every_s,
                should_stop=self._stop.is_set,
                fence=fence or (lambda: True),
                num_threads=self._num_threads,
                run_tag=run_tag,
                limits=_limits(config, world),
                requests=self._requests,
            )
        from workers.harness import Harness

        _freeze_imports()
        harness = Harness(
            config,
            rank=rank,
            world_size=world,
            init_method=init_method,
            checkpoint_dir=checkpoint_dir or None,  # a path or a URL, kept as given
            report=report,
            report_every_s=self._report_every_s,
            should_stop=self._stop.is_set,
            num_threads=self._num_threads,
            fence=fence,
            run_tag=run_tag,
            requests=self._requests,
        )
        self._set_up.set()
        try:
            return harness.run().to_dict()
        finally:
            _release_memory()

    def _run_command(
        self,
        config: HarnessConfig,
        init_method: str | None,
        checkpoint_dir: str | None,
        rank: int,
        world: int,
        fence: Callable[[], bool] | None,
    ) -> dict[str, Any]:
        """A command job's rank (:mod:`workers.command`), from the archive :meth:`run` got."""
        from workers.command import run_command
        from workers.errors import CommandError

        if self._working_dir is None:
            raise CommandError("the job's working directory did not reach this worker")
        return run_command(
            config.to_dict(),
            job_id=self.job_id,
            rank=rank,
            world_size=world,
            init_method=init_method,
            checkpoint_dir=checkpoint_dir or None,
            report=self._make_report(fence),
            report_every_s=self._report_every_s,
            should_stop=self._stop.is_set,
            fence=fence or (lambda: True),
            num_threads=self._num_threads,
            archive=self._working_dir,
            limits=_limits(config, world),
        )

    def request_stop(self) -> None:
        """Ask the running harness to checkpoint and return at the next step (idempotent;
        a request made before :meth:`run` starts stops it before its first step)."""
        self._stop.set()

    def hand_reports(self, reporter_factory: ReporterFactory | None) -> None:
        """Write the job's reports with this sink from now on (``None``: write none): a
        service's replicas are worlds of one, and only one of them reports; when it is
        removed, another takes over (``orchestrator.runtime.service_run``). Answers at once (it
        runs beside :meth:`run`)."""
        self._reporter_factory = reporter_factory

    def _sink(self) -> Callable[[dict[str, Any]], None] | None:
        """The report sink of the factory this actor holds now (built once per factory)."""
        factory = self._reporter_factory
        if factory is None:
            return None
        if self._sink_of is not factory:
            self._sink_of, self._sink_now = factory, factory()
        return self._sink_now

    def _make_report(
        self, fence: Callable[[], bool] | None
    ) -> Callable[[dict[str, Any]], None] | None:
        # a service's replica reports while it holds a sink, which may be handed to it while
        # it serves (hand_reports): it gets a report function even without one now
        if self.rank != 0 or (self._reporter_factory is None and self._requests is None):
            return None
        job_id, warm = self.job_id, self._warm

        # the GPUs this process sees: Ray's choice for a fresh actor, or bound (GPU-less worker)
        devices = os.environ.get("CUDA_VISIBLE_DEVICES")

        def report(data: dict[str, Any]) -> None:
            sink = self._sink()
            if sink is None:
                return  # a service's replica that does not report (now)
            if fence is not None and not fence():
                return  # deposed: the job's reports are a newer run's
            # warm_start: this run skipped the worker's start (a warm pool's actor)
            sink({**data, "job_id": job_id, "warm_start": warm, "visible_devices": devices})

        return report


def _limits(config: HarnessConfig, world: int) -> Limits:
    """What a run of a team's code may use here: the job's memory and network (a gang of more
    than one rank keeps the network its ranks meet over), the operator's bounds."""
    from workers.contain import limits_from_env

    return limits_from_env(config.memory_gb, config.network or world > 1, _node_gpu_slots())


@functools.cache
def _node_gpu_slots() -> int | None:
    """GPU slots of this worker's node (Ray's view), which share its memory; ``None`` when
    not in Ray."""
    try:
        import ray

        if not ray.is_initialized():  # ray.nodes() would start or join a cluster
            return None
        node = ray.get_runtime_context().get_node_id()
        for n in ray.nodes():
            if n.get("NodeID") == node:
                return int(n.get("Resources", {}).get("GPU", 0)) or None
    except Exception:  # not in a Ray worker: the whole host
        return None
    return None


def _close_ray_logs() -> None:
    """Keep the Ray session folder of this node (its logs, which hold every job's output,
    and its caches) to the worker's own user: ``0700`` on the session folder found through
    this process's log file, when the worker owns it, and no one else's write on the folder
    of sessions (Ray makes it 0777: a team's uid could rename or replace what is in it).
    A team's uid then reads no other job's log lines; the job's own reach its owner through
    the store and the API."""
    with contextlib.suppress(OSError):
        log = os.path.realpath("/proc/self/fd/1")
        session = os.path.dirname(os.path.dirname(log))  # .../session_*/logs/worker-*.out
        in_logs = os.path.basename(os.path.dirname(log)) == "logs" and "session" in session
        if in_logs and os.stat(session).st_uid == os.geteuid():
            os.chmod(session, 0o700)
            sessions = os.path.dirname(session)
            st = os.stat(sessions)
            if st.st_uid == os.geteuid() and st.st_mode & 0o022:
                os.chmod(sessions, st.st_mode & 0o7755)


@functools.cache
def _freeze_imports() -> None:
    """Once per process, after the first run's imports: what is alive then (torch, the
    modules) lives as long as the process, so it is put out of the collector's reach, as a warm
    worker does after its warm-up; each run's first collection (its memory peak is its own)
    then scans only what came after (0.2-0.3 s over torch's heap otherwise)."""
    gc.collect()
    gc.freeze()


def _release_memory() -> None:
    """Free what a run left behind (an OOM leaves tensors referenced from its traceback), so
    the next run in this actor (a tuning gang runs one trial after another) starts clean.

    A process that never imported torch (the worker of a sandboxed job: its child builds the
    model) has no torch memory to free, and importing torch here would add its import, seconds
    on a busy host, to the start of every such run (a service's relaunch among them)."""
    gc.collect()
    torch = sys.modules.get("torch")
    # not is_available(): that would initialise CUDA in a GPU-less worker
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
