"""The console over a real archive (written by the trainer's JobArchive): pages, JSON API, downloads,
404s that say what exists, read-only routes, the CLI twins (`veri jobs`, `veri job show`, `veri
trajectories download`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from testkit.console_archive import write_job
from veri.archive import read_rollout
from veri.cli import main
from veri.core.rollout_record import RolloutRecord
from veri.services.console.app import create_app
from veri.services.console.settings import ConsoleSettings
from veri.tools.harness.debug import explain, read_records

pytestmark = pytest.mark.needs("app")

ROLLOUT = "/jobs/demo/steps/{step}/tasks/{task}/rollouts/{rollout}"


def archive_ids(client: TestClient, query: str) -> list[tuple[int, int, int]]:
    rows = client.get(f"/api/jobs/demo/rollouts?{query}").json()["rows"]
    return [(row["step"], row["task_index"], row["rollout_index"]) for row in rows]


def test_jobs_list_and_job_page(client: TestClient):
    jobs = client.get("/api/jobs").json()
    assert [(job["name"], job["status"], job["steps_done"], job["max_steps"]) for job in jobs] == [
        ("demo", "finished", 2, 3)]
    assert jobs[0]["reward_trend"] == [0.5, 0.5] and jobs[0]["duration_s"] >= 0
    page = client.get("/").text
    assert 'href="/jobs/demo"' in page and "finished" in page and "2 of 3" in page and "<polyline" in page
    job = client.get("/jobs/demo").text
    assert '"max_steps": 3' in job  # the config from job.json
    assert 'data-src="/jobs/demo/logs/stream"' in job and 'id="plot-reward"' in job
    assert len(re.findall(r'class="rollout-row"', job)) == 12
    metrics = client.get("/api/jobs/demo/metrics").json()
    assert [line["step"] for line in metrics["metrics"]] == [0, 1] and metrics["status"] == "finished"
    # one unparsed tool call per step, of 5 written (4 clean calls in the tool rollouts + the one sent as text)
    assert [line["tool_calls/parse_failure_rate"] for line in metrics["metrics"]] == [0.2, 0.2]
    assert 'id="plot-parse-failures"' in job
    counts = re.findall(r'<tr class="tool-call-step"><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>\s*<td>([^<]*)</td>'
                        r'\s*<td>([^<]*)</td>', job)
    assert [(s, a, f, r, k.strip()) for s, a, f, r, k in counts] == [
        ("0", "5", "1", "20.0%", "invalid_json 1"), ("1", "5", "1", "20.0%", "invalid_json 1")]


def test_the_step_timeline_is_served_with_its_figures(client: TestClient):
    latest = client.get("/api/jobs/demo/timeline").json()
    assert latest["steps"] == [0, 1] and latest["timeline"]["step"] == 1
    line = client.get("/api/jobs/demo/timeline?step=0").json()["timeline"]
    assert line["step"] == 0 and len(line["rollouts"]) == 6 and line["wall_s"] == 12.0
    # Replica 0 serves rollouts 0, 2, 4 (two 1 s calls each, 2 s apart, each rollout 1 s after the one
    # before on that replica): calls at once count once, [1, 6] is covered and the rest is idle.
    assert line["policy"]["0"] == {"busy": [[1.0, 6.0]], "idle": [[0.0, 1.0], [6.0, 12.0]]}
    assert line["utilisation"] == {"policy_0": 0.4167, "policy_1": 0.3333, "trainer": round(2.5 / 12, 4)}
    metrics = client.get("/api/jobs/demo/metrics").json()["metrics"]
    assert metrics[0]["utilisation/policy_0"] == pytest.approx(5 / 12)
    missing = client.get("/api/jobs/demo/timeline?step=7")
    assert missing.status_code == 404 and "step 0" in missing.text


def test_archive_facets_filters_sort_and_pages(client: TestClient):
    assert archive_ids(client, "status=failed") == [(0, 1, 1), (1, 1, 1)]
    assert archive_ids(client, "step=1&rule=history_rewritten") == []  # a rewritten history is a row of its own now
    assert archive_ids(client, "step=1&rule=harness_failed") == [(1, 1, 1)]
    assert archive_ids(client, "step_min=1&step_max=1&reward_min=0.5&reward_max=1") == [(1, 0, 0), (1, 1, 0)]
    assert archive_ids(client, "q=url+is&step_max=0") == [(0, 0, 0), (0, 1, 0), (0, 2, 0)]  # case-insensitive
    assert archive_ids(client, "task=2&sort=step&desc=1") == [(1, 2, 1), (1, 2, 0), (0, 2, 1), (0, 2, 0)]
    assert archive_ids(client, "sort=reward&desc=1&step=0")[:2] == [(0, 0, 0), (0, 1, 0)]
    page_two = client.get("/api/jobs/demo/rollouts?per_page=5&page=2").json()
    assert page_two["total"] == 12 and page_two["pages"] == 3 and len(page_two["rows"]) == 5
    fragment = client.get("/jobs/demo/archive?status=truncated&rule=no_spans").text
    assert fragment.count('class="rollout-row"') == 2 and 'id="archive-total">2<' in fragment
    assert 'href="/jobs/demo/steps/1/download.jsonl"' in client.get("/jobs/demo?step=1").text


def test_same_task_across_steps(client: TestClient):
    page = client.get("/jobs/demo/tasks/0").text
    assert page.count("I could not find it (step 0)") == 1 and page.count("I could not find it (step 1)") == 1
    same = client.get("/api/jobs/demo/tasks/0").json()
    assert same["total"] == 4 and [(r["step"], r["rollout_index"]) for r in same["rows"]] == [
        (0, 0), (0, 1), (1, 0), (1, 1)]


def test_trajectory_view(client: TestClient):
    page = client.get(ROLLOUT.format(step=1, task=0, rollout=0)).text
    assert "tool call <code>fetch</code>" in page and "(result of call_1)" in page  # the tool call and its result
    assert "https://site.test/0" in page and "reward <strong>1</strong>" in page and "match 1" in page
    assert "bridged" in page and "policy v1" in page and "step 1 task 0" in page  # prompt_source, version, .log
    unparsed = client.get(ROLLOUT.format(step=1, task=0, rollout=1)).text  # a span with a failed tool call
    assert "1 of 2 tool calls unparsed (invalid_json 1)" in unparsed
    span_zero = unparsed.split('id="span-0"')[1].split('id="span-1"')[0]
    assert "tool call invalid_json</span> <code>fetch</code> (the harness got it as text)" in span_zero
    assert "{&#34;name&#34;: &#34;fetch&#34;, &#34;arguments&#34;: {page: 0}" in span_zero  # the raw text
    assert "client retry 1" in span_zero and "re-sent 1&times;" in span_zero
    assert "tool call invalid_json" not in page and "client retry" not in page and "re-sent" not in page
    failed = client.get(ROLLOUT.format(step=0, task=1, rollout=1)).text
    assert "harness_failed" in failed and "what to do: read the rollout&#39;s log" in failed and "masked" in failed


def test_token_view_marks_trained_masked_and_the_break(client: TestClient, state: Path):
    record = read_rollout(state / "jobs/demo/trajectories/step-0/task-0/rollout-0.json")
    row = record.episode.row
    view = client.get("/api/jobs/demo/steps/0/tasks/0/rollouts/0/tokens").json()
    kinds = [token["kind"] for token in view["tokens"]]
    assert kinds == ["prompt"] * len(row.prompt_ids) + ["sampled" if m else "environment" for m in row.env_mask]
    assert [t["trained"] for t in view["tokens"]] == [False] * len(row.prompt_ids) + [bool(m) for m in row.env_mask]
    assert [t["logprob"] for t in view["tokens"] if t["kind"] == "sampled"] == [
        lp for lp, m in zip(row.logprobs, row.env_mask, strict=True) if m]
    assert "".join(t["text"] for t in view["tokens"]).startswith("user: Find the link on page 0.")
    assert [t["position"] for t in view["tokens"] if t["starts_span"]] == [0, len(row.prompt_ids) + 6]

    page = client.get(ROLLOUT.format(step=0, task=0, rollout=0) + "/tokens").text
    classes = re.findall(r'<span class="(t [^"]+)" data-id=', page)
    assert classes.count("t sampled trained") == sum(row.env_mask)
    assert classes.count("t environment") == len(row.env_mask) - sum(row.env_mask)

    masked = client.get("/api/jobs/demo/steps/0/tasks/1/rollouts/1/tokens").json()  # harness failed
    assert masked["why_masked"] == "not trained: harness_failed" and not any(t["trained"] for t in masked["tokens"])

    # The harness rewrote its system prompt: the rollout is two rows, the final one forking from span 0.
    forked = client.get("/api/jobs/demo/steps/0/tasks/1/rollouts/0/tokens").json()
    assert [(r["number"], r["kind"], r["spans"]) for r in forked["rows"]] == [(1, "side_call", [1]), (2, "main", [0])]
    assert forked["breaks"] == [] and forked["fork"]["from_span"] == 0
    position = forked["fork"]["position"]
    assert forked["tokens"][position]["breaks"].startswith("row 1 forks from span 0 here")
    assert "earlier span has 2825, this prompt has 420" in forked["fork"]["why"]  # "brief" vs "short"
    assert forked["tokens_line"] == "tokens: sampled 15, trained 15, dropped 0"
    forked_page = client.get(ROLLOUT.format(step=0, task=1, rollout=0) + "/tokens").text
    assert 'class="t prompt break" data-id="420"' in forked_page and 'href="?row=2"' in forked_page
    other = client.get("/api/jobs/demo/steps/0/tasks/1/rollouts/0/tokens?row=2").json()
    assert other["selected"] == 2 and other["fork"] is None and all(t["trained"] for t in other["tokens"]
                                                                   if t["kind"] == "sampled")
    missing = client.get("/api/jobs/demo/steps/0/tasks/1/rollouts/0/tokens?row=3")
    assert missing.status_code == 404 and "row 2" in missing.text

    no_row = client.get(ROLLOUT.format(step=0, task=2, rollout=1) + "/tokens").text  # no spans at all
    assert "No training row" in no_row and "no_spans" in no_row


def test_downloads_are_the_records_veri_debug_reads(client: TestClient, tmp_path: Path, capsys):
    whole = client.get("/jobs/demo/download.jsonl")
    assert whole.headers["content-type"].startswith("application/x-ndjson")
    assert 'filename="demo.jsonl"' in whole.headers["content-disposition"]
    lines = whole.content.splitlines()
    assert len(lines) == 12 and all(RolloutRecord.model_validate_json(line) for line in lines)
    step = client.get("/jobs/demo/steps/1/download.jsonl").content.splitlines()
    assert [json.loads(line)["policy_step"] for line in step] == [1] * 6
    one = client.get(ROLLOUT.format(step=0, task=1, rollout=0) + "/download.jsonl").content
    path = tmp_path / "one.jsonl"
    path.write_bytes(one)
    (item,) = read_records(path)
    assert "TRAINED on 2 of 2 spans in 2 row(s)" in explain(item) and "row 2 (main, spans [0])" in explain(item)
    assert main(["debug", str(path)]) == 0 and "tokens: sampled 15, trained 15, dropped 0" in capsys.readouterr().out


def test_unknown_job_step_rollout_say_what_exists(client: TestClient):
    missing = client.get("/jobs/nope")
    assert missing.status_code == 404 and "No job &#39;nope&#39;" in missing.text and "<li>demo</li>" in missing.text
    step = client.get(ROLLOUT.format(step=7, task=0, rollout=0))
    assert step.status_code == 404 and "<li>step 0</li>" in step.text and "<li>step 1</li>" in step.text
    rollout = client.get("/api/jobs/demo/steps/0/tasks/0/rollouts/9")
    assert rollout.status_code == 404 and "task 0 rollout 1" in rollout.json()["exists"]
    assert client.get("/jobs/demo/steps/5").status_code == 404
    assert client.get("/jobs/demo/steps/1", follow_redirects=False).headers["location"] == "/jobs/demo?step=1#archive"
    assert client.get("/jobs/demo/tasks/42").status_code == 404
    bad = client.get("/jobs/demo?reward_min=lots")
    assert bad.status_code == 400 and "reward_min=&#39;lots&#39;: give a number" in bad.text
    assert client.get("/jobs/demo?rule=made_up").status_code == 400
    assert client.get(ROLLOUT.format(step="x", task=0, rollout=0)).status_code == 400
    assert "No page at /elsewhere" in client.get("/elsewhere").text


@pytest.mark.parametrize("path", ["/jobs/%2e%2e", "/jobs/%2e%2e%2f%2e%2e%2fetc", "/jobs/demo%2f..%2f..",
                                  "/jobs/.hidden", "/jobs/demo/..%2F..%2F..%2Fetc%2Fpasswd"])
def test_no_path_leaves_the_jobs_folder(client: TestClient, path: str):
    answer = client.get(path)
    assert answer.status_code == 404 and "root:" not in answer.text


def test_read_only(client: TestClient):
    for method in ("post", "put", "delete", "patch"):
        answer = getattr(client, method)("/jobs/demo")
        assert answer.status_code == 405 and "read-only" in answer.text
    assert client.post("/api/jobs").status_code == 405


def test_finished_job_log_stream_ends(client: TestClient):
    with client.stream("GET", "/jobs/demo/logs/stream") as answer:
        body = "".join(answer.iter_text())
    assert "data: " in body and "job demo: backend hf" in body and body.rstrip().endswith(
        "event: end\ndata: the job is not running")
    # The trainer's JSON lines, shown as a person reads them: the time, then the message.
    assert re.search(r"^data: \d{4}-\d\d-\d\dT[\d:.]+Z job demo: backend hf, sandbox local$", body, re.M), body
    assert '"event"' not in body
    resumed = client.get("/jobs/demo/logs/stream", headers={"Last-Event-ID": re.search(r"id: (\d+)", body)[1]}).text
    assert "job demo: backend hf" not in resumed and "event: end" in resumed


def test_a_job_being_written_reads_running_and_an_old_index_is_named(tmp_path: Path, tiny_model: Path):
    import sqlite3

    app = create_app(ConsoleSettings(state_dir=tmp_path))
    with (write_job(tmp_path / "jobs", "live", tiny_model, steps=1),
          TestClient(app, base_url="http://127.0.0.1") as client):
        assert client.get("/api/jobs/live").json()["status"] == "running"
    assert TestClient(app, base_url="http://127.0.0.1").get("/api/jobs/live").json()["status"] == "finished"
    db = sqlite3.connect(tmp_path / "jobs/live/index.sqlite")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    answer = TestClient(app, base_url="http://127.0.0.1").get("/jobs/live")
    assert answer.status_code == 503 and "rebuild it from the files" in answer.text


def test_cli_twins(state: Path, tmp_path: Path, capsys):
    jobs = str(state / "jobs")
    assert main(["jobs", "--jobs", jobs]) == 0
    listed = capsys.readouterr().out
    assert re.search(r"demo\s+finished\s+2/3\s+0\.500", listed)
    assert main(["job", "show", "demo", "--jobs", jobs]) == 0
    shown = capsys.readouterr().out
    assert "status: finished" in shown and "steps: 2 of 3" in shown and "rule/harness_failed: 1" in shown
    out = tmp_path / "step0.jsonl"
    assert main(["trajectories", "download", "demo", "--step", "0", "--jobs", jobs, "--out", str(out)]) == 0
    assert len(read_records(out)) == 6
    assert main(["trajectories", "download", "demo", "--step", "9", "--jobs", jobs]) == 2
    assert "no rollouts in step 9 (steps: 0, 1)" in capsys.readouterr().err
    assert main(["job", "show", "nope", "--jobs", jobs]) == 2
    assert "no job 'nope' (jobs: demo" in capsys.readouterr().err


def test_prometheus_metrics(client: TestClient):
    client.get("/jobs/demo")
    text = client.get("/metrics").text
    assert 'veri_console_jobs{status="finished"} 1.0' in text and 'veri_console_jobs{status="running"} 0.0' in text
    assert 'veri_console_requests_total{route="/jobs/{job}",status="200"}' in text  # templates, not paths


def test_a_job_with_a_log_but_no_index_yet(tmp_path: Path):
    folder = tmp_path / "jobs" / "starting" / "logs"
    folder.mkdir(parents=True)
    (folder / "train.log").write_text("2026-01-01T00:00:00.000Z job starting\n")
    client = TestClient(create_app(ConsoleSettings(state_dir=tmp_path)), base_url="http://127.0.0.1")
    assert client.get("/api/jobs").json()[0]["status"] == "unknown"
    page = client.get("/jobs/starting")
    assert page.status_code == 200 and 'id="archive-total">0<' in page.text
    missing = client.get("/jobs/starting/steps/0/tasks/0/rollouts/0")
    assert missing.status_code == 404 and "the trainer writes index.sqlite" in missing.text
