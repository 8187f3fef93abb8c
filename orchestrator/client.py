"""The Python client of the orchestrator's API (the CLI uses it when ``ORCH_API_URL`` is set).

```python
from orchestrator.client import Client

with Client("http://127.0.0.1:8321", token="orch_...") as orch:
    (job_id,) = orch.submit_many([spec])        # JobSpec objects or plain mappings
    done = orch.wait([job_id], timeout_s=600)   # JobView records once every job has ended
    print(done[0].state, done[0].verdict.met)
    for line in orch.logs(job_id, rank=0):      # its captured stdout/stderr (follow=True: live)
        print(line.stream, line.line)
```

Every refusal raises :class:`~orchestrator.errors.ApiError` with the HTTP status and one line per
problem the server named (a 422 names each field); a server that cannot be reached raises it
with ``status=None``.
"""

from __future__ import annotations

import builtins
import json
import os
import ssl
import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from orchestrator.api.models import (
    JobDetail,
    JobView,
    Submitted,
    TokenCreated,
    Usage,
    WhoAmI,
    WorkingDirStored,
)
from orchestrator.errors import ApiError, ConfigError
from orchestrator.spec import JobSpec
from orchestrator.store.audit import AuditEntry
from orchestrator.store.logs import LogEntry
from orchestrator.store.states import TERMINAL
from orchestrator.store.tokens import Role, TokenInfo
from orchestrator.teams import TeamConfig

__all__ = ["Client"]

JobLike = JobSpec | Mapping[str, Any]


