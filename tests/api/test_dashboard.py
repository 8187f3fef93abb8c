"""The web dashboard in a real headless Chromium (Debian's, through chromedriver) against the
real server: sign in with a token, see the job list, open a job's page with its charts, cancel
as a member; a viewer sees no cancel. Screenshots go to the test's temporary directory, and to
``bench/api/results/`` when ``ORCH_SAVE_SCREENSHOTS`` is set (``dashboard.png``: the job list;
``dashboard-job.png``: a job's page; the committed ones were made so): a test run leaves the
working tree as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api import operations
from orchestrator.api.identity import Principal
from orchestrator.api.server import ApiServer
from orchestrator.config import Settings
from orchestrator.control.loop import ControlLoop
from orchestrator.runtime.local import LocalRuntime
from orchestrator.services import make_policy
from orchestrator.spec import JobSpec
from orchestrator.store import JobStore
from orchestrator.store.states import JobState
from orchestrator.teams import parse_teams
from tests.api.conftest import ROOT, http, job_spec, spec_data

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a dev dependency")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

RESULTS = ROOT / "bench" / "api" / "results"
_WAIT_S = 20
TUNING = {
    "status": "feasible",
    "trials": 3,
    "cache": "miss",
    "trials_table": [
        {
            "number": n,
            "config": {"micro_batch": mb, "gpus": 1},
            "source": "measured",
            "measurement": {"samples_per_s": 300.0 * (n + 1), "p95_ms": 15.0 * (n + 1)},
            "feasible": n < 2,
            "reason": "" if n < 2 else "p95 over 100 ms",
        }
        for n, mb in enumerate((8, 16, 64))
    ],
}
"""A tuning report as the tuner stores it (the fields the page shows)."""


def _chromium() -> tuple[str, str]:
    """Debian's chromium and its chromedriver, installed with apt-get when missing and this is
    root (as ``make browser`` does); the test skips, saying why, when they cannot be had."""
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if (None in found) and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, timeout=300)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"],
            env=env,
            check=False,
            timeout=600,
        )
        found = shutil.which("chromium"), shutil.which("chromedriver")
    browser, driver = found
    if browser is None or driver is None:
        pytest.skip(
            "no chromium/chromedriver, and they could not be installed (run `make browser` as "
            "root, or `apt-get install chromium chromium-driver`)"
        )
    return browser, driver


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    """A headless Chromium (a fresh profile: nothing kept between tests but the module's)."""
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary, driver = _chromium()
    options = Options()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    yield chrome
    chrome.quit()


@pytest.fixture
def running(store: JobStore, tmp_path: Path) -> Iterator[tuple[ControlLoop, list[str]]]:
    """A real control loop (in-process runtime) that has started two of team vision's jobs and
    one of team speech's, and a third vision job waits; the first vision job was tuned and has
    reported metrics for a while."""
    settings = Settings(redis_url="unused", namespace=store.namespace, data_dir=tmp_path)
    loop = ControlLoop(settings, store, LocalRuntime([("n0", 4)]), make_policy("gang"))
    loop.lease.acquire(store.namespace)
    teams = [{"name": "vision", "guaranteed_gpus": 2, "max_gpus": 3}, {"name": "speech"}]
    store.put_teams(parse_teams({"teams": teams}))
    root = Principal.local("alice")
    ids = operations.submit(
        store, root, [job_spec("vision", "eval-a"), job_spec("vision", "eval-b")]
    ).ids
    ids += operations.submit(store, root, [job_spec("speech", "asr")]).ids
    loop.round()
    loop.round()
    wide = JobSpec.model_validate({**spec_data("vision", "eval-wide"), "resources": {"gpus": 2}})
    ids += operations.submit(store, root, [wide]).ids  # 1 GPU is free: it waits
    loop.round()
    store.tune_reports.save(ids[0], TUNING)
    now = time.time()
    for i in range(30):
        report = {"p95_ms": 20.0 + (i % 7), "samples_per_s": 900.0 + 10 * (i % 5), "step": i}
        store.put_metrics(ids[0], {**report, "ts": now - 30 + i})
    yield loop, ids
    loop.lease.release()


def _wait(chrome: WebDriver, condition: Any, what: str) -> Any:
    try:
        return WebDriverWait(chrome, _WAIT_S).until(condition)
    except TimeoutException:
        raise AssertionError(f"the dashboard did not show {what} in {_WAIT_S} s") from None


def _sign_in(chrome: WebDriver, api: ApiServer, token: str) -> None:
    chrome.get(f"{api.url}/dashboard/")
    chrome.execute_script("sessionStorage.clear()")
    chrome.get(f"{api.url}/dashboard/")
    field = _wait(chrome, ec.visibility_of_element_located((By.ID, "token")), "the sign-in form")
    field.send_keys(token)
    chrome.find_element(By.ID, "login").click()


def _row(chrome: WebDriver, job_id: str) -> Any:
    css = f'#jobs-table tbody tr[data-id="{job_id}"]'
    return _wait(chrome, ec.visibility_of_element_located((By.CSS_SELECTOR, css)), job_id)


def _rgb(colour: str) -> tuple[int, ...]:
    """``#3456c8`` or ``rgb(52, 86, 200)`` (``rgba``, as a browser computes it) as numbers."""
    if colour.startswith("#"):
        return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return tuple(int(part) for part in re.findall(r"\d+", colour)[:3])


def _screenshot(chrome: WebDriver, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    assert chrome.save_screenshot(str(shot)), "the screenshot was not written"
    if os.environ.get("ORCH_SAVE_SCREENSHOTS"):
        RESULTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, RESULTS / name)
    return shot


def test_a_member_signs_in_sees_its_jobs_opens_one_and_cancels_it(
    store: JobStore,
    api: ApiServer,
    tokens: dict[str, str],
    browser: WebDriver,
    running: tuple[ControlLoop, list[str]],
    tmp_path: Path,
) -> None:
    loop, (first, second, other, wide) = running
    done = operations.submit(store, Principal.local("alice"), [job_spec("vision", "done")]).ids[0]
    for state in (JobState.PLACED, JobState.RUNNING):
        store.transition(done, state)
    store.put_metrics(done, {"p95_ms": 12.0, "samples_per_s": 500.0, "step": 9})
    store.transition(done, JobState.FINISHED)  # its p95 met its ceiling: judged "met"
    store.logs.append(first, 0, [("out", "epoch 1: loss 0.42"), ("err", "a warning")])
    _sign_in(browser, api, tokens["member"])
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "whoami"), "member of vision"), "who")
    row = _row(browser, first)
    assert "running" in row.text
    # the state filter's choices come from the API (the page spells no state itself)
    options = browser.find_elements(By.CSS_SELECTOR, "#state-filter option")
    assert [o.get_attribute("value") for o in options] == ["", *(s.value for s in JobState)]
    _row(browser, second)
    assert not browser.find_elements(By.CSS_SELECTOR, f'tr[data-id="{other}"]')  # speech's
    _wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "#pool svg")), "the pool")
    teams = browser.find_element(By.ID, "teams").text
    assert "vision" in teams and "2 / 3" in teams  # used against its cap
    _row(browser, wide)
    queues = browser.find_element(By.ID, "queues").text
    assert "interactive vision 1" in queues
    history = (By.CSS_SELECTOR, '#history svg polyline[data-name="vision"]')
    _wait(browser, ec.presence_of_element_located(history), "the pool's use over time")
    assert (
        browser.find_element(By.CSS_SELECTOR, "#history svg").get_attribute("data-series") == "3"
    )  # all teams, speech and vision: the pool's use is no secret, as the pool view
    keys = browser.find_elements(By.CSS_SELECTOR, "#history .legend li")
    assert [k.text for k in keys] == ["all teams", "speech", "vision"]  # a key to each colour
    for key in keys:
        name = key.get_attribute("data-name")
        line = browser.find_element(By.CSS_SELECTOR, f'#history svg polyline[data-name="{name}"]')
        swatch = key.find_element(By.CLASS_NAME, "swatch")
        assert swatch.size["width"] > 0 and swatch.size["height"] > 0, name
        assert _rgb(swatch.value_of_css_property("background-color")) == _rgb(
            line.get_attribute("stroke")
        ), name
    attainment = browser.find_element(By.CSS_SELECTOR, '#attainment tr[data-team="vision"]')
    assert "100% (1/1)" in attainment.text
    shot = _screenshot(browser, tmp_path, "dashboard.png")
    assert shot.stat().st_size > 10_000

    row.find_element(By.LINK_TEXT, first).click()
    title = _wait(browser, ec.visibility_of_element_located((By.ID, "job-title")), "a job page")
    assert first in title.text
    line = (By.CSS_SELECTOR, "#chart-latency svg polyline")
    _wait(browser, ec.presence_of_element_located(line), "the latency chart")
    assert browser.find_element(By.ID, "latency-title").text == "p95 latency (ms)"  # the SLA's
    chart = browser.find_element(By.CSS_SELECTOR, "#chart-latency svg")
    assert chart.get_attribute("data-points") == "30"
    assert "SLA" in chart.text  # the ceiling is drawn
    tput = (By.CSS_SELECTOR, "#chart-tput svg polyline")
    _wait(browser, ec.presence_of_element_located(tput), "the throughput chart")
    logs = browser.find_element(By.ID, "logs").text
    assert "[rank 0] epoch 1: loss 0.42" in logs and "[rank 0 err] a warning" in logs
    busy = browser.find_element(By.ID, "chart-busy").text
    assert busy == "No % busy reported yet."  # the in-process runtime's slots report none
    events = browser.find_element(By.ID, "events").text
    assert "running" in events and "placed" in events
    trials = browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")
    assert len(trials) == 3 and "meets SLA" in trials[0].text
    _screenshot(browser, tmp_path, "dashboard-job.png")

    browser.find_element(By.ID, "cancel").click()
    _wait(browser, ec.alert_is_present(), "the confirmation").accept()
    _wait(browser, ec.invisibility_of_element_located((By.ID, "cancel")), "the cancel done")
    assert store.get(first).state is JobState.CANCELLING
    loop.round()  # the loop stops the run
    loop.round()
    assert store.get(first).state is JobState.CANCELLED
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "job-state"), "cancelled"), "ended")
    [entry] = store.audit.read(10, action="cancel")
    assert entry.actor == "member" and entry.target == first


