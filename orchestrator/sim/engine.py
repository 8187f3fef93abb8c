"""The discrete-event simulator: a simulated clock driving the same policy objects as live.

Every round (at multiples of ``interval_s`` of simulated time) the simulator builds a
:class:`~policies.Snapshot` exactly as the live scheduler does (nodes with free GPUs, queued
jobs, running jobs, teams), asks the policy for decisions and applies them; between rounds each
running job advances by its performance model. The order of events in a round is the published
Pollux simulator's: jobs run until the round time with their current GPUs, jobs that completed
in the meantime release their GPUs, jobs submitted at or before the round time join the queue,
then the policy decides and its decisions take effect for the next interval.

Costs: a start, resize or resume holds the job's GPUs ``restart_s`` seconds without progress; a
preemption or a resize loses the work since the job's last checkpoint (``checkpoint`` seconds of
run time apart; 0 = no loss, the Pollux assumption).

With ``every_round=False`` rounds where nothing happened are skipped (the clock jumps to the
round after the next arrival or completion, or ``max_idle_s`` while jobs wait), which is what
makes 100,000-job traces fast; the Pollux reproduction runs every round, as published.

Two guards keep a run from spinning to its horizon (or forever): a job that needs more GPUs
than the whole pool has can start under no policy (every placement may span nodes), so the
constructor refuses it (:class:`UnplaceableJobs`); and a run in which no job does any work for
``stuck_rounds`` rounds in a row while jobs are queued or running stops with
:class:`StuckSimulation`, naming the jobs and the policy's last reason for each.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import cast

from orchestrator.control.invariants import check_decisions, guarded
from orchestrator.control.snapshot import RunFacts, build_snapshot, job_facts, running_view
from orchestrator.sim.apply import DecisionApplier
from orchestrator.sim.config import SimConfig
from orchestrator.sim.errors import PolicyViolation, StuckSimulation, UnplaceableJobs
from orchestrator.sim.metrics import SimResult, Usage
from orchestrator.sim.models import JobModel, ParametricJobModel, ProfileJobModel
from orchestrator.sim.services import Services, ServiceSpec
from orchestrator.sim.simjob import DONE, QUEUED, SimJob, record_of
from orchestrator.sim.trace import TRACE_FIELDS, TraceJob
from policies import Decision, DecisionKind, NodeView, QueuedJob, RunningJob, Snapshot
from policies.eligibility import capacity, why_barred
from policies.scheduling import SchedulingPolicy
from policies.scheduling.admission import AdmissionDesk
from policies.scheduling.plan import Verdict
from policies.snapshot import TeamView


class Simulator(DecisionApplier):
    """Simulate one trace on one pool under one scheduling policy.

    Args:
        jobs: the trace.
        policy: any :class:`~policies.scheduling.SchedulingPolicy` (the live scheduler's kind).
        nodes: ``(node_id, gpus)`` per node, in the pool's stable order.
        teams: the team config as plain views (see :mod:`orchestrator.teams`).
        config: simulator settings.
        traces_root: the Pollux data folder for ``app`` jobs (default: the standard lookup).
        models: a job model per job name, in place of the one its trace row implies (a
            :class:`~orchestrator.sim.wallclock.WallClockJobModel` to replay a live run).
        gpu_memory_gb: the memory of each node's GPUs (GB) by node id, which jobs'
            ``gpu_memory_gb`` is held to as live; a node not in it: unknown (any job fits).
        kinds: the kind of each node's GPUs and the kind's speed per GPU, ``(kind, speed)``
            by node id (a node not in it: unlabelled, speed 1). A job runs at its own speed on
            the kind it holds (its trace row's ``kind_speed``, else the kind's), the slowest
            when a gang spans kinds: ``duration`` is its work at speed 1.
        services: a :class:`~orchestrator.sim.services.ServiceSpec` per interactive job name
            that is a service (its load, latency and scaling: :mod:`orchestrator.sim.services`;
            its figures in :attr:`services` after the run). While one runs, every round runs.
    """

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        policy: SchedulingPolicy,
        nodes: Sequence[tuple[str, int]],
        teams: Sequence[TeamView] = (),
        config: SimConfig | None = None,
        traces_root: str | None = None,
        models: Mapping[str, JobModel] | None = None,
        gpu_memory_gb: Mapping[str, float] | None = None,
        services: Mapping[str, ServiceSpec] | None = None,
        kinds: Mapping[str, tuple[str, float]] | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.services = Services(services or {})
        self.policy = guarded(policy)  # inside the team caps, as the live loop runs it
        self.node_ids = [n for n, _ in nodes]
        self.capacity = dict(nodes)
        self.free = dict(nodes)
        self.total_gpus = sum(self.capacity.values())
        self.teams = tuple(teams)
        self.memory = dict(gpu_memory_gb or {})
        self.kinds = dict(kinds or {})
        never = {
            s.name: f"needs {'at least ' if s.lo < s.hi else ''}{s.lo} GPUs; "
            f"the pool has {self.total_gpus}"
            for s in jobs
            if s.lo > self.total_gpus
        }
        never.update(self._too_small(jobs))
        if never:
            raise UnplaceableJobs(never)
        self.jobs: list[SimJob] = []
        for seq, spec in enumerate(sorted(jobs, key=lambda j: j.submit_time)):
            model = self._model_of(spec, models, traces_root)
            required, excluded = spec.kinds()
            job = SimJob(
                spec,
                seq,
                model,
                queued_since=spec.submit_time,
                lo=spec.lo,
                team=spec.team,
                checkpoint_s=spec.checkpoint,
                gpu_kinds=required,
                exclude_kinds=excluded,
                kind_speed=spec.speeds(),
            )
            self.jobs.append(job)
        self.by_id = {j.spec.name: j for j in self.jobs}
        self.now = 0.0
        self.queued: dict[str, SimJob] = {}
        self.running: dict[str, SimJob] = {}
        self.usage = Usage(self.total_gpus)
        self.decision_s: list[tuple[int, float]] = []
        self.applied: list[tuple[float, Decision]] = []
        # the admission desk's verdicts, with their round's time (``SimConfig.plan_admission``)
        self.admissions: list[tuple[float, Verdict]] = []
        desk = self.config.plan_admission or policy.binds_admission
        self._desk = AdmissionDesk() if desk else None
        self._last_round: float | None = None
        self.rounds = 0
        # kept up to date instead of recomputed every round (a round must cost little more
        # than the policy's decision, for 100,000-job traces)
        self._node_views = {n: self._node_view(n) for n in self.node_ids}
        self._nodes = tuple(map(self._node_views.__getitem__, self.node_ids))
        self._changed: set[str] = set()  # nodes whose free GPUs changed since the last snapshot
        self._completed: list[SimJob] = []  # running jobs that completed in the last interval
        self._asked = 0  # GPUs the queued and running jobs asked for
        # GPUs held per team, kept by taking and releasing (as ``Usage.add`` reads it: every
        # team that has held GPUs, in the order each first did, 0 once it holds none)
        self._team_gpus: dict[str, int] = {}
        # each team's demand and its jobs queued or running, kept as jobs come and go (see
        # DecisionApplier._ask): [GPUs asked for, jobs]
        self._demand: dict[str, list[int]] = {}

    def _model_of(
        self,
        spec: TraceJob,
        models: Mapping[str, JobModel] | None,
        traces_root: str | None,
    ) -> JobModel:
        """The job's model: the one given for it, its service's, its Pollux application's
        profile (``app``), else a parametric one of its duration."""
        if models and spec.name in models:
            return models[spec.name]
        if spec.name in self.services.specs:
            return self.services.model(spec.name)
        if spec.app:
            return ProfileJobModel(spec.app, spec.batch_size, traces_root)
        return ParametricJobModel(spec.duration, spec.gpus, self.config.sigma)

    def _node_view(self, node_id: str) -> NodeView:
        kind, speed = self.kinds.get(node_id, ("", 1.0))
        return NodeView(
            node_id,
            self.capacity[node_id],
            self.free[node_id],
            self.memory.get(node_id),
            kind,
            speed,
        )

    def _too_small(self, jobs: Sequence[TraceJob]) -> dict[str, str]:
        """Jobs that too few GPUs of the pool may take (their ``gpu_memory_gb`` and kinds, by
        the live rules: :func:`policies.eligibility.capacity`), with why: they could start
        under no policy."""
        views = Snapshot(tuple(self._node_view(n) for n in self.node_ids))
        out = {}
        for s in jobs:
            required, excluded = s.kinds()
            if s.gpu_memory_gb is None and not required and not excluded and not views.mixed:
                continue
            probe = QueuedJob(
                s.name,
                s.job_class,
                s.team,
                s.gpus,
                0,
                0.0,
                gpu_memory_gb=s.gpu_memory_gb,
                gpu_kinds=required,
                exclude_kinds=excluded,
            )
            fit = capacity(views, probe)
            if s.lo > fit:
                note = (
                    why_barred(views, probe, TRACE_FIELDS) or f"the pool's largest kind has {fit}"
                )
                out[s.name] = f"needs {s.lo} GPU{'' if s.lo == 1 else 's'}; {note}"
        return out

    # ---- main loop -------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run to completion (or the horizon) and return the per-job records and totals."""
        # The cyclic garbage collector is paused for the run: a round makes many short-lived
        # objects but no reference cycles to speak of, and with 100,000 jobs in memory the
        # collector's passes over them cost a quarter of the run. It resumes afterwards.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if collecting:
                gc.enable()

    def _run(self) -> SimResult:
        cfg = self.config
        arrivals = 0
        n = len(self.jobs)
        done = 0
        idle = 0  # rounds in a row in which no job did any work
        last_progress = self.now
        wall = time.perf_counter()
        while done < n:
            # jobs that completed during the last interval release their GPUs
            for job in self._completed:
                self._release(job)
                job.state = DONE
                self._asked -= job.spec.gpus
                done += 1
            self._completed.clear()
            while arrivals < n and self.jobs[arrivals].spec.submit_time <= self.now:
                job = self.jobs[arrivals]
                job.state = QUEUED
                self.queued[job.spec.name] = job
                self._ask(job, job.lo, 1)
                self._asked += job.spec.gpus
                arrivals += 1
            if self.queued or self.running:
                self._round()
            if done >= n:
                break
            nxt = self._next_round(arrivals)
            if cfg.horizon_s is not None and nxt > cfg.horizon_s:
                break
            if self._advance(nxt) or not (self.queued or self.running):
                idle = 0
                last_progress = self.now
            else:
                idle += 1
                if idle == cfg.stuck_rounds:
                    raise StuckSimulation(self._stuck_jobs(), idle, last_progress)
        return SimResult(
            records=[record_of(j, self.now) for j in self.jobs],
            usage=self.usage,
            rounds=self.rounds,
            end_time=self.now,
            wall_s=time.perf_counter() - wall,
            decision_s=self.decision_s,
        )

    def _next_round(self, arrivals: int) -> float:
        cfg = self.config
        step = cfg.interval_s
        if cfg.every_round or (self.services and self.services.active(self.queued, self.running)):
            return self.now + step
        nxt = math.inf
        if arrivals < len(self.jobs):
            nxt = self.jobs[arrivals].spec.submit_time
        if self.queued:
            nxt = min(nxt, self.now + cfg.max_idle_s)
        # the gap only grows with ``nxt``, and is never below a step: when the next arrival
        # (or the idle limit) is within one step, no completion can make it shorter, and
        # the running jobs' completions are not asked for (half the rounds, every job each)
        if nxt == math.inf or self._gap_to(nxt) > step:
            now = self.now
            for job in self.running.values():
                left = job.model.remaining_time(job.placement) / job.speed
                done_at = now + job.restart_left + left
                if done_at < nxt:
                    nxt = done_at
        return self.now + self._gap_to(nxt)

    def _gap_to(self, nxt: float) -> float:
        """The step from now to the first round at or after ``nxt`` (at least one step)."""
        step = self.config.interval_s
        return max(step, math.ceil((nxt - self.now) / step - 1e-9) * step)

    def _advance(self, until: float) -> bool:
        """Run the jobs until ``until``; whether any of them did work (past its restart)."""
        dt = until - self.now
        progressed = False
        held = self.total_gpus - sum(self.free.values())
        # demand: what the jobs asked for, not what elastic ones were grown to (the same
        # jobs make the same demand under every policy)
        demand = self._asked
        restarting = 0.0
        if self.services:
            self.services.serve(self.by_id, self.now, dt)
        now = self.now
        completed = self._completed
        # every running job every round: the usual job (no restart left, no checkpoint to
        # take) costs one step of its model
        for job in self.running.values():
            if job.completed_at is not None:
                continue
            left = dt
            if job.restart_left > 0:
                d = min(job.restart_left, left)
                job.restart_left -= d
                left -= d
                restarting += d * len(job.nodes)
            if left <= 0:  # restarting all along: no work, no checkpoint clock
                continue
            progressed = True
            ckpt = job.checkpoint_s
            speed = job.speed  # its speed on its GPUs' kind (work per second at speed 1)
            if ckpt <= 0:  # the usual case: one step, no checkpoint to take
                used = job.model.advance(job.placement, left * speed)
                if used is not None:
                    job.completed_at = now + (dt - left) + used / speed
                    completed.append(job)
                continue
            elapsed = dt - left
            while left > 0:
                chunk = min(left, ckpt - job.since_ckpt) if ckpt > 0 else left
                used = job.model.advance(job.placement, chunk * speed)
                if used is not None:
                    job.completed_at = now + elapsed + used / speed
                    completed.append(job)
                    break
                elapsed += chunk
                left -= chunk
                if ckpt > 0:
                    job.since_ckpt += chunk
                    if job.since_ckpt >= ckpt - 1e-9:
                        job.since_ckpt = 0.0
                        job.ckpt = job.model.state()
        self.usage.add(dt, held, restarting, demand, self._team_gpus)
        self.now = until
        return progressed

    def _stuck_jobs(self) -> dict[str, str]:
        """The jobs of a stuck run: each queued one with the policy's last reason, each
        running one with what it holds (it never gets past its restart)."""
        jobs = {name: job.wait_reason or "queued" for name, job in self.queued.items()}
        for name, job in self.running.items():
            jobs[name] = f"holds {len(job.nodes)} GPUs, always restarting"
        return jobs

    # ---- one round -------------------------------------------------------------------------

    def _round(self) -> None:
        if self.services:
            self.services.scale_running(
                self.by_id, self.running, self.teams, self.now, self.config.restart_s
            )
        snapshot = self.snapshot()
        if self._desk is not None:  # as the live loop's ControlLoop.admit
            if self.policy.binds_admission:
                snapshot, verdicts = self._desk.bind(snapshot)
            else:
                verdicts = self._desk.round(snapshot)
            self.admissions += [(self.now, v) for v in verdicts]
        # each team's demand for its entitlement (see Usage.note_entitlement), from the jobs
        # as the snapshot shows them: a queued job asks for its lo, a running one for
        # max(gpus, lo) (kept as jobs come and go, not summed over every job every round)
        demand = {team: asked for team, (asked, _) in self._demand.items()}
        if self.config.time_decisions:
            t0 = time.perf_counter()
            decisions = self.policy.decide(snapshot)
            self.decision_s.append((len(snapshot.queue), time.perf_counter() - t0))
        else:
            decisions = self.policy.decide(snapshot)
        self.rounds += 1
        atomic = self.config.atomic_moves
        _, broken = check_decisions(snapshot, decisions, atomic_moves=atomic)
        if broken:  # the live loop logs and drops such a decision; a simulation stops
            raise PolicyViolation(broken[0][1])
        moving = self._release_moves(decisions) if atomic else {}
        for d in decisions:
            if d.job_id in moving:
                self._finish_move(d, moving[d.job_id])
            else:
                self._apply(d)
            if self.config.log_decisions and d.kind is not DecisionKind.WAIT:
                self.applied.append((self.now, d))
        self.usage.note_entitlement(demand, self.teams, snapshot.total_gpus)

    def snapshot(self) -> Snapshot:
        """The immutable view of this round (what the live scheduler would build)."""
        if self._changed:
            for nid in self._changed:
                self._node_views[nid] = self._node_view(nid)
            self._changed.clear()
            self._nodes = tuple(map(self._node_views.__getitem__, self.node_ids))
        nodes = self._nodes
        # a job's view is rebuilt only when it may have changed (the fast path of _view); a
        # queued job's view is a QueuedJob, a running one's a RunningJob
        queue = tuple(
            j.view if j.view is not None and j.speedup_final else self._view(j)
            for j in self.queued.values()
        )
        running = tuple(
            j.view if j.view is not None and j.speedup_final else self._view(j)
            for j in self.running.values()
        )
        return build_snapshot(
            nodes,
            cast(tuple[QueuedJob, ...], queue),
            cast(tuple[RunningJob, ...], running),
            now=self.now,
            seed=self.config.seed,
            teams=self.teams,
            restart_cost_s=self.config.restart_s,
            interval_s=self._gap(),
        )

    def _gap(self) -> float:
        """Seconds since the previous round (the configured interval before the first one):
        a job stopped in that round was stopped within this gap, exactly."""
        gap = self.now - self._last_round if self._last_round is not None else None
        self._last_round = self.now
        return self.config.interval_s if gap is None else gap

    def _speedup(self, job: SimJob) -> tuple[float, ...]:
        if job.speedup_final:
            return job.speedup
        if job.spec.lo == job.spec.hi and not job.model.speedup_absolute:
            job.speedup_final = True
            return ()  # rigid: the policy never needs its relative curve
        speedup = job.model.speedup(job.spec.hi)
        if speedup is not job.speedup:
            job.speedup = speedup
            job.view = None
        job.speedup_final = not job.model.speedup_changes
        return speedup

    def _view(self, job: SimJob) -> QueuedJob | RunningJob:
        if job.view is not None and job.speedup_final:
            return job.view
        speedup = self._speedup(job)
        if job.view is not None:
            return job.view
        s = job.spec
        remaining = None
        service = s.name in self.services.specs
        if s.app == "" and not service:
            m = job.model
            assert isinstance(m, ParametricJobModel)
            # at the rate of the GPUs it holds (as the live loop measures it), else asked for
            speed = job.speed if job.nodes else 1.0
            remaining = (m.work - m.done) / (m.rate(len(job.nodes) or s.gpus) * speed)
        running = job.state != QUEUED
        facts = job_facts(
            s.name,
            s.job_class,
            s.team,
            s.gpus,
            job.seq,
            s.submit_time,
            min_gpus=s.lo,
            max_gpus=s.hi,
            deadline_s=s.deadline,
            wait_target_s=s.wait_target,
            speedup=speedup,
            gpu_memory_gb=s.gpu_memory_gb,
            gpu_kinds=job.gpu_kinds,
            exclude_kinds=job.exclude_kinds,
            kind_speed=job.kind_speed,
            # its ended runs' (as live), with the work left its model knows exactly
            history=job.history
            if remaining is None
            else replace(job.history, remaining_work=remaining),
        )
        view: QueuedJob | RunningJob
        if not running:
            view = facts
        else:
            run = RunFacts(
                job.nodes,
                started_at=job.started_at,
                checkpoint_at=self._checkpoint_at(job),
                # its first step comes once the restart is paid
                first_step_at=job.started_at + job.start_s,
            )
            if service:  # as live: rigid, its size moves only as the guard asks
                facts = replace(facts, min_gpus=0, max_gpus=0, speedup=())
                run = replace(run, want_gpus=self.services.want.get(s.name, 0))
            view = running_view(facts, run)
        if job.state == QUEUED or job.spec.checkpoint <= 0:
            job.view = view  # a running job with periodic checkpoints changes every round
        return view

    def _checkpoint_at(self, job: SimJob) -> float:
        if job.spec.checkpoint <= 0:
            # no work is lost (``_lose_work``): "always checkpointed", a value that stays true
            # in the view kept for the whole run (``now`` would age with it: a stop would
            # look like it lost everything since the view was built)
            return math.inf
        return self.now - job.since_ckpt


def uniform_pool(nodes: int, gpus_per_node: int) -> list[tuple[str, int]]:
    """``nodes`` nodes of ``gpus_per_node`` GPUs, named ``n0``, ``n1``, ..."""
    return [(f"n{i}", gpus_per_node) for i in range(nodes)]
