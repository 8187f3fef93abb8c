"""The twin: one trace run live and in the simulator, and their decisions side by side.

Used by the twin test (``test_twin.py``, which asserts that they agree on :data:`FIRST_ACT`,
the trace's first six jobs) and by the twin benchmark (``bench/twin/run.py``, which runs the
whole :data:`TRACE` and prints and records both timelines).

A trace of 18 short real jobs (both classes, three teams with guarantees 2/2/2 and speech capped
at 3, an elastic job, a deadline job, interactive starts that need room) runs live under
``shared`` on the multi-node virtual-GPU cluster (a head, a 4-GPU node, a 2-GPU node) against a
real Redis, then in the simulator on the same nodes, with the very policy object the live loop
ran, the submission times the live run had (each wave when the live loop first acted on it: an
interactive job starts in the first round that sees it, so its wave arrives when it started; a
round that took 3 s under the full suite's load otherwise shifted every later decision), each
job's measured run length (first step to its end) and start-up (placement to first step: the
median for a run stopped before its first step), and the restart cost the live loop weighs.

Lining the two worlds up: live jobs run for a wall-clock ``run.duration_s`` in total whatever
their GPU count, a resumed run for what is left of it (the run time is in the checkpoint a
stopped run writes), which the simulator's :class:`~orchestrator.sim.wallclock.WallClockJobModel`
does too, for the sum of the live runs' measured lengths. Events are spaced well apart
against the jitter of live gang starts (a few seconds on a loaded 2-core machine): the trace
tests decisions, not timing.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.sim.config import SimConfig
from orchestrator.sim.engine import Simulator
from orchestrator.sim.trace import TraceJob
from orchestrator.sim.wallclock import WallClockJobModel
from orchestrator.spec import JobSpec, parse_spec
from orchestrator.store.states import JobState
from orchestrator.teams import parse_teams
from policies import DecisionKind
from policies.scheduling import SchedulingPolicy
from tests.e2e.conftest import Orch

TEAMS: dict[str, Any] = {
    "teams": [
        {"name": "vision", "guaranteed_gpus": 2},
        {"name": "speech", "guaranteed_gpus": 2, "max_gpus": 3},
        {"name": "nlp", "guaranteed_gpus": 2},
    ]
}
JITTER_S = 1.0
"""How far a live decision's time may be off what the simulator replays: a round's latency
(0.2 s rounds on a loaded machine), a stopped run's clean-up, the report of a first step."""
VARIANTS = 20
"""Replays with start-ups jittered by up to ``JITTER_S`` tried when the exact one differs."""
RESTART_S = 6.0
"""What the live loop weighs a restart at (about a gang's start on this loaded machine)."""


@dataclass(frozen=True)
class Job:
    """One job of the trace: when it is submitted (s after the first) and what it is."""

    at: float
    name: str
    team: str
    cls: str = "bulk"
    gpus: int | tuple[int, int] = 1
    duration_s: float = 10.0
    deadline_s: float | None = None
    kinds: tuple[str, ...] = ()
    """``resources.gpu_kinds``: the GPU kinds it may run on (empty: any)."""
    exclude: tuple[str, ...] = ()
    """``resources.exclude_gpu_kinds``."""


