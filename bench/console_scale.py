"""The console at scale: server time of its pages over an index of 100k rollouts in 500 steps.

Builds a job folder in a temp dir: index.sqlite with 100k rollout rows (each the `index_row` of a real
record built by core.episodes, varied over step, task, status, rules, reward and final answer, in one
transaction: writing 100k rollout files fsync by fsync would take most of an hour and the pages read
the index, not the files), 500 metrics lines (`step_metrics` of real records), job.json, and one real
16k-token rollout written by `JobArchive.write_rollout` for the token view. Then times, in process
(TestClient: routing, queries, templates; no network), the median of --repeat requests each:

    job page           /jobs/<job> (config, facet choices, archive page 1)        target < 300 ms
    filtered archive   step range + status + reward range + final-answer text,
                       sorted by reward, page 3                                  target < 300 ms
                       ("URL": in a third of the rows; the rare-text row: 3 rows, where the FTS5
                       index pays off)
    token view         the 16k-token rollout's /tokens page                       target < 500 ms
    (and, for reference: /api/.../metrics, the same-task view, the jobs list)

    python bench/console_scale.py --model build/models/tiny [--rollouts 100000 --steps 500]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from testkit.console_archive import TIMINGS, Tokens, record, step_records, tool_rollout
from testkit.spans import make_span
from veri.archive import JobArchive, step_metrics
from veri.archive.index import COLUMNS, index_row
from veri.archive.index_writer import IndexWriter
from veri.services.console.app import create_app
from veri.services.console.settings import ConsoleSettings

TARGETS_MS = {"job page": 300, "filtered archive": 300, "token view (16k tokens)": 500}


def long_rollout(tok: Tokens, tokens: int):
    """A bridged conversation of 16 turns whose training row holds about `tokens` tokens."""
    turns, spans = 16, []
    prompt = tok("user: summarise every page you fetch.\nassistant:")
    completion_size = environment_size = max(1, tokens // (2 * turns))
    for turn in range(turns):
        completion = [(turn * 31 + i) % 5000 + 100 for i in range(completion_size)]
        span = make_span(turn, prompt, completion, bridged_from=turn - 1 if turn else None, reply=f"turn {turn}")
        spans.append(span)
        prompt = [*prompt, *completion, *[(turn * 17 + i) % 5000 + 100 for i in range(environment_size)]]
    return spans


def build(root: Path, model: Path, rollouts: int, steps: int) -> None:
    tok = Tokens(model)
    with JobArchive(root, "bench") as archive:
        archive.start_job(model=str(model), max_steps=steps, config={"model": str(model), "max_steps": steps})
        archive.log("bench job")
        long_record = record(0, 0, long_rollout(tok, 16_000), reward=1.0)
        archive.write_rollout(0, long_record)
        print(f"16k rollout: {len(long_record.episode.row.prompt_ids) + len(long_record.episode.row.completion_ids)}"
              " tokens in its row", flush=True)
    templates = step_records(tok, 0) + [record(3, 0, tool_rollout(tok, 3, 0, "a long answer " * 20, 0), reward=0.25)]
    per_step = rollouts // steps
    writer = IndexWriter(root / "bench" / "index.sqlite")
    placeholders = ", ".join("?" for _ in COLUMNS)
    sql = f"INSERT OR REPLACE INTO rollouts ({', '.join(COLUMNS)}) VALUES ({placeholders})"
    with writer.db:
        for step in range(steps):
            for index in range(per_step if step else per_step - 1):
                template = templates[index % len(templates)]
                task, rollout = divmod(index if step else index + 1, 8)
                row = index_row(step, template, f"trajectories/step-{step}/task-{task}/rollout-{rollout}.json")
                row |= {"task_index": task, "rollout_index": rollout, "rollout_id": f"r-{step}-{task}-{rollout}",
                        "reward": None if row["reward"] is None else (row["reward"] + step / steps) / 2,
                        "final_answer": f"{row['final_answer']} (step {step}, task {task})"}
                writer.db.execute(sql, [row[column] for column in COLUMNS])
    metrics = step_metrics(templates, TIMINGS)
    for step in range(steps):
        line = {"step": step, "wall_time": time.time(), **metrics}
        with (root / "bench" / "metrics.jsonl").open("a") as handle:
            handle.write(json.dumps(line) + "\n")
        writer.upsert_step(step, line)
    writer.close()


def timed(client: TestClient, url: str, repeat: int) -> tuple[float, float, int]:
    """Median wall and CPU milliseconds of `repeat` requests. CPU time (this process: the app runs in a
    TestClient thread) is what the page costs the server; on a shared box the wall time adds the wait."""
    walls, cpus = [], []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        answer = client.get(url)
        walls.append((time.perf_counter() - start) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
        assert answer.status_code == 200, f"{url}: {answer.status_code} {answer.text[:300]}"
    return statistics.median(walls), statistics.median(cpus), len(answer.content)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("build/models/tiny"))
    parser.add_argument("--rollouts", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="veri-console-bench-") as state:
        start = time.perf_counter()
        build(Path(state) / "jobs", args.model, args.rollouts, args.steps)
        print(f"built {args.rollouts} index rows over {args.steps} steps in {time.perf_counter() - start:.1f} s")
        client = TestClient(create_app(ConsoleSettings(state_dir=Path(state))), base_url="http://127.0.0.1")
        client.get("/jobs/bench")  # warm: templates compiled, tokenizer loaded, SQLite pages cached
        client.get("/jobs/bench/steps/0/tasks/0/rollouts/0/tokens")
        filtered = ("/jobs/bench?step_min=100&step_max=400&status=completed&reward_min=0.3&reward_max=0.9"
                    "&q=URL&sort=reward&desc=1&page=3")
        pages = {
            "job page": "/jobs/bench",
            "filtered archive": filtered,
            "filtered archive (fragment)": filtered.replace("/jobs/bench?", "/jobs/bench/archive?"),
            "filtered, rare text (fragment)": filtered.replace("/jobs/bench?", "/jobs/bench/archive?")
            .replace("q=URL", "q=step+250%2C+task+3").replace("page=3", "page=1"),
            "token view (16k tokens)": "/jobs/bench/steps/0/tasks/0/rollouts/0/tokens",
            "metrics JSON (plots)": "/api/jobs/bench/metrics",
            "same task across steps": "/jobs/bench/tasks/7",
            "jobs list": "/",
        }
        print(f"{'page':32} {'wall ms':>9} {'CPU ms':>8} {'target':>8} {'KB':>8}")
        failed = False
        for name, url in pages.items():
            ms, cpu_ms, size = timed(client, url, args.repeat)
            target = TARGETS_MS.get(name)
            failed |= target is not None and ms > target
            print(f"{name:32} {ms:9.1f} {cpu_ms:8.1f} {f'< {target}' if target else '':>8} {size / 1024:8.1f}")
        print("all targets met" if not failed else "a target was missed (see above)")
        print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs while measuring)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
