"""Hosts made of Linux network namespaces: a bridge, a veth pair and a namespace per host.

Each :class:`Host` has its own network stack (interfaces, loopback, ports) and reaches the others
only over the bridge, as machines on one LAN would; the root namespace (the test process) has an
address on the bridge too, so the test can talk to a host's Redis. Processes, memory and the
filesystem stay shared: namespaces isolate the network only, so each Ray node gets its own
``--temp-dir``.

Names carry a random suffix (``netns_name``, interface names) so that parallel runs never meet,
and :meth:`Lan.teardown` removes everything a run made, the processes of its namespaces first.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Host", "Lan", "netns_unavailable"]

HOST_IFACE = "eth0"
"""The name of each host's interface inside its namespace (``GLOO_SOCKET_IFNAME`` names it)."""


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be made here, or ``None`` when they can."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"orchprobe-{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip() or made.returncode}"
    _ip("netns", "del", probe, check=False)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


@dataclass
class Host:
    """One machine: a network namespace with one interface on the LAN.

    Attributes:
        name: a short role name (``head``, ``w1``...).
        netns: the namespace's name (unique to this run).
        ip: the host's address on the LAN.
        veth: the root-namespace end of its cable (set down to cut the host off).
        dir: this host's private folder (Ray's temp dir, logs).
    """

    name: str
    netns: str
    ip: str
    veth: str
    dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def argv(self, *cmd: str) -> list[str]:
        """``cmd`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *cmd]

    def run(
        self, *cmd: str, env: Mapping[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` on this host to completion; raise with its output if it fails."""
        done = subprocess.run(
            self.argv(*cmd), env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{self.name}: {' '.join(cmd)} exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def spawn(self, *cmd: str, env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
        """Start ``cmd`` on this host in the background, its output in ``log``."""
        with log.open("ab") as out:
            proc = subprocess.Popen(
                self.argv(*cmd),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def pids(self) -> list[int]:
        """Every process whose network namespace is this host's (daemons included)."""
        done = _ip("netns", "pids", self.netns, check=False)
        return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to every process of this host (its Ray node, Redis, orchestrator)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    def cut(self) -> None:
        """Pull this host's cable: its interface on the bridge goes down."""
        _ip("link", "set", self.veth, "down")


class Lan:
    """A bridge in the root namespace and the hosts plugged into it (see the module doc).

    Args:
        root: a folder for the hosts' private folders.
    """

    def __init__(self, root: Path) -> None:
        self.suffix = secrets.token_hex(3)
        self.root = root
        self.bridge = f"obr{self.suffix}"
        # A random /24 in 10.200-250.x.0, away from the usual private ranges.
        rand = secrets.randbelow(51 * 256)
        self.net = ipaddress.ip_network(f"10.{200 + rand // 256}.{rand % 256}.0/24")
        self.gateway = str(self.net[1])
        self.hosts: list[Host] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add(self, name: str) -> Host:
        """Plug a new host into the LAN (the next free address)."""
        index = len(self.hosts) + 2
        netns = f"orch-{self.suffix}-{name}"
        veth = f"o{self.suffix}{index}"
        peer = f"p{self.suffix}{index}"
        host = Host(name, netns, str(self.net[index]), veth, self.root / name)
        host.dir.mkdir(parents=True, exist_ok=True)
        self.hosts.append(host)  # before making anything, so teardown finds what was made
        _ip("netns", "add", netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", veth, "master", self.bridge)
        _ip("link", "set", veth, "up")
        _ip("link", "set", peer, "netns", netns)
        for cmd in (
            ("ip", "link", "set", "lo", "up"),
            ("ip", "link", "set", peer, "name", HOST_IFACE),
            ("ip", "addr", "add", f"{host.ip}/24", "dev", HOST_IFACE),
            ("ip", "link", "set", HOST_IFACE, "up"),
        ):
            host.run(*cmd)
        return host

    def wait_reachable(self, host: Host, port: int, timeout_s: float = 60) -> None:
        """Wait until ``host`` accepts TCP connections on ``port`` from the root namespace."""
        import socket

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection((host.ip, port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def teardown(self, hosts: Sequence[Host] | None = None) -> None:
        """Kill every process of the hosts, then delete their namespaces and the bridge.

        Never raises: it runs after failures, and must remove all it can.
        """
        for host in hosts if hosts is not None else self.hosts:
            for proc in host.procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        for host in hosts if hosts is not None else self.hosts:
            # Ray's processes leave their namespace with ``ip netns del`` only once dead.
            for _ in range(3):
                host.kill_all()
                if not host.pids():
                    break
                time.sleep(0.5)
            _ip("link", "del", host.veth, check=False)
            _ip("netns", "del", host.netns, check=False)
        _ip("link", "del", self.bridge, check=False)
