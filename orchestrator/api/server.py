"""Running the API: uvicorn in a background thread (``orch up``, tests) or in the foreground
(``orch serve``).

The listening socket is bound here, before uvicorn starts, so an address in use is a clear
error at once (not a log line from a thread), and port 0 picks a free port whose URL is known.
"""

from __future__ import annotations

import gc
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


def _server(store: JobStore) -> uvicorn.Server:
    config = uvicorn.Config(
        create_app(store), log_level="warning", access_log=False, timeout_keep_alive=30
    )
    return uvicorn.Server(config)


@dataclass
class ApiServer:
    """The API serving in a background thread.

    Attributes:
        url: where it answers (``http://127.0.0.1:8321``).
    """

    url: str
    server: uvicorn.Server
    thread: threading.Thread
    sock: socket.socket

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (open streams are closed) and wait for the thread."""
        self.server.should_exit = True
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
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise OrchError(f"the API server did not start on {address}")
        time.sleep(0.02)
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
