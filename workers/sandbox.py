"""The trust boundary around a team's code: it runs in processes of its own, as an
unprivileged user, contained, with nothing of the control plane's.

A built-in workload (``workers.workloads``: code the operator installed) runs inside the worker
actor. Anything else a team names (an ``entry:`` module, a command job's script) is the team's
code, and the worker runs it in a :func:`sandbox` (:func:`run_sandboxed` here, a child
``python -m workers.sandbox_child``; :func:`workers.command.run_command` for a script):

- as a user of its own: a uid claimed per job on each host (:mod:`workers.uids`, from
  ``ORCH_SANDBOX_UIDS``, default ``61000-64999``, uids no account uses), with that gid and no
  supplementary groups, so it cannot read the data directory (the embedded Redis's password
  and files are 0700/0600), another job's checkpoints (each job's folder is 0700 and belongs
  to its uid only while it runs; the folder of the jobs' folders is not listable), Ray's
  token and logs (``~/.ray``; the node's Ray session folder is 0700: every job's output is
  in its logs) or the worker's memory and environment (``/proc`` of another uid);
- contained (:mod:`workers.contain`): in a cgroup of its own with a bound on its tasks and
  its memory (an out-of-memory kill is reported as one), without the host's network unless
  the job declares it (``resources.network``), and with every process of it killed and
  awaited at the run's end, before its uid goes back to the pool;
- with a scrubbed environment (no ``REDIS_URL``, no ``RAY_*``, no ``ORCH_*``: nothing but what
  torch and the job need; a command's own checkpoint folder, ``ORCH_CHECKPOINT_DIR``, is the
  one ``ORCH_`` name it sees), a private home and temp folder, and no inherited descriptors but
  its pipes; the teams' own packages (``ORCH_TEAM_CODE_PATH``) on its import path and never
  on the worker's, so that a start-up hook in a team's tree (``sitecustomize.py``, a
  ``.pth`` file) runs in the sandbox alone;
- talking to the worker only through those pipes: the run's settings in, its reports, its
  output and its result out. The worker, not the child, writes reports to the store (it
  checks each one's shape and size first, and stamps the job id itself), relays stop
  requests, and tells the child when its run has been deposed (see ``Harness``'s ``fence``).

A worker that is not root cannot give the code a uid of its own: there the team's code is
refused (:func:`refuse_unisolated`) unless the operator set ``ORCH_ALLOW_UNISOLATED=1`` (a
laptop, a single-user ``orch up``), and ``orch up`` says once at start what holds on its host
(:func:`isolation_report`).

Why hand-written: Ray's runtime environments choose a worker's Python packages and variables,
not its user, and a Ray worker process can itself submit Ray tasks; the child must not be one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from workers.contain import MEMORY_ENV, PIDS_ENV, Limits, RunCgroup, enforced, launcher
from workers.errors import CheckpointError, HarnessConfigError
from workers.uids import NoUidLeft, chown_tree, claim_uid
from workers.workloads.base import WorkloadError
from workers.workloads.registry import is_entry_point

__all__ = [
    "ALLOW_UNISOLATED_ENV",
    "RunSandbox",
    "SandboxError",
    "clean_report",
    "isolation_report",
    "needs_sandbox",
    "refuse_unisolated",
    "run_sandboxed",
    "sandbox",
    "team_code_path",
]

TEAM_CODE_ENV = "ORCH_TEAM_CODE_PATH"
"""Folders (``os.pathsep``-separated) holding the teams' own packages (those the team config's
``entry_modules`` name) on a worker host: on a team's process's import path only."""
ALLOW_UNISOLATED_ENV = "ORCH_ALLOW_UNISOLATED"
"""Set to ``1`` by an operator whose workers cannot run as root, to run teams' code anyway
(as the worker's own user: no isolation from it, or from each other)."""
MAX_MESSAGE_BYTES = 1 << 20
"""A line from the child longer than this is not read as a message (it is dropped)."""

# Variables the child may keep: locale, search path, and what picks its devices and threads.
_KEEP_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)


