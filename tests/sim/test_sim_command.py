"""`orch sim TRACE` as a user runs it: the real executable, its exit codes, what it writes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from policies import SCHEDULING_POLICIES

HAND_TRACE = """\
name,submit_time,job_class,gpus,duration,wait_target
a,0,bulk,4,120,
b,30,bulk,2,60,
c,30,bulk,2,90,
i,100,interactive,1,60,60
"""


def orch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "orch"
    return subprocess.run(
        [str(exe), *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def by_job(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["name"]: j for j in run["jobs"]}


def test_hand_computed_trace_under_gang_and_shared(tmp_path: Path) -> None:
    trace = tmp_path / "hand.csv"
    trace.write_text(HAND_TRACE)
    pool = ["--pool", "1x4", "--policy", "gang", "--policy", "shared"]
    rounds = ["--interval", "60", "--restart", "30"]
    out = orch("sim", str(trace), *pool, *rounds, "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stderr
    assert "gang" in out.stdout and "shared" in out.stdout and "p95 JCT" in out.stdout
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["pool"] == [{"name": "n0", "gpus": 4}]
    assert doc["config"]["interval_s"] == 60 and doc["config"]["restart_s"] == 30

    # One node of 4 GPUs, a round every 60 s; every start costs 30 s (GPUs held, no work), so a
    # job started at round t completes at t + 30 + duration and its GPUs are free from the
    # first round after that.
    # gang (interactive first, then FIFO, no backfill, never preempts):
    #   0: a starts on 4 GPUs -> done 0+30+120 = 150 (JCT 150)
    #   60, 120: b and c (submitted 30) and i (submitted 100) wait: the pool is full
    #   180: a's GPUs are free; i (1 GPU) then b (2) start; c (2) does not fit in the 1 left
    #        i: done 180+30+60 = 270, JCT 170, waited 80 > its 60 s target
    #        b: done 180+30+60 = 270, JCT 240
    #   300: c starts -> done 300+30+90 = 420, JCT 390
    gang = doc["policies"]["gang"]
    assert {n: j["jct"] for n, j in by_job(gang).items()} == {
        "a": 150.0,
        "b": 240.0,
        "c": 390.0,
        "i": 170.0,
    }
    assert by_job(gang)["i"]["waits"] == [80.0]
    s = gang["summary"]
    assert s["mean_jct"] == (150 + 240 + 390 + 170) / 4
    assert s["median_jct"] == (170 + 240) / 2
    assert s["makespan"] == 420.0
    assert s["interactive_attainment"] == 0.0 and s["preemptions"] == 0
    # GPUs held: 4 until the round at 180, then 3 (i, b) until 300, then 2 (c) until 420
    assert gang["held_gpus"] == [[0.0, 4], [180.0, 3], [300.0, 2]]
    assert s["utilisation"] == (4 * 180 + 3 * 120 + 2 * 120) / (4 * 420)

    # shared (interactive at once, preempting bulk; bulk in least-attained-service order):
    #   0: a starts on 4 GPUs; 60: b, c wait (a is young and within its share)
    #   120: i arrives: a is preempted (it did 120-30 = 90 of its 120 s, nothing lost: no
    #        checkpoint interval means continuous checkpoints); i starts (waited 20 s): done
    #        120+30+60 = 210, JCT 110; b starts on 2 of the 3 GPUs bulk may use: done 210,
    #        JCT 180; a (4) and c (2) do not fit
    #   240: a (seq 0) resumes on 4 GPUs with 30 s left: done 240+30+30 = 300, JCT 300;
    #        its re-wait is 240-120 = 120 s
    #   300: c starts -> done 300+30+90 = 420, JCT 390
    shared = doc["policies"]["shared"]
    assert {n: j["jct"] for n, j in by_job(shared).items()} == {
        "a": 300.0,
        "b": 180.0,
        "c": 390.0,
        "i": 110.0,
    }
    assert by_job(shared)["a"]["waits"] == [0.0, 120.0]
    assert by_job(shared)["a"]["preemptions"] == 1
    assert shared["summary"]["interactive_attainment"] == 1.0
    assert shared["summary"]["preemptions"] == 1
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "out" / "results.png").stat().st_size > 0
    else:
        assert "matplotlib not installed" in out.stdout


def test_nodes_file_and_default_output_folder(tmp_path: Path) -> None:
    # two 2-GPU nodes: a 4-GPU gang spans both (every placement may span nodes)
    trace = tmp_path / "t.csv"
    trace.write_text("name,submit_time,gpus,duration\nwide,0,4,100\n")
    nodes = tmp_path / "nodes.json"
    nodes.write_text('[{"name": "x", "gpus": 2}, {"name": "y", "gpus": 2}]')
    out = orch("sim", str(trace), "--nodes", str(nodes), "--policy", "gang", "--restart", "0")
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "t-sim" / "results.json").read_text())
    (wide,) = doc["policies"]["gang"]["jobs"]
    assert wide["jct"] == 100.0


def test_a_job_that_can_never_start_exits_2_naming_it(tmp_path: Path) -> None:
    trace = tmp_path / "big.csv"
    trace.write_text("name,submit_time,gpus,duration\nsmall,0,2,100\nbig,0,16,100\n")
    out = orch("sim", str(trace), "--pool", "1x8", "--policy", "gang")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: 1 job can never start: big (needs 16 GPUs; the pool has 8)"
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "big-sim").exists()


def test_an_unknown_policy_exits_2_listing_the_valid_names(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HAND_TRACE)
    out = orch("sim", str(trace), "--policy", "gang", "--policy", "fastest")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert "'fastest'" in line and "Traceback" not in out.stderr
    for name in SCHEDULING_POLICIES.names():
        assert name in line


def test_bad_pool_exits_2(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HAND_TRACE)
    out = orch("sim", str(trace), "--pool", "16")
    assert out.returncode == 2 and "--pool must be NODESxGPUS" in out.stderr


def test_a_stuck_policy_is_reported_and_the_others_still_run(tmp_path: Path) -> None:
    # 2 nodes x 8 GPUs; static-partition keeps round(10% of 16) = 2 GPUs for interactive jobs,
    # so the 16-GPU bulk job fits the pool but never its 14-GPU bulk partition; gang runs it.
    trace = tmp_path / "t.csv"
    trace.write_text("name,submit_time,gpus,duration\nsmall,0,2,100\nbig,0,16,100\n")
    args = ["--pool", "2x8", "--policy", "static-partition", "--policy", "gang"]
    out = orch("sim", str(trace), *args, "--out", str(tmp_path / "out"))
    assert out.returncode == 1
    assert "static-partition: no job made progress for 1000 rounds" in out.stderr
    assert "big (needs 16 GPUs; the bulk partition has 14)" in out.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["policies"]["static-partition"]["stuck_jobs"] == {
        "big": "needs 16 GPUs; the bulk partition has 14"
    }
    assert doc["policies"]["gang"]["summary"]["completed"] == 2


def test_team_caps_refuse_a_job_up_front(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("name,submit_time,team,gpus,duration\nv1,0,vision,4,100\n")
    teams = tmp_path / "teams.yaml"
    teams.write_text("teams:\n  - name: vision\n    max_gpus: 2\n")
    out = orch("sim", str(trace), "--pool", "1x8", "--teams", str(teams))
    assert out.returncode == 2
    assert "v1 (" in out.stderr and "max_gpus 2" in out.stderr
