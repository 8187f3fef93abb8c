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
    from orchestrator.control.loop import ControlLoop
    from orchestrator.pool import GPUPool


def open_store(settings: Settings) -> tuple[JobStore, str]:
    """The job store of ``settings.namespace`` and the Redis URL workers should use.

    Starts the embedded Redis server when ``REDIS_URL`` is unset.

    Raises:
        StoreError: Redis is unreachable or could not be started.
    """
    url = resolve_url(settings)
    return JobStore.from_url(url, settings.namespace), url


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
    another scheduler already serving) are raised here, not lost in the thread.
    """
    from orchestrator.control.loop import ControlLoop
    from orchestrator.pool import GPUPool
    from orchestrator.runtime.ray_gang import RayRuntime

    store, url = open_store(settings)
    pool = GPUPool(settings)
    pool.start()
    runtime = RayRuntime(pool, url, settings.namespace, stop_grace_s=settings.stop_grace_s)
    scheduler = ControlLoop(settings, store, runtime, policy or make_policy(settings.policy))
    scheduler.acquire()
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            scheduler.serve(stop)
        except BaseException as err:  # surfaced by the caller through `errors`
            errors.append(err)

    thread = threading.Thread(target=loop, name="orch-scheduler", daemon=True)
    thread.start()
    return Running(scheduler, pool, thread, stop, errors)
