"""Capture of a rank's output: what the workload prints, its warnings and its traceback.

:class:`OutputCapture` swaps ``sys.stdout`` and ``sys.stderr`` for tees while a run lasts: every
write still reaches the original stream (the worker's own log), and complete lines are also
queued and handed, in batches, to a sink the orchestrator supplies (for instance one that
appends them to a Redis stream). Batching keeps the cost at one sink call per
:data:`FLUSH_EVERY_S` however chatty the workload is; a background thread does the sending, so
a slow sink never slows a step.

What is captured: anything written through Python's ``sys.stdout``/``sys.stderr`` (``print``,
``warnings``, ``traceback``, a ``logging`` handler writing to them) from any thread of the
process. What is not: output written at the C level straight to file descriptors 1 and 2
(CUDA or NCCL messages, a C++ extension's ``printf``); those stay in the worker's own log.

Bounds: a line is cut at :data:`MAX_LINE_CHARS`; at most :data:`MAX_PENDING` lines wait for the
sink, and beyond that lines are dropped and counted (one ``[orch] N lines dropped`` line says
so). A carriage return (a progress bar redrawing itself) keeps only the text after it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TextIO, cast

__all__ = [
    "FLUSH_EVERY_S",
    "MAX_LINE_CHARS",
    "MAX_PENDING",
    "LogLine",
    "LogSink",
    "OutputCapture",
]

LogLine = tuple[str, str]
"""One captured line: ``(stream, text)``, the stream ``out`` or ``err``, without newline."""

LogSink = Callable[[Sequence[LogLine]], None]
"""Receives batches of lines, oldest first; it must not raise (a failed write drops them)."""

FLUSH_EVERY_S = 0.5
"""Lines wait at most this long before they are handed to the sink."""

MAX_LINE_CHARS = 1024
"""A longer line is cut here (a line is a display line, not a data channel)."""

MAX_PENDING = 10_000
"""Lines waiting for the sink beyond this are dropped (a sink far slower than the output)."""

MAX_BATCH = 500
"""At most this many lines per sink call."""

_CUT = " [cut]"


class _Tee:
    """A text stream that writes through to ``original`` and queues complete lines."""

    def __init__(self, original: TextIO, name: str, capture: OutputCapture) -> None:
        self._original = original
        self._name = name
        self._capture = capture
        self._partial = ""

    def write(self, text: str) -> int:
        written = self._original.write(text)
        self._capture.add(self, text)
        return written if isinstance(written, int) else len(text)

    def flush(self) -> None:
        self._original.flush()

    def __getattr__(self, name: str) -> Any:
        # encoding, isatty, fileno...: the tee looks like the stream it wraps
        return getattr(self._original, name)


class OutputCapture:
    """A context manager: while it is active, ``sys.stdout``/``sys.stderr`` are teed to ``sink``.

    Args:
        sink: receives batches of ``(stream, line)``.
        flush_every_s: the longest a line waits before it is sent.

    Attributes:
        dropped: lines lost because too many were waiting.
    """

    def __init__(self, sink: LogSink, *, flush_every_s: float = FLUSH_EVERY_S) -> None:
        self._sink = sink
        self._flush_every_s = flush_every_s
        self._lock = threading.RLock()  # a signal handler may print while a write holds it
        self._pending: list[LogLine] = []
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: tuple[TextIO, TextIO] | None = None
        self._tees: list[_Tee] = []
        self.dropped = 0

    def __enter__(self) -> OutputCapture:
        self._saved = (sys.stdout, sys.stderr)
        out, err = _Tee(sys.stdout, "out", self), _Tee(sys.stderr, "err", self)
        self._tees = [out, err]
        sys.stdout, sys.stderr = cast(TextIO, out), cast(TextIO, err)
        self._thread = threading.Thread(target=self._send_loop, name="log-capture", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._saved is not None:
            sys.stdout, sys.stderr = self._saved
            self._saved = None
        with self._lock:
            for tee in self._tees:  # a last line without its newline still counts
                if tee._partial:
                    self._queue(tee._name, tee._partial)
                    tee._partial = ""
        self._done.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()  # the last lines are sent before the run returns
            self._thread = None

    def add(self, tee: _Tee, text: str) -> None:
        """Split what ``tee`` was given into lines and queue the complete ones."""
        with self._lock:
            parts = (tee._partial + text).split("\n")
            tee._partial = _redraw(parts.pop())
            if len(tee._partial) > MAX_LINE_CHARS:  # no newline in sight: send what there is
                parts.append(tee._partial)
                tee._partial = ""
            for line in parts:
                self._queue(tee._name, _redraw(line.removesuffix("\r")))
            full = len(self._pending) >= MAX_BATCH
        if full:
            self._wake.set()

    def _queue(self, stream: str, line: str) -> None:
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        if len(line) > MAX_LINE_CHARS:
            line = line[: MAX_LINE_CHARS - len(_CUT)] + _CUT
        self._pending.append((stream, line))

    def _send_loop(self) -> None:
        reported = 0
        while True:
            self._wake.wait(self._flush_every_s)
            self._wake.clear()
            done = self._done.is_set()
            with self._lock:
                batch, self._pending = self._pending, []
                if self.dropped > reported:
                    batch.append(("err", f"[orch] {self.dropped - reported} lines dropped"))
                    reported = self.dropped
            for i in range(0, len(batch), MAX_BATCH):
                chunk = batch[i : i + MAX_BATCH]
                try:
                    self._sink(chunk)
                except Exception:  # a sink must not raise; if one does, its lines are lost
                    with self._lock:
                        self.dropped += len(chunk)
            if done:
                return


def _redraw(line: str) -> str:
    """What a terminal would show of ``line``: the text after its last carriage return."""
    return line.rsplit("\r", 1)[-1] if "\r" in line else line
