"""Waking the scheduler: submissions and cancels are published on the namespace's wake channel.

The control loop polls (a round every ``scheduler_interval_s``); a job submitted just after a
round used to wait for the next one. The submit script (``submit.lua``) and
:meth:`JobStore.cancel` publish on ``{namespace}:wake``, and the loop, between rounds, waits
on a subscription to it (:class:`Wakeups`) instead of sleeping the whole interval.

Pub/sub, not a stream: a wake-up carries no fact the loop must not miss (the queue and the job
states in Redis are the facts, read every round), so one lost while Redis is away costs at most
one polling interval, which stays the fallback. Nothing is kept in Redis for it.
"""

from __future__ import annotations

import contextlib
import threading
import time

import redis

from orchestrator.store.keys import KeyFamily

__all__ = ["STOP_CHECK_S", "WAKE_GAP_S", "WakeChannel", "Wakeups"]

STOP_CHECK_S = 0.1
"""How often a wait looks at its ``stop`` event (a subscription's socket cannot wait on it)."""

WAKE_GAP_S = 0.05
"""Wake-ups closer together than this are one: a burst of submissions (a batch, an API flood)
makes a round every 50 ms at most, not one per job."""


class WakeChannel(KeyFamily):
    """The namespace's wake channel (``ns:wake``): who publishes, and the loop's subscription."""

    @property
    def channel(self) -> str:
        """The channel's name (a pub/sub channel, not a key: nothing is stored)."""
        return self._keys.key("wake")

    def publish(self, what: str) -> None:
        """Wake the namespace's scheduler (``what``: the job id, for whoever listens)."""
        self._client.publish(self.channel, what)

    def subscribe(self) -> Wakeups:
        """A subscription for the control loop (close it when the loop stops)."""
        return Wakeups(self._client, self.channel)


class Wakeups:
    """A subscription to the wake channel, which the control loop waits on between rounds.

    Redis being away is not an error here: a wait then sleeps its whole timeout (polling, as
    without wake-ups) and the next wait subscribes again.

    Args:
        client: the store's Redis client (the subscription takes its own connection).
        channel: the wake channel.
    """

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self._client = client
        self._channel = channel
        self._pubsub: redis.client.PubSub | None = None
        self._last = -float("inf")  # monotonic time of the last wake-up returned
        self._subscribe()  # now: what is published during the first round wakes the next

    def _subscribe(self) -> redis.client.PubSub | None:
        if self._pubsub is None:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self._channel)
            except redis.RedisError:
                pubsub.close()
                return None
            self._pubsub = pubsub
        return self._pubsub

    def wait(self, timeout_s: float, stop: threading.Event) -> bool:
        """Block until a wake-up comes, ``stop`` is set, or ``timeout_s`` has passed.

        Wake-ups that came while the caller was busy count (they wait on the subscription's
        connection); all those pending are taken at once.

        Returns:
            Whether a wake-up ended the wait.
        """
        deadline = time.monotonic() + timeout_s
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            pubsub = self._subscribe()
            if pubsub is None:  # Redis is away: poll, as without wake-ups
                stop.wait(left)
                return False
            try:
                message = pubsub.get_message(timeout=min(left, STOP_CHECK_S))
                if message is None:
                    continue
                while pubsub.get_message(timeout=0.0) is not None:
                    pass  # one wake-up for all that are pending
            except redis.RedisError:
                self.close()  # subscribed again on the next wait
                stop.wait(min(left, STOP_CHECK_S))
                continue
            # spaced: a flood of submissions must not turn the loop into a busy loop
            stop.wait(max(0.0, self._last + WAKE_GAP_S - time.monotonic()))
            self._last = time.monotonic()
            return True
        return False

    def close(self) -> None:
        """Unsubscribe and give the connection back (idempotent)."""
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                self._pubsub.close()
            self._pubsub = None
