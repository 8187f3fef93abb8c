"""The Redis key layout: every key the orchestrator writes lives under ``{namespace}:``.

One namespace per orchestrator lets several of them (or several test runs) share one Redis, and
:meth:`Keys.pattern` lets a namespace be listed or deleted as a whole. Job ids and names match
``[a-z0-9._-]`` (see ``orchestrator.spec``), so they never contain the ``:`` separator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Keys"]

# Characters that glob-style MATCH patterns treat specially.
_GLOB = re.compile(r"([*?\[\]\\])")


@dataclass(frozen=True)
class Keys:
    """Builds the keys of one namespace.

    Layout (``ns`` is the namespace)::

        ns:seq                     string  submit counter (job order, FIFO scores)
        ns:jobs                    zset    every job id, score = submit sequence
        ns:job:{id}                hash    the job record
        ns:events:{id}             stream  state changes {event, ts, message, from}
        ns:queue:{class}           zset    queued job ids of a class, score = submit sequence
        ns:names:{name}            set     ids of the jobs with that name
        ns:queue-version           string  bumped whenever a queue's membership changes
        ns:metrics:{id}            hash    latest value of each metric (JSON)
        ns:metrics-stream:{id}     stream  metric reports, capped
        ns:{part}:{part}...        anything else, through :meth:`key`
    """

    namespace: str

    def key(self, *parts: str) -> str:
        """A free-form key ``ns:part1:part2...`` (pool view, tuner studies, teams...)."""
        return ":".join((self.namespace, *parts))

    @property
    def prefix(self) -> str:
        """The common prefix of every key in the namespace, separator included."""
        return f"{self.namespace}:"

    @property
    def pattern(self) -> str:
        """A SCAN ``MATCH`` pattern for every key of the namespace (and only this one)."""
        return _GLOB.sub(r"\\\1", self.prefix) + "*"

    @property
    def seq(self) -> str:
        """The submit counter."""
        return self.key("seq")

    @property
    def jobs(self) -> str:
        """All job ids, scored by submit sequence."""
        return self.key("jobs")

    def job(self, job_id: str) -> str:
        """The hash holding one job record."""
        return self.key("job", job_id)

    def events(self, job_id: str) -> str:
        """The stream of one job's state changes."""
        return self.key("events", job_id)

    def queue(self, job_class: str) -> str:
        """Queued job ids of one class, scored by submit sequence (lowest first = FIFO)."""
        return self.key("queue", job_class)

    @property
    def queue_version(self) -> str:
        """Counter bumped on every change of a queue's membership (a cheap "has it changed")."""
        return self.key("queue-version")

    @property
    def queue_prefix(self) -> str:
        """``queue(c)`` is ``queue_prefix + c``; the transition script builds it this way."""
        return self.key("queue", "")

    def names(self, name: str) -> str:
        """Ids of the jobs submitted under one name."""
        return self.key("names", name)

    def metrics(self, job_id: str) -> str:
        """The latest value of each metric of a job."""
        return self.key("metrics", job_id)

    def metrics_stream(self, job_id: str) -> str:
        """Every metrics report of a job, capped to the most recent ones."""
        return self.key("metrics-stream", job_id)
