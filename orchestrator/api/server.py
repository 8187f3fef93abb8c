"""Running the API: uvicorn in a background thread (``orch up``, tests) or in the foreground
(``orch serve``).

The listening socket is bound here, before uvicorn starts, so an address in use is a clear
error at once (not a log line from a thread), and port 0 picks a free port whose URL is known.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from orchestrator.api.app import create_app
from orchestrator.api.limits import BodyLimits
from orchestrator.config import Settings
from orchestrator.errors import ConfigError, OrchError
from orchestrator.store import JobStore

__all__ = ["ApiServer", "app_from_env", "bind", "parse_address", "serve", "start"]

_START_TIMEOUT_S = 15.0
_uvicorn_log = logging.getLogger("uvicorn.error")  # where uvicorn's own shutdown logs


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:8321`` for IPv6) as a host and a port.

    Raises:
        ConfigError: not ``host:port``, or a port outside 0-65535.
    """
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"API address must be host:port, got {address!r}")
    return host, int(port)


def bind(address: str) -> socket.socket:
    """A listening socket on ``address``.

    Raises:
        ConfigError: a malformed address.
        OrchError: the address cannot be bound (in use, not this machine's).
    """
    host, port = parse_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it a small answer waits on the client's delayed
    # ACK (about 40 ms a request on Linux).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OrchError(f"the API cannot listen on {address}: {err.strerror or err}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, stopping as soon as it is told to, without uvicorn's fixed pauses:
    its main loop looks at ``should_exit`` every 0.1 s and its shutdown sleeps 0.1 s before
    waiting for connections in steps of 0.1 s, which made every stop take about 0.2 s (the API
    tests start and stop one server each: 300 of them). The steps are uvicorn's (0.54) own:
    stop accepting, ask each connection to close (an idle one closes at once, one answering
    closes once its answer is sent), wait for them and their tasks (cancelled after
    ``timeout_graceful_shutdown``), then the app's lifespan shutdown."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        """Set once it listens: :func:`start` waits on it rather than polling."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # raises SystemExit where it cannot start
        if self.started:  # not where the app's own start-up failed (it then exits)
            self.ready.set()

    def exit_soon(self) -> None:
        """Ask the server to stop, from any thread, waking its main loop at once."""
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(wake.set)

    async def main_loop(self) -> None:
        """uvicorn's ticks every 0.1 s (the date header, ``should_exit``), cut short by
        :meth:`exit_soon`."""
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            await asyncio.wait_for(self._drained(), self.config.timeout_graceful_shutdown)
        except TimeoutError:
            _uvicorn_log.error(
                "Cancel %s running task(s), timeout graceful shutdown exceeded",
                len(self.server_state.tasks),
            )
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _drained(self) -> None:
        """Until no connection is open and no task runs (or a second Ctrl-C forces exit)."""
        state = self.server_state
        while (state.connections or state.tasks) and not self.force_exit:
            await asyncio.sleep(0.005)


def _server(store: JobStore) -> _Server:
    config = uvicorn.Config(
        create_app(store), log_level="warning", access_log=False, timeout_keep_alive=30
    )
    return _Server(config)


@dataclass
class ApiServer:
    """The API serving in a background thread.

    Attributes:
        url: where it answers (``http://127.0.0.1:8321``).
    """

    url: str
    server: _Server
    thread: threading.Thread
    sock: socket.socket

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open streams are closed) and wait for the thread."""
        self.server.exit_soon()
        self.thread.join(timeout)
        self.sock.close()


def start(store: JobStore, address: str) -> ApiServer:
    """Serve the API over ``store`` on ``address`` in a daemon thread; returns once it answers.

    Raises:
        OrchError: the address cannot be bound, or the server did not start.
    """
    sock = bind(address)
    server = _server(store)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="orch-api", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not server.ready.wait(0.02):
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise OrchError(f"the API server did not start on {address}")
    return ApiServer(url=url_of(sock), server=server, thread=thread, sock=sock)


def serve(
    store: JobStore,
    address: str,
    announce: Callable[[str], None] | None = None,
    workers: int = 1,
) -> None:
    """Serve the API over ``store`` on ``address`` until interrupted.

    Args:
        announce: called with the server's URL once the address is bound.
        workers: server processes sharing the socket; with more than one, each builds its own
            store from the environment (:func:`app_from_env`) and this process supervises them.

    Raises:
        OrchError: the address cannot be bound.
    """
    sock = bind(address)
    if announce is not None:
        announce(url_of(sock))
    try:
        if workers == 1:
            server = _server(store)
            _freeze_heap()
            server.run(sockets=[sock])
            return
        from uvicorn.supervisors import Multiprocess

        config = uvicorn.Config(
            f"{__name__}:app_from_env",
            factory=True,
            workers=workers,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=30,
        )
        Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()


def _freeze_heap() -> None:
    """Leave what was loaded to serve (the app, FastAPI, pydantic's schemas: most of the heap)
    out of the cyclic garbage collector's passes: each request allocates enough to set off
    collections, and a pass over that whole heap took about a tenth of the server's time under
    load (measured with py-spy, bench/api/singles.py). Only for a process that serves and
    nothing else (``orch serve``): what is frozen is never freed."""
    gc.collect()
    gc.freeze()


def app_from_env() -> FastAPI:
    """The app over the store the environment names (``REDIS_URL``, ``ORCH_NAMESPACE``...):
    what each worker process of ``orch serve --workers N`` serves."""
    from orchestrator.store import resolve_url

    settings = Settings.from_env()
    url = resolve_url(settings)  # not services.open_store: services imports this module
    store = JobStore.from_url(url, settings.namespace, retention_s=settings.retention_s)
    app = create_app(store, body_limits=BodyLimits.from_settings(settings))
    _freeze_heap()
    return app


def url_of(sock: socket.socket) -> str:
    """The ``http://`` URL a bound socket answers on."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"
