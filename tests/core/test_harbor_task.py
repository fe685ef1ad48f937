"""Harbor task folders (core/harbor_task.py): the published task.toml schema read as Harbor reads it, the
upstream example tasks (tests/fixtures/harbor/, byte-identical copies) loaded, and every refusal named with
the task, the field and the fix."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from veri.core.harbor_task import (
    HarborTaskConfig,
    NetworkMode,
    check_task,
    check_tasks,
    find_tasks,
    load_task,
    offline_lines,
    strip_canary,
    task_notes,
)
from veri.core.problems import ProblemsError

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/fixtures/harbor"
COOKBOOK, HARBOR, OWN = FIXTURES / "harbor-cookbook", FIXTURES / "harbor", FIXTURES / "veri"
RUNNABLE = [COOKBOOK / name for name in ("simple-task", "multi-reward", "skills", "dns-blacklisting")] + [
    HARBOR / name for name in ("hello-world", "hello-alpine", "hello-user", "hello-workdir", "hello-healthcheck")
] + [OWN / "reward-txt", OWN / "reward-json"]


def test_the_upstream_copies_are_byte_identical_to_the_catalogued_commits():
    sums = (REPO / "scratch/harbor/SHA256SUMS").read_text().splitlines()
    assert len(sums) > 90
    for line in sums:
        digest, name = line.split(maxsplit=1)
        assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == digest, name
    for source in (COOKBOOK, HARBOR):
        licence = (source / "LICENSE").read_text()
        assert "Apache License" in licence and "Version 2.0" in licence
        assert "Commit:" in (source / "SOURCE.md").read_text()


@pytest.mark.parametrize("folder", RUNNABLE, ids=lambda folder: f"{folder.parent.name}/{folder.name}")
def test_the_single_step_examples_load_and_are_runnable(folder: Path):
    task = load_task(folder)
    assert check_task(task) == []
    assert task.instruction.strip() and task.folder == folder


@pytest.mark.parametrize(("folder", "field"), [
    (COOKBOOK / "multi-step", "steps"),
    (COOKBOOK / "multi-container", "environment/docker-compose.yaml"),
    (COOKBOOK / "mcp-tools", "environment/docker-compose.yaml"),
    (COOKBOOK / "mcp-tools", "environment.mcp_servers"),
])
def test_the_examples_veri_cannot_run_are_refused_by_field(folder: Path, field: str):
    problems = check_task(load_task(folder))
    assert f"{folder.name}: {field}" in [problem.where for problem in problems]
    assert all(problem.fix for problem in problems)


def test_every_refusal_of_a_task_is_named_at_once_with_its_fix():
    problems = {problem.where: problem for problem in check_task(load_task(OWN / "refused"))}
    assert set(problems) == {
        "refused: tests/test.sh", "refused: environment.mcp_servers", "refused: environment.gpus",
        "refused: environment.os", "refused: verifier.environment_mode", "refused: environment.env.API_KEY",
        "refused: verifier.network_mode",
    }
    assert "gpus = 0" in problems["refused: environment.gpus"].fix
    assert "linux" in problems["refused: environment.os"].fix
    assert "${OPENAI_API_KEY}" in problems["refused: environment.env.API_KEY"].message


def test_the_harbor_fields_are_read_with_harbors_defaults():
    config = load_task(HARBOR / "hello-healthcheck").config
    assert config.task is not None and config.task.name == "harbor/hello-healthcheck"
    assert config.task.authors[0].email == "alex@harborframework.com"
    assert config.environment.healthcheck is not None and config.environment.healthcheck.retries == 2
    assert (config.agent.timeout_sec, config.verifier.timeout_sec) == (120.0, 120.0)
    assert load_task(HARBOR / "hello-user").config.agent.user == "agent"
    assert load_task(HARBOR / "hello-workdir").config.environment.workdir == "/custom-workdir"
    empty = HarborTaskConfig.model_validate({})
    assert (empty.schema_version, empty.verifier.timeout_sec, empty.agent.timeout_sec) == ("1.3", 600.0, None)
    assert empty.environment.network_mode is NetworkMode.PUBLIC and empty.environment.os == "linux"


def test_older_spellings_are_normalised():
    task = load_task(OWN / "reward-json")
    env = task.config.environment
    assert task.config.schema_version == "1.0" and task.name == "reward-json"  # no [task]: the folder's name
    assert (env.memory_mb, env.storage_mb, env.cpus) == (2048, 10240, 2)
    assert env.network_mode is NetworkMode.NO_NETWORK
    assert HarborTaskConfig.model_validate({"environment": {"allow_internet": True}}).environment.network_mode \
        is NetworkMode.PUBLIC
    assert HarborTaskConfig.model_validate({"environment": {"memory": "512M", "storage": "1024K"}}).environment \
        .model_dump(include={"memory_mb", "storage_mb"}) == {"memory_mb": 512, "storage_mb": 1}
    assert HarborTaskConfig.model_validate({"version": 1.0}).schema_version == "1.0"


@pytest.mark.parametrize(("toml", "where", "said"), [
    ('[environment]\nmemory = "2G"\nmemory_mb = 1024\n', "environment", "disagree"),
    ('[environment]\nmemory = 2048\n', "environment", "memory_mb"),
    ('[environment]\nstorage = "lots"\n', "environment", "like \"2G\""),
    ('[environment]\ncpus = "many"\n', "environment.cpus", "integer"),
    ('[environment]\nallowed_hosts = ["example.com"]\n', "environment", "allowlist"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["https://x.com/a"]\n',
     "environment.allowed_hosts", "not a hostname"),
    ('[task]\nname = "no-slash"\n', "task.name", "org/name"),
    ('[verifier]\ntimeout_sec = -1\n', "verifier.timeout_sec", "greater than 0"),
])
def test_a_task_toml_against_the_schema_is_named_by_field(tmp_path: Path, toml: str, where: str, said: str):
    folder = _task(tmp_path, toml)
    with pytest.raises(ProblemsError) as raised:
        load_task(folder)
    problems = raised.value.problems
    assert [problem.where for problem in problems] == [f"t: {where}"], problems
    assert said in problems[0].message and "harbor-task.md" in problems[0].fix


def test_a_toml_that_is_not_harbors_or_not_toml_is_refused(tmp_path: Path):
    with pytest.raises(ProblemsError, match="is not Harbor's task.toml"):
        load_task(_task(tmp_path, '[tool.poetry]\nname = "x"\n'))
    with pytest.raises(ProblemsError, match="cannot be read"):
        load_task(_task(tmp_path, "[environment\n"))
    with pytest.raises(ProblemsError, match="has no task.toml"):
        load_task(tmp_path / "nowhere")
    folder = _task(tmp_path, "")
    (folder / "instruction.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(ProblemsError, match="instruction.md: is not UTF-8"):
        load_task(folder)


def test_a_folder_without_instruction_or_test_or_image_is_refused(tmp_path: Path):
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "task.toml").write_text("")  # an empty task.toml is Harbor's defaults
    wheres = [problem.where for problem in check_task(load_task(folder))]
    assert wheres == ["bare: instruction.md", "bare: tests/test.sh", "bare: environment.docker_image"]
    (folder / "instruction.md").write_text("<!-- harbor-canary GUID x -->\n\n")
    assert "is empty" in check_task(load_task(folder))[0].message


def test_unknown_keys_are_named_not_dropped(tmp_path: Path):
    folder = _task(tmp_path, 'scoring = "x"\n[environment]\ngpu_count = 0\n[agent]\nmodel = "m"\n')
    config = load_task(folder).config
    assert config.unknown_keys() == ["scoring", "agent.model", "environment.gpu_count"]
    notes = task_notes(load_task(folder))
    assert any("environment.gpu_count is not a key of Harbor's schema" in note for note in notes)
    assert not check_task(load_task(folder))  # named, not refused: Harbor ignores them too


def test_a_newer_schema_and_ignored_fields_are_notes(tmp_path: Path):
    notes = task_notes(load_task(_task(tmp_path, 'schema_version = "1.5"\nartifacts = ["/app/x"]\n')))
    assert any("newer than veri knows" in note for note in notes) and any("artifacts" in note for note in notes)
    assert any("skills_dir is ignored" in note for note in task_notes(load_task(COOKBOOK / "skills")))


def test_a_phase_network_override_is_refused_and_the_same_policy_is_not(tmp_path: Path):
    differs = '[environment]\nnetwork_mode = "no-network"\n[agent]\nnetwork_mode = "public"\n'
    assert [p.where for p in check_task(load_task(_task(tmp_path, differs)))] == ["t: agent.network_mode"]
    same = '[environment]\nnetwork_mode = "no-network"\n[agent]\nnetwork_mode = "no-network"\n'
    assert check_task(load_task(_task(tmp_path, same))) == []


def test_the_instruction_loses_harbors_canary_lines():
    assert load_task(OWN / "reward-txt").instruction.startswith("Write the line")
    assert strip_canary("# harbor-canary GUID 1\n<!-- canary -->\n\nDo it.\n# not a canary\n") == \
        "Do it.\n# not a canary\n"


def test_tasks_are_found_in_a_task_a_folder_of_them_or_tasks_beneath(tmp_path: Path):
    assert find_tasks(OWN / "reward-txt") == [OWN / "reward-txt"]
    assert find_tasks(OWN) == [OWN / "refused", OWN / "reward-json", OWN / "reward-txt"]
    shutil.copytree(OWN / "reward-txt", tmp_path / "set" / "tasks" / "one")
    assert find_tasks(tmp_path / "set") == [tmp_path / "set" / "tasks" / "one"]
    with pytest.raises(ProblemsError, match="holds no task.toml"):
        find_tasks(tmp_path)


def test_check_tasks_reports_every_task_at_once():
    checked = check_tasks(COOKBOOK)
    assert len(checked.tasks) == 7
    assert {problem.where.split(":")[0] for problem in checked.problems} == {"mcp-tools", "multi-container",
                                                                            "multi-step"}


def test_test_sh_lines_the_offline_verifier_cannot_serve_are_named():
    script = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh
uvx --with pytest==8.4.1 --with requests pytest /tests/test_x.py
pip install numpy==2.0.0 -r /tests/requirements.txt
pip install pandas
wget https://example.com/data.csv  # the data
npm install -g left-pad
cargo install ripgrep
apt-get install -y jq curl
"""
    lines = offline_lines(script)
    assert len(lines) == 6, lines
    assert lines[0].startswith("line 5: `requests` is not pinned")
    assert lines[1].startswith("line 7: `pandas` is not pinned")
    assert lines[2].startswith("line 8: fetches https://example.com/data.csv")
    assert lines[3].startswith("line 9: `npm install`") and lines[4].startswith("line 10: `cargo install`")
    assert lines[5].startswith("line 11: apt installs jq:")
    assert offline_lines((COOKBOOK / "simple-task/tests/test.sh").read_text()) == []


def _task(tmp_path: Path, toml: str) -> Path:
    folder = tmp_path / "t"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(OWN / "reward-txt", folder)
    (folder / "task.toml").write_text(toml)
    return folder
