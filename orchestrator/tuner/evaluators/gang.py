"""Trials on the pool: a tuning gang of worker actors, one per GPU of a placement group.

The scheduler places a tuning run like a job, on as many GPUs as the job may use. This
evaluator starts one :class:`workers.actor.WorkerActor` per bundle of that placement group, the
same actor that runs jobs, and profiles a ``g``-GPU config on the first ``g`` of them: a real
``g``-rank run of the worker harness (DDP or FSDP, NCCL on CUDA and Gloo on CPU), warm-up steps
excluded, then measured steps. So the GPU count and the sharding are tuned on the hardware the
job will run on, not extrapolated from one GPU.

The actors are kept from one trial to the next (a fresh process imports torch and builds the
model, seconds per trial). A trial that fails on any rank (out of memory, a crash, a hang past
``trial_timeout_s``) kills its actors: its other ranks would wait in a collective that never
completes. The next trial starts a fresh gang, and the error goes back to the tuner, which
makes the trial infeasible and carries on.

Batches (:meth:`GangEvaluator.evaluate_batch`, the tuner's ``free_gpus``): the trials of a batch
run at once on disjoint slices of the gang (a 4-GPU gang runs four one-GPU trials, or a 2-GPU
trial beside two one-GPU ones), each from its own thread waiting on its ranks. A failing trial
kills only its slice, so the others finish; the gang is restarted whole before the next
trial (``runtime.gang.start_workers`` starts every bundle's actor), which costs the healthy
actors a restart too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.tuner.evaluators.base import (
    Evaluator,
    EvaluatorLost,
    measurement_of,
    probe_config,
    trial_config,
)
from orchestrator.tuner.objective import Measurement
from orchestrator.tuner.space import Config, DeviceCaps

__all__ = ["GangEvaluator", "TrialTimeout", "telling_error"]


class TrialTimeout(RuntimeError):
    """A trial did not finish within the evaluator's ``trial_timeout_s``."""


