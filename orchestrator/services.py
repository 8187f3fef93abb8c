"""Bringing the parts up: the store, the pool, the policy and the scheduler thread.

The CLI commands and the demo use these, so each part is set up one way only.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.config import Settings
from orchestrator.errors import ConfigError
from orchestrator.store import JobStore, resolve_url
from policies import SCHEDULING_POLICIES, SchedulingPolicy, UnknownPolicyError

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.api.server import ApiServer
    from orchestrator.control.loop import ControlLoop
    from orchestrator.pool import GPUPool


def open_store(settings: Settings) -> tuple[JobStore, str]:
    """The job store of ``settings.namespace`` and the Redis URL workers should use.

    Starts the embedded Redis server when ``REDIS_URL`` is unset.

    Raises:
        StoreError: Redis is unreachable or could not be started.
    """
    url = resolve_url(settings)
    return JobStore.from_url(url, settings.namespace, retention_s=settings.retention_s), url


def make_policy(name: str = "shared", **options: str) -> SchedulingPolicy:
    """The scheduling policy registered as ``name``, with its options.

    Raises:
        ConfigError: an unknown name (the message lists the valid ones) or option.
    """
    try:
        return SCHEDULING_POLICIES.create(name, **options)
    except UnknownPolicyError as err:
        raise ConfigError(str(err)) from None
    except TypeError as err:  # an option this policy does not take
        raise ConfigError(f"policy {name!r}: {err}") from None


@dataclass
class Running:
    """A scheduler serving in a background thread (for `orch up`, `orch demo` and tests)."""

    scheduler: ControlLoop
    pool: GPUPool
    thread: threading.Thread
    stop: threading.Event
    errors: list[BaseException]

    def shutdown(self, timeout: float = 90.0) -> None:
        """Stop the loop (running jobs are stopped and requeued), wait for it, and shut down
        the local Ray instance if this process started one."""
        self.stop.set()
        self.thread.join(timeout)
        self.pool.stop()


def serve_in_background(settings: Settings, policy: SchedulingPolicy | None = None) -> Running:
    """Start the pool (local Ray unless ``RAY_ADDRESS``) and a scheduler thread.

    The store, pool and lease are set up before returning, so errors (Redis unreachable,
    another scheduler already serving) are raised here, not lost in the thread. With
    ``settings.standby`` the thread first waits for the lease (:meth:`ControlLoop.acquire`).
    """
    from orchestrator.control.loop import ControlLoop
    from orchestrator.pool import GPUPool
    from orchestrator.runtime.ray_gang import RayRuntime
    from orchestrator.store.lease import SchedulerBusy, holder_is_dead
    from orchestrator.tuner.remote import tune_job

    store, url = open_store(settings)
    holder = store.lease_holder()
    if not settings.standby and holder is not None and not holder_is_dead(holder):
        raise SchedulerBusy.of(holder, settings.namespace)  # said before Ray starts for nothing
    pool = GPUPool(settings)
    pool.start()
    runtime = RayRuntime(
        pool,
        url,
        settings.namespace,
        stop_grace_s=settings.stop_grace_s,
        warm_workers=settings.warm_workers,
        tune=tune_job,
    )
    scheduler = ControlLoop(settings, store, runtime, policy or make_policy(settings.policy))
    stop = threading.Event()
    if settings.redis_url is None:  # ours: restarted if it dies (it keeps its data and port)
        from orchestrator.store.watchdog import RedisWatchdog

        RedisWatchdog(settings.data_dir, stop, bind=settings.redis_bind).start()
    if not settings.standby:
        try:
            scheduler.acquire()
        except BaseException:
            stop.set()  # the watchdog
            raise
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            if settings.standby and not scheduler.acquire(standby=stop):
                return  # stopped while standing by
            scheduler.serve(stop)
        except BaseException as err:  # surfaced by the caller through `errors`
            errors.append(err)

    thread = threading.Thread(target=loop, name="orch-scheduler", daemon=True)
    thread.start()
    return Running(scheduler, pool, thread, stop, errors)


def start_api(settings: Settings, console: Console) -> ApiServer | None:
    """The HTTP API on ``settings.api_address`` in a background thread (``orch up``).

    An address that cannot be bound (another ``orch up`` on this machine holds it) is reported
    on ``console`` and the scheduler runs on without the API (``orch serve`` can serve it
    later), rather than a second scheduler failing for want of a port.
    """
    from orchestrator.api.server import start
    from orchestrator.errors import OrchError

    store, _ = open_store(settings)
    try:
        api = start(store, settings.api_address)
    except OrchError as err:
        console.print(f"[yellow]warning:[/] {err}; running without the API", highlight=False)
        return None
    console.print(f"API on {api.url} (docs at {api.url}/docs)")
    return api
