"""The dashboard in a real browser: headless Chromium (Debian's chromium + chromium-driver, which
run.sh installs) driven by selenium, against a real database with thousands of jobs in every
state. Every page is opened and saved as a screenshot under artifacts/dashboard/ (or
$JOBKIT_ARTIFACTS/dashboard), and the browser's console must stay free of errors, CSP
violations included."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_seed import hold_state_changing_schedules, seed
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.dashboard import AuthConfig, Dashboard
from jobkit.dashboard.filters import STATES
from jobkit.jobs import NewJob
from jobkit.lifecycle import Lifecycle
from jobkit.ops.localdb import LocalCluster
from jobkit.schema.deploy import DeployOptions, deploy
from poll import wait_for
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait
from standins.postgrest import serve

TOKEN = "browser-test-token-0123456789"
PER_STATE = 400  # per type and state: 3 types x 7 states x 400 = 8,400 jobs
ARTIFACTS = Path(os.environ.get("JOBKIT_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts")) / "dashboard"


def _binary(*names: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    raise RuntimeError(f"none of {names} is installed: `./run.sh test` installs chromium and "
                       "chromium-driver (apt), or install them yourself")


@pytest.fixture(scope="module")
def seeded(cluster: LocalCluster, admin: Session, template_db: str) -> Iterator[str]:
    name = f"b_{uuid.uuid4().hex[:12]}"
    admin.execute_with_identifiers("create database {name} template {tpl}", name=name, tpl=template_db)
    url = cluster.url(name)
    deploy(Database(url), Settings(db_url=url), DeployOptions(), echo=lambda _m: None)
    hold_state_changing_schedules(url)
    seed(url, per_state=PER_STATE)
    try:
        yield url
    finally:
        admin.execute("select cron.unschedule(jobid) from cron.job where database = %s", (name,))
        admin.execute_with_identifiers("drop database if exists {name} with (force)", name=name)


@pytest.fixture(scope="module")
def site(seeded: str) -> Iterator[str]:
    dashboard = Dashboard(seeded, Settings(db_url=seeded), auth=AuthConfig(token=TOKEN))
    with serve(dashboard.app) as base:  # type: ignore[arg-type]
        yield base
    dashboard.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium", "chromium-browser")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1100", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(_binary("chromedriver")))
    driver.set_page_load_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def signed_in(browser: WebDriver, site: str) -> WebDriver:
    browser.get(f"{site}/jobs")
    assert "/login" in browser.current_url  # refused without auth: sent to sign in
    browser.find_element(By.ID, "credential").send_keys(TOKEN)
    browser.find_element(By.ID, "sign-in").click()
    WebDriverWait(browser, 10).until(ready.presence_of_element_located((By.ID, "jobs")))
    return browser


def console_errors(driver: WebDriver) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def shot(driver: WebDriver, name: str) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, max(900, min(int(height) + 40, 3000)))
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    driver.set_window_size(1400, 1100)


def counts(url: str, job_type: str | None = None) -> dict[str, int]:
    """Jobs per state (every state the status check allows, zeros included), of one type or all."""
    with Database(url).session() as s:
        found = {r["status"]: int(r["n"]) for r in
                 s.all("select status, count(*) as n from jobkit.jobs where %(t)s::text is null or type = %(t)s "
                       "group by status", {"t": job_type})}
    return {state: found.get(state, 0) for state in STATES}


def shots(driver: WebDriver, name: str, reload: bool = True) -> None:
    """The page at 1280x800, light and dark (prefers-color-scheme emulated), for docs/img/; reloaded
    in each (the charts are drawn in the scheme's colours at the window's width) unless it is the
    answer to a POST."""
    driver.set_window_size(1280, 800)
    for scheme in ("light", "dark"):
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
        if reload:
            driver.refresh()
            WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.TAG_NAME, "main")))
            if driver.find_elements(By.ID, "series"):
                WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.CSS_SELECTOR, ".uplot canvas")))
        driver.save_screenshot(str(ARTIFACTS / f"{name}-{scheme}.png"))
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    driver.set_window_size(1400, 1100)


def test_refused_without_auth(browser: WebDriver, site: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{site}/")
    assert "/login" in browser.current_url
    browser.find_element(By.ID, "credential").send_keys("not-the-token")
    button = browser.find_element(By.ID, "sign-in")
    button.click()
    WebDriverWait(browser, 10).until(ready.staleness_of(button))
    assert "was refused" in browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    shot(browser, "login")
    shots(browser, "login", reload=False)
    console_errors(browser)  # the 401 of the refused sign-in is logged; it is expected here


def test_run_now_is_queued(signed_in: WebDriver, site: str, seeded: str) -> None:
    """"Run now" schedules a one-off pg_cron job; test_run_now_ran (the last test) waits for pg_cron's
    minute, so the wait overlaps the tests between them."""
    driver = signed_in
    driver.get(f"{site}/schedules")
    button = driver.find_element(By.ID, "run-sweep-stuck")
    button.click()
    WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.ID, "queued")))
    assert "run queued" in driver.find_element(By.CSS_SELECTOR, 'tr[data-schedule="sweep-stuck"]').text
    assert console_errors(driver) == []


def test_state_bar_counts_are_the_databases(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    for path, job_type in (("/", None), ("/jobs?type=send_email", "send_email")):
        driver.get(site + path)
        bar = {a.get_attribute("data-state"): a for a in driver.find_elements(By.CSS_SELECTOR, "#states a.state")}
        shown = {state: int(a.get_attribute("data-count")) for state, a in bar.items() if state}
        assert shown == counts(seeded, job_type), path
        assert all(a.get_attribute("data-exact") == "true" for state, a in bar.items() if state)
    bar["dead"].click()  # a link to the jobs of that state
    WebDriverWait(driver, 10).until(ready.url_contains("status=dead"))
    assert "type=send_email" in driver.current_url
    total = driver.find_element(By.ID, "total-count").text
    assert int(total.replace(",", "")) == counts(seeded, "send_email")["dead"]
    assert console_errors(driver) == []


def test_keyboard_moves_selects_and_retries_after_a_confirm(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    driver.get(f"{site}/jobs?type=sync_crm&status=dead")
    body = driver.find_element(By.TAG_NAME, "body")
    rows = driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-id]")
    body.send_keys("j")
    body.send_keys("j")
    assert "current" in rows[1].get_attribute("class")
    body.send_keys("k")
    assert "current" in rows[0].get_attribute("class") and "current" not in rows[1].get_attribute("class")
    body.send_keys("/")
    assert driver.switch_to.active_element.get_attribute("name") == "type"  # the filter's first field
    driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    body.send_keys("x")
    assert rows[0].find_element(By.CSS_SELECTOR, "input.pick").is_selected()
    body.send_keys("r")
    WebDriverWait(driver, 10).until(ready.url_contains("/actions/confirm"))
    assert driver.find_element(By.ID, "confirm-title").text == "Retry 1 job?"  # confirmed first
    sample = [a.get_attribute("title") for a in driver.find_elements(By.CSS_SELECTOR, "#sample a.mono")]
    assert sample == [rows_id(seeded, "sync_crm", "dead")]
    assert console_errors(driver) == []


def rows_id(url: str, job_type: str, status: str) -> str:
    """The newest job of the type and state: the jobs page's first row."""
    with Database(url).session() as s:
        return str(s.scalar("select id from jobkit.jobs where type = %s and status = %s "
                            "order by created_at desc, id desc limit 1", (job_type, status)))


