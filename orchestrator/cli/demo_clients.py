"""The demo's services' clients: each service with an endpoint is sent the load its job file
offers, through the API, as a team's clients would send it.

A service answers only requests that reach its endpoint (``serve.endpoint``, the default): its
``serve.rate_rps`` or ``serve.trace`` is the load its SLA is judged at, not a generator inside
it. So ``orch demo`` (and the end-to-end test that submits every example) plays the clients:
from the service's first ready replica until a second before it stops serving (``ends_at``
in its description), the engine of ``orch load`` sends that offered load open loop over HTTP
to the API on a loopback port, with a token scoped to the service. What the clients saw is
reported beside the verdict, which is on the requests as the ingress measured them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

from orchestrator.errors import OrchError

if TYPE_CHECKING:
    from orchestrator.api.server import ApiServer
    from orchestrator.client import Client
    from orchestrator.load import LoadReport
    from orchestrator.spec import JobSpec
    from orchestrator.store import JobStore

__all__ = ["ServiceClients"]

END_MARGIN_S = 1.0
"""The clients stop this long before the service's run ends (it stops serving then)."""
TIMEOUT_S = 30.0
CONNECTIONS = 100


class ServiceClients:
    """Clients for services with an endpoint (see the module doc): a thread per service, the
    API server on a loopback port started with the first. :meth:`close` stops both."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.api: ApiServer | None = None
        self.threads: list[threading.Thread] = []
        self.reports: dict[str, LoadReport | str] = {}
        self.tokens: list[tuple[str, str]] = []  # (service, token id): revoked at the end
        self.ends_at: dict[str, float] = {}  # when each service said it stops serving
        self.closed = threading.Event()

    def offer(self, job_id: str, spec: JobSpec) -> str | None:
        """Send service ``job_id`` the load ``spec`` offers, from its first ready replica; a
        line saying so (with the request a client sends), or ``None`` for a job that is not a
        service with an endpoint."""
        from orchestrator.api import operations
        from orchestrator.api.identity import Principal
        from orchestrator.api.server import start

        serve = spec.serve
        if serve is None or not serve.endpoint or spec.run.duration_s is None:
            return None
        if self.api is None:
            self.api = start(self.store, "127.0.0.1:0")
        who = Principal.local("demo")
        token, info = operations.create_service_token(self.store, who, job_id, "demo-clients")
        self.tokens.append((job_id, info.id))
        thread = threading.Thread(
            target=self._run, args=(job_id, spec, token), name=f"clients-{job_id}", daemon=True
        )
        thread.start()
        self.threads.append(thread)
        load = f"{serve.rate_rps:g} req/s" if serve.rate_rps is not None else "its trace's arrivals"
        return (
            f"{job_id}'s clients send {load} to its endpoint once it serves, each request "
            f"as: curl -H 'Authorization: Bearer TOKEN' -H 'Content-Type: application/json' "
            f"-d '{{\"input\": [...]}}' {self.api.url}/v1/services/{job_id}/infer"
        )

    def _run(self, job_id: str, spec: JobSpec, token: str) -> None:
        from orchestrator.client import Client
        from orchestrator.load import offered_schedule, send_load

        assert self.api is not None and spec.serve is not None  # set by offer
        assert spec.run.duration_s is not None
        try:
            with Client(self.api.url, token) as client:
                info = self._ready(client, job_id)
                if info is None:
                    self.reports[job_id] = "it never had a ready replica"
                    return
                # until it stops serving: its start was stamped at launch, before its first
                # replica loaded the model, so it serves less than its duration from here
                ends_at = info.get("ends_at")
                left = spec.run.duration_s
                if isinstance(ends_at, int | float):
                    self.ends_at[job_id] = float(ends_at)
                    left = min(left, float(ends_at) - time.time())
                span = max(1.0, left - END_MARGIN_S)
                schedule = offered_schedule(spec.serve.model_dump(), span, spec.run.seed)
                self.reports[job_id] = send_load(
                    client,
                    job_id,
                    info,
                    schedule,
                    seed=spec.run.seed,
                    timeout_s=TIMEOUT_S,
                    connections=CONNECTIONS,
                )
        except Exception as err:  # said in the summary, not lost in the thread
            self.reports[job_id] = f"{type(err).__name__}: {err}"

    def _ready(self, client: Client, job_id: str) -> dict[str, object] | None:
        """The service's description once a replica is ready; ``None`` if it ends (or the
        clients are closed) first."""
        while not self.closed.is_set():
            info = client.service(job_id)
            if info.get("ready_replicas"):
                return info
            if self.store.get(job_id).terminal:
                return None
            time.sleep(0.3)
        return None

    def lines(self) -> list[str]:
        """What each service's clients saw, a line each."""
        out = []
        for job_id, report in self.reports.items():
            if isinstance(report, str):
                out.append(f"{job_id}'s clients sent nothing: {report}")
                continue
            answered = report.statuses.get("200", 0)
            p99 = "-" if report.latency is None else f"{report.latency.p99:,.1f} ms"
            others = ", ".join(f"{n} {k}" for k, n in sorted(report.statuses.items()) if k != "200")
            out.append(
                f"{job_id}'s clients: {report.requests:,} requests at "
                f"{report.offered_rps or 0:,.1f} req/s, {answered:,} answered"
                f"{f' ({others})' if others else ''}, p99 {p99} from each request's due time"
            )
        return out

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop waiting for services to be ready, wait for the loads sent, revoke the
        clients' tokens (none outlives the demo), stop the API."""
        from orchestrator.api import operations
        from orchestrator.api.identity import Principal

        self.closed.set()
        deadline = time.monotonic() + timeout_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        who = Principal.local("demo")
        try:
            for job_id, token_id in self.tokens:
                with contextlib.suppress(OrchError):  # its job is gone: so is its reach
                    operations.revoke_service_token(self.store, who, job_id, token_id)
            self.tokens.clear()
        finally:
            if self.api is not None:
                self.api.stop()
                self.api = None
