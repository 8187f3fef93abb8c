"""Command mode: a team's own script, run by the worker in its working directory.

A job ``workload: {command: [python, train.py, ...]}`` ships its working directory with the
submission; the runtime hands its archive to every rank of the gang (see
``orchestrator.runtime.workdir``). For each rank, :func:`run_command`

- checks the archive against the job's digest and unpacks it into a private run folder of the
  job's sandbox user (:func:`workers.sandbox.sandbox`: the uid it claims for the job on this
  host when the worker is root, 0700, the run's cgroup; the script cannot read the data
  directory, the Redis password, ``~/.ray``, another job's checkpoints or code, as for an
  ``entry:`` workload, and nothing it starts outlives the run);
- runs the command there as that user, with the sandbox's scrubbed environment plus the job
  context (``ORCH_JOB_CONTEXT``, ``ORCH_JOB_FD``, ``ORCH_JOB_CONTROL_FD``: see
  :mod:`workers.job`), the variables ``torchrun`` gives a rank (:func:`torchrun_env`), so a
  script written for ``torchrun`` runs unchanged, and ``ORCH_CHECKPOINT_DIR``, the job's
  checkpoint folder, for such a script to keep its own checkpoints in; ``python`` is the
  worker's own interpreter (torch, ``workers.job``), and ``python X ...`` runs through
  :mod:`workers.launch`, which installs the step hook that measures a script that never calls
  ``job.report``;
- turns the script's step reports into the harness's reports (:mod:`workers.steps`), relays
  stop requests and a lost fence to it, and relays its output to the job's log; a script that
  never asks ``job.should_stop()`` (a torchrun script) cannot stop when asked, so a stop ends
  its processes (``SIGTERM``, ``SIGKILL`` after :data:`TERM_GRACE_S`), as torchrun's agent
  does to restart its workers: the run is "stopped", and the next run starts the script again
  (from its own checkpoint, if it keeps one);
- measures the run's own peak memory, of every process it started (:mod:`workers.run_memory`:
  the run's cgroup's peak, else its process tree sampled), not the worker's other runs';
- ends with the harness's ``RunResult``, or a :class:`~workers.errors.CommandError` that says
  what went wrong: the command was not found or not executable, it exited with an error (its
  code and last lines of output), or it sent no step report within ``first_report_s``; or an
  ``OutOfMemoryError`` when the kernel killed one of its processes for its memory
  (:meth:`workers.sandbox.RunSandbox.check`), which the tuner prunes as a CUDA OOM.

What the script checkpoints is its own, in ``ctx.checkpoint_dir`` (the job's checkpoint folder,
kept across runs); the worker keeps beside it (``<folder>.command.json``, where the script
cannot write) the step of its last finished checkpoint and the measurements up to it, so a
resumed run is told where to resume and continues the job's percentiles and throughput.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from workers.contain import Limits
from workers.errors import CommandError
from workers.job import CONTEXT_ENV, CONTROL_FD_ENV, REPORT_FD_ENV
from workers.run_memory import RunMemory
from workers.steps import CommandSteps
from workers.workdir import unpack_verified

if TYPE_CHECKING:
    from workers.sandbox import RunSandbox

__all__ = ["CHECKPOINT_DIR_ENV", "run_command"]

PYTHONS = ("python", "python3")
TAIL_LINES = 20
"""Lines of the script's output quoted when it fails."""
_DRAIN_S = 3.0
"""How long the worker still reads the script's reports after it exited."""
TERM_GRACE_S = 10.0
"""How long a script ended by a stop has between ``SIGTERM`` and ``SIGKILL``."""
CHECKPOINT_DIR_ENV = "ORCH_CHECKPOINT_DIR"
"""The job's checkpoint folder (``ctx.checkpoint_dir``) as a variable, for a script that never
reads its job context (a torchrun script): kept across the job's runs, so a script that saves
there and loads what it finds resumes after a preemption."""

Report = Callable[[dict[str, Any]], None]


