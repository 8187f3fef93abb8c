"""The scheduler lease: at most one scheduler drives a namespace.

A Redis key (``{ns}:scheduler:lease``) holds the owner (``host:pid:tag``) with a time-to-live.
A heartbeat thread renews it every third of the TTL, independently of how long a scheduling
round takes, so a slow round (a stuck probe, a long stop) never lets the lease lapse while its
holder is alive. If renewal is refused (someone else holds the key) or has not succeeded for a
whole TTL (Redis was unreachable long enough for another scheduler to take over), the lease
counts as lost and the scheduler must stop acting: every write it does after that could race
its successor.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import redis

from orchestrator.errors import OrchError
from orchestrator.store.keys import Keys
from orchestrator.store.server import pid_alive

__all__ = ["LEASE_MS", "Lease", "LeaseLost", "SchedulerBusy", "lease_holder"]

log = logging.getLogger(__name__)

LEASE_MS = 15_000
"""How long a lease lives without renewal, by default."""

_RENEW_LUA = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"""
# Compare-and-set: take over only the lease of the holder we saw (and found dead).
_TAKEOVER_LUA = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
end
return false
"""
# Compare-and-delete: never delete a successor's lease.
_RELEASE_LUA = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
"""


class SchedulerBusy(OrchError):
    """Another scheduler holds this namespace's lease."""


class LeaseLost(OrchError):
    """This scheduler's lease expired or was taken over: it must stop acting."""


class Lease:
    """One scheduler's hold on a namespace (built by ``JobStore.lease``).

    Args:
        client: the store's Redis client.
        keys: the namespace's keys (the lease is ``keys.scheduler_lease``).
        owner: this holder's identity, ``host:pid:tag``.
        ttl_ms: how long the lease lives without renewal.
    """

    def __init__(self, client: redis.Redis, keys: Keys, owner: str, ttl_ms: int = LEASE_MS) -> None:
        self._client = client
        self.key = keys.scheduler_lease
        self.owner = owner
        self.ttl_ms = ttl_ms
        self._renew = client.register_script(_RENEW_LUA)
        self._takeover = client.register_script(_TAKEOVER_LUA)
        self._release = client.register_script(_RELEASE_LUA)
        self._renewed_at = 0.0
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, namespace: str) -> None:
        """Take the lease and start renewing it.

        A holder that was a process on this host which has exited is taken over at once (a
        scheduler restarted after a crash need not wait for the TTL).

        Raises:
            SchedulerBusy: another live scheduler holds it.
        """
        if not self._client.set(self.key, self.owner, nx=True, px=self.ttl_ms):
            holder = str(self._client.get(self.key) or "")
            if not (
                _holder_is_dead(holder)
                and self._takeover(keys=[self.key], args=[holder, self.owner, self.ttl_ms])
            ):
                raise SchedulerBusy(
                    f"another scheduler ({holder}) is driving namespace {namespace!r}; "
                    "stop it first, or use another ORCH_NAMESPACE"
                )
            log.warning("took over the lease of %s, whose process is gone", holder)
        self._renewed_at = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name="orch-lease", daemon=True)
        self._thread.start()

    @property
    def held(self) -> bool:
        """Whether the lease is still ours (renewed within the TTL and never refused)."""
        if self._lost.is_set():
            return False
        if time.monotonic() - self._renewed_at > self.ttl_ms / 1000:
            self._lost.set()
        return not self._lost.is_set()

    def check(self) -> None:
        """Raise if the lease is no longer held.

        Raises:
            LeaseLost: it expired or another scheduler took it.
        """
        if not self.held:
            raise LeaseLost("the scheduler lease was lost (another scheduler may have taken over)")

    def release(self) -> None:
        """Stop renewing and delete the key if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._release(keys=[self.key], args=[self.owner])
        except redis.RedisError as err:  # it expires on its own
            log.warning("could not release the scheduler lease: %s", err)

    def _beat(self) -> None:
        interval = self.ttl_ms / 3000
        while not self._stop.wait(interval):
            try:
                if not self._renew(keys=[self.key], args=[self.owner, self.ttl_ms]):
                    log.error("scheduler lease taken by another scheduler")
                    self._lost.set()
                    return
                self._renewed_at = time.monotonic()
            except redis.RedisError as err:  # transient: `held` expires it after a full TTL
                log.warning("lease renewal failed: %s", err)


def lease_holder(client: redis.Redis, keys: Keys) -> str | None:
    """Who holds the namespace's scheduler lease (``host:pid:tag``), or ``None``."""
    holder = client.get(keys.scheduler_lease)
    return str(holder) if holder else None


def _holder_is_dead(holder: str) -> bool:
    """Whether a holder (``host:pid:tag``) was a process on this host that has exited."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    return host == socket.gethostname() and pid_text.isdigit() and not pid_alive(int(pid_text))
