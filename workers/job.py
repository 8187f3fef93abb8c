"""The job-context API: how a command-mode script talks to ``orch``.

In the spirit of Ray Train's ``get_context()`` / ``report()``: a team's own training script
(``workload: {command: [python, train.py]}``) reads the settings ``orch`` chose for this run,
reports each optimizer step, saves a checkpoint when asked and stops cleanly on preemption::

    from workers import job

    ctx = job.context()
    model = build(hidden=ctx.settings["hidden"])
    step = load(ctx.checkpoint_dir) if ctx.resume else 0   # the script's own checkpoint
    data = DataLoader(dataset, batch_size=ctx.micro_batch, **ctx.dataloader_kwargs)
    batches = job.loader(data)                # its waits for each batch, timed
    while step < ctx.steps:
        loss = train_step(next(batches))
        step += 1
        job.report(samples=ctx.micro_batch * ctx.grad_accum * ctx.world_size, loss=loss)
        if job.should_checkpoint():
            save(ctx.checkpoint_dir, step)
            job.checkpointed()
        if job.should_stop():                 # preempted, resized or cancelled: exit 0
            break

Timing: a step's time is the time between two :func:`report` calls (the first from
:func:`context`); ``orch`` excludes the first ``ctx.warmup_steps`` of each run, as for a
built-in workload, and turns the steps into the same latency percentiles, throughput and SLA
figures. Call :func:`report` once per optimizer step, on every rank (only rank 0's count).

Data wait: the batches a script reads through :func:`loader` are timed as it waits for each
one, and that wait is reported with the step, apart from it, as the harness reports a built-in
workload's: the step's time is then its compute, and ``data_wait_share`` says how much of the
job's time went to waiting for data (a throughput SLA is judged at the wall clock, and the
tuner tries other loader settings when the wait is material: ``ctx.dataloader_kwargs`` hands
the script the ones it chose). Without :func:`loader`, a step's time holds its loading and
the data wait is not known.

How it talks: the worker runs the script as the job's sandbox user with three variables,
``ORCH_JOB_CONTEXT`` (a JSON file of the run's settings), ``ORCH_JOB_FD`` (a pipe the reports
go out on, one JSON object a line) and ``ORCH_JOB_CONTROL_FD`` (a pipe ``stop`` and
``fenced`` come in on). Without them (``python train.py`` on a laptop) :func:`context`
returns defaults and :func:`report` does nothing, so the same script runs anywhere. If the
worker goes away (its pipe closes), the script is ended: a run nobody supervises must not
keep its GPU.

Without :func:`report`: a script that never calls it (one written for ``torchrun``, or a loop
set up by :func:`prepare`) is measured by a step hook, ``torch.optim``'s global
``register_optimizer_step_post_hook``, which :mod:`workers.launch` installs when the script's
interpreter first imports ``torch.optim``: each step of the first optimizer that steps counts,
with ``ctx.global_batch`` samples (the script does not say). Its report goes out one step late,
so a script that calls :func:`report` after its first step is never counted twice (its own
reports take over). A script that never calls :func:`should_stop` cannot stop when asked: the
worker ends its processes instead (``SIGTERM``, as torchrun's agent does on a restart).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

__all__ = [
    "CONTEXT_ENV",
    "CONTROL_FD_ENV",
    "REPORT_FD_ENV",
    "JobContext",
    "checkpointed",
    "context",
    "load",
    "loader",
    "prepare",
    "report",
    "save",
    "should_checkpoint",
    "should_stop",
]

CONTEXT_ENV = "ORCH_JOB_CONTEXT"
REPORT_FD_ENV = "ORCH_JOB_FD"
CONTROL_FD_ENV = "ORCH_JOB_CONTROL_FD"

T = TypeVar("T")


@dataclass(frozen=True)
class JobContext:
    """This run's settings, as ``orch`` applies them for the script.

    Attributes:
        job_id: the job.
        rank, world_size: this process's data-parallel rank and the number of ranks.
        init_method: ``tcp://host:port`` of rank 0 for ``torch.distributed`` (``None`` with
            one rank).
        micro_batch, grad_accum: samples per forward pass, micro-batches per optimizer step.
        precision: ``fp32``, ``bf16`` or ``fp16``.
        steps: optimizer steps in total, counting those before a resume (``None``: a run for
            ``duration_s`` seconds).
        duration_s: wall-clock seconds to train for (``None``: a run of ``steps``).
        warmup_steps: steps of each run left out of the measurements.
        checkpoint_every: checkpoint every this many steps (0: only when stopped).
        seed: the job's seed.
        checkpoint_dir: the folder the script keeps its checkpoints in (the job's own, kept
            across runs, readable by no other job).
        resume: whether an earlier run of the job checkpointed (:func:`checkpointed`).
        resume_step: the step of that checkpoint (``None`` when ``resume`` is false).
        settings: the script's declared settings (``workload.settings``), with their values.
        args: the job file's ``workload.args``.
        loader_settings: the data loader's knobs for this run (``run.loader``, or what the
            tuner's loader stage chose: ``num_workers``, ``prefetch_factor``, ``pin_memory``,
            ``persistent_workers``, ``cache_mb``); see :attr:`dataloader_kwargs`.
        sharding: ``ddp`` or ``fsdp``, how more than one rank train (:func:`prepare`).
        activation_checkpointing: recompute the named blocks in backward (:func:`prepare`):
            all, or a share of them (the first ones).
        compile: run the model through ``torch.compile`` (:func:`prepare`).
    """

    job_id: str = "local"
    rank: int = 0
    world_size: int = 1
    init_method: str | None = None
    micro_batch: int = 8
    grad_accum: int = 1
    precision: str = "fp32"
    steps: int | None = None
    duration_s: float | None = None
    warmup_steps: int = 3
    checkpoint_every: int = 0
    seed: int = 0
    checkpoint_dir: str = "checkpoints"
    resume: bool = False
    resume_step: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    loader_settings: dict[str, Any] = field(default_factory=dict)
    sharding: str = "ddp"
    activation_checkpointing: bool | float = False
    compile: bool = False

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over all ranks."""
        return self.micro_batch * self.grad_accum * self.world_size

    @property
    def dataloader_kwargs(self) -> dict[str, Any]:
        """:attr:`loader_settings` as ``torch.utils.data.DataLoader``'s keyword arguments:
        ``num_workers`` and ``pin_memory``, and with workers ``prefetch_factor`` and
        ``persistent_workers`` (torch refuses them without). ``cache_mb`` (the harness's RAM
        cache of decoded samples) is the script's to honour or not."""
        s = self.loader_settings
        workers = int(s.get("num_workers", 0))
        kwargs: dict[str, Any] = {"num_workers": workers, "pin_memory": bool(s.get("pin_memory"))}
        if workers > 0:
            kwargs["prefetch_factor"] = int(s.get("prefetch_factor", 2))
            kwargs["persistent_workers"] = bool(s.get("persistent_workers"))
        return kwargs


