"""`veri train` on a harness that compacts its history, as Claude Code does when its context fills: after
the tool call it asks the model for a summary, then goes on from a new history (the system prompt and
the summary) instead of the old one. Both conversations are rows; every sampled token is trained."""

from __future__ import annotations

import pytest

from testkit.trainer_jobs import write_job, write_tasks
from tests.trainer.test_train import veri_train
from veri.archive import ArchiveIndex, read_metrics
from veri.core.episodes import RowKind

pytestmark = [pytest.mark.needs("process"), pytest.mark.slow]

COMPACTING_AGENT = '''
import json, os, pathlib
from openai import OpenAI

task = json.loads(os.environ["VERI_TASK"])
index = int(os.environ["VERI_ROLLOUT_INDEX"])
client = OpenAI(max_retries=0)
model = os.environ["VERI_POLICY_MODEL"]
tools = [{"type": "function", "function": {"name": "lookup", "description": "Look a key up",
          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}}]
system = {"role": "system", "content": "You look things up."}
messages = [system, {"role": "user", "content": task["prompt"]}]
reply = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
messages.append(reply.model_dump(exclude_none=True))
for call in reply.tool_calls or []:
    messages.append({"role": "tool", "tool_call_id": call.id, "content": f"veri-answer-{index % 2}"})
# Compaction: a summary of the history so far, then a new history made of the system prompt and the summary.
messages.append({"role": "user", "content": "Summarize the conversation so far."})
summary = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message.content
messages = [system, {"role": "user", "content": f"Earlier: {summary!r}. The lookup said veri-answer-{index % 2}."}]
answer = client.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message.content
pathlib.Path(os.environ["VERI_OUTPUT_DIR"], "answer.txt").write_text(answer or "")
print("answer:", answer)
'''


def test_a_compacting_harness_trains_both_conversations(stack, tiny_model, tmp_path):
    # Room for the first conversation's row (tool result, summary request and summary): none cut off.
    job = write_job(tmp_path / "job", tiny_model, max_steps=2, max_response_length=256)
    (job.parent / "bundle" / "agent.py").write_text(COMPACTING_AGENT)
    write_tasks(job.parent / "tasks.jsonl", [{"prompt": "Look up the answer, please.", "expected": "beta"},
                                             {"prompt": "Look up the answer now.", "expected": "beta"}])
    result = veri_train(job, stack, tmp_path / "jobs")
    assert result.returncode == 0, result.stderr[-6000:]
    job_dir = tmp_path / "jobs" / "job"
    metrics = read_metrics(job_dir / "metrics.jsonl")
    assert [line["step"] for line in metrics] == [0, 1]
    for line in metrics:
        assert line["trainable"] == 4 and line["train/rows/branch_rows"] == 4
        assert line["rows/per_rollout"] == 2 and line["tokens/dropped_fraction"] == 0
    with ArchiveIndex(job_dir) as index:
        records = [index.read_rollout(row["path"]) for row in index.rollouts(limit=20)]
    assert len(records) == 8
    for record in records:
        episode = record.episode
        (before,) = episode.branches
        # The summary call extends the first conversation; the answer starts the compacted one.
        assert before.kind == RowKind.MAIN and before.spans == [0, 1]
        assert episode.chain_kind == RowKind.COMPACTION and episode.chain == [2], episode.chain_why
        account = record.tokens
        assert account.sampled == account.trained > 0 and account.dropped == {}, account.line()