def test_dark_mode_follows_the_system(signed_in: WebDriver, site: str) -> None:
    driver = signed_in
    backgrounds = {}
    for scheme in ("light", "dark"):
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
        driver.get(f"{site}/jobs")
        backgrounds[scheme] = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert backgrounds == {"light": "rgb(255, 255, 255)", "dark": "rgb(15, 17, 21)"}
    assert console_errors(driver) == []


def test_auto_refresh_and_its_pause(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    driver.get(f"{site}/jobs?status=pending")
    live = driver.find_element(By.ID, "live")
    WebDriverWait(driver, 8).until(lambda d: live.get_attribute("data-refreshed"))
    with Database(seeded).session() as s:  # a new job shows up without a reload
        new = Lifecycle(s).enqueue(NewJob("send_email", {"to": "refresh@example.org"}))
    WebDriverWait(driver, 8).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#jobs tr[data-id="{new}"]'))
    toggle = driver.find_element(By.ID, "refresh-toggle")
    toggle.click()
    assert toggle.get_attribute("aria-pressed") == "true"
    stamp = live.get_attribute("data-refreshed")
    time.sleep(5.5)
    assert live.get_attribute("data-refreshed") == stamp  # paused: no refresh
    driver.refresh()  # the pause is remembered
    assert driver.find_element(By.ID, "refresh-toggle").get_attribute("aria-pressed") == "true"
    driver.find_element(By.ID, "refresh-toggle").click()
    assert console_errors(driver) == []


def test_every_page_without_console_errors(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    console_errors(driver)  # drop what the sign-in left
    with Database(seeded).session() as s:
        dead_id = s.scalar("select id from jobkit.jobs where status = 'dead' order by created_at limit 1")
    pages = {"overview": "/", "jobs": "/jobs", "job": f"/jobs/{dead_id}", "schedules": "/schedules",
             "ratelimits": "/ratelimits", "triggers": "/triggers", "audit": "/actions", "overview-day": "/?window=1d"}
    for name, path in pages.items():
        driver.get(site + path)
        WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.TAG_NAME, "main")))
        if name.startswith("overview"):
            WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.CSS_SELECTOR, ".uplot canvas")))
        shot(driver, name)
        if name != "overview-day":
            shots(driver, name)
        assert console_errors(driver) == [], name
        assert "error:" not in driver.find_element(By.TAG_NAME, "main").text, name