class _Channel:
    """The process's link to its worker (one per process; see :func:`_channel`)."""

    def __init__(self) -> None:
        path = os.environ.get(CONTEXT_ENV)
        data: dict[str, Any] = {}
        if path:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        known = set(JobContext.__dataclass_fields__)
        self.under_orch = bool(path)
        self.context = JobContext(**{k: v for k, v in data.items() if k in known and v is not None})
        self.step = self.context.resume_step or 0
        self.last = time.perf_counter()
        self.wait = 0.0  # waited in loader() since the last report
        self.timed = False  # whether the script reads its batches through loader()
        self.explicit = False  # whether the script calls report() (the step hook then stops)
        self.counted: int | None = None  # id() of the optimizer whose steps the hook counts
        self.pending: dict[str, Any] | None = None  # the hook's last step, sent one step late
        self.polled = False  # whether the script asks should_stop()
        self.paused = False  # orch's own optimizer steps (a state made for loading) uncounted
        self.stop = threading.Event()
        self.fenced = threading.Event()
        self.lock = threading.Lock()
        self.out: IO[str] | None = None
        fd = os.environ.get(REPORT_FD_ENV)
        if fd:
            self.out = os.fdopen(int(fd), "w", buffering=1)
        control = os.environ.get(CONTROL_FD_ENV)
        if control:
            threading.Thread(target=self._listen, args=(int(control),), daemon=True).start()

    def _listen(self, fd: int) -> None:
        with os.fdopen(fd, "r") as control:
            for line in control:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if message.get("fenced"):
                    self.fenced.set()
                if message.get("stop") or message.get("fenced"):
                    self.stop.set()
        # the worker is gone (killed, or its host lost): nobody supervises this run
        os._exit(143)

    def waited(self, seconds: float) -> None:
        with self.lock:
            self.wait += seconds
            self.timed = True

    def send(self, message: dict[str, Any]) -> None:
        if self.out is None:
            return
        with self.lock:
            self.out.write(json.dumps(message) + "\n")

    def step_message(
        self, samples: int, tokens: int | None, loss: float | None, step: int | None
    ) -> dict[str, Any]:
        """The next step's report: its time since the last one, the data wait within it."""
        now = time.perf_counter()
        elapsed, self.last = now - self.last, now
        self.step = self.step + 1 if step is None else int(step)
        with self.lock:
            wait, self.wait = self.wait, 0.0
        return {
            "step": {
                "step": self.step,
                "s": elapsed,
                "samples": int(samples),
                "tokens": None if tokens is None else int(tokens),
                "loss": None if loss is None else float(loss),
                "wait_s": wait if self.timed else None,
            }
        }

    def flush(self) -> None:
        """Send the step hook's last step (at exit, and before a checkpoint is announced)."""
        pending, self.pending = self.pending, None
        if pending is not None and not self.explicit:
            self.send(pending)