TRACE = [
    # contention on 6 GPUs, decided by team accounting
    Job(0, "v1", "vision", gpus=2, duration_s=30),
    Job(0, "s1", "speech", gpus=2, duration_s=15),
    Job(0, "s2", "speech", gpus=2, duration_s=20),  # over speech's cap until s1 ends
    Job(0, "n1", "nlp", gpus=(1, 2), duration_s=30),  # elastic
    Job(18, "i1", "vision", cls="interactive", duration_s=10),  # vision's own v1 gives way
    Job(35, "i2", "nlp", cls="interactive", gpus=2, duration_s=8),  # nlp's own n1 gives way
    # then waves within every team's guarantee
    Job(110, "v2", "vision", duration_s=5),
    Job(110, "s3", "speech", duration_s=5),
    Job(110, "d1", "vision", duration_s=0, deadline_s=300),  # work by a deadline
    Job(110, "n2", "nlp", duration_s=5),
    Job(132, "s4", "speech", duration_s=5),
    Job(132, "v3", "vision", duration_s=5),
    Job(132, "i3", "speech", cls="interactive", duration_s=5),
    Job(132, "n3", "nlp", duration_s=5),
    # a full pool again: nlp's elastic n5 starts on 1 GPU beside n4 and grows when it ends
    Job(154, "v4", "vision", gpus=2, duration_s=8),
    Job(154, "s5", "speech", gpus=2, duration_s=16),
    Job(154, "n4", "nlp", duration_s=8),
    Job(154, "n5", "nlp", gpus=(1, 2), duration_s=25),
]

FIRST_ACT = TRACE[:6]
"""The trace's first act, the twin test's (139 s live on a loaded machine, against about 210 s
for the whole trace on an idle one): contention decided by team accounting, an elastic job, and
both interactive starts that need room taking their own team's bulk job. The later waves (within
every guarantee, the deadline job, an elastic job growing) are the benchmark's, with the rest."""

KINDS_ACT = [
    # a pool of two kinds: the cluster's virtual slots (6) and 2 declared L4 GPUs at 0.4
    Job(0, "v1", "vision", gpus=4, duration_s=40, exclude=("L4",)),
    Job(0, "n1", "nlp", gpus=2, duration_s=25, kinds=("L4",)),
    Job(0, "s1", "speech", gpus=2, duration_s=15),  # bulk: the fastest kind, not the free L4s
    Job(8, "s2", "speech", duration_s=10),  # the next GPU of any kind
    Job(8, "n2", "nlp", duration_s=8, kinds=("L4",)),  # waits for an L4 while others are free
    # the pool full: room on the fastest kind, from vision's own v1 there (none from n1 on L4)
    Job(12, "i1", "vision", cls="interactive", duration_s=8),
]
"""A trace on a pool of two kinds (``test_twin.py`` adds an L4 node of 2 GPUs at speed 0.4):
jobs that require or exclude a kind, a bulk job taking the fastest kind, one that waits for
its kind while GPUs of the other are free, and an interactive start that makes room on the
kind it starts on (about a minute live)."""

TIE_S = 1.5
"""Decisions closer than this live are a tie: their order in the replay is not compared."""

Event = tuple[float, str, str]
"""(seconds, what: ``start``/``preempt``/``resize->N``, job name)."""


@dataclass
class Facts:
    """What the live run measured of one job: its submission, and per run (placement to its
    end) the start-up (placement to first step) and the length (first step to the end), each
    ``None`` for a run stopped before its first step."""

    submitted: float = 0.0
    placed: float | None = None
    """When its first run was placed (an interactive job's: the first round that saw it)."""
    starts: list[float | None] = field(default_factory=list)
    lengths: list[float | None] = field(default_factory=list)


def spec(job: Job) -> JobSpec:
    """The job's live spec: a small MLP for ``duration_s`` (or a sample count by a deadline).

    A job run for a wall-clock time sleeps 50 ms before each step (``pace_ms``): its length
    is the same, and the gang starts the trace measures are not slowed by other jobs' ranks
    computing flat out on the test machine's few cores."""
    lo, hi = job.gpus if isinstance(job.gpus, tuple) else (job.gpus, job.gpus)
    run: dict[str, Any] = {"micro_batch": 8, "warmup_steps": 1, "checkpoint_every": 0}
    args: dict[str, Any] = {"hidden": 32, "pace_ms": 50}
    if job.deadline_s is not None:
        args = {"hidden": 32}
        sla: dict[str, Any] = {
            "throughput": {"work_samples": 8 * 400, "deadline_s": job.deadline_s}
        }
    elif job.cls == "interactive":
        sla = {"latency": {"max_ms": 10_000, "start_within_s": 5}}
        run["duration_s"] = job.duration_s
    else:
        sla = {"throughput": {"min_samples_per_s": 1}}
        run["duration_s"] = job.duration_s
    return parse_spec(
        {
            "name": job.name,
            "team": job.team,
            "class": job.cls,
            "workload": {"name": "mlp", "args": args},
            "sla": sla,
            "resources": {
                "gpus": {"min": lo, "max": hi},
                "gpu_kinds": list(job.kinds),
                "exclude_gpu_kinds": list(job.exclude),
            },
            "run": run,
        }
    )


