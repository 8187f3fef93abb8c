"""GPU kinds in the control loop (in-process runtime, real Redis): a job tuned on one kind runs
its own config on another, and a kind's prediction is replaced by what a run measured."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.errors import SpecError
from orchestrator.pool import NodeInfo
from orchestrator.runtime.base import OutcomeKind
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.store import JobStore
from policies import Decision, DecisionKind
from tests.control.test_loop import job

# an 80 GB kind and a 24 GB one (virtual slots declaring their kinds, as the e2e pool does)
BIG = NodeInfo("big", "127.0.0.1", 2, virtual=True, gpu_memory_gb=80.0, kind="A100", speed=1.0)
SMALL = NodeInfo("small", "127.0.0.1", 2, virtual=True, gpu_memory_gb=24.0, kind="L4", speed=0.4)


@pytest.fixture
def loop_rt(store: JobStore, tmp_path: Path) -> Iterator[tuple[ControlLoop, LocalRuntime]]:
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    rt = LocalRuntime([BIG, SMALL], auto_start=False)
    loop = ControlLoop(settings, store, rt, make_policy("shared"))
    loop.lease.acquire(store.namespace)
    loop.observe()
    yield loop, rt
    loop.lease.release()


def _tuned(store: JobStore, loop: ControlLoop, rt: LocalRuntime, **extra: Any) -> str:
    """A job tuned on the big kind to micro-batch 32 x 1 on one GPU, with its profile."""
    spec = job("k", tuning={"enabled": True}, **extra)
    job_id = store.submit(spec).id
    answer = {"run": True, "config": {"micro_batch": 32, "gpus": 1}, "cache": "miss", "trials": 3}
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("big",)), {"big": 2, "small": 2})
    rt.end(job_id, OutcomeKind.FINISHED, "tuned", answer)
    loop.reap(rt.poll())
    trial = {"precision": "fp32", "status": "ok", "p95_ms": 40.0, "gpus": 1}
    curves = [  # the fastest config needs 40 GB; the next fits 24 GB
        {**trial, "micro_batch": 32, "samples_per_s": 265.0, "peak_mem_mb": 40_000.0},
        {
            **trial,
            "micro_batch": 16,
            "grad_accum": 2,
            "samples_per_s": 240.0,
            "peak_mem_mb": 21_000.0,
        },
        {
            **trial,
            "micro_batch": 8,
            "grad_accum": 4,
            "samples_per_s": 200.0,
            "peak_mem_mb": 12_000.0,
        },
    ]
    store.profiles.save(job_id, {"curves": {"fp32": curves}})
    loop.facts.forget(job_id)
    return job_id


def test_a_job_tuned_on_one_kind_runs_its_own_config_on_another(
    store: JobStore, loop_rt: tuple[ControlLoop, LocalRuntime]
) -> None:
    loop, rt = loop_rt
    job_id = _tuned(store, loop, rt)
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("small",)), {"big": 2, "small": 2})
    run = rt.launches[-1].spec.run
    assert (run.micro_batch, run.grad_accum) == (16, 2)  # the best that fits 24 GB
    config = [e["message"] for e in store.events(job_id) if e["event"] == "config"]
    assert config and "micro-batch 16 x 2" in config[-1], config
    why = store.get(job_id).message  # the job's message says why
    assert "peaked at 40,000 MB, over these GPUs' 22,888 MB" in why, why
    # on the big kind it runs the config it was tuned to
    rt.end(job_id, OutcomeKind.LOST, "lost", {})
    loop.reap(rt.poll())
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("big",)), {"big": 2, "small": 2})
    run = rt.launches[-1].spec.run
    assert (run.micro_batch, run.grad_accum) == (32, 1)


def test_a_kinds_prediction_is_replaced_by_measurement(
    store: JobStore, loop_rt: tuple[ControlLoop, LocalRuntime]
) -> None:
    loop, rt = loop_rt
    job_id = store.submit(job("m")).id
    # a run on the A100 kind measures 100 samples/s on its GPU: the L4 prediction is 40
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("big",)), {"big": 2, "small": 2})
    rt.end(job_id, OutcomeKind.LOST, "lost", {"samples_per_s": 100.0, "world_size": 1})
    loop.reap(rt.poll())
    assert store.scaling.kinds(job_id) == ({"A100": 100.0}, {})
    assert loop.facts.kind_speed(job_id) == (("A100", pytest.approx(1.0)),)
    # a run on L4 measures 60 (this job gains less from the faster kind than the speeds say)
    loop.bind(Decision(DecisionKind.START, job_id, nodes=("small",)), {"big": 2, "small": 2})
    rt.end(job_id, OutcomeKind.LOST, "lost", {"samples_per_s": 60.0, "world_size": 1})
    loop.reap(rt.poll())
    (note,) = [e["message"] for e in store.events(job_id) if e["event"] == "kind-profile"]
    assert note.startswith("on L4: predicted 40.0 samples/s per GPU") and "measured 60.0" in note
    assert "(prediction error -33%)" in note
    speeds = dict(loop.facts.kind_speed(job_id))
    assert speeds["L4"] / speeds["A100"] == pytest.approx(0.6)  # measured, not the kinds' 0.4
    (facts,) = [q for q in loop.observe().queue if q.job_id == job_id]
    assert dict(facts.kind_speed) == pytest.approx(speeds)


def test_an_interactive_job_measured_fast_enough_moves_to_the_cheaper_kind(
    store: JobStore, loop_rt: tuple[ControlLoop, LocalRuntime]
) -> None:
    """Its p95 on the A100 kind was 10 ms against a 50 ms ceiling: a kind of a fifth of that
    speed meets it, so the next start takes the cheaper L4 (speed 0.4), not the faster A100."""
    loop, rt = loop_rt
    spec = job("sess", cls="interactive", sla={"latency": {"max_ms": 50, "percentile": 95}})
    job_id = store.submit(spec).id
    assert store.client.hget(store.keys.job(job_id), "latency_ceiling") == "95 50.0"
    (first,) = [d for d in loop.policy.decide(loop.observe()) if d.job_id == job_id]
    assert set(first.nodes) == {"big"}  # nothing measured: the fastest kind
    loop.bind(first, {"big": 2, "small": 2})
    rt.end(
        job_id, OutcomeKind.LOST, "lost", {"p95_ms": 10.0, "samples_per_s": 50.0, "world_size": 1}
    )
    loop.reap(rt.poll())
    (facts,) = [q for q in loop.observe().queue if q.job_id == job_id]
    assert facts.min_speed == pytest.approx(0.2)
    (again,) = [d for d in loop.policy.decide(loop.observe()) if d.job_id == job_id]
    assert again.kind is DecisionKind.START and set(again.nodes) == {"small"}


def test_orch_show_says_the_kinds_a_job_may_run_on(store: JobStore) -> None:
    from tests.orchestrator.test_views import render_show

    spec = job("picky")
    resources = spec.resources.model_copy(
        update={"gpu_kinds": ["L4", "A100"], "exclude_gpu_kinds": ["T4"]}
    )
    job_id = store.submit(spec.model_copy(update={"resources": resources})).id
    assert "GPU kinds  only L4 or A100; never T4" in render_show(store, job_id)


def test_metrics_and_the_pool_view_label_nodes_by_their_kind() -> None:
    from orchestrator.api.metrics import node_kind
    from orchestrator.pool import nodes_to_json

    (big, small) = nodes_to_json([BIG, SMALL])
    assert (node_kind(big), node_kind(small)) == ("A100", "L4")
    assert (small["kind"], small["speed"]) == ("L4", 0.4)
    # a view published before kinds: the models, or virtual
    assert node_kind({"virtual": True, "models": []}) == "virtual"


def test_the_loop_moves_a_running_job_to_a_faster_kind_once_it_is_free(
    store: JobStore, tmp_path: Path
) -> None:
    """A rigid job started on the L4 GPUs while the A100s were taken; once they are free, the
    policy moves it there (no restart cost in this loop, so any gain pays) and the loop stops it
    and starts it again on the A100 node, as a resize to other GPUs."""
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    rt = LocalRuntime([BIG, SMALL])
    loop = ControlLoop(settings, store, rt, make_policy("shared"), restart_cost_s=0.0)
    loop.lease.acquire(store.namespace)
    try:
        blocker = store.submit(job("blocker", gpus=2)).id
        loop.round()
        loop.round()
        assert set(loop.runs[blocker].launch.nodes) == {"big"}
        mover = store.submit(job("mover", gpus=2)).id
        loop.round()
        loop.round()
        assert set(loop.runs[mover].launch.nodes) == {"small"}
        time.sleep(0.5)  # it stepped soon after it started, and has just checkpointed: a move
        # loses nothing, and its start-up (its own restart cost, measured) is short
        now = time.time()
        first = loop.runs[mover].launched_at + 0.01
        store.put_metrics(mover, {"first_step_at": first, "checkpoint_at": now})
        assert store.cancel(blocker)
        for _ in range(6):
            loop.round()
            if mover in loop.runs and set(loop.runs[mover].launch.nodes) == {"big"}:
                break
        assert set(loop.runs[mover].launch.nodes) == {"big"}, store.get(mover).message
        events = [e["message"] for e in store.events(mover)]
        assert any("moved to 2 other GPUs" in m for m in events), events
    finally:
        loop.release(grace_s=5)


def test_a_job_tuned_to_bf16_runs_a_precision_a_kind_without_it_has(
    store: JobStore, tmp_path: Path
) -> None:
    # CPU slots declaring T4 (no bf16 there): a bf16 job runs fp16 and says so
    t4 = NodeInfo("t4", "127.0.0.1", 2, virtual=True, kind="T4", speed=0.21)
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    rt = LocalRuntime([BIG, t4], auto_start=False)
    loop = ControlLoop(settings, store, rt, make_policy("shared"))
    loop.lease.acquire(store.namespace)
    try:
        loop.observe()
        job_id = store.submit(job("b", run={"steps": 5, "micro_batch": 8, "precision": "bf16"})).id
        loop.bind(Decision(DecisionKind.START, job_id, nodes=("t4",)), {"big": 2, "t4": 2})
        assert rt.launches[-1].spec.run.precision == "fp16"
        why = store.get(job_id).message
        assert "these GPUs have no bf16: runs fp16, not measured" in why, why
        config = [e["message"] for e in store.events(job_id) if e["event"] == "config"]
        assert config and config[-1].endswith("fp16 (rule)"), config
        # on a kind with bf16 it runs bf16
        rt.end(job_id, OutcomeKind.LOST, "lost", {})
        loop.reap(rt.poll())
        loop.bind(Decision(DecisionKind.START, job_id, nodes=("big",)), {"big": 2, "t4": 2})
        assert rt.launches[-1].spec.run.precision == "bf16"
    finally:
        loop.lease.release()


def test_a_node_gone_lately_still_counts_for_a_submission(
    store: JobStore, loop_rt: tuple[ControlLoop, LocalRuntime]
) -> None:
    """The only A100 node leaves (a restart, say): a job that needs an A100 is still accepted,
    to wait for it, while the node is published as lately absent; one the pool never had is
    refused as before."""
    loop, rt = loop_rt
    loop.round()
    assert store.pool_view.read()["absent_nodes"] == []  # type: ignore[index]
    rt.set_nodes([SMALL])
    loop.round()
    view = store.pool_view.read()
    assert view is not None
    assert [n["node_id"] for n in view["nodes"]] == ["small"]
    assert [n["node_id"] for n in view["absent_nodes"]] == ["big"]
    wants_a100 = job("a100", resources={"gpus": 2, "gpu_kinds": ["A100"]})
    assert store.submit(wants_a100).state.value == "queued"
    with pytest.raises(SpecError, match=r"resources\.gpu_kinds"):
        store.submit(job("h100", resources={"gpus": 1, "gpu_kinds": ["H100"]}))
    rt.set_nodes([BIG, SMALL])  # back: no longer absent
    loop.round()
    assert store.pool_view.read()["absent_nodes"] == []  # type: ignore[index]


def test_a_node_gone_longer_than_kept_is_forgotten(
    store: JobStore, loop_rt: tuple[ControlLoop, LocalRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, rt = loop_rt
    loop.round()
    rt.set_nodes([SMALL])
    monkeypatch.setattr("orchestrator.control.loop.ABSENT_KEPT_S", 0.0)
    time.sleep(0.01)
    loop.round()
    assert store.pool_view.read()["absent_nodes"] == []  # type: ignore[index]
    with pytest.raises(SpecError, match=r"resources\.gpu_kinds"):
        store.submit(job("a100", resources={"gpus": 1, "gpu_kinds": ["A100"]}))