def test_a_viewer_reads_but_has_no_cancel_and_a_bad_token_is_refused(
    store: JobStore,
    api: ApiServer,
    tokens: dict[str, str],
    browser: WebDriver,
    running: tuple[ControlLoop, list[str]],
) -> None:
    _, (first, *_) = running
    _sign_in(browser, api, tokens["viewer"])
    _row(browser, first)
    assert not browser.find_elements(By.CSS_SELECTOR, "#jobs-table button.cancel")
    browser.get(f"{api.url}/dashboard/#/job/{first}")
    _wait(browser, ec.text_to_be_present_in_element((By.ID, "job-title"), first), "the job")
    assert not browser.find_element(By.ID, "cancel").is_displayed()

    _sign_in(browser, api, "orch_0123abcd_not-a-token")
    error = _wait(browser, ec.visibility_of_element_located((By.ID, "error")), "a refusal")
    assert "unknown, malformed or revoked" in error.text
    assert browser.find_element(By.ID, "token").is_displayed()
    assert browser.execute_script("return sessionStorage.getItem('orch-token')") is None


# ---- the routes the page uses, over plain HTTP ---------------------------------------------


def test_the_page_is_self_contained_and_served_at_the_root(api: ApiServer) -> None:
    client = http(api)
    home = client.get("/", follow_redirects=False)
    assert home.status_code == 307 and home.headers["location"] == "/dashboard/"
    page = client.get("/dashboard/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for name in ("app.js", "style.css"):
        served = client.get(f"/dashboard/{name}")
        assert served.status_code == 200, name
        # nothing is fetched from elsewhere (no CDN): every reference is relative
        assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?https?:""", served.text), name
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page.text)


def test_job_rows_and_metrics_history_follow_the_roles(
    store: JobStore, api: ApiServer, tokens: dict[str, str]
) -> None:
    root = Principal.local("alice")
    ours = operations.submit(store, root, [job_spec("vision", f"v{i}") for i in range(3)]).ids
    theirs = operations.submit(store, root, [job_spec("speech", "s0")]).ids
    store.put_metrics(ours[0], {"p95_ms": 12.0, "samples_per_s": 100.0})
    store.put_metrics(ours[0], {"p95_ms": 14.0, "samples_per_s": 110.0})

    assert http(api).get("/v1/dashboard/jobs").status_code == 401
    rows = http(api, tokens["member"]).get("/v1/dashboard/jobs").json()
    assert [r["id"] for r in rows] == ours[::-1]  # its team's only, newest first
    assert rows[0]["class"] == "interactive" and rows[0]["state"] == "queued"
    assert rows[0]["verdict"] == {"met": None, "target": "p95 <= 100 ms", "measured": "-"}
    newest = http(api, tokens["viewer-all"]).get("/v1/dashboard/jobs", params={"limit": 2})
    assert [r["id"] for r in newest.json()] == [theirs[0], ours[2]]

    history = http(api, tokens["viewer"]).get(f"/v1/jobs/{ours[0]}/metrics").json()
    assert [h["p95_ms"] for h in history] == [12.0, 14.0] and history[0]["ts"] > 0
    assert http(api, tokens["outsider"]).get(f"/v1/jobs/{ours[0]}/metrics").status_code == 404
    assert http(api, tokens["member"]).get("/v1/jobs/nope-000000/metrics").status_code == 404
