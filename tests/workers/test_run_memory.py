"""A run's peak memory where its cgroup keeps none (``workers.run_memory``): its process tree,
sampled, counts what the script's own children hold; the peak stays once they are gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from workers.run_memory import SAMPLE_EVERY_S, RunMemory

# the script starts a child that holds 200 MiB (written, so resident) and waits on it
CHILD = "x = b'\\x01' * (200 << 20); print('ready', flush=True); import time; time.sleep(60)"
SCRIPT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {CHILD!r}])"


def test_without_a_cgroup_the_sampled_tree_counts_the_scripts_children() -> None:
    script = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # as workers.command starts a script: its own session
    )
    try:
        assert script.stdout is not None and script.stdout.readline().strip() == "ready"
        memory = RunMemory(None, script.pid)
        memory.sample()
        assert memory.peak_mb() >= 200  # the child's, in the script's session
    finally:
        os.killpg(script.pid, signal.SIGKILL)
        script.wait()
    time.sleep(SAMPLE_EVERY_S)
    memory.sample()  # nothing left to read
    assert memory.peak_mb() >= 200