def run_command(
    config: dict[str, Any],
    *,
    job_id: str,
    rank: int,
    world_size: int,
    init_method: str | None,
    checkpoint_dir: str | None,
    report: Report | None,
    report_every_s: float,
    should_stop: Callable[[], bool],
    fence: Callable[[], bool],
    num_threads: int | None,
    archive: bytes,
    time_limit_s: float | None = None,
    limits: Limits | None = None,
) -> dict[str, Any]:
    """Run one rank of a command job (``config``: a ``HarnessConfig`` dict with ``command``);
    return its ``RunResult.to_dict()``. ``archive``: the job's working directory as stored
    (checked against ``command.working_dir``, its digest, then unpacked for this run alone).
    ``time_limit_s``: the script (and what it started) is killed past this many seconds and
    the run fails (a tuning trial's bound: a script that ignores its step budget and stop
    requests must not hold the tuner). ``limits``: what its processes may use
    (:class:`workers.contain.Limits`).

    Raises:
        CommandError: see the module doc.
    """
    from workers.sandbox import sandbox

    if checkpoint_dir is not None and "://" in checkpoint_dir:
        raise CommandError(
            "a command job keeps its checkpoints in a local (or shared) folder; "
            f"the checkpoint store {checkpoint_dir!r} is a URL"
        )
    digest = config["command"].get("working_dir")
    if not digest:
        raise CommandError("the job names no working directory (workload.working_dir)")
    ckpt = Path(checkpoint_dir) if checkpoint_dir else None
    with sandbox(job_id, rank, world_size, limits, ckpt, "orch-cmd-") as box:
        work = box.home / "work"
        work.mkdir()
        unpack_verified(archive, digest, work)  # checked against the job's digest first
        keep = ckpt is not None
        if ckpt is None:  # no job folder (a test, a trial): a private one, gone after the run
            ckpt = box.home / "checkpoints"
            ckpt.mkdir()
        box.give(box.home)
        run = _CommandRun(config, job_id, rank, world_size, init_method, ckpt, report, keep)
        run.time_limit_s = time_limit_s
        return run.execute(box, work, num_threads, report_every_s, should_stop, fence)