class SandboxError(RuntimeError):
    """The team's process ended without a result (killed, or it exited on its own), or with
    an error of its own (the message starts with its type: ``RuntimeError: ...``)."""


class OutOfMemoryError(SandboxError):
    """The team's code ran out of memory: device memory (``torch.OutOfMemoryError`` in its
    process), or host memory (the kernel killed one of its processes for it, see
    :meth:`RunSandbox.check`). Named so, the tuner's OOM handling
    (``orchestrator.tuner.oom.is_oom``) sees it as one: the trial is pruned as a CUDA OOM is."""


# the child's errors that keep their type here: the worker's and the tuner's callers act on it
_ERRORS: dict[str, type[Exception]] = {
    "HarnessConfigError": HarnessConfigError,
    "WorkloadError": WorkloadError,
    "CheckpointError": CheckpointError,
    "OutOfMemoryError": OutOfMemoryError,
    "MemoryError": MemoryError,
}


def needs_sandbox(workload: str) -> bool:
    """Whether a workload is a team's code (an entry point), not one the operator installed."""
    return is_entry_point(workload)


# -- the worker's side ------------------------------------------------------------------------


def run_sandboxed(
    config: dict[str, Any],
    *,
    job_id: str,
    rank: int,
    world_size: int,
    init_method: str | None,
    checkpoint_dir: str | None,
    report: Callable[[dict[str, Any]], None] | None,
    report_every_s: float,
    should_stop: Callable[[], bool],
    fence: Callable[[], bool],
    num_threads: int | None,
    run_tag: str = "",
    limits: Limits | None = None,
    requests: Any = None,
) -> dict[str, Any]:
    """Run one rank's harness for ``config`` in a sandboxed child; return its
    ``RunResult.to_dict()``. ``requests``: a service endpoint's queue, which this worker
    holds and pumps to the child (:class:`workers.serve_endpoint.RequestPump`).

    Raises:
        HarnessConfigError, WorkloadError, CheckpointError: as the harness raised them.
        SandboxError: the child died, or ended without saying how.
    """
    init = {
        "config": config,
        "rank": rank,
        "world_size": world_size,
        "init_method": init_method,
        "checkpoint_dir": checkpoint_dir,
        "report_every_s": report_every_s,
        "num_threads": num_threads,
        "run_tag": run_tag,
        "report": report is not None,
        "endpoint": requests is not None,
    }
    local = Path(checkpoint_dir) if checkpoint_dir and "://" not in checkpoint_dir else None
    with sandbox(job_id, rank, world_size, limits, local, "orch-run-") as box:
        box.give(box.home)
        outcome, code = _supervise(init, box, report, should_stop, fence, requests)
        box.check(code)
        return _outcome(outcome, code)


class RunSandbox:
    """One run's sandbox (see :func:`sandbox`): the job's ``uid`` on this host (``None`` when
    the worker is not root), a private ``home`` folder, the run's ``cgroup`` (``None`` where
    the host offers none) and its ``limits``."""

    def __init__(
        self, uid: int | None, home: Path, cgroup: RunCgroup | None, limits: Limits
    ) -> None:
        self.uid, self.home, self.cgroup, self.limits = uid, home, cgroup, limits

    def give(self, path: Path) -> None:
        """Make ``path`` (and what is in it) the job's uid's alone (0700 at its top)."""
        if self.uid is not None:
            chown_tree(path, self.uid)

    def preexec(self) -> Callable[[], None] | None:
        """The child's first steps: into the cgroup, off the network, down to the uid."""
        return launcher(self.uid, self.cgroup, self.limits.network)

    def check(self, code: int) -> None:
        """After the team's process ended with ``code``: an out-of-memory kill is raised as
        one; a fork refused by the process bound is said in the job's log.

        Raises:
            OutOfMemoryError: the kernel killed a process of the run for its memory.
        """
        if self.cgroup is None:
            return
        if self.cgroup.hit_process_bound():
            print(
                f"[orch] the job's processes reached their bound of {self.limits.pids} "
                f"tasks ({PIDS_ENV}): a fork failed",
                file=sys.stderr,
                flush=True,
            )
        if self.cgroup.out_of_memory(killed=code == -signal.SIGKILL):
            mib = (self.limits.memory_bytes or 0) / (1 << 20)
            raise OutOfMemoryError(
                f"out of memory: the job's processes went over their host memory bound of "
                f"{mib:.0f} MiB (resources.memory_gb, or the operator's {MEMORY_ENV}); "
                f"the kernel killed one (exit code {code})"
            )


