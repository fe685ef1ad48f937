"""What `veri tasks vendor` downloads and `veri tasks build` maps is read from a task's Dockerfile and
test.sh lines: the apt packages, the pinned pip requirements, the FROM images."""

from __future__ import annotations

from pathlib import Path

import pytest

from veri.tools.tasks.build import TaskBuildError, content_hash, parse_image_map
from veri.tools.tasks.lines import base_images, dockerfile_wants, map_from_lines, script_wants
from veri.tools.tasks.vendor import VendorError, read_wants

# As the Harbor cookbook's tasks write them (written here, not copied).
COOKBOOK_TEST_SH = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.7/install.sh | sh
source $HOME/.local/bin/env
uvx \\
  --with pytest==8.4.1 \\
  --with pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""

DOCKERFILE = """# syntax=docker/dockerfile:1
FROM --platform=linux/amd64 ubuntu:24.04 AS base
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
    curl python3 \\
    # the JSON tool
    jq=1.6-2 -o Dpkg::Options::=--force-confold \\
    && rm -rf /var/lib/apt/lists/*
RUN pip install --break-system-packages --index-url http://x/simple requests==2.32.3 "rich[jupyter]==13.0.0"
RUN python3 -m pip install numpy -r requirements.txt
RUN ["pip3", "install", "attrs==25.1.0"]
FROM base AS final
COPY --from=base /app /app
FROM scratch
"""


def test_the_cookbook_test_sh_asks_for_the_uvx_with_pins_only():
    wants = script_wants(COOKBOOK_TEST_SH)
    assert wants.pins == ["pytest==8.4.1", "pytest-json-ctrf==0.3.5"]
    assert wants.unpinned == []
    assert wants.apt == ["curl"]  # served by the verifier's shim, not vendored


def test_uvx_tool_and_pip_lines_of_a_test_sh():
    wants = script_wants("uvx ruff@0.6.1 check .\nuv run --with pytest==8.0.0 pytest\n"
                         "pip install -q hypothesis==6.1.0 six\nuvx --with pytest==8.0.0 pytest\n")
    assert wants.pins == ["ruff==0.6.1", "pytest==8.0.0", "hypothesis==6.1.0"]
    assert wants.unpinned == ["six"]


def test_a_dockerfile_asks_for_its_apt_and_pip_lines():
    wants = dockerfile_wants(DOCKERFILE)
    assert wants.apt == ["curl", "python3", "jq=1.6-2"]
    assert wants.pins == ["requests==2.32.3", "rich[jupyter]==13.0.0", "attrs==25.1.0"]
    assert sorted(wants.unpinned) == ["-r requirements.txt", "numpy"]


def test_only_the_from_images_are_mapped():
    assert base_images(DOCKERFILE) == ["ubuntu:24.04"]  # not the stage `base`, not scratch
    mapped, applied = map_from_lines(DOCKERFILE, {"ubuntu:24.04": "veri/task-os-base", "base": "nope"})
    assert applied == {"ubuntu:24.04": "veri/task-os-base"}
    assert "FROM --platform=linux/amd64 veri/task-os-base AS base\n" in mapped
    assert "FROM base AS final\n" in mapped and "COPY --from=base /app /app" in mapped
    assert mapped.replace("veri/task-os-base", "ubuntu:24.04") == DOCKERFILE
    # `name` in the map matches `name:latest` and the other way round
    assert map_from_lines("FROM debian\n", {"debian:latest": "x"})[0] == "FROM x\n"
    assert map_from_lines("FROM debian:latest\n", {"debian": "x"})[0] == "FROM x\n"


def test_image_map_pairs_are_checked():
    assert parse_image_map(["ubuntu:24.04=veri/task-os-base"]) == {"ubuntu:24.04": "veri/task-os-base"}
    with pytest.raises(TaskBuildError, match="FROM=LOCAL"):
        parse_image_map(["ubuntu:24.04"])


def test_read_wants_names_a_folder_that_is_no_task(tmp_path: Path):
    with pytest.raises(VendorError, match="no environment/Dockerfile"):
        read_wants([tmp_path])


def test_the_tag_hash_covers_the_environment_the_map_and_the_vendored_inputs(tmp_path: Path):
    env, vendor = tmp_path / "environment", tmp_path / "vendor"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    first = content_hash(env, {"ubuntu:24.04": "a"}, {"ubuntu:24.04": "sha256:1"}, vendor)
    assert content_hash(env, {"ubuntu:24.04": "a"}, {"ubuntu:24.04": "sha256:1"}, vendor) == first
    assert content_hash(env, {"ubuntu:24.04": "b"}, {"ubuntu:24.04": "sha256:1"}, vendor) != first
    assert content_hash(env, {"ubuntu:24.04": "a"}, {"ubuntu:24.04": "sha256:2"}, vendor) != first
    (vendor / "wheels").mkdir(parents=True)
    (vendor / "wheels" / "six-1.0-py3-none-any.whl").write_bytes(b"w")
    assert content_hash(env, {"ubuntu:24.04": "a"}, {"ubuntu:24.04": "sha256:1"}, vendor) != first
    (env / "app.py").write_text("print(1)\n")
    assert content_hash(env, {"ubuntu:24.04": "a"}, {"ubuntu:24.04": "sha256:1"}, vendor) != first


def test_a_folder_of_tasks_means_its_tasks_with_a_dockerfile(tmp_path: Path):
    from veri.tools.tasks.folders import NoTasksError, task_folders

    for name, dockerfile in (("a", True), ("b", True), ("prebuilt", False)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task.toml").write_text('version = "1.0"\n')
        if dockerfile:
            (tmp_path / name / "environment").mkdir()
            (tmp_path / name / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    assert task_folders([tmp_path]) == [tmp_path / "a", tmp_path / "b"]
    assert task_folders([tmp_path / "b", tmp_path]) == [tmp_path / "b", tmp_path / "a"]
    with pytest.raises(NoTasksError, match="point at a task folder"):
        task_folders([tmp_path / "prebuilt"])
