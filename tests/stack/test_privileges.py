"""Every container of the running stack holds the least it needs (docs/security.md): `docker
inspect` of each (the services, a trainer of the same compose service, the egress gateway a job's
sandboxes used) against tests/stack/privileges.py, where each user, capability, writable mount and
tmpfs beyond compose.yaml's x-least is listed with its reason."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.stack.conftest import REPO, _compose
from tests.stack.privileges import ALLOWED, inspect_running, least_user, service_of, violations

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # `trained`: one make train on the session stack


@pytest.fixture
def trainer(stack) -> Iterator[None]:
    """A container of the `trainer` service (`make train` runs it with --rm: gone when it ends), idle."""
    name = f"{stack.env['VERI_PROJECT']}-privileges-trainer"
    env = {**stack.env, "VERI_CONTROL_TOKEN": stack.control_token}
    started = subprocess.run([*_compose().split(), "-p", stack.env["VERI_PROJECT"], "run", "-d", "--no-deps",
                              "--name", name, "trainer", "sleep", "600"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120)


@pytest.mark.needs("docker")
def test_every_container_holds_only_what_its_allowlist_says(stack, trained, trainer):
    containers = inspect_running(f"label=com.docker.compose.project={stack.env['VERI_PROJECT']}")
    # the gateway of the job's sandboxes (an open-egress bundle), named after the stack's rollouts network
    containers += [c for c in inspect_running("label=veri.egress-gateway")
                   if c["Name"].lstrip("/").startswith(f"{stack.env['VERI_ROLLOUTS_NETWORK']}-egress-")]
    assert {service_of(c) for c in containers} == set(ALLOWED), [c["Name"] for c in containers]
    found = [problem for container in containers for problem in violations(container, stack.state)]
    assert not found, "\n".join(found)


def test_the_sandboxes_output_folders_went_back_to_the_services_user(stack, trained):
    """The launcher gave each rollout's folder to the sandbox user and took it back (its CAP_CHOWN is real):
    what the harness wrote (answer.txt) is the services' now, as the non-root trainer read it."""
    name, _ = trained
    uid, gid = (int(part) for part in least_user().split(":"))
    folders = [p for p in (stack.state / "outputs" / name).iterdir() if not p.name.startswith(".")]
    assert len(folders) == len(list((stack.state / "jobs" / name / "trajectories").rglob("rollout-*.json"))) > 0
    for folder in folders:
        for path in (folder, *folder.rglob("*")):
            assert (path.stat().st_uid, path.stat().st_gid) == (uid, gid), path
    assert any((folder / "answer.txt").is_file() for folder in folders)


def test_the_check_finds_what_a_container_must_not_hold(tmp_path):
    """A container as docker makes it by default: root, every default capability, a writable root, and
    the whole state folder mounted read-write."""
    state = tmp_path / "state"
    default = {"Name": "/veri-proxy-1", "Config": {"User": "", "Labels": {"com.docker.compose.service": "proxy"}},
               "HostConfig": {"CapAdd": ["NET_ADMIN"], "CapDrop": None, "SecurityOpt": None, "ReadonlyRootfs": False,
                              "Tmpfs": {"/tmp": "rw,exec"}},
               "Mounts": [{"Type": "bind", "Source": str(state), "Destination": "/state", "RW": True},
                          {"Type": "bind", "Source": str(state / "jobs"), "Destination": "/state/spans",
                           "RW": True}]}
    found = "\n".join(violations(default, state))
    for problem in ("runs as 'root", "drops None", "adds capability CAP_NET_ADMIN", "no no-new-privileges",
                    "a writable root", f"mounts {state} at /state", "/state/spans is ", "a tmpfs at /tmp:exec"):
        assert problem in found, found
    assert violations({**default, "Config": {"User": "", "Labels": {}}, "Name": "/x"}, state) == [
        "x: not on the allowlist (tests/stack/privileges.py)"]