def refuse_unisolated() -> None:
    """Refuse a team's code on a worker that cannot give it a uid of its own (not root),
    unless the operator allowed it (:data:`ALLOW_UNISOLATED_ENV`).

    Raises:
        SandboxError: says why, and the setting.
    """
    if os.geteuid() == 0 or os.environ.get(ALLOW_UNISOLATED_ENV, "") in ("1", "true", "yes"):
        return
    raise SandboxError(
        f"this worker runs as uid {os.geteuid()}, not root, so a team's code would run as the "
        f"worker's own user, beside its credentials; the operator may allow that with "
        f"{ALLOW_UNISOLATED_ENV}=1 (docs/operator-guide.md, 'What each platform enforces')"
    )


def isolation_report() -> list[str]:
    """What ``orch up`` says once at start of how this host contains a team's code: one line
    when everything holds, else one line per part that does not, and whether team code is
    refused (no uid of its own, and the operator did not allow it)."""
    found = enforced()
    missing = {what: how for what, how in found.items() if how.startswith("not enforced")}
    if not missing:
        return [
            "team code: isolated on this host (a uid per job; processes and memory bounded by "
            f"{found['memory']}; every process ends with its run; no network unless declared)"
        ]
    lines = [f"team code: {what} {how}" for what, how in missing.items()]
    if "user" in missing:
        try:
            refuse_unisolated()
            lines.append(f"team code: runs anyway, as the worker's user ({ALLOW_UNISOLATED_ENV})")
        except SandboxError:
            lines.append(
                f"team code: refused on this host's workers (set {ALLOW_UNISOLATED_ENV}=1 to "
                "run it as the worker's own user)"
            )
    return lines


@contextlib.contextmanager
def sandbox(
    job_id: str,
    rank: int,
    world_size: int,
    limits: Limits | None,
    checkpoint: Path | None,
    prefix: str,
) -> Iterator[RunSandbox]:
    """The sandbox of one run of a team's code on this host, for the block: the job's uid
    (claimed; with ``checkpoint``, the job's local checkpoint folder, lent to it), a private
    folder, and the run's cgroup with ``limits`` (default: :class:`Limits`'s; a gang of more
    than one rank keeps the network, its ranks meet over TCP). At the block's end, in this
    order: every process left in the cgroup is killed and awaited, the folder is removed, the
    uid is released (so no process of this job is alive when the uid is claimed by another).

    Raises:
        SandboxError: the worker cannot isolate and the operator did not allow it
            (:func:`refuse_unisolated`).
    """
    refuse_unisolated()
    limits = limits or Limits()
    if world_size > 1 and not limits.network:
        limits = dataclasses.replace(limits, network=True)
    with contextlib.ExitStack() as stack:
        uid = None
        if os.geteuid() == 0:
            try:
                uid = stack.enter_context(claim_uid(job_id, checkpoint))
            except NoUidLeft as err:
                raise SandboxError(str(err)) from None
        elif checkpoint is not None:
            checkpoint.mkdir(mode=0o700, parents=True, exist_ok=True)
        home = Path(tempfile.mkdtemp(prefix=prefix))
        stack.callback(shutil.rmtree, home, True)
        cgroup = RunCgroup(f"{job_id}-{rank}", limits)
        stack.callback(cgroup.close)
        _say_what_does_not_hold(uid, cgroup)
        yield RunSandbox(uid, home, cgroup if cgroup.dirs else None, limits)


