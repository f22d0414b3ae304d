"""The dashboard in a real browser: headless Chromium (Debian's chromium + chromium-driver, which
run.sh installs) driven by selenium, against a real database with thousands of jobs in every
state. Every page is opened and saved as a screenshot under artifacts/dashboard/ (or
$JOBKIT_ARTIFACTS/dashboard), and the browser's console must stay free of errors, CSP
violations included."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_seed import hold_state_changing_schedules, seed
from jobkit.config import Settings
from jobkit.connector import Database, Session
from jobkit.dashboard import AuthConfig, Dashboard
from jobkit.ops.localdb import LocalCluster
from jobkit.schema.deploy import DeployOptions, deploy
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
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


def counts(url: str) -> dict[str, int]:
    with Database(url).session() as s:
        return {r["status"]: int(r["n"]) for r in
                s.all("select status, count(*) as n from jobkit.jobs group by status")}


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
    console_errors(browser)  # the 401 of the refused sign-in is logged; it is expected here


def test_every_page_without_console_errors(signed_in: WebDriver, site: str, seeded: str) -> None:
    driver = signed_in
    console_errors(driver)  # drop what the sign-in left
    with Database(seeded).session() as s:
        dead_id = s.scalar("select id from jobkit.jobs where status = 'dead' order by created_at limit 1")
    pages = {"overview": "/", "jobs": "/jobs", "job": f"/jobs/{dead_id}", "schedules": "/schedules",
             "ratelimits": "/ratelimits", "audit": "/actions", "overview-day": "/?window=1d"}
    for name, path in pages.items():
        driver.get(site + path)
        WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.TAG_NAME, "main")))
        if name.startswith("overview"):
            WebDriverWait(driver, 10).until(ready.presence_of_element_located((By.CSS_SELECTOR, ".uplot canvas")))
        shot(driver, name)
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
    shot(driver, "confirm")
    driver.find_element(By.ID, "confirm").click()
    WebDriverWait(driver, 30).until(ready.presence_of_element_located((By.ID, "done")))  # htmx progress
    shot(driver, "action-progress")
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
