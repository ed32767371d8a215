#!/usr/bin/python3
"""The operator console in a real browser (Debian's chromium, headless, through chromium-driver).

Run by tests/integration/console_itest.cpp against a running engine whose sagas it made; exits 0
when every check holds, 1 (after printing what failed) otherwise. Everything is printed on stderr.

  console_test.py --url http://127.0.0.1:PORT --token TOKEN --sagas-json FILE [--screenshots DIR]

FILE names the sagas: {"completed": [...], "compensated": ID, "parked": ID, "held": ID,
"script": ID, "key": KEY, "keyed": ID}.
"""
import argparse
import json
import os
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

failures = []


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def check(condition, what):
    log(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)
    return condition


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--sagas-json", required=True)
    parser.add_argument("--screenshots")
    args = parser.parse_args()
    with open(args.sagas_json) as f:
        sagas = json.load(f)

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1440,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    # The pages re-render as they poll: an element read between two renders is looked up again.
    wait = WebDriverWait(driver, 20, ignored_exceptions=[StaleElementReferenceException])
    try:
        run(driver, wait, args, sagas)
    except TimeoutException as e:
        failures.append("timed out waiting: " + (e.msg or "a condition"))
        log("FAIL timed out; page text:\n" + driver.find_element(By.TAG_NAME, "body").text[:3000])
    finally:
        # The page must have run without script errors or Content-Security-Policy violations.
        for entry in driver.get_log("browser"):
            message = entry.get("message", "")
            if "Content Security Policy" in message or "Uncaught" in message:
                failures.append("browser console: " + message)
                log("FAIL browser console: " + message)
        driver.quit()
    if failures:
        log("\n%d check(s) failed:" % len(failures))
        for f in failures:
            log("  - " + f)
        return 1
    log("all console checks passed")
    return 0


def rows(driver):
    return [r.get_attribute("data-saga-id") for r in driver.find_elements(By.CSS_SELECTOR, "#sagas tbody tr[data-saga-id]")]


def wait_rows(driver, wait, expected, what):
    """Waits until the table shows exactly `expected` (a set of saga ids)."""
    try:
        if expected:
            wait.until(lambda d: set(rows(d)) == expected)
        else:  # an empty table before the page loaded does not count
            wait.until(lambda d: d.find_elements(By.ID, "no-match"))
        return check(True, what)
    except TimeoutException:
        return check(False, what + " (shown: %s)" % rows(driver))


def apply_filters(driver, wait, status="", type_="", key="", prefix="", older="", newer=""):
    driver.get(driver.current_url.split("#")[0] + "#/sagas")
    wait.until(lambda d: d.find_elements(By.ID, "filters"))
    Select(driver.find_element(By.ID, "filter-status")).select_by_value(status)
    # The types arrive with the overview.
    wait.until(lambda d: any(o.get_attribute("value") == type_ for o in
                             Select(d.find_element(By.ID, "filter-type")).options))
    Select(driver.find_element(By.ID, "filter-type")).select_by_value(type_)
    for element_id, value in (("filter-key", key), ("filter-prefix", prefix), ("filter-older", older),
                              ("filter-newer", newer)):
        field = driver.find_element(By.ID, element_id)
        field.clear()
        field.send_keys(value)
    driver.find_element(By.ID, "filter-apply").click()


def open_saga(driver, wait, saga_id):
    driver.get(driver.current_url.split("#")[0] + "#/saga/" + saga_id)
    wait.until(lambda d: d.find_elements(By.ID, "saga-status") and
               d.find_element(By.ID, "saga-id").text == saga_id)


def confirm(driver, wait, reason=None):
    wait.until(lambda d: d.find_element(By.ID, "confirm-dialog").get_attribute("open") is not None)
    text = driver.find_element(By.ID, "confirm-text").text
    if reason is not None:
        driver.find_element(By.ID, "confirm-reason").send_keys(reason)
    driver.find_element(By.ID, "confirm-ok").click()
    return text