def _say_what_does_not_hold(uid: int | None, cgroup: RunCgroup) -> None:
    """One line in the run's log (the worker's captured stderr) naming what this host could
    not enforce around it (see the operator guide's table); nothing when everything held."""
    held = cgroup.enforces()
    missing = [what for what, ok in held.items() if not ok]
    if uid is None:
        missing.insert(0, "a uid of its own")
    if missing:
        print(
            f"[orch] this host does not enforce around the run: {', '.join(missing)} "
            "(docs/operator-guide.md, 'What each platform enforces')",
            file=sys.stderr,
            flush=True,
        )


def team_code_path() -> list[str]:
    """The folders of the teams' own packages on this host (:data:`TEAM_CODE_ENV`), on the
    import path of a team's process and never on the worker's.

    Raises:
        SandboxError: one of them is on this worker's own import path, where the start-up
            hooks of a team's tree (``sitecustomize.py``) would run with the worker's rights.
    """
    folders = [p for p in os.environ.get(TEAM_CODE_ENV, "").split(os.pathsep) if p]
    own = {os.path.realpath(p or os.getcwd()) for p in sys.path}
    for folder in folders:
        if os.path.realpath(folder) in own:
            raise SandboxError(
                f"{TEAM_CODE_ENV} folder {folder} is on the worker's own import path "
                "(PYTHONPATH): teams' packages go in that setting alone"
            )
    return folders


def _child_env(home: Path, uid: int | None, num_threads: int | None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    # the worker's own import path, so the child imports the same torch and packages
    # ("" is the worker's current folder, which the child, started elsewhere, must name),
    # then the teams' packages, which only a team's process ever imports from
    paths = [p or os.getcwd() for p in sys.path] + team_code_path()
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if os.path.isdir(p))
    env.update(HOME=str(home), TMPDIR=str(home), PYTHONNOUSERSITE="1")
    # getpass.getuser() (torch.compile's cache folder) reads these before the passwd file,
    # where a sandbox uid has no entry
    env["USER"] = env["LOGNAME"] = f"orch-{uid}" if uid is not None else "orch-run"
    if num_threads is not None:
        env["OMP_NUM_THREADS"] = str(num_threads)
    return env