class Client:
    """A session with the API server.

    Args:
        url: the server (``http://127.0.0.1:8321``).
        token: an API token (``orch tokens create``).
        timeout_s: how long one request may take.
    """

    def __init__(self, url: str, token: str, *, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
        )

    @classmethod
    def from_env(cls) -> Client | None:
        """A client from ``ORCH_API_URL`` and ``ORCH_TOKEN``, or ``None`` when neither is set.

        Raises:
            ConfigError: only one of the two is set.
        """
        url = os.environ.get("ORCH_API_URL", "").strip()
        token = os.environ.get("ORCH_TOKEN", "").strip()
        if not url and not token:
            return None
        if not url or not token:
            missing = "ORCH_API_URL" if not url else "ORCH_TOKEN"
            raise ConfigError(f"API mode needs ORCH_API_URL and ORCH_TOKEN; {missing} is not set")
        return cls(url, token)

    # ---- jobs --------------------------------------------------------------------------------

    def submit(self, spec: JobLike, *, strict: bool = False) -> str:
        """Queue one job; returns its id. ``strict``: refuse it (an error, nothing queued) if
        its deadline cannot be met even on all its GPUs at its tuned rate, or if the
        scheduler's plan declines it beside the deadline jobs already admitted."""
        params = {"strict": "true"} if strict else None
        reply = self._call("POST", "/v1/jobs", json=_body(spec), params=params)
        (job_id,) = Submitted.model_validate(reply).ids
        return job_id

    def submit_many(self, specs: Iterable[JobLike], *, strict: bool = False) -> builtins.list[str]:
        """Queue many jobs, all or none; returns their ids in order (``strict``: see
        :meth:`submit`)."""
        return self.submit_batch(specs, strict=strict).ids

    def submit_batch(self, specs: Iterable[JobLike], *, strict: bool = False) -> Submitted:
        """:meth:`submit_many`, answered whole: the ids and the warnings the server gave
        (a deadline not checked or not met at the tuned rate, a job the scheduler's plan
        declines), which ``orch submit`` prints."""
        body = {"jobs": [_body(s) for s in specs]}
        params = {"strict": "true"} if strict else None
        reply = self._call("POST", "/v1/jobs/batch", json=body, params=params)
        return Submitted.model_validate(reply)

    def put_working_dir(self, data: bytes) -> str:
        """Store a command job's packed working directory (``orchestrator.workdir.pack``);
        returns the digest its jobs name as ``workload.working_dir``."""
        headers = {"content-type": "application/zip"}
        reply = self._call("PUT", "/v1/working-dirs", content=data, headers=headers)
        return WorkingDirStored.model_validate(reply).digest

    def list(
        self,
        *,
        states: Iterable[str] | None = None,
        team: str | None = None,
        job_class: str | None = None,
        limit: int = 50,
    ) -> builtins.list[JobView]:
        """Jobs in submit order: the ``limit`` newest that match."""
        params: dict[str, Any] = {"limit": limit, "state": builtins.list(states or [])}
        if team is not None:
            params["team"] = team
        if job_class is not None:
            params["class"] = job_class
        return [JobView.model_validate(j) for j in self._call("GET", "/v1/jobs", params=params)]

    def show(self, ref: str) -> JobDetail:
        """One job (by id or unique name): record, verdict, metrics, events, tuning."""
        return JobDetail.model_validate(self._call("GET", f"/v1/jobs/{_path(ref)}"))

    def cancel(self, ref: str) -> JobView:
        """Cancel a job; returns it as it is right after (cancelled, or cancelling)."""
        return JobView.model_validate(self._call("POST", f"/v1/jobs/{_path(ref)}/cancel"))

    def retune(self, ref: str) -> JobView:
        """Re-tune a running job from what it measures (it resumes from its checkpoint with
        the new settings if they are predicted to meet its SLA, else with its own)."""
        return JobView.model_validate(self._call("POST", f"/v1/jobs/{_path(ref)}/tune"))

    def events(self, ref: str) -> builtins.list[dict[str, Any]]:
        """The job's state changes so far, oldest first."""
        events: builtins.list[dict[str, Any]] = self._call("GET", f"/v1/jobs/{_path(ref)}/events")
        return events

    def follow(self, ref: str, after: str = "0") -> Iterator[dict[str, Any]]:
        """Each state change of the job as it happens (server-sent events), until it ends."""
        yield from self._events(f"/v1/jobs/{_path(ref)}/events/stream", {"after": after})

    def logs(
        self,
        ref: str,
        *,
        rank: int | None = None,
        tail: int | None = None,
        follow: bool = False,
    ) -> Iterator[LogEntry]:
        """The job's captured stdout and stderr lines, oldest first across ranks (each says its
        rank and stream): the last ``tail`` of each rank (all that are kept by default), only
        ``rank``'s if given; with ``follow``, then each new line until the job ends."""
        params: dict[str, Any] = {}
        if rank is not None:
            params["rank"] = rank
        if tail is not None:
            params["tail"] = tail
        if not follow:
            kept = self._call("GET", f"/v1/jobs/{_path(ref)}/logs", params=params)
            yield from (LogEntry.model_validate(e) for e in kept)
            return
        for data in self._events(f"/v1/jobs/{_path(ref)}/logs/stream", params):
            yield LogEntry.model_validate(data)

    def wait(
        self, ids: Iterable[str], *, timeout_s: float | None = None, poll_s: float = 1.0
    ) -> builtins.list[JobView]:
        """Poll until every job has ended (or ``timeout_s`` passes); returns them in order."""
        pending = builtins.list(ids)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            jobs = [self.show(j).job for j in pending]
            ended = all(j.state in TERMINAL for j in jobs)
            if ended or (deadline is not None and time.monotonic() > deadline):
                return jobs
            time.sleep(poll_s)

    # ---- services ----------------------------------------------------------------------------

    def service(self, ref: str) -> dict[str, Any]:
        """A service (by job id or unique name): its ``job_id``, ``ready_replicas`` and the
        ``input`` one request carries (``{shape, dtype, high}``, or ``None``)."""
        view: dict[str, Any] = self._call("GET", f"/v1/services/{_path(ref)}")
        return view

    def async_http(
        self, *, timeout_s: float, connections: int, tls: ssl.SSLContext | None = None
    ) -> httpx.AsyncClient:
        """An asyncio session with the same server and token, holding at most
        ``connections`` open. Close it (``async with``, ``aclose``).

        Args:
            timeout_s: how long one request may take.
            connections: the most connections it opens at once.
            tls: the TLS settings to use (default: httpx's, made for this session; making
                them loads the CA bundle, ~30 ms, so many sessions share one:
                ``httpx.create_ssl_context()``).
        """
        return httpx.AsyncClient(
            base_url=self.url,
            headers=self._http.headers,
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            verify=tls if tls is not None else True,
        )

    # ---- the pool, teams, tokens, audit -------------------------------------------------------

    def pool(self) -> dict[str, Any]:
        """The pool view the running scheduler publishes."""
        view: dict[str, Any] = self._call("GET", "/v1/pool")
        return view

    def usage(self, *, since: float = 0.0, team: str | None = None) -> Usage:
        """GPU-seconds per job and team held since ``since`` (epoch seconds)."""
        params: dict[str, Any] = {"since": since}
        if team is not None:
            params["team"] = team
        return Usage.model_validate(self._call("GET", "/v1/usage", params=params))

    def teams(self) -> TeamConfig:
        """The stored team config."""
        return TeamConfig.model_validate(self._call("GET", "/v1/teams"))

    def apply_teams(self, config: TeamConfig | Mapping[str, Any]) -> TeamConfig:
        """Replace the team config (admins)."""
        body = config.model_dump(mode="json") if isinstance(config, TeamConfig) else config
        return TeamConfig.model_validate(self._call("PUT", "/v1/teams", json=body))

    def whoami(self) -> WhoAmI:
        """The principal this client's token speaks for."""
        return WhoAmI.model_validate(self._call("GET", "/v1/whoami"))

    def create_token(self, *, name: str, role: Role | str, team: str | None) -> TokenCreated:
        """Make a token (admins); the answer holds the token, shown this once."""
        body = {"name": name, "role": str(role), "team": team}
        return TokenCreated.model_validate(self._call("POST", "/v1/tokens", json=body))

    def create_service_token(self, ref: str, *, name: str) -> TokenCreated:
        """Make a token for a service's own clients (an admin or a member of its team): it
        reaches that service's endpoint and nothing else; shown this once."""
        body = {"name": name}
        path = f"/v1/services/{_path(ref)}/tokens"
        return TokenCreated.model_validate(self._call("POST", path, json=body))

    def tokens(self) -> builtins.list[TokenInfo]:
        """Every token's record (admins)."""
        return [TokenInfo.model_validate(t) for t in self._call("GET", "/v1/tokens")]

    def revoke_token(self, token_id: str) -> TokenInfo:
        """Revoke a token (admins)."""
        return TokenInfo.model_validate(self._call("DELETE", f"/v1/tokens/{_path(token_id)}"))

    def audit(self, count: int = 100, action: str | None = None) -> builtins.list[AuditEntry]:
        """The latest audit entries, oldest first (admins)."""
        params: dict[str, Any] = {"count": count}
        if action is not None:
            params["action"] = action
        return [AuditEntry.model_validate(e) for e in self._call("GET", "/v1/audit", params=params)]

    # ---- plumbing ----------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            reply = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise ApiError(None, [f"cannot reach {self.url}: {err}"]) from None
        if reply.status_code >= 400:
            raise _error(reply)
        return reply.json()

    def _events(self, url: str, params: dict[str, Any]) -> Iterator[Any]:
        """The data of each server-sent event of ``url``, until the server ends the stream.

        Raises:
            ApiError: the request was refused, the server is unreachable, or the stream ended
                with an ``event: error`` (the store failed while it was followed).
        """
        try:
            with self._http.stream("GET", url, params=params, timeout=None) as reply:
                if reply.status_code >= 400:
                    reply.read()
                    raise _error(reply)
                kind = ""
                for line in reply.iter_lines():
                    if line.startswith("event: "):
                        kind = line.removeprefix("event: ")
                    elif line.startswith("data: "):
                        data = json.loads(line.removeprefix("data: "))
                        if kind == "error":  # the server says why the stream ends
                            raise ApiError(data.get("status"), [str(data.get("detail"))])
                        yield data
                    elif not line:  # an event's end: the next one names its own kind
                        kind = ""
        except httpx.HTTPError as err:
            raise ApiError(None, [f"cannot reach {self.url}: {err}"]) from None

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _body(spec: JobLike) -> Any:
    if isinstance(spec, JobSpec):
        return spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return dict(spec)


def _path(ref: str) -> str:
    return quote(ref, safe="")


def _error(reply: httpx.Response) -> ApiError:
    """One line per problem the server named (``loc: msg`` for each field of a 422)."""
    try:
        detail = reply.json().get("detail")
    except (ValueError, AttributeError):
        detail = reply.text or reply.reason_phrase
    if isinstance(detail, builtins.list):
        problems = []
        for item in detail:
            loc = [str(p) for p in item.get("loc", []) if p != "body"]
            msg = str(item.get("msg", item))
            problems.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    else:
        problems = [str(detail)]
    return ApiError(reply.status_code, problems or [reply.reason_phrase])