def run_live(o: Orch, trace: Sequence[Job] = TRACE) -> dict[str, str]:
    """Submit ``trace`` on its schedule; wait for every job to finish. Job ids by name."""
    o.running.scheduler.restart_cost_s = RESTART_S
    o.store.put_teams(parse_teams(TEAMS, "twin teams"))
    deadline = time.monotonic() + 60
    while o.store.pool_view.read() is None:  # the loop's first round is behind it
        if time.monotonic() > deadline:
            raise RuntimeError("the control loop published no pool view in 60 s")
        time.sleep(0.1)
    t0 = time.monotonic()
    ids: dict[str, str] = {}
    waves: dict[float, list[Job]] = defaultdict(list)
    for job in trace:
        waves[job.at].append(job)
    for at, wave in sorted(waves.items()):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        # one round trip: a scheduling round sees the whole wave or none of it, as in the
        # simulator, where the wave arrives at one instant
        ids.update(zip((j.name for j in wave), o.store.submit_many(map(spec, wave)), strict=True))
    for job_id in ids.values():
        rec = o.wait(job_id, {JobState.FINISHED, JobState.FAILED}, timeout_s=300)
        if rec.state is not JobState.FINISHED:
            raise RuntimeError(f"{rec.id} {rec.state.value}: {rec.message}")
    return ids


Record = tuple[list[dict[str, Any]], list[dict[str, Any]]]
"""A job's stored events and its workers' reports."""


def records(o: Orch, ids: dict[str, str]) -> dict[str, Record]:
    """What the store kept of each job of the live run, by name."""
    return {n: (o.store.events(j), o.store.metrics_history(j, 1000)) for n, j in ids.items()}


def live_timeline(recs: dict[str, Record]) -> tuple[list[Event], dict[str, Facts]]:
    """The live run's starts, preemptions and resizes (from the job events), and per job its
    submission, run lengths and start latencies (from the events and the workers' reports)."""
    events: list[Event] = []
    facts: dict[str, Facts] = defaultdict(Facts)
    for name, (evs, reports) in recs.items():
        firsts = sorted({float(r["first_step_at"]) for r in reports if r.get("first_step_at")})
        f = facts[name]
        f.submitted = evs[0]["ts"]
        placed = None
        for e in evs[1:]:
            kind, src, msg = e["event"], e.get("from", ""), e.get("message", "")
            if kind == "placed":
                if src == "queued":
                    events.append((e["ts"], "start", name))
                    if f.placed is None:
                        f.placed = e["ts"]
                else:
                    size = msg.split(" GPUs")[0].split(" to ")[-1]
                    events.append((e["ts"], f"resize->{size}", name))
            if kind == "queued" and msg.startswith("requeued: preempted"):
                events.append((e["ts"], "preempt", name))
            if placed is not None and kind in ("queued", "placed", "finished"):
                first = next((t for t in firsts if placed < t <= e["ts"]), None)
                f.starts.append(None if first is None else first - placed)
                f.lengths.append(None if first is None else e["ts"] - first)
                placed = None
            if kind == "placed":
                placed = e["ts"]
    return sorted(events), dict(facts)


@dataclass(frozen=True)
class Pool:
    """What the live run ran on, as the simulator is given it: the policy object, the nodes
    (``(node_id, GPUs)`` in the pool's order), each node's GPU kind and its speed, and the
    loop's round interval."""

    policy: SchedulingPolicy
    nodes: list[tuple[str, int]]
    kinds: dict[str, tuple[str, float]]
    interval_s: float