class _CommandRun:
    """One rank's run of the command (kept apart so :func:`run_command` stays a recipe)."""

    def __init__(
        self,
        config: dict[str, Any],
        job_id: str,
        rank: int,
        world_size: int,
        init_method: str | None,
        ckpt: Path,
        report: Report | None,
        keep: bool,
    ) -> None:
        command = config["command"]
        self.argv = [str(a) for a in command["argv"]]
        self.first_report_s = float(command.get("first_report_s", 300.0))
        self.ckpt = ckpt
        # beside the job's folder, in the worker's checkpoint root, where the script cannot
        # write (never in a folder of the job's user: root would follow a link planted there);
        # read by every rank, written by rank 0 alone (as the harness's checkpoint record is)
        self.state_file = ckpt.with_name(ckpt.name + ".command.json") if keep else None
        self.writes_state = rank == 0
        self.report = report
        state = _read_state(self.state_file)
        self.context = {
            "job_id": job_id,
            "rank": rank,
            "world_size": world_size,
            "init_method": init_method,
            **{
                k: config.get(k)
                for k in ("micro_batch", "grad_accum", "precision", "steps", "duration_s")
            },
            **{k: config.get(k) for k in ("warmup_steps", "checkpoint_every", "seed")},
            **{k: config.get(k) for k in ("sharding", "activation_checkpointing", "compile")},
            "checkpoint_dir": str(ckpt),
            "resume": state is not None,
            "resume_step": state["checkpoint_step"] if state else None,
            "settings": dict(command.get("settings") or {}),
            "args": dict(config.get("workload_args") or {}),
            "loader_settings": dict(config.get("loader") or {}),
        }
        self.steps = CommandSteps(
            warmup_steps=int(config.get("warmup_steps") or 0),
            global_batch=int(config["micro_batch"]) * int(config["grad_accum"]) * world_size,
            total_steps=config.get("steps"),
            rank=rank,
            world_size=world_size,
            state=state,
        )
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.time_limit_s: float | None = None
        self.stopped = self.fenced = False
        self.polls_stop = False  # whether the script asks job.should_stop() (else: SIGTERM)
        self.init_method, self.rank, self.world_size = init_method, rank, world_size
        self.memory: RunMemory | None = None

    def execute(
        self,
        box: RunSandbox,
        work: Path,
        num_threads: int | None,
        report_every_s: float,
        should_stop: Callable[[], bool],
        fence: Callable[[], bool],
    ) -> dict[str, Any]:
        from workers.sandbox import _child_env

        home, uid = box.home, box.uid
        context_file = home / "context.json"
        context_file.write_text(json.dumps(self.context))
        if uid is not None:
            os.chown(context_file, uid, uid)
        env = _child_env(home, uid, num_threads)
        # `python` is the worker's own interpreter, first on the search path for the script's
        # own subprocesses too (it has torch and workers.job)
        env["PATH"] = os.pathsep.join((os.path.dirname(sys.executable), env.get("PATH", "")))
        msg_r, msg_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        env.update(
            {CONTEXT_ENV: str(context_file), REPORT_FD_ENV: str(msg_w), CONTROL_FD_ENV: str(ctl_r)}
        )
        env.update(torchrun_env(self.rank, self.world_size, self.init_method))
        env[CHECKPOINT_DIR_ENV] = str(self.ckpt)
        argv = _interpreted(self.argv)
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(msg_w, ctl_r),
                cwd=work,
                env=env,
                start_new_session=True,  # a signal to the worker's group is not the child's
                preexec_fn=box.preexec(),  # cgroup, network, uid; dies with the worker
            )
        except FileNotFoundError:
            raise CommandError(
                f"command not found: {self.argv[0]} (in the job's working directory)"
            ) from None
        except PermissionError:
            raise CommandError(
                f"command not executable by the job's user: {self.argv[0]} "
                "(chmod +x it; the Python install must be readable by other users)"
            ) from None
        except subprocess.SubprocessError as err:  # the launcher failed: nothing of theirs ran
            raise CommandError(f"the job's process could not be set up: {err}") from None
        finally:
            os.close(msg_w)
            os.close(ctl_r)
        self.memory = RunMemory(box.cgroup, child.pid)
        code = self._supervise(child, msg_r, ctl_w, report_every_s, should_stop, fence)
        box.check(code)
        return self._end(code)

    def _supervise(
        self,
        child: subprocess.Popen[bytes],
        msg_r: int,
        ctl_w: int,
        report_every_s: float,
        should_stop: Callable[[], bool],
        fence: Callable[[], bool],
    ) -> int:
        from workers.sandbox import _messages

        assert child.stdout is not None
        inbox: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        output = threading.Thread(target=self._relay, args=(child.stdout,), daemon=True)
        output.start()
        reader = threading.Thread(target=_read, args=(msg_r, inbox, _messages), daemon=True)
        reader.start()
        control = os.fdopen(ctl_w, "w", buffering=1)
        started, stopped, fenced, eof = time.monotonic(), False, False, False
        terminated = 0.0  # when a stop sent SIGTERM to a script that does not ask
        last_report, exited = -float("inf"), 0.0
        try:
            while True:
                # until the script has exited and its pipe is drained: a process it left
                # behind may hold the pipe open, so that is awaited a few seconds at most
                if child.poll() is not None:
                    exited = exited or time.monotonic()
                    if eof or time.monotonic() - exited >= _DRAIN_S:
                        break
                if eof:  # nothing more will come: wait on the script's exit itself
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=0.1)
                with contextlib.suppress(queue.Empty):
                    message = inbox.get(timeout=0.1) if not eof else None
                    if message is None:
                        eof = True
                    else:
                        self._take(message)
                if self.memory is not None:  # where the run's cgroup keeps no peak of its own
                    self.memory.sample()
                if not stopped and should_stop():
                    stopped = _tell(control, {"stop": True})
                    if not self.polls_stop:  # it would not hear it: end it, as torchrun does
                        terminated = _signal(child, signal.SIGTERM)
                if terminated and time.monotonic() - terminated > TERM_GRACE_S:
                    terminated = _signal(child, signal.SIGKILL)
                if not fenced and not fence():
                    fenced = _tell(control, {"fenced": True})
                if self.time_limit_s is not None and time.monotonic() - started > self.time_limit_s:
                    raise CommandError(
                        f"the command ran past its time limit of {self.time_limit_s:g} s"
                        f"{self._last_lines()}"
                    )
                if fenced:
                    continue
                if self.steps.local_steps == 0 and time.monotonic() - started > self.first_report_s:
                    raise CommandError(
                        f"the command sent no step report within {self.first_report_s:g} s "
                        "(workload.first_report_s): it must call workers.job.report() once per "
                        f"step{self._last_lines()}"
                    )
                if self.steps.local_steps and time.monotonic() - last_report >= report_every_s:
                    last_report = time.monotonic()
                    self._emit("running")
            code = child.wait()
        finally:
            # the script, if it still runs, and whatever it started: nothing outlives the run
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            with contextlib.suppress(OSError):
                control.close()
            output.join(timeout=5)
        self.stopped, self.fenced = stopped, fenced
        return code

    def _take(self, message: dict[str, Any]) -> None:
        step = message.get("step")
        if isinstance(step, dict):
            self.steps.add(step)
        elif message.get("polls_stop") is True:
            self.polls_stop = True
        elif "checkpointed" in message:
            self.steps.checkpointed(message["checkpointed"])
            if self.writes_state:
                _write_state(self.state_file, self.steps.state())

    def _end(self, code: int) -> dict[str, Any]:
        stopped, fenced = self.stopped, self.fenced
        if fenced:
            return self.steps.result("fenced", 0.0, None).to_dict()
        # a stop ends a script that does not ask: however its ranks exit then (a signal, a
        # peer's lost connection), the run was stopped, not failed
        ended = stopped and not self.polls_stop
        if code != 0 and not ended:
            kind = "command not found" if code == 127 else f"the command exited with code {code}"
            if code < 0:
                kind = f"the command was killed by signal {-code}"
            raise CommandError(f"{kind}: {' '.join(self.argv)}{self._last_lines()}")
        status = "stopped" if stopped else "finished"
        self._emit(status)
        return self.steps.result(status, self._peak_mb(), str(self.ckpt)).to_dict()

    def _emit(self, status: str) -> None:
        if self.report is None:
            return
        with contextlib.suppress(Exception):  # a failing sink must not end the job
            self.report(self.steps.report(status, self._peak_mb()))

    def _peak_mb(self) -> float:
        """The run's own peak memory so far, in MiB (:mod:`workers.run_memory`)."""
        return self.memory.peak_mb() if self.memory is not None else 0.0

    def _relay(self, source: IO[bytes]) -> None:
        """The script's output to the worker's stdout (the job's log), keeping its last lines
        for an error message."""
        for raw in iter(lambda: source.readline(64 * 1024), b""):
            line = raw.decode("utf-8", "replace")
            self.tail.append(line.rstrip("\n"))
            with contextlib.suppress(Exception):
                sys.stdout.write(line)
                sys.stdout.flush()

    def _last_lines(self) -> str:
        lines = [line[:300] for line in self.tail if line.strip()][-5:]
        return "; last output: " + " | ".join(lines) if lines else ""


