"""The dashboard's /workers page in a real browser (headless Chromium through selenium, as
test_dashboard_browser.py): a real `jobkit worker serve` process appears on the open page without a
reload, with the job it holds, and turns gone when it stops; the console stays free of errors (CSP
violations included). Screenshots go to artifacts/dashboard/ (or $JOBKIT_ARTIFACTS/dashboard)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobkit.config import Settings
from jobkit.connector import Session
from jobkit.dashboard import Dashboard
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from standins.postgrest import serve
from workers import Worker

ARTIFACTS = Path(os.environ.get("JOBKIT_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts")) / "dashboard"


def _binary(*names: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    raise RuntimeError(f"none of {names} is installed: `./run.sh test` installs chromium and "
                       "chromium-driver (apt), or install them yourself")


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium", "chromium-browser")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,800", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(_binary("chromedriver")))
    driver.set_page_load_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def site(db_url: str) -> Iterator[str]:
    dashboard = Dashboard(db_url, Settings(db_url=db_url))  # no auth: loopback host names only
    with serve(dashboard.app) as base:  # type: ignore[arg-type]
        yield base
    dashboard.close()


def _state(driver: WebDriver, worker_id: str) -> str | None:
    """The state the open page shows for the worker (None: not listed)."""
    rows = driver.find_elements(By.CSS_SELECTOR, f'tr.worker[data-worker="{worker_id}"]')
    return rows[0].get_attribute("data-state") if rows else None


def _shots(driver: WebDriver, name: str) -> None:
    """The open page at 1280x800 in light and dark (prefers-color-scheme emulated, as
    test_dashboard_browser.py's shots), for docs/img/: ARTIFACTS/<name>-light.png and -dark.png."""
    driver.set_window_size(1280, 800)
    for scheme in ("light", "dark"):
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
        driver.save_screenshot(str(ARTIFACTS / f"{name}-{scheme}.png"))
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def _wait(driver: WebDriver, check: Any, what: str, timeout: float = 20) -> None:
    """Until ``check`` holds; the table is replaced every 2 s, so an element found just before a
    refresh may be stale when read: that try counts as not yet."""
    WebDriverWait(driver, timeout, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: check(d), message=what)


def _link(driver: WebDriver, css: str) -> tuple[str, str]:
    link = driver.find_element(By.CSS_SELECTOR, css)
    return link.text, link.get_attribute("href") or ""


def _read(read: Any) -> Any:
    """``read()``, again if the 2 s refresh replaced the element between finding and reading it."""
    for _ in range(20):
        try:
            return read()
        except StaleElementReferenceException:
            continue
    return read()


def test_a_worker_appears_holds_a_job_and_disappears_on_the_open_page(
    browser: WebDriver, site: str, db_url: str, session: Session
) -> None:
    browser.get(f"{site}/workers")
    assert "No workers have registered" in _read(lambda: browser.find_element(By.ID, "workers-table").text)
    assert browser.find_element(By.CSS_SELECTOR, 'nav a.here').text == "Workers"
    session.execute("create table side_effects (key text primary key, job_id uuid, at timestamptz default now())")
    session.execute("grant all on side_effects to public")
    worker = Worker(db_url, "--heartbeat", "1s", "--grace", "1s")
    try:
        worker_id = worker.health()["worker"]
        _wait(browser, lambda d: _state(d, worker_id) == "alive", "the worker did not appear")  # no reload
        job = Lifecycle(session, "jobkit").enqueue(NewJob("e2e.slow", {"seconds": 30}, idempotency_key="b1"))
        assert worker.run({"type": "e2e.slow"}).status_code == 202
        _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-held-by="{worker_id}"] a.job'),
              "its job is not listed")
        text, href = _read(lambda: _link(browser, f'tr[data-held-by="{worker_id}"] a.job'))
        assert text == str(job) and href.endswith(f"/jobs/{job}")
        row = _read(lambda: browser.find_element(By.CSS_SELECTOR, f'tr.worker[data-worker="{worker_id}"]').text)
        assert "pg_net" in row and "e2e.slow" in row
        browser.save_screenshot(str(ARTIFACTS / "workers.png"))
        _shots(browser, "dashboard-workers")
        code, out = worker.stop()
        assert code == 0, out
    finally:
        if worker.alive:
            worker.kill()
    _wait(browser, lambda d: _state(d, worker_id) == "gone", "the worker did not turn gone")
    assert not browser.find_elements(By.CSS_SELECTOR, f'tr[data-held-by="{worker_id}"]')
    assert "1 gone" in _read(lambda: browser.find_element(By.ID, "worker-counts").text)
    browser.save_screenshot(str(ARTIFACTS / "workers-gone.png"))
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
