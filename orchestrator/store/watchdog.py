"""Keeping the embedded Redis up: the scheduler that uses it restarts it when it dies.

The embedded server (:class:`~orchestrator.store.server.EmbeddedRedis`) keeps its data in an
append-only file, so a restart loses at most the last second of writes (``appendfsync
everysec``); it comes back on the same port with the same password, so every client's URL stays
valid. Meanwhile the control loop's rounds fail on the connection and are retried, and its lease
is renewed, or taken back, once Redis answers (see :mod:`orchestrator.store.lease`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from orchestrator.errors import StoreError
from orchestrator.store.server import EmbeddedRedis

__all__ = ["RedisWatchdog"]

log = logging.getLogger(__name__)


class RedisWatchdog(threading.Thread):
    """A thread that restarts the embedded Redis of ``data_dir`` whenever it is not running.

    Args:
        data_dir: the orchestrator's data directory (``Settings.data_dir``).
        stop: set to end the thread.
        every_s: how often to look.
        bind: the address it listens on besides loopback (``Settings.redis_bind``): a server
            restarted without it would strand remote workers.
    """

    def __init__(
        self,
        data_dir: Path,
        stop: threading.Event,
        every_s: float = 1.0,
        bind: str = "127.0.0.1",
    ) -> None:
        super().__init__(name="orch-redis-watchdog", daemon=True)
        self.server = EmbeddedRedis(data_dir, bind)
        self.stop_event = stop
        self.every_s = every_s
        self.restarts = 0

    def run(self) -> None:
        """Look every ``every_s``; restart a server that is gone (never raises)."""
        while not self.stop_event.wait(self.every_s):
            try:
                if self.server.url() is None:
                    log.warning("the embedded Redis is not running; restarting it")
                    self.server.ensure_running()
                    self.restarts += 1
                    log.warning("the embedded Redis is back")
            except (StoreError, OSError) as err:  # try again on the next look
                log.error("could not restart the embedded Redis: %s", err)
