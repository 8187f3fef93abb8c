"""Submission against a published pool of several GPU kinds: a gang runs on one kind, so a job
larger than every kind is refused at once (it would wait for ever), and a kind named in another
case than the pool's is refused with the pool's spelling (it would silently match no GPU)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store import JobStore

MIXED = {
    "nodes": [
        {"node_id": "h0", "gpus": 4, "kind": "H100", "speed": 2.0},
        {"node_id": "l0", "gpus": 4, "kind": "L4", "speed": 0.5},
        {"node_id": "l1", "gpus": 2, "kind": "L4", "speed": 0.5},
    ]
}


def _spec(gpus: int | dict[str, int], name: str = "job", **resources: Any) -> JobSpec:
    return parse_spec(
        {
            "name": name,
            "team": "t",
            "class": "bulk",
            "workload": "mlp",
            "sla": {"throughput": {"min_samples_per_s": 1}},
            "resources": {"gpus": gpus, **resources},
            "run": {"steps": 10},
        }
    )


def test_a_gang_larger_than_every_kind_is_refused_naming_the_largest(store: JobStore) -> None:
    store.pool_view.publish(MIXED, ttl_ms=60_000)
    with pytest.raises(SpecError) as err:
        store.submit_many([_spec(6, name="fits"), _spec(7, name="big")])
    (problem,) = err.value.problems
    assert problem == (
        "job 'big': resources.gpus asks for at least 7 GPUs, but a job's GPUs are all of one "
        "kind and the pool's largest kind has 6 (its kinds: H100 x4, L4 x6): ask for at most 6"
    )
    assert store.list() == []  # all or nothing
    # elastic: its minimum is what must fit one kind
    assert store.submit(_spec({"min": 2, "max": 10}, name="elastic")).state.value == "queued"
    assert store.submit(_spec(6)).state.value == "queued"


def test_in_a_pool_of_one_kind_a_larger_job_is_queued_to_wait(store: JobStore) -> None:
    one = {"nodes": [{"node_id": "n0", "gpus": 4}, {"node_id": "n1", "gpus": 2}]}
    store.pool_view.publish(one, ttl_ms=60_000)
    # (the policy's wait says "needs 8 GPUs; the pool has 6": nodes may join)
    assert store.submit(_spec(8)).state.value == "queued"


@pytest.mark.parametrize(
    ("field", "names", "message"),
    [
        ("exclude_gpu_kinds", ["l4"], "resources.exclude_gpu_kinds names l4"),
        ("gpu_kinds", ["h100"], "resources.gpu_kinds names h100"),
        ("gpu_kinds", ["H100", "l4"], "resources.gpu_kinds names l4"),
    ],
)
def test_a_kind_in_another_case_than_the_pools_is_refused_with_its_spelling(
    store: JobStore, field: str, names: list[str], message: str
) -> None:
    store.pool_view.publish(MIXED, ttl_ms=60_000)
    with pytest.raises(SpecError) as err:
        store.submit(_spec(1, **{field: names}))
    (problem,) = err.value.problems
    assert message in problem and "did you mean" in problem, problem
    assert store.list() == []


def test_a_kind_the_pool_lacks_in_any_case_may_be_excluded(store: JobStore) -> None:
    store.pool_view.publish(MIXED, ttl_ms=60_000)
    rec = store.submit(_spec(2, exclude_gpu_kinds=["T4"]))  # a kind nodes may bring later
    assert rec.state.value == "queued"


@pytest.mark.parametrize(
    ("resources", "problem"),
    [
        (
            {"gpu_kinds": ["L4"], "exclude_gpu_kinds": ["L4"]},
            "resources: gpu_kinds and exclude_gpu_kinds both name L4",
        ),
        ({"gpu_kinds": ["H100", "H100"]}, "resources: gpu_kinds names H100 more than once"),
        ({"exclude_gpu_kinds": ["T4", "T4"]}, "exclude_gpu_kinds names T4 more than once"),
    ],
)
def test_contradictory_or_repeated_kinds_are_refused(
    resources: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SpecError) as err:
        _spec(1, **resources)
    assert problem in err.value.problems[0], err.value.problems


def test_a_restriction_that_rules_nothing_out_is_judged_by_size_alone(store: JobStore) -> None:
    # every node has 80 GB: a 40 GB need rules nothing out, so the message is the kinds' size
    roomy = {"nodes": [{**n, "gpu_memory_gb": 80.0} for n in MIXED["nodes"]]}
    store.pool_view.publish(roomy, ttl_ms=60_000)
    with pytest.raises(SpecError) as err:
        store.submit(_spec(7, gpu_memory_gb=40.0))
    (problem,) = err.value.problems
    assert "resources.gpus asks for at least 7 GPUs" in problem, problem
    # in a pool of one kind, all of it usable, the larger job is queued as any other
    one = {"nodes": [{"node_id": "n0", "gpus": 4, "gpu_memory_gb": 80.0, "kind": "L4"}]}
    store.pool_view.publish(one, ttl_ms=60_000)
    assert store.submit(_spec(8, gpu_memory_gb=40.0, gpu_kinds=["L4"])).state.value == "queued"
