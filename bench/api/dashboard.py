"""Dashboard benchmark (issue 13): the job list with 10,000 jobs, time to first render in a real
headless Chromium.

    .venv/bin/python bench/api/dashboard.py            # the figures (run on a quiet machine)
    .venv/bin/python bench/api/dashboard.py --smoke    # a tiny run (seconds)

Redis is ``REDIS_URL`` (else an embedded server); the jobs land in a fresh namespace, deleted at
the end. ``--jobs`` jobs of four teams and both classes are submitted, a fifth of them run and
finish with metrics (half meeting their SLA), the rest wait. The API is `orch serve` in its own
process (as in ``submit.py``); the browser is Debian's chromium through chromedriver
(``make browser`` installs them), signed in with an admin token (it sees every job).

Figures, each the median (and max) over ``--repeats`` fresh page loads:

- ``first render``: from navigation start to the job list's first page drawn (the page marks
  ``document.body.dataset.jobsRendered`` with ``performance.now()``): fetching the pool view
  and ``GET /v1/dashboard/jobs`` (every job, with its SLA verdict), parsing, drawing the pool,
  teams and queues, and the first 100 rows.
- ``list endpoint``: ``GET /v1/dashboard/jobs`` alone (httpx), and its body size.

Results: ``bench/api/results/dashboard.json`` and a screenshot, ``dashboard-10k.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from submit import api_server, redis_url  # noqa: E402

from orchestrator.api import operations  # noqa: E402
from orchestrator.api.identity import Principal  # noqa: E402
from orchestrator.spec import JobSpec, load_spec  # noqa: E402
from orchestrator.store import JobStore  # noqa: E402
from orchestrator.store.states import JobState  # noqa: E402
from orchestrator.store.tokens import Role  # noqa: E402

RESULTS = Path(__file__).parent / "results"
EXAMPLE = ROOT / "examples" / "interactive-mlp.yaml"
TEAMS = ("vision", "speech", "ranking", "research")
_RENDER_TIMEOUT_S = 120


def fill(store: JobStore, jobs: int) -> None:
    """``jobs`` jobs over four teams; every fifth runs and finishes with metrics."""
    base = load_spec(EXAMPLE).model_dump(mode="json", by_alias=True, exclude_unset=True)
    specs = [
        JobSpec.model_validate({**base, "team": TEAMS[i % 4], "name": f"job-{i}"})
        for i in range(jobs)
    ]
    ids = store.submit_many(specs, by="bench")
    for n, job_id in enumerate(ids[::5]):
        for state in (JobState.PLACED, JobState.RUNNING, JobState.FINISHED):
            store.transition(job_id, state)
        store.put_metrics(job_id, {"p95_ms": 40.0 if n % 2 else 400.0, "samples_per_s": 900.0})


def chromium() -> Any:
    """A headless Debian chromium driven by its chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        raise SystemExit("needs chromium and chromedriver: run `make browser` as root")
    options = Options()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1000")
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def first_render_ms(browser: Any, base: str, token: str) -> float:
    """One fresh load of the dashboard, signed in: ms from navigation start to the first page
    of the job list drawn."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{base}/healthz")  # same origin: sessionStorage is the dashboard's
    browser.execute_script("sessionStorage.setItem('orch-token', arguments[0])", token)
    browser.get(f"{base}/dashboard/")
    mark = WebDriverWait(browser, _RENDER_TIMEOUT_S, poll_frequency=0.02).until(
        lambda b: b.execute_script("return document.body.dataset.jobsRendered")
    )
    return float(mark)


def list_endpoint(base: str, token: str, repeats: int) -> dict[str, float]:
    """``GET /v1/dashboard/jobs`` timed alone: median and max ms, and the body's size."""
    import httpx

    times, size = [], 0
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as http:
        for _ in range(repeats):
            start = time.perf_counter()
            reply = http.get("/v1/dashboard/jobs", params={"limit": 100_000}, timeout=120)
            times.append(1000 * (time.perf_counter() - start))
            reply.raise_for_status()
            size = len(reply.content)
    return {"p50_ms": statistics.median(times), "max_ms": max(times), "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in the namespace")
    parser.add_argument("--repeats", type=int, default=5, help="page loads timed")
    parser.add_argument("--smoke", action="store_true", help="a tiny run")
    args = parser.parse_args()
    jobs, repeats = (300, 1) if args.smoke else (args.jobs, args.repeats)
    namespace = f"bench-dash-{uuid.uuid4().hex[:8]}"
    with redis_url() as url:
        store = JobStore.from_url(url, namespace)
        try:
            fill(store, jobs)
            token, _ = operations.create_token(
                store, Principal.local("bench"), name="bench", role=Role.ADMIN, team=None
            )
            with api_server(url, namespace, 1) as base:
                endpoint = list_endpoint(base, token, repeats)
                browser = chromium()
                try:
                    renders = [first_render_ms(browser, base, token) for _ in range(repeats)]
                    if not args.smoke:
                        RESULTS.mkdir(exist_ok=True)
                        browser.save_screenshot(str(RESULTS / "dashboard-10k.png"))
                finally:
                    browser.quit()
        finally:
            store.delete_namespace()
    render = {"p50_ms": statistics.median(renders), "max_ms": max(renders)}
    print(f"jobs: {jobs}, page loads: {repeats}")
    print(
        f"first render of the job list: p50 {render['p50_ms']:.0f} ms,"
        f" max {render['max_ms']:.0f} ms"
    )
    print(
        f"GET /v1/dashboard/jobs: p50 {endpoint['p50_ms']:.0f} ms, max {endpoint['max_ms']:.0f}"
        f" ms, {endpoint['bytes'] / 1e6:.1f} MB"
    )
    if not args.smoke:
        out = {"jobs": jobs, "repeats": repeats, "first_render": render, "endpoint": endpoint}
        (RESULTS / "dashboard.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