def _supervise(
    init: dict[str, Any],
    box: RunSandbox,
    report: Callable[[dict[str, Any]], None] | None,
    should_stop: Callable[[], bool],
    fence: Callable[[], bool],
    requests: Any = None,
) -> tuple[dict[str, Any], int]:
    msg_r, msg_w = os.pipe()
    home, uid = box.home, box.uid
    try:
        child = _spawn(
            [sys.executable, "-m", "workers.sandbox_child", str(msg_w)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(msg_w,),
            cwd=home,
            env=_child_env(home, uid, init["num_threads"]),
            start_new_session=True,  # a signal to the worker's group is not the child's
            preexec_fn=box.preexec(),  # cgroup, network, uid; nor outlives a killed worker
        )
    finally:
        os.close(msg_w)
    if child is None:
        raise SandboxError(
            f"the job's user (uid {uid}) cannot run {sys.executable}: the Python install and "
            "the packages it imports must be readable by other users (folders o+rx)"
        )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    stdin = child.stdin
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock, contextlib.suppress(OSError, ValueError):  # the child is gone already
            stdin.write((json.dumps(message) + "\n").encode())
            stdin.flush()

    send(init)
    pump = None
    if requests is not None:
        from workers.serve_endpoint import RequestPump

        pump = RequestPump(requests, send)
    done = threading.Event()
    relays = [
        threading.Thread(target=_relay, args=(child.stdout, sys.stdout), daemon=True),
        threading.Thread(target=_relay, args=(child.stderr, sys.stderr), daemon=True),
        threading.Thread(target=_watch, args=(send, should_stop, fence, done), daemon=True),
    ]
    for t in relays:
        t.start()
    outcome: dict[str, Any] = {}
    try:
        with os.fdopen(msg_r, "rb") as messages:
            for message in _messages(messages):
                if pump is not None and pump.on_message(message):
                    continue
                if "report" in message and report is not None and fence():
                    cleaned = clean_report(message["report"])
                    if cleaned is not None:
                        report(cleaned)
                elif "result" in message or "error" in message:
                    outcome = message
        code = child.wait()
    finally:
        done.set()
        if pump is not None:
            pump.close()
        if child.poll() is None:
            child.kill()
            child.wait()
        for t in relays[:2]:
            t.join(timeout=5)
    return outcome, code


def _spawn(args: list[str], **kw: Any) -> subprocess.Popen[bytes] | None:
    """``Popen(args, **kw)``, or ``None`` when the job's user may not run the interpreter.

    Raises:
        SandboxError: the child could not become the job's user (it never runs as root).
    """
    try:
        return subprocess.Popen(args, **kw)
    except PermissionError:
        return None
    except subprocess.SubprocessError as err:  # the launcher failed: nothing of the team's ran
        raise SandboxError(f"the job's process could not be set up: {err}") from None


def _outcome(outcome: dict[str, Any], code: int) -> dict[str, Any]:
    if isinstance(outcome.get("result"), dict):
        return dict(outcome["result"])
    error = outcome.get("error")
    if isinstance(error, dict):
        name, text = str(error.get("type"))[:100], str(error.get("message", ""))[:2000]
        kind = _ERRORS.get(name)
        err = kind(text) if kind is not None else SandboxError(f"{name}: {text}")
        raise err
    raise SandboxError(f"the job's process exited with code {code} without a result")


def _messages(stream: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The child's messages: JSON objects, one a line; anything else is skipped."""
    while True:
        line = stream.readline(MAX_MESSAGE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_MESSAGE_BYTES:
            while line and not line.endswith(b"\n"):  # drop the rest of the long line
                line = stream.readline(MAX_MESSAGE_BYTES)
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            yield message


def _relay(source: IO[bytes], target: IO[str]) -> None:
    """Copy the child's output line by line to the worker's stream (captured to the job's log
    when the worker has a log sink)."""
    for raw in iter(lambda: source.readline(64 * 1024), b""):
        with contextlib.suppress(Exception):
            target.write(raw.decode("utf-8", "replace"))
            target.flush()


def _watch(
    send: Callable[[dict[str, Any]], None],
    should_stop: Callable[[], bool],
    fence: Callable[[], bool],
    done: threading.Event,
) -> None:
    """Pass stop requests and a lost fence to the child until the run is over."""
    stopped = fenced = False
    while not done.wait(0.1):
        if not stopped and should_stop():
            stopped = True
            send({"stop": True})
        if not fenced and not fence():
            fenced = True
            send({"fenced": True})


def clean_report(data: object) -> dict[str, Any] | None:
    """A report from the team's process as the store may take it: a flat object of at most
    128 keys, each a short name, with numbers (a non-finite one becomes ``None``), booleans,
    ``None`` or short strings as values; ``None`` for anything else. The job id is the
    worker's to add. (What it says is only ever about its own job.)"""
    if not isinstance(data, dict) or len(data) > 128:
        return None
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str) or len(key) > 64 or key == "job_id":
            return None
        if value is None or isinstance(value, bool):
            out[key] = value
        elif isinstance(value, int | float):
            out[key] = value if math.isfinite(value) else None  # a diverged loss: unknown
        elif isinstance(value, str) and len(value) <= 256:
            out[key] = value
        else:
            return None
    return out