_lock = threading.Lock()
_state: _Channel | None = None


def _channel() -> _Channel:
    global _state
    with _lock:
        if _state is None:
            _state = _Channel()
        return _state


def context() -> JobContext:
    """This run's settings (read once; the same object on every call)."""
    return _channel().context


def report(
    *,
    samples: int,
    tokens: int | None = None,
    loss: float | None = None,
    step: int | None = None,
) -> None:
    """Report one optimizer step (call it once per step, after the step).

    Args:
        samples: samples the step processed over all ranks (usually ``ctx.global_batch``).
        tokens: tokens it processed, for a job whose SLA counts tokens.
        loss: the step's loss (the job's final loss is the last one reported).
        step: the step's number (from 1, counting earlier runs); by default one more than the
            last reported, starting from ``ctx.resume_step``.
    """
    ch = _channel()
    ch.explicit, ch.pending = True, None  # the script's own reports: the hook's are dropped
    ch.send(ch.step_message(samples, tokens, loss, step))


def optimizer_stepped(optimizer: object) -> None:
    """The step hook (:mod:`workers.launch`): one step of ``optimizer`` is done. Counted
    unless the script reports its steps itself, for the first optimizer that steps alone (a
    second one, a GAN's, steps in the same iteration), with ``ctx.global_batch`` samples;
    sent at the next step (or at exit), so that a first :func:`report` can still drop it."""
    ch = _channel()
    if ch.explicit or ch.paused:
        return
    if ch.counted is None:
        ch.counted = id(optimizer)
        atexit.register(ch.flush)
    elif ch.counted != id(optimizer):
        return
    message = ch.step_message(ch.context.global_batch, None, None, None)
    ch.flush()
    ch.pending = message


def loader(batches: Iterable[T]) -> Iterator[T]:
    """Iterate ``batches`` (the script's ``DataLoader``, or any iterable of batches), timing
    each wait for the next one (its workers' start included, on the first): the waits since
    the last :func:`report` go out with the next one, apart from the step (see the module
    doc). Outside ``orch`` it only iterates."""
    ch = _channel()
    start = time.perf_counter()
    source = iter(batches)
    while True:
        try:
            batch = next(source)
        except StopIteration:
            return
        finally:
            ch.waited(time.perf_counter() - start)
        yield batch
        start = time.perf_counter()


def should_stop() -> bool:
    """Whether ``orch`` asked this run to end (preemption, a resize, a cancel): checkpoint if
    :func:`should_checkpoint` says so, then exit with status 0."""
    ch = _channel()
    if not ch.polled:  # the worker then asks it to stop rather than ending its processes
        ch.polled = True
        ch.send({"polls_stop": True})
    return ch.stop.is_set()


def should_checkpoint() -> bool:
    """Whether to save a checkpoint now: every ``checkpoint_every`` steps, and when asked to
    stop; never once the run is deposed (a newer run of the job owns the checkpoints)."""
    ch = _channel()
    if ch.fenced.is_set():
        return False
    every = ch.context.checkpoint_every
    return ch.stop.is_set() or (every > 0 and ch.step > 0 and ch.step % every == 0)


def checkpointed(step: int | None = None) -> None:
    """Tell ``orch`` that a checkpoint of ``step`` (default: the last reported) is complete in
    ``ctx.checkpoint_dir``: the next run of the job gets ``resume`` and ``resume_step``."""
    ch = _channel()
    ch.flush()  # the steps up to the checkpoint first: the worker keeps their figures with it
    ch.send({"checkpointed": ch.step if step is None else int(step)})


@contextlib.contextmanager
def hook_paused() -> Iterator[None]:
    """Optimizer steps inside are not counted by the step hook (:func:`workers.prepare`'s
    step of learning rate 0 that gives a fresh optimizer its state before a load)."""
    ch = _channel()
    ch.paused = True
    try:
        yield
    finally:
        ch.paused = False


def under_orch() -> bool:
    """Whether this process runs under ``orch`` (else :func:`context` is the defaults)."""
    return _channel().under_orch


def prepare(model: Any, optimizer: Any, loader: Any, **options: Any) -> Any:
    """Apply this run's settings to a plain PyTorch loop: see :func:`workers.prepare.prepare`
    (imported here on first use: this module imports no torch)."""
    from workers.prepare import prepare as _prepare

    return _prepare(model, optimizer, loader, **options)


def save(state: dict[str, Any], step: int) -> None:
    """Checkpoint ``state`` at ``step``: see :func:`workers.prepare.save`."""
    from workers.prepare import save as _save

    _save(state, step)


def load(state: dict[str, Any]) -> int | None:
    """Load the last checkpoint into ``state``: see :func:`workers.prepare.load`."""
    from workers.prepare import load as _load

    return _load(state)
