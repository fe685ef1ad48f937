"""A two-call chat loop with a heavy-tailed tool in between (bench/gpu_check.sh, async vs sync).

The first reply is followed by a "tool" that sleeps lognormal(0, 0.99) x 1 s (median 1 s, p99 ~ 10x
the median; bench/async_step.py's tool), seeded by the rollout id, then the model answers once more.
The second reply goes to $VERI_OUTPUT_DIR/answer.txt; the job's reward scores it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from pathlib import Path

from openai import OpenAI

MEDIAN_S = 1.0


def tool_seconds(rollout_id: str) -> float:
    seed = int(hashlib.sha256(rollout_id.encode()).hexdigest()[:8], 16)
    return random.Random(seed).lognormvariate(0.0, 0.99) * MEDIAN_S


def main() -> None:
    client, model = OpenAI(max_retries=0), os.environ["VERI_POLICY_MODEL"]
    task = json.loads(os.environ["VERI_TASK_INPUT"])
    messages = [{"role": "user", "content": task}] if isinstance(task, str) else task
    first = client.chat.completions.create(model=model, messages=messages).choices[0].message
    time.sleep(tool_seconds(os.environ["VERI_ROLLOUT_ID"]))
    messages += [{"role": "assistant", "content": first.content or ""},
                 {"role": "user", "content": "The tool says: done. Answer now."}]
    answer = client.chat.completions.create(model=model, messages=messages).choices[0].message.content
    Path(os.environ["VERI_OUTPUT_DIR"], "answer.txt").write_text(answer or "")


if __name__ == "__main__":
    main()
