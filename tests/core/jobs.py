"""Job-config helpers: a complete job folder in tmp (model config, dataset, bundle, reward file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

REWARD = '''
def reward(prompts, completions, expected_url, **kwargs):
    return [1.0 if expected_url[0] in str(completions[0]) else 0.0]
'''


def write_model(folder: Path, heads: int = 16, positions: int = 32768) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "qwen3", "num_attention_heads": heads, "max_position_embeddings": positions}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    return folder


def make_job_dir(tmp_path: Path) -> Path:
    write_model(tmp_path / "models" / "policy")
    (tmp_path / "data").mkdir()
    rows = [{"prompt": f"Find the URL in page {i}", "expected_url": f"https://example.com/{i}"} for i in range(3)]
    (tmp_path / "data" / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "veri-harness.toml").write_text('name = "agent"\nentrypoint = ["python", "agent.py"]\n')
    (tmp_path / "bundle" / "agent.py").write_text("print('hi')\n")
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "url.py").write_text(REWARD)
    return tmp_path


def job(**overrides: Any) -> dict[str, Any]:
    """A valid CPU job (paths relative to `job_dir`), with top-level overrides."""
    config: dict[str, Any] = {
        "model": "models/policy",
        "backend": "hf",
        "dataset": {"path": "data/tasks.jsonl"},
        "harness_bundle": "bundle",
        "rewards": [{"file": "rewards/url.py", "weight": 1.0}],
        "rollouts_per_prompt": 4,
        "grpo": {"per_device_train_batch_size": 4, "logging_steps": 1},
    }
    config.update(overrides)
    return config


def write_job(folder: Path, config: dict[str, Any], name: str = "job.yaml") -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(config))
    return path
