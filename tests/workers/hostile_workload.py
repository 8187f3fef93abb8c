"""A team's workload that tries to leave its sandbox (``tests/e2e/test_trust.py``).

While building, it tries what a hostile member's code would: read the control plane's secrets
and files, join the Ray cluster, and reach Redis; it prints one line ``HOSTILE <json>`` with
what each attempt got, then trains like an ordinary workload (so the job finishes).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from tests.workers.sample_workload import build as build_sample
from workers.workloads.base import Workload


def _read(path: str) -> str:
    try:
        return "read:" + Path(path).read_text()[:40]
    except OSError as err:
        return f"refused:{type(err).__name__}"


def _listdir(path: str) -> str:
    try:
        return "listed:" + ",".join(sorted(os.listdir(path))[:5])
    except OSError as err:
        return f"refused:{type(err).__name__}"


def _redis(host: str, port: int) -> str:
    """A command without the password: an open Redis answers it."""
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.sendall(b"*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n")
            return s.recv(64).decode(errors="replace")[:30]
    except OSError as err:
        return f"refused:{type(err).__name__}"


def _ray_token() -> str:
    return _read(str(Path("/root/.ray/auth_token"))) if os.geteuid() != 0 else "root"


def build(args: dict[str, Any], seed: int) -> Workload:
    """Probe (see the module doc), then build the sample regression workload."""
    found = {
        "uid": os.geteuid(),
        "env": sorted(k for k in os.environ if k.startswith(("REDIS", "RAY", "ORCH"))),
        "password": _read(args["password_file"]),
        "data_dir": _listdir(args["data_dir"]),
        "other_checkpoint": _listdir(args["other_checkpoint"]),
        "redis": _redis(args["redis_host"], int(args["redis_port"])),
        "ray_token": _ray_token(),
        "parent_environ": _read(f"/proc/{os.getppid()}/environ"),
    }
    print("HOSTILE " + json.dumps(found), flush=True)
    return build_sample({}, seed)