def simulate(
    facts: dict[str, Facts],
    trace: Sequence[Job],
    pool: Pool,
    median_start_s: float,
    jitter: random.Random | None = None,
) -> list[Event]:
    """The jobs of ``facts`` (of ``trace``) in the simulator on ``pool``, with what the live
    run measured (see the module doc); ``jitter``: move each start-up by up to ``JITTER_S``
    either way."""
    t0 = min(f.submitted for f in facts.values())
    by_name = {j.name: j for j in trace}
    wave_at: dict[float, float] = {}  # each wave arrives at once: when its first job did
    lag: dict[float, float] = {}  # and is seen when the live loop started its interactive job
    for name, f in facts.items():
        job = by_name[name]
        wave_at[job.at] = min(wave_at.get(job.at, f.submitted), f.submitted)
        if job.cls == "interactive" and f.placed is not None:
            seen = max(0.0, f.placed - f.submitted)
            lag[job.at] = min(lag.get(job.at, seen), seen)
    rows, models = [], {}
    for name, f in facts.items():
        job = by_name[name]
        lo, hi = job.gpus if isinstance(job.gpus, tuple) else (job.gpus, job.gpus)
        assert f.lengths[-1] is not None, f"{name}: its last run has no first step"
        # each run trains for what the earlier ones left: the job's length is their sum
        length = sum(x for x in f.lengths if x is not None)
        rows.append(
            TraceJob(
                name,
                wave_at[job.at] + lag.get(job.at, 0.0) - t0,
                team=job.team,
                job_class=job.cls,
                gpus=lo,
                min_gpus=lo,
                max_gpus=hi,
                duration=length,
                deadline=job.deadline_s,
                gpu_kinds=" ".join(job.kinds),
                exclude_kinds=" ".join(job.exclude),
                wait_target=5.0 if job.cls == "interactive" else 60.0,
                # none since the start, as the policy sees it live (checkpoint_every 0); the
                # model keeps the run time on a stop all the same, as the stop checkpoint does
                checkpoint=1e9,
            )
        )
        starts = tuple(median_start_s if x is None else x for x in f.starts)
        if jitter is not None:
            starts = tuple(max(0.0, x + jitter.uniform(-JITTER_S, JITTER_S)) for x in starts)
        models[name] = WallClockJobModel(length, starts=starts)
    sim = Simulator(
        rows,
        pool.policy,
        pool.nodes,
        parse_teams(TEAMS, "twin teams").views(),
        SimConfig(
            interval_s=pool.interval_s,
            restart_s=RESTART_S,  # what the policy weighs; the starts are measured
            log_decisions=True,
        ),
        models=models,
        kinds=pool.kinds,
    )
    sim.run()
    out: list[Event] = []
    sizes = {j.name: 0 for j in rows}
    for at, d in sim.applied:
        if d.kind is DecisionKind.START:
            out.append((at, "start", d.job_id))
        elif d.kind is DecisionKind.PREEMPT:
            out.append((at, "preempt", d.job_id))
        elif len(d.nodes) != sizes[d.job_id]:
            out.append((at, f"resize->{len(d.nodes)}", d.job_id))
        sizes[d.job_id] = len(d.nodes) if d.kind is not DecisionKind.PREEMPT else 0
    return out