def torchrun_env(rank: int, world_size: int, init_method: str | None) -> dict[str, str]:
    """The variables ``torchrun`` sets for a worker process, for this rank: ``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (rank 0's ``init_method``; with one
    rank a free port of this host), so ``dist.init_process_group(backend)`` joins the job's
    group through ``env://``. ``LOCAL_RANK`` is 0 and ``LOCAL_WORLD_SIZE`` 1 (``GROUP_RANK``
    the rank): each rank runs in a worker that sees only its own GPU (``cuda:LOCAL_RANK`` is
    it) and has a run folder of its own, like a node of one process."""
    host, port = "127.0.0.1", ""
    if init_method and init_method.startswith("tcp://"):
        host, _, port = init_method.removeprefix("tcp://").rpartition(":")
    if not port:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = str(sock.getsockname()[1])
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": str(rank),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": host.strip("[]"),
        "MASTER_PORT": port,
    }


def _interpreted(argv: list[str]) -> list[str]:
    """``[python, X, ...]`` as the worker's interpreter running :mod:`workers.launch` (its
    step hook) on ``X``; ``python -c``/``-u``... and other programs as given (the interpreter
    made the worker's)."""
    if argv[0] not in PYTHONS:
        return argv
    rest = argv[1:]
    if rest and (not rest[0].startswith("-") or rest[0] == "-m"):
        return [sys.executable, "-P", "-m", "workers.launch", *rest]
    return [sys.executable, *rest]


def _signal(child: subprocess.Popen[bytes], sig: int) -> float:
    """Send ``sig`` to the script's process group; when (0.0 once it is the last one)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, sig)
    return time.monotonic() if sig == signal.SIGTERM else 0.0


def _tell(control: IO[str], message: dict[str, Any]) -> bool:
    with contextlib.suppress(OSError, ValueError):  # the script is gone already
        control.write(json.dumps(message) + "\n")
    return True


def _read(
    fd: int,
    inbox: queue.SimpleQueue[dict[str, Any] | None],
    messages: Callable[[IO[bytes]], Any],
) -> None:
    with os.fdopen(fd, "rb") as stream:
        for message in messages(stream):
            inbox.put(message)
    inbox.put(None)


def _read_state(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "checkpoint_step" in data else None


def _write_state(path: Path | None, state: dict[str, Any] | None) -> None:
    if path is None or state is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)
