"""The simulator runs pools of several GPU kinds as the live scheduler places them: a job runs at
its own speed on the kind it holds, and is held to its required and excluded kinds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.sim import SimConfig, Simulator
from orchestrator.sim.cli import load_nodes
from orchestrator.sim.errors import TraceError, UnplaceableJobs
from orchestrator.sim.trace import TraceJob, read_trace
from orchestrator.sim.wallclock import WallClockJobModel
from policies import SCHEDULING_POLICIES, DecisionKind

NODES = [("slow", 2), ("fast", 2)]
KINDS = {"slow": ("T4", 0.5), "fast": ("H100", 2.0)}
CONFIG = SimConfig(interval_s=1.0, restart_s=0.0, log_decisions=True)


def _run(jobs: list[TraceJob], policy: str = "shared") -> tuple[Simulator, dict[str, float]]:
    sim = Simulator(jobs, SCHEDULING_POLICIES.create(policy), NODES, config=CONFIG, kinds=KINDS)
    res = sim.run()
    done = {r.name: r.completed_at for r in res.records}
    assert all(t is not None for t in done.values()), done
    return sim, {k: float(v) for k, v in done.items() if v is not None}


def test_a_job_runs_at_its_speed_on_the_kind_it_holds() -> None:
    # 100 s of work at speed 1: 50 s on H100 (speed 2), 200 s on T4 (0.5)
    _, done = _run([TraceJob("a", 0.0, gpus=2, duration=100.0)])
    assert done["a"] == pytest.approx(50.0, abs=1.0)
    _, done = _run([TraceJob("b", 0.0, gpus=2, duration=100.0, gpu_kinds="T4")])
    assert done["b"] == pytest.approx(200.0, abs=1.0)
    # its own speed on a kind wins over the kind's
    _, done = _run([TraceJob("c", 0.0, gpus=2, duration=100.0, kind_speed="H100:4 T4:1")])
    assert done["c"] == pytest.approx(25.0, abs=1.0)


def test_a_wall_clock_job_runs_its_length_on_any_kind() -> None:
    # a live run replayed (the twin test): virtual slots run as fast whatever kind they declare
    jobs = [TraceJob("w", 0.0, gpus=2, duration=100.0, gpu_kinds="T4")]
    sim = Simulator(
        jobs,
        SCHEDULING_POLICIES.create("shared"),
        NODES,
        config=CONFIG,
        kinds=KINDS,
        models={"w": WallClockJobModel(100.0)},
    )
    (done,) = [r.completed_at for r in sim.run().records]
    assert done == pytest.approx(100.0, abs=1.0)


def test_each_job_takes_the_kind_it_gains_most_on_first() -> None:
    jobs = [
        TraceJob("likes-t4", 0.0, gpus=2, duration=100.0, kind_speed="T4:1 H100:1"),
        TraceJob("likes-h100", 0.0, gpus=2, duration=100.0, kind_speed="T4:0.5 H100:3"),
    ]
    sim, done = _run(jobs)
    starts = {d.job_id: d for _, d in sim.applied if d.kind is DecisionKind.START}
    # the first in order takes a kind it is fastest on (a tie: the cheaper), the other the rest
    assert set(starts["likes-t4"].nodes) == {"slow"}
    assert set(starts["likes-h100"].nodes) == {"fast"}
    assert done["likes-h100"] == pytest.approx(100.0 / 3, abs=1.0)


def test_excluded_and_missing_kinds() -> None:
    sim, _ = _run([TraceJob("x", 0.0, gpus=1, duration=10.0, exclude_kinds="H100")])
    (start,) = [d for _, d in sim.applied if d.kind is DecisionKind.START]
    assert set(start.nodes) == {"slow"}
    with pytest.raises(UnplaceableJobs) as err:
        Simulator(
            [TraceJob("y", 0.0, gpus=1, duration=1.0, gpu_kinds="A100")],
            SCHEDULING_POLICIES.create("shared"),
            NODES,
            kinds=KINDS,
        )
    # named as the trace says it (its column), not as a job file would
    assert "y (needs 1 GPU; needs GPUs of kind A100 (trace column gpu_kinds)" in str(err.value)
    with pytest.raises(UnplaceableJobs, match="largest kind has 2"):  # 3 GPUs of one kind
        Simulator(
            [TraceJob("z", 0.0, gpus=3, duration=1.0)],
            SCHEDULING_POLICIES.create("shared"),
            NODES,
            kinds=KINDS,
        )


def test_traces_and_nodes_files_carry_kinds(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "name,submit_time,gpus,duration,gpu_kinds,exclude_kinds,kind_speed\n"
        'a,0,1,10,H100 A100,,"H100:2 A100:1"\nb,0,1,10,,T4,\n'
    )
    a, b = read_trace(trace)
    assert a.kinds() == (("H100", "A100"), ()) and a.speeds() == (("H100", 2.0), ("A100", 1.0))
    assert b.kinds() == ((), ("T4",)) and b.speeds() == ()
    bad = tmp_path / "bad.csv"
    bad.write_text("name,submit_time,gpus,duration,kind_speed\na,0,1,10,H100=2\n")
    with pytest.raises(TraceError, match="kind_speed must be KIND:SPEED"):
        read_trace(bad)
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps([{"name": "x", "gpus": 2, "kind": "H100", "speed": 2}]))
    assert [(n.kind, n.speed) for n in load_nodes(nodes)] == [("H100", 2.0)]
    nodes.write_text(
        json.dumps(
            [
                {"name": "x", "gpus": 2, "kind": "H100", "speed": 2},
                {"name": "y", "gpus": 2, "kind": "H100", "speed": 3},
            ]
        )
    )
    with pytest.raises(SpecError, match="one speed"):
        load_nodes(nodes)


def _jsonl_row(tmp_path: Path, **cols: object) -> Path:
    path = tmp_path / "t.jsonl"
    row = {"name": "j", "submit_time": 0, "gpus": 1, "duration": 10, **cols}
    path.write_text(json.dumps(row) + "\n")
    return path


def test_jsonl_lists_and_objects_are_the_columns_space_separated_forms(tmp_path: Path) -> None:
    path = _jsonl_row(
        tmp_path, gpu_kinds=["H100", "A100"], exclude_kinds=["L4"], kind_speed={"H100": 2.5}
    )
    (job,) = read_trace(path)
    assert job.kinds() == (("H100", "A100"), ("L4",))
    assert job.speeds() == (("H100", 2.5),)


@pytest.mark.parametrize(
    ("cols", "message"),
    [
        ({"gpu_kinds": [1, 2]}, "column 'gpu_kinds' must be kind names"),
        ({"exclude_kinds": {"L4": 1}}, "column 'exclude_kinds' must be kind names"),
        ({"kind_speed": ["H100:2"]}, "column 'kind_speed' must be KIND:SPEED pairs"),
        ({"kind_speed": {"H100": "fast"}}, "column 'kind_speed' must be KIND:SPEED pairs"),
        ({"team": ["a"]}, "column 'team' must be a string"),
        ({"kind_speed": "H100:2:3"}, "kind_speed must be KIND:SPEED pairs"),
        ({"kind_speed": "H100:2,L4:1"}, "kind_speed must be KIND:SPEED pairs"),
        ({"kind_speed": "H100:2 H100:0.1"}, "kind_speed names H100 twice"),
        ({"kind_speed": "H100:1e308"}, "at most 1e+06"),
        ({"gpu_kinds": "H 100"}, None),  # two names, each fine
        ({"gpu_kinds": "$(id)"}, "gpu_kinds must be kind names"),
    ],
)
def test_bad_kind_columns_are_refused_naming_the_row(
    tmp_path: Path, cols: dict[str, object], message: str | None
) -> None:
    path = _jsonl_row(tmp_path, **cols)
    if message is None:
        assert read_trace(path)
        return
    with pytest.raises(TraceError, match=re.escape(message)) as err:
        read_trace(path)
    assert f"{path}:1" in str(err.value)


def test_a_nodes_file_problem_names_the_node(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("- {name: a, gpus: 4}\n- {name: b, gpus: 4, speed: -1}\n- {gpus: 0}\n")
    with pytest.raises(SpecError) as err:
        load_nodes(nodes)
    problems = err.value.problems
    assert "node 2 ('b'): speed must be > 0.0, got -1" in problems, problems
    assert any(p.startswith("node 3: ") and "gpus" in p for p in problems), problems