def occurrences(events: list[Event], prefix: str) -> list[tuple[float, str]]:
    """The ``prefix`` decisions (``start``, ``preempt``, ``resize``) in time order, each as
    (time, ``job#k``: the job's k-th such decision, with the new size for a resize)."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for t, what, job in sorted(events):
        if what.startswith(prefix):
            key = job if what == prefix else f"{job} {what}"
            seen[key] += 1
            out.append((t, f"{key}#{seen[key]}"))
    return out


def disagreements(
    live: list[Event], simulated: list[Event], prefix: str, tie_s: float
) -> list[str]:
    """How the two worlds' ``prefix`` decisions differ: a decision only one made, or two
    decisions made in opposite orders, unless they were less than ``tie_s`` apart live (their
    order then comes from the jitter of the measured times, not from a decision)."""
    a, b = occurrences(live, prefix), occurrences(simulated, prefix)
    at_live = {k: t for t, k in a}
    problems = [f"only live: {k}" for k in at_live.keys() - {k for _, k in b}]
    problems += [f"only simulated: {k}" for _, k in b if k not in at_live]
    order = [k for _, k in b if k in at_live]  # the simulated order of the shared decisions
    for i, x in enumerate(order):
        for y in order[i + 1 :]:
            if at_live[y] < at_live[x] - tie_s:
                problems.append(f"{x} before {y} simulated, {y} first live")
    return problems


@dataclass
class Twin:
    """Both timelines and the live measurements behind the simulated one."""

    live: list[Event]
    simulated: list[Event]
    median_start_s: float
    facts: dict[str, Facts]
    pool: Pool
    ids: dict[str, str] = field(default_factory=dict)
    """The live run's job ids by name."""
    variant: int = 0
    """0: the exact replay; k: the k-th jittered one (see :func:`twin_of`)."""

    def disagreements(self, tie_s: float) -> list[str]:
        """How the replay's starts, preemptions and resizes differ from the live ones."""
        return [
            f"{kind}: {problem}"
            for kind in ("start", "preempt", "resize")
            for problem in disagreements(self.live, self.simulated, kind, tie_s)
        ]

    def report(self) -> str:
        """Both timelines, for a failure message or the benchmark's output."""
        t0 = self.live[0][0] if self.live else 0.0
        return "\n".join(
            [f"live (median start {self.median_start_s:.1f} s; replay {self.variant}):"]
            + [f"  {t - t0:6.1f} {w:10s} {j}" for t, w, j in self.live]
            + ["simulated:"]
            + [f"  {t:6.1f} {w:10s} {j}" for t, w, j in self.simulated]
        )


def run_twin(o: Orch, trace: Sequence[Job] = TRACE) -> Twin:
    """Run ``trace`` live on ``o`` (a ``shared`` orchestrator), then simulated."""
    ids = run_live(o, trace)
    recs = records(o, ids)
    nodes = [n for n in o.running.scheduler.runtime.nodes() if n.gpus]
    pool = Pool(
        o.running.scheduler.policy,  # the very policy object the live loop ran
        [(n.node_id, n.gpus) for n in nodes],
        {n.node_id: (n.kind, n.speed) for n in nodes},
        o.settings.scheduler_interval_s,
    )
    twin = twin_of(recs, trace, pool, TIE_S)
    twin.ids = ids
    return twin


def twin_of(recs: dict[str, Record], trace: Sequence[Job], pool: Pool, tie_s: float) -> Twin:
    """The live timeline of ``recs`` and its simulated twin.

    The exact replay first. Two live events closer than the replay's timing error (a round's
    latency and a stopped run's clean-up: about ``JITTER_S``) may come in either order in it,
    and when two ends swap, a decision between them can go the other way. So if the exact
    replay differs, up to ``VARIANTS`` replays with each start-up moved by up to ``JITTER_S``
    are tried (seeded: deterministic), and the first that agrees is the twin; if none does, the
    exact one is returned with its disagreements.
    """
    live, facts = live_timeline(recs)
    median = statistics.median(s for f in facts.values() for s in f.starts if s is not None)
    exact = Twin(live, simulate(facts, trace, pool, median), median, facts, pool)
    if not exact.disagreements(tie_s):
        return exact
    for k in range(1, VARIANTS + 1):
        replay = simulate(facts, trace, pool, median, random.Random(k))
        twin = Twin(live, replay, median, facts, pool, variant=k)
        if not twin.disagreements(tie_s):
            return twin
    return exact
