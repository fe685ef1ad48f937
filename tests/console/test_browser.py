"""The console in a real browser (headless Debian chromium, Selenium) against `veri serve console` over an
archive written by the trainer's `JobArchive`: the jobs list, logs streaming while the job runs (follow
and pause), a facet filter narrowing the archive, the token view's trained / masked tokens, its rows and where one forks
point of a broken trajectory, a download `veri debug` reads, and what an empty plot says (no step yet, no
tool calls). Screenshots: build/test-artifacts/console/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

from testkit.console_archive import TIMINGS, Tokens, record, rewritten_rollout, write_job
from testkit.servers import RunningServer, start_server
from tests.console.browser import chromium, screenshot, wait_for
from veri.archive import JobArchive, step_metrics
from veri.tools.harness.debug import explain, read_records

# chromium's absence fails each test as it runs (tests/conftest.py)
pytestmark = [pytest.mark.needs("browser"), pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[tuple[JobArchive, RunningServer]]:
    """A job still running (this process holds its archive open) and the console serving it."""
    state = tmp_path_factory.mktemp("browser-state")
    with write_job(state / "jobs", "live", tiny_model) as archive, \
            start_server(["serve", "console", "--state", str(state)]) as console:
        yield archive, console


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    downloads = tmp_path_factory.mktemp("downloads")
    with chromium(downloads) as driver:
        driver.downloads = downloads
        yield driver


def test_jobs_list_shows_the_job(live, browser):
    _, console = live
    browser.get(console.url + "/")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-job="live"]')
    assert "running" in row.text and "2 of 3" in row.text
    assert browser.find_elements(By.CSS_SELECTOR, 'tr[data-job="live"] svg.spark polyline')
    screenshot(browser, "jobs")


def test_logs_stream_while_the_job_runs_with_follow_and_pause(live, browser):
    archive, console = live
    browser.get(console.url + "/jobs/live")
    logs = browser.find_element(By.ID, "logs")
    wait_for(lambda: "job live: backend hf" in logs.text, "the log's first lines")
    archive.log("step 2: a line written while the page is open")
    wait_for(lambda: "a line written while the page is open" in logs.text, "the appended line to stream in")

    follow = browser.find_element(By.ID, "log-follow")
    follow.click()  # pause: new lines wait
    archive.log("step 2: held while paused")
    wait_for(lambda: follow.text == "paused (1 new)", "the paused button to count the held line")
    assert "held while paused" not in logs.text
    follow.click()
    assert "held while paused" in logs.text and follow.text == "following"

    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#plot-reward svg polyline"), "the reward plot")
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-status svg rect")
    assert browser.find_element(By.ID, "job-status").text == "running"
    screenshot(browser, "job-running")


def test_a_facet_filter_narrows_the_archive(live, browser):
    _, console = live
    browser.get(console.url + "/jobs/live")
    assert browser.find_element(By.ID, "archive-total").text == "12"
    Select(browser.find_element(By.ID, "f-status")).select_by_visible_text("failed")
    browser.find_element(By.CSS_SELECTOR, "#facets button[type=submit]").click()
    wait_for(lambda: browser.find_element(By.ID, "archive-total").text == "2", "the filtered count")
    rows = browser.find_elements(By.CSS_SELECTOR, "#rollouts tr.rollout-row")
    assert [row.get_attribute("data-status") for row in rows] == ["failed", "failed"]
    assert "status=failed" in browser.current_url  # the filtered view is a link
    Select(browser.find_element(By.ID, "f-step-min")).select_by_visible_text("1")
    browser.find_element(By.ID, "f-text").send_keys("crash")
    browser.find_element(By.CSS_SELECTOR, "#facets button[type=submit]").click()
    wait_for(lambda: browser.find_element(By.ID, "archive-total").text == "1", "step and text narrowing further")
    screenshot(browser, "archive-filtered")


def test_token_view_marks_masked_tokens_and_the_break(live, browser):
    _, console = live
    browser.get(console.url + "/jobs/live/steps/0/tasks/0/rollouts/0/tokens")
    trained = browser.find_elements(By.CSS_SELECTOR, "#tokens .t.sampled.trained")
    environment = browser.find_elements(By.CSS_SELECTOR, "#tokens .t.environment")
    assert trained and environment
    style = browser.execute_script  # masked tokens are struck through, trained ones are not
    assert "line-through" in style("return getComputedStyle(arguments[0]).textDecorationLine", environment[0])
    assert "line-through" not in style("return getComputedStyle(arguments[0]).textDecorationLine", trained[0])
    title = trained[0].get_attribute("title")
    assert re.fullmatch(r"#\d+ id \d+ logprob -?\d+\.\d{4} sampled, trained \(span 0\)", title), title
    assert environment[0].get_attribute("title").endswith("environment, masked (span 1)")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tokens .span-start")) == 2
    screenshot(browser, "tokens-trained")

    browser.get(console.url + "/jobs/live/steps/0/tasks/1/rollouts/0/tokens")  # a rewritten system prompt
    (fork,) = browser.find_elements(By.CSS_SELECTOR, "#tokens .t.break")
    assert fork.text == " sh" and "BREAK: row 1 forks from span 0 here" in fork.get_attribute("title")
    box = browser.find_element(By.ID, "fork")
    assert "Row 1 forks from span 0 at token 3" in box.text and "this prompt has 420" in box.text
    assert browser.find_element(By.ID, "tokens-line").text == "tokens: sampled 15, trained 15, dropped 0"
    screenshot(browser, "tokens-fork")
    browser.find_element(By.CSS_SELECTOR, '#rows a[href="?row=2"]').click()  # the conversation before it
    assert "row 2" in browser.find_element(By.CSS_SELECTOR, "#rows li.selected").text
    assert browser.find_elements(By.CSS_SELECTOR, "#tokens .t.sampled.trained")

    browser.get(console.url + "/jobs/live/steps/0/tasks/1/rollouts/1/tokens")  # harness failed: all masked
    assert browser.find_element(By.ID, "row-trained").text == "masked"
    assert not browser.find_elements(By.CSS_SELECTOR, "#tokens .t.trained")
    screenshot(browser, "tokens-masked")


def test_a_download_is_jsonl_that_veri_debug_reads(live, browser):
    _, console = live
    browser.get(console.url + "/jobs/live/steps/1/tasks/1/rollouts/0")
    screenshot(browser, "trajectory")
    browser.find_element(By.ID, "download-rollout").click()
    path = wait_for(lambda: next(iter(browser.downloads.glob("*rollout-0.jsonl")), None), "the download")
    (record,) = read_records(path)
    assert record["rollout_id"] == "r-1-0" and "in 2 row(s)" in explain(record)


def test_the_step_timeline_draws_a_bar_per_rollout_the_trainer_the_sync_and_idle_gaps(live, browser):
    _, console = live
    browser.get(console.url + "/jobs/live")
    bars = wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#plot-timeline g.timeline-rollout"),
                    "the timeline's rollout bars")
    assert len(bars) == 6  # the step's rollouts, one bar each
    assert {bar.get_attribute("data-rollout-id") for bar in bars} == {f"r-{t}-{i}" for t in range(3) for i in range(2)}
    model_calls = browser.find_elements(By.CSS_SELECTOR, "#plot-timeline g.timeline-rollout rect.tl-model")
    assert len(model_calls) == 2 + 2 + 2 + 2 + 2  # every rollout's spans but the one with none
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-timeline g.timeline-trainer rect.tl-forward_backward")
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-timeline g.timeline-sync rect.tl-weight_sync")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#plot-timeline g.timeline-policy")) == 2
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-timeline g.timeline-policy rect.tl-idle")
    assert "policy 0" in browser.find_element(By.ID, "timeline-figures").text
    select = Select(browser.find_element(By.ID, "timeline-step"))
    assert [o.text for o in select.options] == ["0", "1"] and select.first_selected_option.text == "1"
    select.select_by_visible_text("0")
    wait_for(lambda: Select(browser.find_element(By.ID, "timeline-step")).first_selected_option.text == "0"
             and len(browser.find_elements(By.CSS_SELECTOR, "#plot-timeline g.timeline-rollout")) == 6,
             "step 0's timeline")
    screenshot(browser, "job-timeline")


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[RunningServer]:
    """Jobs with nothing for some plots: one finished whose steps made no tool call, one finished with no step,
    one running with no step yet."""
    state = tmp_path_factory.mktemp("quiet-state")
    tok = Tokens(tiny_model)
    with JobArchive(state / "jobs", "no-tools") as archive:
        archive.start_job(model=str(tiny_model), max_steps=2, config={"model": str(tiny_model)})
        for step in range(2):
            records = [record(0, index, rewritten_rollout(tok, step), reward=0.5) for index in range(2)]
            for item in records:
                archive.write_rollout(step, item)
            archive.write_step_metrics(step, step_metrics(records, TIMINGS))
    with JobArchive(state / "jobs", "no-steps") as archive:
        archive.start_job(model=str(tiny_model), max_steps=2, config={"model": str(tiny_model)})
    with JobArchive(state / "jobs", "starting") as running:
        running.start_job(model=str(tiny_model), max_steps=2, config={"model": str(tiny_model)})
        with start_server(["serve", "console", "--state", str(state)]) as console:
            yield console


def _plot_text(browser, plot: str) -> str:
    return wait_for(lambda: browser.find_element(By.ID, plot).text, f"{plot} to be drawn or to say why not")


def test_an_empty_plot_says_why(quiet, browser):
    browser.get(quiet.url + "/jobs/no-tools")
    assert _plot_text(browser, "plot-parse-failures") == "no tool calls in this job's steps"
    assert browser.find_elements(By.CSS_SELECTOR, "#plot-reward svg polyline")  # the steps are there
    screenshot(browser, "job-no-tool-calls")

    browser.get(quiet.url + "/jobs/no-steps")
    assert _plot_text(browser, "plot-parse-failures") == "no step completed in this job"
    assert _plot_text(browser, "plot-status") == "no step completed in this job"

    browser.get(quiet.url + "/jobs/starting")
    assert _plot_text(browser, "plot-parse-failures") == "no completed step yet"
