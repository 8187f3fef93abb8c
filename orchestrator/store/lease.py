"""The scheduler lease: at most one scheduler drives a namespace.

A Redis key (``{ns}:scheduler:lease``) holds the owner (``host:pid:tag``) with a time-to-live.
A heartbeat thread renews it every third of the TTL, independently of how long a scheduling
round takes, so a slow round (a stuck probe, a long stop) never lets the lease lapse while its
holder is alive. If renewal is refused (someone else holds the key), the lease is lost and the
scheduler must stop acting; its state writes are refused by the store anyway (they are fenced:
``JobStore.fence``).

Redis being unreachable is not a loss: nobody can take the lease or write state meanwhile.
While renewals fail for longer than the TTL the lease is *unconfirmed* (:meth:`Lease.check`
raises a connection error, which the loop treats as an outage and retries); once Redis answers
again the holder renews it, or takes it back if it expired and nobody took it in between (a
generation counter, bumped on every acquisition, tells). So a Redis restart pauses the
scheduler instead of stopping it.
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

__all__ = ["LEASE_MS", "Lease", "LeaseLost", "SchedulerBusy", "lease_generation", "lease_holder"]

log = logging.getLogger(__name__)

LEASE_MS = 15_000
"""How long a lease lives without renewal, by default."""
STANDBY_POLL_S = 0.5
"""How often a standby tries to take the lease."""

# KEYS: lease, generation. ARGV: owner, ttl, our generation. 1: renewed; 2: taken back
# (it had expired and nobody took it since: the generation is still ours); 0: someone else's.
_RENEW_LUA = """
local holder = redis.call("GET", KEYS[1])
if holder == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
if not holder and redis.call("GET", KEYS[2]) == ARGV[3] then
  redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
  return 2
end
return 0
"""
# KEYS: lease, generation. ARGV: owner, ttl, the holder we saw ("": none). Take the lease if
# it is (still) held by the holder we saw; returns the new generation, or false.
_ACQUIRE_LUA = """
local holder = redis.call("GET", KEYS[1])
if (ARGV[3] == "" and not holder) or holder == ARGV[3] then
  redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
  return redis.call("INCR", KEYS[2])
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

    @classmethod
    def of(cls, holder: str, namespace: str) -> SchedulerBusy:
        """The error for ``holder`` driving ``namespace``."""
        return cls(
            f"another scheduler ({holder}) is driving namespace {namespace!r}; "
            "stop it first, or use another ORCH_NAMESPACE"
        )


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
        self.gen_key = keys.scheduler_lease_generation
        self.owner = owner
        self.ttl_ms = ttl_ms
        self.generation = 0
        self._renew = client.register_script(_RENEW_LUA)
        self._acquire = client.register_script(_ACQUIRE_LUA)
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
        keys = [self.key, self.gen_key]
        gen = self._acquire(keys=keys, args=[self.owner, self.ttl_ms, ""])
        if not gen:
            holder = str(self._client.get(self.key) or "")
            if holder_is_dead(holder):
                gen = self._acquire(keys=keys, args=[self.owner, self.ttl_ms, holder])
            if not gen:
                raise SchedulerBusy.of(holder, namespace)
            log.warning("took over the lease of %s, whose process is gone", holder)
        self.generation = int(gen)
        self._renewed_at = time.monotonic()
        self._thread = threading.Thread(target=self._beat, name="orch-lease", daemon=True)
        self._thread.start()

    def acquire_when_free(self, namespace: str, stop: threading.Event) -> bool:
        """Wait as a standby until the lease can be taken, then take it (see :meth:`acquire`).

        Tries every half second (a try is one small script): a holder that dies (no renewal)
        lets its lease expire within one TTL, so a standby takes over at most about a TTL after
        its death, and within half a second when the holder was a process on this host that
        has exited.

        Returns:
            Whether the lease was taken (``False``: ``stop`` was set first).
        """
        logged = False
        while not stop.is_set():
            try:
                self.acquire(namespace)
                return True
            except SchedulerBusy as err:
                if not logged:
                    log.info("standby: %s", err)
                    logged = True
            except redis.RedisError as err:  # Redis restarting: keep waiting
                log.warning("standby: Redis unreachable (%s); waiting", err)
            stop.wait(min(STANDBY_POLL_S, self.ttl_ms / 3000))
        return False

    @property
    def held(self) -> bool:
        """Whether the lease is ours and confirmed (renewed within the TTL, never refused)."""
        if self._lost.is_set():
            return False
        return time.monotonic() - self._renewed_at <= self.ttl_ms / 1000

    @property
    def lost(self) -> bool:
        """Whether another scheduler holds (or held) the lease since we took it: for good."""
        return self._lost.is_set()

    def check(self) -> None:
        """Raise unless the lease is held and confirmed.

        Raises:
            LeaseLost: another scheduler took it.
            redis.ConnectionError: not renewed for a whole TTL because Redis does not answer
                (an outage: the caller waits, and the lease is renewed or taken back once Redis
                answers, unless someone took it meanwhile).
        """
        if self._lost.is_set():
            raise LeaseLost("the scheduler lease was taken by another scheduler")
        if not self.held:
            raise redis.ConnectionError(
                f"the scheduler lease has not been renewed for "
                f"{time.monotonic() - self._renewed_at:.0f} s: Redis does not answer"
            )

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
        keys = [self.key, self.gen_key]
        while not self._stop.wait(interval):
            try:
                renewed = self._renew(keys=keys, args=[self.owner, self.ttl_ms, self.generation])
            except redis.RedisError as err:  # an outage: `check` says so after a full TTL
                log.warning("lease renewal failed: %s", err)
                continue
            if not renewed:
                log.error("scheduler lease taken by another scheduler")
                self._lost.set()
                return
            if renewed == 2:
                log.warning("took the scheduler lease back after Redis was unreachable")
            self._renewed_at = time.monotonic()


def lease_holder(client: redis.Redis, keys: Keys) -> str | None:
    """Who holds the namespace's scheduler lease (``host:pid:tag``), or ``None``."""
    holder = client.get(keys.scheduler_lease)
    return str(holder) if holder else None


def lease_generation(client: redis.Redis, keys: Keys) -> int | None:
    """The generation of the namespace's latest lease acquisition (``None``: never taken)."""
    gen = client.get(keys.scheduler_lease_generation)
    return int(gen) if gen else None


def holder_is_dead(holder: str) -> bool:
    """Whether a holder (``host:pid:tag``) was a process on this host that has exited."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    return host == socket.gethostname() and pid_text.isdigit() and not pid_alive(int(pid_text))


def live_scheduler(url: str) -> str | None:
    """The holder of a live scheduler lease in any namespace of the Redis at ``url`` (``orch
    down`` refuses to stop a server a scheduler uses: its watchdog would restart it at once)."""
    from orchestrator.store.connection import open_url

    client = open_url(url)
    try:
        for key in client.scan_iter(match="*:scheduler:lease"):
            holder = client.get(key)
            if holder and not holder_is_dead(str(holder)):
                return str(holder)
        return None
    finally:
        client.close()