class GangEvaluator(Evaluator):
    """Profiles configs on the GPUs of a placement group (see module doc).

    Args:
        placement_group: a Ray placement group of ``{"GPU": 1}`` bundles, already placed.
        workload: built-in name or ``module:function`` entry point.
        workload_args: its arguments.
        job_id: the job being tuned (names the actors in Ray's dashboard).
        warmup_steps: steps excluded from the figures.
        measured_steps: steps measured.
        num_threads: torch CPU threads per rank (1 on virtual GPU slots; ``None`` = default).
        seed: the job's seed.
        trial_timeout_s: a trial still running after this long is killed and counted as failed.
        gpus_per_node: GPUs of one pool node (where gradient sync starts crossing nodes).
        command: a command job's ``HarnessConfig.command``: each trial runs its script
            (``workers.command``, sandboxed as a job run is) with the trial's settings.
        working_dir: a command job's working directory, its archive in Ray's object store
            (``orchestrator.runtime.workdir``): every trial's run unpacks it afresh.
        memory_gb, network: the job's ``resources``: a team's code (a script, an ``entry:``)
            is bounded in a trial as in the job's runs (``trial_config``).
    """

    def __init__(
        self,
        placement_group: Any,
        workload: str,
        workload_args: dict[str, Any] | None = None,
        *,
        job_id: str = "tune",
        warmup_steps: int = 3,
        measured_steps: int = 10,
        num_threads: int | None = None,
        seed: int = 0,
        trial_timeout_s: float = 600.0,
        gpus_per_node: int | None = None,
        command: dict[str, Any] | None = None,
        working_dir: Any = None,
        memory_gb: float | None = None,
        network: bool = False,
    ) -> None:
        self.command = command
        self.memory_gb = memory_gb
        self.network = network
        self.working_dir = working_dir
        self.placement_group = placement_group
        self.size = len(placement_group.bundle_specs)
        self.workload = workload
        self.workload_args = dict(workload_args or {})
        self.job_id = job_id
        self.warmup_steps = warmup_steps
        self.measured_steps = measured_steps
        self.num_threads = num_threads
        self.seed = seed
        self.trial_timeout_s = trial_timeout_s
        self.grace_s = 5.0  # after one rank fails, how long the others get to report theirs
        self.gangs_started = 0  # how many times the actors were (re)started: one unless trials fail
        self._actors: list[Any] = []
        self._broken = False  # a trial killed some actors: restart the gang before the next
        self._probe: dict[str, Any] | None = None
        import ray

        try:
            facts = ray.get(self._gang()[0].device_facts.remote(), timeout=trial_timeout_s)
        except Exception as err:
            self.close()
            raise EvaluatorLost(f"the tuning gang could not start: {err}") from err
        self.caps = DeviceCaps.from_facts(
            facts,
            max_gpus=self.size,
            shardings=("ddp", "fsdp"),
            gpus_per_node=gpus_per_node,
        )

    def forward_only(self) -> bool:
        """The workload's answer to a one-step probe on the gang's first actor (once; in the
        sandbox for a team's code, as its trials run; see ``probe_config``). A command job
        trains (its script reports optimizer steps): no probe.

        Raises:
            the workload's own error when the probe step fails (as a trial would).
        """
        return self.command is None and bool(self._probed().get("forward_only"))

    def reads_dataset(self) -> bool:
        """Whether the probe's harness read a dataset through its loader; for a command job,
        yes: its script may read through ``job.loader`` (see ``CommandEvaluator``)."""
        return self.command is not None or bool(self._probed().get("dataset"))

    def _probed(self) -> dict[str, Any]:
        if self._probe is None:
            probe = probe_config(self.workload, self.workload_args, self.seed)
            actor = self._gang()[0]
            self._probe = self._collect(
                [actor.run.remote(probe, None, None, rank=0, world_size=1)], [actor]
            )
        return self._probe

    def evaluate(self, config: Config) -> Measurement:
        """Run ``warmup_steps + measured_steps`` optimizer steps on ``config.gpus`` ranks.

        Raises:
            the workload's own error when a rank fails (so the tuner sees an OOM as one),
            TrialTimeout when the trial hangs, ValueError for more GPUs than the gang holds.
        """
        if not 1 <= config.gpus <= self.size:
            raise ValueError(f"{config.gpus} GPUs asked, the tuning gang holds {self.size}")
        return self._run_on(config, self._gang()[: config.gpus])

    def evaluate_batch(self, configs: Sequence[Config]) -> list[Measurement | BaseException]:
        """Run ``configs`` at once on disjoint slices of the gang (the largest on the first
        bundles, which a PACK placement puts on the fewest nodes).

        Raises:
            ValueError: their GPU counts add up to more than the gang holds.
        """
        if sum(c.gpus for c in configs) > self.size or any(c.gpus < 1 for c in configs):
            asked = [c.gpus for c in configs]
            raise ValueError(f"GPUs {asked} asked at once, the tuning gang holds {self.size}")
        if len(configs) <= 1:
            return super().evaluate_batch(configs)
        gang = self._gang()
        slices: dict[int, list[Any]] = {}
        start = 0
        for i in sorted(range(len(configs)), key=lambda i: -configs[i].gpus):
            slices[i] = gang[start : start + configs[i].gpus]
            start += configs[i].gpus

        def one(i: int) -> Measurement | BaseException:
            try:
                return self._run_on(configs[i], slices[i])
            except Exception as err:  # the tuner classifies it; the others run on
                return err

        with ThreadPoolExecutor(len(configs), thread_name_prefix="trial") as pool:
            return list(pool.map(one, range(len(configs))))

    def _run_on(self, config: Config, actors: list[Any]) -> Measurement:
        """One trial on ``actors`` (``config.gpus`` of them), rank ``r`` on ``actors[r]``."""
        import ray

        t0 = time.perf_counter()
        init_method = None
        try:
            # Also the check that a fresh gang started: if its actors cannot even answer, the
            # pool (a node) is gone and the trial would say nothing about the config.
            host, port = ray.get(actors[0].node_address.remote(), timeout=120)
        except Exception as err:
            self.close()
            raise EvaluatorLost(f"the tuning gang does not answer: {err}") from err
        if config.gpus > 1:
            init_method = f"tcp://{host}:{port}"
        run = trial_config(
            self.workload,
            self.workload_args,
            config,
            warmup_steps=self.warmup_steps,
            measured_steps=self.measured_steps,
            seed=self.seed,
            command=self.command,
            memory_gb=self.memory_gb,
            network=self.network,
        )
        refs = [
            a.run.remote(
                run, init_method, None, rank=r, world_size=config.gpus, working_dir=self.working_dir
            )
            for r, a in enumerate(actors)
        ]
        return measurement_of(self._collect(refs, actors), time.perf_counter() - t0)

    def close(self) -> None:
        """Stop the actors (the placement group stays: its owner removes it)."""
        import ray

        for actor in self._actors:
            with contextlib.suppress(Exception):  # already dead
                ray.kill(actor)
        self._actors = []
        self._broken = False

    def _kill(self, actors: list[Any]) -> None:
        """Stop the actors of a failed trial; the gang is restarted before the next trial."""
        import ray

        self._broken = True
        for actor in actors:
            with contextlib.suppress(Exception):  # already dead
                ray.kill(actor)

    def _collect(self, refs: list[Any], actors: list[Any]) -> dict[str, Any]:
        """Rank 0's result once every rank is done. On the first failure, wait briefly for the
        other ranks' errors, kill the trial's actors, and raise the most telling error
        (unwrapped from Ray's): see :func:`telling_error`."""
        import ray

        deadline = time.monotonic() + self.trial_timeout_s
        pending = list(refs)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill(actors)
                raise TrialTimeout(f"the trial ran past {self.trial_timeout_s:g} s")
            done, pending = ray.wait(pending, num_returns=1, timeout=min(left, 5.0))
            failed = [e for e in (_error_of(r) for r in done) if e is not None]
            if failed:
                # The rank that ran out of memory tears its process group down, so a peer can
                # fail first with "connection closed": give the others a moment to report.
                if pending:
                    rest, _ = ray.wait(pending, num_returns=len(pending), timeout=self.grace_s)
                    failed += [e for e in (_error_of(r) for r in rest) if e is not None]
                self._kill(actors)
                raise telling_error(failed) from None
        return dict(ray.get(refs[0]))

    def _gang(self) -> list[Any]:
        """The actors, started on first use and (all of them) after a failed trial."""
        if self._broken:
            self.close()
        if self._actors:
            return self._actors
        from orchestrator.runtime.gang import start_workers

        self._actors = start_workers(
            self.placement_group,
            self.job_id,
            num_threads=self.num_threads,
        )
        self.gangs_started += 1
        return self._actors


def _error_of(ref: Any) -> BaseException | None:
    """The exception a finished rank raised (the workload's own, unwrapped), or ``None``."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        ray.get(ref)
    except RayTaskError as err:
        cause = getattr(err, "cause", None)
        return cause if isinstance(cause, BaseException) else err
    except Exception as err:  # the actor or its node died
        return err
    return None


def telling_error(errors: list[BaseException]) -> BaseException:
    """Of the errors the ranks of one trial raised, the one that says why it failed: an
    out-of-memory error if any rank had one (it rules out larger micro-batches), else one that
    is not a peer's collective failing, else the first."""
    from orchestrator.runtime.gang import DISTRIBUTED_ERRORS
    from orchestrator.tuner.oom import is_oom

    for e in errors:
        if is_oom(e):
            return e
    for e in errors:
        if type(e).__name__ not in DISTRIBUTED_ERRORS and "connection closed" not in str(e):
            return e
    return errors[0]
