"""`make train` on the tiny model through the whole stack: TRL steps, weight sync, gVisor rollouts
through the launcher service, and the archive a user then reads. The job (tests/stack/train_job/)
gives the two rollouts of a group different rewards, so the steps must move the weights."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.stack.conftest import REPO
from veri.core.rollout_record import RolloutRecord

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # make train may rebuild veri/runtime first

TINY = REPO / "build" / "models" / "tiny"
FREE_TASK = "https://nothing.test/"  # the expected_url of the task no scripted rule matches


def test_make_train_tiny_moves_the_weights_and_writes_a_consistent_archive(stack, trained):
    name, done = trained
    job = stack.state / "jobs" / name
    assert f"archive in {job}" in done.stdout

    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    for line in metrics:
        assert line["rollouts"] == 4
        assert {"time/rollout_s", "time/reward_s", "time/train_s", "time/weight_sync_s"} <= set(line)

    for step in (0, 1):
        records = [RolloutRecord.model_validate_json(p.read_text())
                   for p in sorted((job / "trajectories" / f"step-{step}").rglob("rollout-*.json"))]
        assert len(records) == 4
        by_task: dict[str, list[RolloutRecord]] = {}
        for record in records:
            assert record.status == "completed" and record.trainable, record.verdicts
            assert {span.policy_version for span in record.spans} == {step}
            by_task.setdefault(record.task["expected_url"], []).append(record)
        free_group = by_task.pop(FREE_TASK)
        [url_group] = by_task.values()
        for record in url_group:  # scripted: the right answer, after a fetched page
            assert record.reward.per_function["reward"] == 1.0
            row = record.episode.row
            # sampled tokens trained, the fetched page (environment) masked, logprobs 0.0 there
            assert 0 in row.env_mask and 1 in row.env_mask
            assert all(lp == 0.0 for lp, m in zip(row.logprobs, row.env_mask, strict=True) if m == 0)
        # sampled freely: the group's rewards differ, so its advantages are not 0
        assert len({record.reward.reward for record in free_group}) == 2, [r.reward for r in free_group]

    initial, final = load_file(TINY / "model.safetensors"), load_file(job / "model" / "model.safetensors")
    assert initial.keys() == final.keys()
    moved = [name for name, tensor in initial.items() if not torch.equal(tensor, final[name])]
    assert moved, "two GRPO steps with non-zero advantages left every weight as it was"
    assert list((job / "tensorboard").iterdir())


@pytest.mark.needs("browser")
def test_the_console_service_shows_the_trained_job_in_a_browser(stack, trained, tmp_path):
    """The compose `console` service (state mounted read-only) over the job make train just wrote."""
    from selenium.webdriver.common.by import By

    from tests.console.browser import chromium, missing_browser, screenshot, wait_for
    from veri.tools.harness.debug import explain, read_records

    assert not missing_browser(), missing_browser()
    name, done = trained
    console = f"http://127.0.0.1:{stack.env['VERI_CONSOLE_PORT']}"
    assert f"make train: job {name} on the console: {console}/jobs/{name}" in done.stdout
    with chromium(tmp_path) as browser:
        browser.get(console + "/")
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{name}"]')
        assert "finished" in row.text and "2 of 2" in row.text, row.text
        screenshot(browser, "stack-jobs")

        browser.get(f"{console}/jobs/{name}")
        wait_for(lambda: "done: final model in" in browser.find_element(By.ID, "logs").text, "the job's log")
        wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#plot-reward svg polyline"), "the reward plot")
        assert browser.find_element(By.ID, "archive-total").text == "8"
        screenshot(browser, "stack-job")

        link = "#rollouts tr.rollout-row td:nth-child(3) a"
        first = browser.find_element(By.CSS_SELECTOR, link).get_attribute("href")
        browser.get(first + "/tokens")
        assert browser.find_elements(By.CSS_SELECTOR, "#tokens .t.sampled.trained")
        assert browser.find_element(By.ID, "row-trained").text == "trained"
        screenshot(browser, "stack-tokens")

        browser.get(first)
        browser.find_element(By.ID, "download-rollout").click()
        path = wait_for(lambda: next(iter(tmp_path.glob("*.jsonl")), None), "the download")
        (record,) = read_records(path)
        assert "result: TRAINED" in explain(record)