def run(driver, wait, args, sagas):
    everyone = set(sagas["completed"]) | {sagas["compensated"], sagas["parked"], sagas["held"], sagas["script"],
                                          sagas["keyed"]}

    # Without a token the API answers 401 and the console asks for one.
    driver.get(args.url + "/ui/")
    wait.until(lambda d: d.find_element(By.ID, "token-dialog").get_attribute("open") is not None)
    check(True, "without a token the console asks for one")
    driver.find_element(By.ID, "token-input").send_keys(args.token)
    driver.find_element(By.ID, "token-save").click()
    try:
        wait.until(lambda d: d.execute_script("return sessionStorage.getItem('sagaflow.token')") == args.token)
        check(True, "the token is kept in the tab's session storage")
    except TimeoutException:
        check(False, "the token is kept in the tab's session storage")
    check(driver.get_cookies() == [], "no cookie is set")

    # The list: every saga, newest first, with counts per status.
    wait_rows(driver, wait, everyone, "the list shows every saga")
    shown = rows(driver)
    check(shown == sorted(shown, reverse=True), "newest first (UUID v7 ids descending)")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#counts .count[data-status='completed']"))
    completed_count = driver.find_element(By.CSS_SELECTOR, "#counts .count[data-status='completed'] .n").text
    expected_completed = len(sagas["completed"]) + 2  # the <script> saga and the keyed one complete too
    check(completed_count == str(expected_completed),
          "the completed count says %d (shows %s)" % (expected_completed, completed_count))
    check(driver.find_element(By.ID, "fact-parked").text == "1", "the overview counts one parked saga")
    if args.screenshots:
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(args.screenshots, "console-sagas.png"))

    # Filters, each against what the database holds.
    apply_filters(driver, wait, status="failed")
    wait_rows(driver, wait, {sagas["parked"]}, "status parked (failed) shows the parked saga only")
    apply_filters(driver, wait, status="compensated")
    wait_rows(driver, wait, {sagas["compensated"]}, "status compensated shows the compensated saga only")
    apply_filters(driver, wait, status="running", type_="itest-saga")
    wait_rows(driver, wait, {sagas["held"]}, "status running and the type show the held saga only")
    apply_filters(driver, wait, key=sagas["key"])
    wait_rows(driver, wait, {sagas["keyed"]}, "the idempotency key finds its saga")
    apply_filters(driver, wait, prefix=sagas["parked"][:-3])
    wait_rows(driver, wait, {sagas["parked"]}, "an id prefix finds its saga")
    apply_filters(driver, wait, older="60")
    wait_rows(driver, wait, set(), "older than an hour: none")
    apply_filters(driver, wait, newer="60")
    wait_rows(driver, wait, everyone, "newer than an hour: all")

    # A saga: its steps, timeline and diagram.
    open_saga(driver, wait, sagas["compensated"])
    phases = {(r.get_attribute("data-step"), r.get_attribute("data-phase")): r.get_attribute("data-status")
              for r in driver.find_elements(By.CSS_SELECTOR, "#steps tbody tr")}
    check(phases.get(("charge", "action")) == "failed", "the failed charge is shown as failed")
    check(phases.get(("reserve", "compensation")) == "succeeded", "the reservation's release is shown")
    wait.until(lambda d: d.execute_script(
        "const i = document.getElementById('diagram-image'); return i && i.complete && i.naturalWidth > 0"))
    check(True, "the diagram is drawn")
    kinds = [r.get_attribute("data-kind") for r in driver.find_elements(By.CSS_SELECTOR, "#timeline tbody tr")]
    check(kinds[:1] == ["started"] and "finished" in kinds, "the timeline runs from started to finished")
    if args.screenshots:
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(args.screenshots, "console-saga.png"))

    # A value from the database is text, never markup.
    open_saga(driver, wait, sagas["script"])
    shown_input = driver.find_element(By.CSS_SELECTOR, "#saga-input pre").text
    check("<script>" in shown_input, "an input with <script> is shown as text")
    check(driver.execute_script("return window.__xss === undefined"), "and nothing of it ran")
    check(driver.execute_script("return document.scripts.length") == 1, "the page has its one script only")
    try:
        driver.switch_to.alert
        check(False, "no alert opened")
    except NoAlertPresentException:
        check(True, "no alert opened")

    # Retry the parked saga through the console.
    open_saga(driver, wait, sagas["parked"])
    check(not driver.find_elements(By.ID, "cancel-button"), "a parked saga offers no cancel")
    driver.find_element(By.ID, "retry-button").click()
    text = confirm(driver, wait)
    check("one more attempt" in text and "same command event id" in text, "the retry confirmation says what happens")
    wait.until(lambda d: d.find_element(By.ID, "action-result").get_attribute("data-outcome") == "accepted")
    check(True, "the retry was accepted")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline tbody tr[data-kind='operator-retry']"))
    check(True, "the timeline shows the operator's retry")

    # Cancel the held saga, with a reason; a confirmation that is dismissed changes nothing.
    open_saga(driver, wait, sagas["held"])
    driver.find_element(By.ID, "cancel-button").click()
    wait.until(lambda d: d.find_element(By.ID, "confirm-dialog").get_attribute("open") is not None)
    driver.find_element(By.ID, "confirm-cancel").click()
    time.sleep(1)
    check(driver.find_element(By.ID, "saga-status").get_attribute("data-status") == "running",
          "dismissing the confirmation leaves the saga running")
    driver.find_element(By.ID, "cancel-button").click()
    text = confirm(driver, wait, reason="customer called <b>support</b>")
    check("compensated" in text and "cannot be undone" in text, "the cancel confirmation says what happens")
    wait.until(lambda d: d.find_element(By.ID, "action-result").get_attribute("data-outcome") == "accepted")
    check(True, "the cancel was accepted")
    wait.until(lambda d: d.find_element(By.ID, "saga-status").get_attribute("data-status") in
               ("compensating", "compensated"))
    check(True, "the saga is compensating")
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline tbody tr[data-kind='cancelled']"))
    check(True, "the timeline shows the cancel")


if __name__ == "__main__":
    sys.exit(main())