def test_filter_by_payload(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    driver.get(f"{site}/jobs")
    field = driver.find_element(By.ID, "payload")
    field.clear()
    field.send_keys('{"user_id": 7}')
    driver.find_element(By.ID, "apply").click()
    WebDriverWait(driver, 10).until(ready.staleness_of(field))  # the filtered page replaced this one
    shown = {a.get_attribute("href").rsplit("/", 1)[1]
             for a in driver.find_elements(By.CSS_SELECTOR, "#jobs a.mono")}
    with Database(seeded).session() as s:
        want = {str(r["id"]) for r in s.all("select id from jobkit.jobs where payload @> '{\"user_id\": 7}'")}
    assert shown == want and len(want) == 7
    shot(driver, "jobs-payload-filter")
    assert console_errors(driver) == []


def test_retry_every_dead_job_matching_a_filter(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    before = counts(seeded)
    driver.get(f"{site}/jobs?type=resize_image&status=dead")
    button = driver.find_element(By.ID, "retry-matching")
    button.click()
    WebDriverWait(driver, 10).until(ready.staleness_of(button))
    heading = WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.TAG_NAME, "h1")))
    assert heading.text == f"Retry {PER_STATE} jobs?"  # the count, confirmed first
    assert "every job where type is resize_image and status is dead" in driver.find_element(By.ID, "confirm-target").text
    assert len(driver.find_elements(By.CSS_SELECTOR, "#sample tbody tr")) == 10
    shot(driver, "confirm")
    shots(driver, "confirm", reload=False)
    driver.find_element(By.ID, "confirm").click()
    WebDriverWait(driver, 30).until(ready.presence_of_element_located((By.ID, "done")))  # htmx progress
    shot(driver, "action-progress")
    shots(driver, "action-progress")
    after = counts(seeded)
    assert after["dead"] == before["dead"] - PER_STATE
    assert after["pending"] == before["pending"] + PER_STATE
    with Database(seeded).session() as s:
        row = s.one("select * from jobkit.audit_log order by id desc limit 1")
    assert row is not None and row["action"] == "retry" and row["affected"] == PER_STATE
    assert row["target"] == {"filter": {"type": "resize_image", "status": "dead"}}
    assert console_errors(driver) == []


def test_cancel_one_job(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    with Database(seeded).session() as s:
        job_id = s.scalar("select id from jobkit.jobs where status = 'pending' and type = 'sync_crm' limit 1")
    driver.get(f"{site}/jobs/{job_id}")
    button = driver.find_element(By.ID, "job-cancel")
    button.click()
    WebDriverWait(driver, 10).until(ready.staleness_of(button))
    WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.ID, "confirm"))).click()
    WebDriverWait(driver, 30).until(ready.presence_of_element_located((By.ID, "done")))
    with Database(seeded).session() as s:
        assert s.scalar("select status from jobkit.jobs where id = %s", (job_id,)) == "cancelled"
    driver.get(f"{site}/jobs/{job_id}")
    assert driver.find_element(By.ID, "job-status").text == "cancelled"
    assert console_errors(driver) == []


def test_refused_without_the_csrf_token(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    before = counts(seeded)
    driver.get(f"{site}/jobs?status=completed")
    driver.execute_script("document.querySelectorAll('#matching input[name=csrf]').forEach(e => e.remove())")
    button = driver.find_element(By.ID, "delete-matching")
    button.click()
    WebDriverWait(driver, 10).until(ready.staleness_of(button))
    assert "CSRF token" in driver.find_element(By.TAG_NAME, "body").text
    assert counts(seeded) == before
    console_errors(driver)  # the 403 is logged by the browser; expected here


def test_run_now_ran_in_pg_cron(signed_in: WebDriver, site: str, seeded: str) -> None:
    """The one-off of test_run_now_is_queued ran at pg_cron's next minute: its run is in
    cron.job_run_details, with the schedule's command, and the strip shows it meanwhile."""
    name = seeded.rsplit("/", 1)[1].split("?")[0]
    seen: dict[str, Any] = {}

    def ran() -> bool:
        with Database(seeded).with_dbname("postgres").session() as s:
            seen["run"] = s.one("select d.status, d.command from cron.job_run_details d join cron.job j using (jobid) "
                                "where j.database = %s and j.jobname like '%%:now:%%' "
                                "and d.status in ('succeeded', 'failed')", (name,))
        return seen["run"] is not None

    wait_for(ran, 150, "pg_cron ran the one-off of run now", every=1)
    assert seen["run"]["status"] == "succeeded" and "sweep_stuck()" in seen["run"]["command"]
    driver = signed_in
    driver.get(f"{site}/schedules")
    strip = driver.find_elements(By.CSS_SELECTOR, 'tr[data-schedule="sweep-stuck"] .strip .run.ok')
    assert strip, "the run shows in the schedule's strip"
    shots(driver, "schedules")
    assert console_errors(driver) == []
