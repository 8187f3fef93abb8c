"""`orch up` killed with SIGKILL leaves no Ray processes behind.

The real command in its own process starts its own local Ray instance (no ``RAY_ADDRESS``):
a GCS server, a raylet, agents and workers, all its descendants. After a SIGKILL to `orch up`
itself (no clean shutdown runs), every one of them must be gone within a few seconds: Ray's
reaper ends the local instance when the driver that started it dies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.e2e.conftest import ROOT


def test_a_killed_orch_up_leaves_no_ray_processes(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "ORCH_NAMESPACE": namespace,
        "ORCH_DATA_DIR": str(tmp_path),
        "ORCH_VIRTUAL_GPUS": "1",
        "ORCH_API_ADDRESS": "127.0.0.1:0",
    }
    env.pop("RAY_ADDRESS", None)
    orch = Path(sys.executable).parent / "orch"
    proc = subprocess.Popen(
        [str(orch), "up"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if "scheduler up" in line or time.monotonic() > deadline:
                break
        assert proc.poll() is None, "orch up exited"
        ray = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if any(s in " ".join(p.cmdline()) for s in ("gcs_server", "raylet"))
        ]
        assert ray, "orch up started no local Ray instance"
        tree = psutil.Process(proc.pid).children(recursive=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    _, alive = psutil.wait_procs(tree, timeout=15)
    assert not alive, [" ".join(p.cmdline())[:120] for p in alive]
