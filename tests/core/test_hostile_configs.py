"""Hostile job configs and harness manifests (docs/architecture.md, "Reliability"): each is refused with a message
naming what is wrong and a fix, never a traceback (binary files, nesting past the parser, NaN and infinity, wrong
shapes). The field-by-field checks: tests/core/test_config.py, tests/harness/test_manifest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.jobs import job, write_job
from veri.core.harness import ManifestError, load_manifest
from veri.validation.run import check_config

NESTED = "[" * 3000 + "]" * 3000


@pytest.mark.parametrize("name, text, where, says, fix", [
    ("binary.yaml", b"\xff\xfe\x00garbage", "", "not UTF-8 text", "save the job file as UTF-8"),
    ("binary.toml", b"\xff\xfe", "", "not UTF-8 text", "save the job file as UTF-8"),
    ("deep.yaml", f"model: {NESTED}\n".encode(), "", "too deeply", "flat `key: value` lines"),
    ("list.yaml", b"- model\n- backend\n", "", "not a mapping", "`key: value`"),
    ("empty.yaml", b"", "", "not a mapping", "`key: value`"),
])
def test_unreadable_job_file_is_one_problem_with_its_fix(job_dir: Path, name, text, where, says, fix):
    path = job_dir / name
    path.write_bytes(text)
    problems = check_config(path, base_dir=job_dir).problems
    assert [(problem.where, says in problem.message, fix in problem.fix) for problem in problems] == [
        (where, True, True)], problems


@pytest.mark.parametrize("overrides, where, fix", [
    ({"learning_rate": float("nan")}, "learning_rate", "a finite number"),
    ({"learning_rate": float("inf")}, "learning_rate", "a finite number"),
    ({"rewards": [{"file": "rewards/url.py", "weight": float("nan")}]}, "rewards[0].weight", "a finite number"),
    ({"sampling": {"temperature": float("inf")}}, "sampling.temperature", "a finite number"),
    ({"rewards": []}, "rewards", "at least 1 entries"),
    ({"model": ["a", "b"]}, "model", "a path"),
    ({"rewards": [{"file": 5}]}, "rewards[0].file", "a path"),
    ({"rollouts_per_prompt": 2.5}, "rollouts_per_prompt", "a valid integer"),
    ({"dataset": "data/tasks.jsonl"}, "dataset", "a valid dictionary"),
    ({"backend": "tpu"}, "backend", "'vllm' or 'hf'"),
    ({"harness_bundle": "data/tasks.jsonl"}, "harness_bundle", "point `harness_bundle:` at one"),
    ({"\x00": 1}, "\x00", "remove it"),
])
def test_hostile_job_values_name_the_field_and_fix(job_dir: Path, overrides, where, fix):
    problems = check_config(write_job(job_dir, job(**overrides)), base_dir=job_dir).problems
    found = {problem.where: problem.fix for problem in problems}
    assert where in found and fix in found[where], problems


AGENT = 'name = "x"\nentrypoint = ["python", "agent.py"]\n'


@pytest.mark.parametrize("text, says", [
    (b"\xff\xfe\x00", "not UTF-8 text"),
    (f"a = {NESTED}\n".encode(), "nest too deeply"),
    (f'name = "{"a" * 300}"\nentrypoint = ["python", "agent.py"]\n'.encode(), "at most 128 characters"),
    (b'name = "x"\nentrypoint = 5\n', "entrypoint:"),
    (b'name = "a\\u0000b"\nentrypoint = ["python", "agent.py"]\n', "name:"),
    (f'{AGENT}deps = "numpy"\n'.encode(), "deps:"),
    (f'{AGENT}[deps]\nrequirements = "../../../etc/passwd"\n'.encode(), "outside the bundle"),
    (f'{AGENT}[deps]\nrequirements = "/etc/passwd"\n'.encode(), "outside the bundle"),
])
def test_hostile_manifest_refused_with_its_fix(tmp_path: Path, text: bytes, says: str):
    (tmp_path / "veri-harness.toml").write_bytes(text)
    (tmp_path / "agent.py").write_text("print(1)\n")
    with pytest.raises(ManifestError) as error:
        load_manifest(tmp_path)
    assert says in str(error.value) and "fix:" in str(error.value), str(error.value)
