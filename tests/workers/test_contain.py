"""A run's containment (``workers.contain``) on this host, without Ray: the child joins its
cgroup and leaves the network before it drops to the job's uid; its forks and memory are
bounded and the bounds' hits are seen; whatever it leaves behind is gone at close."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.contain import Limits, RunCgroup, enforced, launcher, limits_from_env

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and uids need root")
UID = 61999  # a sandbox uid no other test claims


def run(code: str, cgroup: RunCgroup | None, network: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd="/",
        preexec_fn=launcher(UID, cgroup, network),
    )


@pytest.fixture
def cgroup() -> Iterator[RunCgroup]:
    box = RunCgroup("test-contain", Limits(pids=64, memory_bytes=256 << 20))
    if not box.enforces()["processes"]:
        box.close()
        pytest.skip("no writable cgroup with a pids controller on this host")
    yield box
    box.close()


@root_only
def test_the_child_runs_as_the_jobs_uid_inside_the_runs_cgroup(cgroup: RunCgroup) -> None:
    child = run("import os; print(os.getuid(), os.getgid(), os.getgroups())", cgroup)
    out, _ = child.communicate(timeout=60)
    assert out.split("\n")[0] == f"{UID} {UID} []"


@root_only
def test_forks_past_the_bound_fail_and_the_hit_is_seen(cgroup: RunCgroup) -> None:
    code = (
        "import os, time\n"
        "made = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        "            os.close(1); os.close(2); time.sleep(60); os._exit(0)\n"
        "        made += 1\n"
        "except OSError as err:\n"
        "    print('stopped', made, type(err).__name__)\n"
    )
    out, _ = run(code, cgroup).communicate(timeout=60)
    word, made, error = out.split()
    assert word == "stopped" and int(made) < 64 and error == "BlockingIOError", out
    assert cgroup.hit_process_bound()
    assert cgroup.pids()  # the forks sleep on, in the cgroup
    assert cgroup.close()
    assert not any(d.exists() for _, d in cgroup.dirs)


@root_only
def test_the_runs_memory_peak_is_its_own(cgroup: RunCgroup) -> None:
    """A fresh cgroup per run: its peak is what this run's processes held (100 MiB and an
    interpreter), nothing of what the worker or its earlier runs did."""
    if cgroup.memory_peak() is None:
        pytest.skip("no memory controller here")
    child = run("x = b'\\x01' * (100 << 20); print('held')", cgroup)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and "held" in out
    peak = cgroup.memory_peak()
    assert peak is not None and 100 << 20 <= peak < 200 << 20


@root_only
def test_memory_past_the_bound_is_an_out_of_memory_kill(cgroup: RunCgroup) -> None:
    if not cgroup.enforces()["memory"]:
        pytest.skip("no memory controller here")
    code = "x = []\nfor _ in range(64):\n    x.append(bytearray(32 << 20))\nprint('survived')"
    child = run(code, cgroup)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == -9 and "survived" not in out
    assert cgroup.out_of_memory()


@root_only
def test_a_detached_daemon_is_gone_at_close(cgroup: RunCgroup) -> None:
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(600); os._exit(0)\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
    )
    run(code, cgroup).wait(timeout=60)
    [daemon] = cgroup.pids()  # its parent is gone; it is not
    assert cgroup.close()
    stat = Path(f"/proc/{daemon}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[1].startswith("Z")


@root_only
def test_without_network_the_child_has_its_own_loopback_and_nothing_of_the_hosts() -> None:
    code = (
        "import socket\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "socket.create_connection(s.getsockname(), timeout=2).close()\n"  # its own loopback
        "print(socket.socket().connect_ex(('127.0.0.1', 6379)))\n"  # the host's Redis
        "print(sorted(line.split(':')[0].strip() for line in open('/proc/net/dev')"
        ".read().splitlines()[2:]))\n"
    )
    out, _ = run(code, None).communicate(timeout=60)
    refused, interfaces = out.splitlines()[:2]
    assert refused != "0" and interfaces == "['lo']", out
    # with the network declared, it is the host's
    out, _ = run(code, None, network=True).communicate(timeout=60)
    assert out.splitlines()[1] != "['lo']", out


def test_a_runs_limits_come_from_the_job_then_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORCH_SANDBOX_PIDS_MAX", "100")
    monkeypatch.setenv("ORCH_SANDBOX_MEMORY", "512M")
    assert limits_from_env(None, False) == Limits(pids=100, memory_bytes=512 << 20)
    assert limits_from_env(2.0, True).memory_bytes == 2_000_000_000
    monkeypatch.setenv("ORCH_SANDBOX_PIDS_MAX", "none")  # not a number: the default
    monkeypatch.delenv("ORCH_SANDBOX_MEMORY")
    four = limits_from_env(None, False, gpu_slots=4)
    whole = limits_from_env(None, False)
    assert four.pids == 4096 and four.memory_bytes and whole.memory_bytes
    assert abs(four.memory_bytes * 4 - whole.memory_bytes) < 4  # the host's, shared by slots


@root_only
def test_what_the_host_enforces_is_found_by_trying() -> None:
    found = enforced()
    assert found["user"] == "a uid per job"
    assert set(found) == {"user", "processes", "memory", "cleanup", "network"}
    # the probe's cgroup is gone again
    from workers.contain import _hierarchies

    assert not [d for h in _hierarchies() for d in h.base.glob("orch-probe-*")]
