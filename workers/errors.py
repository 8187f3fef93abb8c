"""One exceptions module for the data plane.

Every error a user's configuration can cause derives from :class:`WorkerError`; each also
derives from :class:`ValueError` so callers that validate input can catch the familiar type.
"""

from __future__ import annotations


class WorkerError(Exception):
    """Root of every data-plane error."""


class WorkloadError(WorkerError, ValueError):
    """A workload name, entry point or its arguments are invalid, or the builder failed."""


class HarnessConfigError(WorkerError, ValueError):
    """A harness setting is invalid, or impossible on this device (e.g. fp16 without CUDA)."""


class CheckpointError(WorkerError, ValueError):
    """A checkpoint cannot be resumed by this run (it belongs to a different workload)."""


class CommandError(WorkerError):
    """A command-mode job's script could not start (not found, not executable), exited with
    an error, or never reported a step: the message says which, with its last output."""


def failure_line(err: BaseException) -> str:
    """Why a run failed, in one line of at most 500 characters: the error's type and the first
    line of its message (a sandboxed job's error, whose message names the job's own error type
    first, without its wrapper's). What a failed job's log ends with; the control plane words
    the job's message alike (``orchestrator.runtime.gang.failure_message``)."""
    text = str(err).strip().splitlines()
    if type(err).__name__ == "SandboxError" and text:
        return text[0][:500]
    return f"{type(err).__name__}: {text[0] if text else ''}"[:500]
