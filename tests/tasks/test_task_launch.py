"""A dataset row of a Harbor task becomes a launch in the task's own environment: the image and the trees
resolved at the job's start, the bundle's entrypoint rewritten to run from the runtime tree
(/veri/rt/bin/python3, the bundle's code at /veri/rt/harness), the task's [agent] timeout carried for the
launcher to cap with the job's harness timeout. A row of an ordinary dataset launches as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from veri.core.dataset import harbor_row
from veri.core.harbor_task import load_task
from veri.core.launch import RolloutLaunch
from veri.loop.collect.harbor import HarborTaskNotPrepared, task_env_for
from veri.services.launcher.task_runtime.runtime import harness_command
from veri.services.launcher.task_sandbox import agent_timeout

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "config/data/harbor_cpu/train/copy-apple-to-violet"


def test_the_entrypoint_runs_from_the_runtime_tree():
    assert harness_command(["python", "agent.py"]) == ["/veri/rt/bin/python3", "/veri/rt/harness/agent.py"]
    assert harness_command(["python3", "-u", "./src/main.py", "--turns", "3"]) == [
        "/veri/rt/bin/python3", "-u", "/veri/rt/harness/src/main.py", "--turns", "3"]
    assert harness_command(["claude", "-p"]) == ["/veri/rt/bin/claude", "-p"]
    assert harness_command(["sh", "-c", "cd x && python a.py"]) == ["sh", "-c", "cd x && python a.py"]


def test_a_harbor_row_launches_in_its_tasks_environment():
    row = harbor_row(load_task(TASK))
    prepared = {str(TASK.resolve()): {"image": "veri/task-copy:abc", "runtime_tree": "/b/rt", "tools_dir": "/b/tools",
                                      "harness_command": harness_command(["python", "agent.py"])}}
    env = task_env_for(row, prepared)
    assert env is not None and env.image == "veri/task-copy:abc" and env.agent == "harness"
    assert env.harness_command == ["/veri/rt/bin/python3", "/veri/rt/harness/agent.py"]
    assert (env.runtime_tree, env.tools_dir, env.workdir, env.network_mode) == ("/b/rt", "/b/tools", "/app",
                                                                                "no-network")
    assert env.tests_dir == str(TASK.resolve() / "tests")
    # [agent] timeout_sec = 60: the job's harness timeout caps it, and it caps the job's
    assert env.agent_timeout_s == 60 and agent_timeout(env, 30) == 30 and agent_timeout(env, 600) == 60
    launch = RolloutLaunch(rollout_id="r", image="veri/harness-harbor_bash:x", env={"VERI_ROLLOUT_ID": "r"},
                           timeout_s=30, task_env=env)
    assert launch.task_env is env


def test_an_ordinary_row_has_no_task_environment_and_an_unprepared_task_is_named():
    assert task_env_for({"prompt": "hi"}, {}) is None
    with pytest.raises(HarborTaskNotPrepared, match="was not built at the job's start"):
        task_env_for(harbor_row(load_task(TASK)), {})
