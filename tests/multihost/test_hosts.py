"""Jobs across hosts that share nothing but a network (see ``conftest``: one virtual GPU on each
of two worker hosts, the orchestrator and its Redis on a third).

In file order: a job on both hosts; a preemption that moves a job from one host to the other;
a host that dies (last: the session's cluster has one worker host left after it).
"""

from __future__ import annotations

import math
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from orchestrator.runtime.harness_config import job_harness_config
from orchestrator.store.states import JobState
from tests.e2e.jobs import HOLDER, RESUMED_ONCE, mlp_job, state_events
from tests.multihost.conftest import Cluster
from workers.config import HarnessConfig
from workers.harness import Harness

ONCE = ["submitted", "queued", "placed", "running", "finished"]


def _step(c: Cluster, job_id: str) -> int:
    return int(c.store.metrics(job_id).get("step", 0))


def _wait_steps(c: Cluster, job_id: str, steps: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while _step(c, job_id) < steps:
        assert time.monotonic() < deadline, f"{job_id} at step {_step(c, job_id)} < {steps}"
        time.sleep(0.2)


def _events(c: Cluster, job_id: str) -> list[str]:
    return [e["event"] for e in state_events(c.store.events(job_id))]


def test_embedded_redis_is_on_the_head_address_and_wants_its_password(cluster: Cluster) -> None:
    c = cluster
    # The orchestrator's own Redis serves the other hosts (the tests reach it over the bridge
    # too), and only with the password.
    host = c.head.ip
    assert f"@{host}:" in c.redis_url
    port = int(c.redis_url.rsplit(":", 1)[1].split("/")[0])
    stranger = redis.Redis(host=host, port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
    try:
        stranger.ping()
        raise AssertionError("the embedded Redis answered without its password")
    except redis.AuthenticationError:
        pass
    finally:
        stranger.close()


def test_a_job_on_two_hosts_trains_as_one_and_reports_live(cluster: Cluster) -> None:
    c = cluster
    steps = 150
    job = c.store.submit(mlp_job("across", gpus=2, steps=steps)).id
    with c.placements(job) as placements:
        c.wait(job, {JobState.RUNNING, JobState.FINISHED})
        # Rank 0 (on a worker host) streams its metrics to the head's Redis while the job
        # runs: the URL it was given names the head's address (read here over the bridge).
        live: dict[str, object] = {}
        deadline = time.monotonic() + 60
        while c.store.get(job).state is JobState.RUNNING and time.monotonic() < deadline:
            live = c.store.metrics(job)
            if 0 < int(str(live.get("step", 0))) < steps:
                break
            time.sleep(0.1)
        rec = c.wait(job, {JobState.FINISHED, JobState.FAILED})
    assert [sorted(p) for p in placements] == [["w1", "w2"]]  # a GPU on each host, one run
    assert live.get("world_size") == 2 and 0 < int(str(live["step"])) < steps, live

    assert rec.state is JobState.FINISHED, rec.message
    assert rec.result is not None and rec.result["steps_done"] == steps
    assert _events(c, job) == ONCE

    # Trained together: gloo averaged the two ranks' gradients over the network, so the run is
    # the same as one process with their combined batch (and not two separate models).
    cfg = job_harness_config(rec.spec)
    cfg["micro_batch"] *= 2
    reference = Harness(HarnessConfig.from_dict(cfg), num_threads=1).run()
    assert math.isclose(rec.result["loss"], reference.loss or 0.0, rel_tol=1e-3)
    assert math.isclose(rec.result["param_fingerprint"], reference.param_fingerprint, rel_tol=1e-4)


def test_a_preempted_job_resumes_on_the_other_host_from_its_checkpoint(cluster: Cluster) -> None:
    c = cluster
    steps = 800
    # An interactive job takes one host (interactive jobs are never preempted)...
    holder = c.store.submit(
        mlp_job("holder", cls="interactive", workload=HOLDER, duration_s=300)
    ).id
    c.wait(holder, {JobState.RUNNING})
    (held,) = c.hosts_of(holder)
    bulk = c.store.submit(mlp_job("bulk", steps=steps, checkpoint_every=20)).id
    with c.placements(bulk) as placements:
        # ...the bulk job gets the other...
        c.wait(bulk, {JobState.RUNNING})
        _wait_steps(c, bulk, 40)
        # ...and a second interactive job, with no GPU free, takes the bulk job's host.
        notebook = c.store.submit(
            mlp_job("notebook", cls="interactive", workload=HOLDER, duration_s=300)
        ).id
        c.wait(notebook, {JobState.RUNNING})
        taken = c.hosts_of(notebook)
        assert c.store.get(bulk).state is JobState.QUEUED
        # The holder's host frees up: the bulk job resumes there, from its checkpoint.
        c.store.cancel(holder)
        c.wait(bulk, {JobState.RUNNING})
        c.store.cancel(notebook)  # two cores: the bulk job alone finishes sooner
        rec = c.wait(bulk, {JobState.FINISHED, JobState.FAILED}, timeout_s=240)

    (first,) = [h for h in c.nodes.values() if h.name != held]
    assert placements == [(first.name,), (held,)]
    assert taken == (first.name,)
    assert rec.state is JobState.FINISHED, rec.message
    assert rec.result is not None
    assert rec.result["steps_done"] == steps
    assert 20 <= rec.result["resumed_from_step"] < steps
    assert _events(c, bulk) == RESUMED_ONCE
    assert any("preempted" in e.get("message", "") for e in c.store.events(bulk))
    for job in (holder, notebook):
        c.wait(job, {JobState.CANCELLED})


def test_a_dead_host_has_its_job_requeued_and_finished_elsewhere_once(cluster: Cluster) -> None:
    c = cluster
    # long enough that the host dies mid-run however slowly it is cut and killed (with 600
    # steps the run once finished on the dying host before its processes were killed)
    steps, short = 3000, 200
    doomed = c.store.submit(mlp_job("doomed", steps=steps, checkpoint_every=100)).id
    other = c.store.submit(mlp_job("survivor", steps=short)).id
    with c.placements(doomed) as placements, c.placements(other) as others:
        c.wait(doomed, {JobState.RUNNING})
        # past its first checkpoint (step 100) before the host dies: the kill used to race
        # the steps from 40 to 100 and, when it won, the job rightly restarted from step 0
        _wait_steps(c, doomed, 100)
        deadline = time.monotonic() + 60
        while c.store.metrics(doomed).get("checkpoint_at") is None:
            assert time.monotonic() < deadline, "no checkpoint reported"
            time.sleep(0.2)
        (name,) = placements[0]

        # The host dies: its cable is pulled and every process on it is killed.
        dead = next(h for h in c.workers if h.name == name)
        dead.cut()
        dead.kill_all()
        died_at = time.time()
        rec = c.wait(doomed, {JobState.FINISHED, JobState.FAILED}, timeout_s=240)

    assert rec.state is JobState.FINISHED, rec.message
    (alive,) = [h.name for h in c.workers if h.name != name]
    assert placements == [(name,), (alive,)]
    assert others == [(alive,)]
    assert rec.result is not None
    # Resumed from its last checkpoint, never run twice: its steps add up to the spec's once.
    assert rec.result["steps_done"] == steps
    assert 100 <= rec.result["resumed_from_step"] < steps
    assert _step(c, doomed) == steps
    events = state_events(c.store.events(doomed))
    assert [e["event"] for e in events] == RESUMED_ONCE
    assert "worker lost" in events[4]["message"], events[4]
    # Ray marks the node dead ~5 s after (health checks sped up for the test); the scheduler
    # can take 30 s more when its periodic NVML probe of the nodes was sent to the dying one
    # (GPUPool waits up to 30 s for a probe, holding the round).
    noticed_s = events[4]["ts"] - died_at
    print(f"the dead host's job was requeued {noticed_s:.1f} s after the host died")
    assert noticed_s < 60
    assert c.wait(other, {JobState.FINISHED, JobState.FAILED}).state is JobState.FINISHED
    assert _events(c, other) == ONCE
    view = c.store.pool_view.read() or {}
    assert [c.nodes[n["node_id"]].name for n in view["nodes"]] == [alive]
