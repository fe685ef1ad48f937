"""`veri serve launcher --backend kubernetes` options for a stack outside the cluster (compose.kubernetes.yaml):
`--host-alias NAME=IP` and the output root's node path from `--host-path` (test_kubelet_stack.py runs them)."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path
from unittest import mock

import pytest

from veri.services.launcher.app import _on_host

REPO = Path(__file__).resolve().parents[2]
VERI = REPO / ".venv" / "bin" / "veri"


@pytest.mark.parametrize("alias", ["proxy", "proxy=", "=10.0.0.5", "proxy=my-host"])
def test_a_host_alias_must_be_name_equals_ip(alias: str) -> None:
    done = subprocess.run([str(VERI), "serve", "launcher", "--backend", "kubernetes",
                           "--host-alias", alias], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    # A malformed pair is argparse's refusal; a name without an IP is the setting's (the same check
    # $VERI_LAUNCHER_HOST_ALIASES gets): both name the flag, the pair and an example.
    assert "--host-alias" in done.stderr and "NAME=IP" in done.stderr and "proxy=10.0.0.5" in done.stderr
    assert alias in done.stderr and "Traceback" not in done.stderr


def test_a_variable_sets_a_launcher_knob_and_a_flag_wins() -> None:
    """Each LauncherSettings field is a flag and a VERI_LAUNCHER_<FIELD> variable, declared once."""
    from veri.infra.settings_cli import settings_from_flags
    from veri.services.launcher.cli import FLAG_NAMES, register_serve
    from veri.services.launcher.settings import LauncherSettings

    parser = argparse.ArgumentParser()
    register_serve(parser.add_subparsers())
    env = {"VERI_LAUNCHER_MAX_PARALLEL_ROLLOUTS": "7", "VERI_LAUNCHER_HOST_ALIASES": '{"proxy": "10.0.0.5"}',
           "VERI_LAUNCHER_NAMESPACE": "team-a", "VERI_LAUNCHER_REGISTRY": ""}
    with mock.patch.dict(os.environ, env):
        from_env = settings_from_flags(LauncherSettings, parser.parse_args(["launcher"]), rename=FLAG_NAMES)
        flagged = settings_from_flags(LauncherSettings, parser.parse_args(
            ["launcher", "--max-parallel", "3", "--host-alias", "web=10.0.0.6", "--unsafe-runc"]), rename=FLAG_NAMES)
    assert (from_env.max_parallel_rollouts, from_env.host_aliases, from_env.namespace) == (7, {"proxy": "10.0.0.5"},
                                                                                           "team-a")
    assert from_env.registry is None  # compose's `${X:-}`: an empty variable is the default
    assert (flagged.max_parallel_rollouts, flagged.unsafe_runc) == (3, True)
    assert flagged.host_aliases == {"proxy": "10.0.0.5", "web": "10.0.0.6"}  # a KEY=VALUE flag adds a pair
    assert flagged.namespace == "team-a"  # not given as a flag: still the variable's


def test_the_output_root_on_the_node_follows_the_longest_host_path() -> None:
    paths = {"/state": "/srv/veri/state", "/state/outputs": "/mnt/shared/outputs"}
    assert _on_host(Path("/state/outputs"), paths) == "/mnt/shared/outputs"
    assert _on_host(Path("/state/other"), paths) == "/srv/veri/state/other"
    assert _on_host(Path("/elsewhere"), paths) is None  # as this process sees it


def compose_files(env: dict[str, str]) -> subprocess.CompletedProcess:
    """scripts/stack/compose_files.sh as up.sh and train.sh source it; prints the COMPOSE_FILE it leaves."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("VERI_", "COMPOSE_FILE"))}
    return subprocess.run(["bash", "-c", "set -euo pipefail; source scripts/stack/compose_files.sh; "
                           "echo \"${COMPOSE_FILE:-} ${VERI_K8S_PROXY_PORT:-unset}\""],
                          cwd=REPO, env={**keep, **env}, capture_output=True, text=True, timeout=30)


def test_the_stack_picks_its_compose_files_by_launcher_backend(tmp_path: Path) -> None:
    assert compose_files({}).stdout.split() == ["unset"]  # docker: compose.yaml alone, rollout URLs on 8000
    assert compose_files({"VERI_K8S_PROXY_PORT": "18000"}).stdout.split() == ["unset"]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    k8s = {"VERI_LAUNCHER_BACKEND": "kubernetes", "VERI_LAUNCHER_KUBECONFIG": str(kubeconfig),
           "VERI_K8S_STACK_ADDRESS": "172.17.0.1", "COMPOSE_FILE": "compose.yaml:/state/compose.policy.yaml"}
    done = compose_files(k8s)
    assert done.stdout.split() == ["compose.yaml:/state/compose.policy.yaml:compose.kubernetes.yaml", "8000"]
    twice = compose_files({**k8s, "COMPOSE_FILE": "compose.yaml:compose.kubernetes.yaml"})
    assert twice.stdout.split()[0] == "compose.yaml:compose.kubernetes.yaml"  # train.sh then up.sh: added once


@pytest.mark.parametrize(("env", "says"), [
    ({"VERI_LAUNCHER_BACKEND": "kubernetes", "VERI_K8S_STACK_ADDRESS": "10.0.0.5"}, "needs VERI_LAUNCHER_KUBECONFIG"),
    ({"VERI_LAUNCHER_BACKEND": "kubernetes", "VERI_LAUNCHER_KUBECONFIG": "/etc/hostname"},
     "needs VERI_K8S_STACK_ADDRESS"),
    ({"VERI_LAUNCHER_BACKEND": "k8s"}, "the stack's launcher is docker or kubernetes"),
])
def test_make_up_names_what_the_kubernetes_launcher_lacks(env: dict[str, str], says: str) -> None:
    done = compose_files(env)
    assert done.returncode == 1 and says in done.stderr, done


def launcher_mounts(env: dict[str, str], tmp_path: Path) -> list[tuple[str, str, str]]:
    """(type, source, target) of the launcher's mounts in the merged config of the files compose_files.sh
    picks, rendered by the host's compose (v1 prints short bind syntax, v2 long)."""
    v2 = subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    compose = "docker compose" if v2 else "docker-compose"
    base = {"VERI_STATE_DIR": str(tmp_path / "state"), "VERI_CONTROL_TOKEN": "t"}
    done = subprocess.run(["bash", "-c", f"set -euo pipefail; source scripts/stack/compose_files.sh; {compose} config"],
                          cwd=REPO, env={**os.environ, **base, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    import yaml

    mounts = []
    for volume in yaml.safe_load(done.stdout)["services"]["launcher"]["volumes"]:
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
            mounts.append(("bind", source, target))
        else:
            mounts.append((volume["type"], volume.get("source", ""), volume["target"]))
    return mounts


def test_a_kubernetes_launcher_has_no_docker_socket(tmp_path: Path) -> None:
    """Its Jobs need no dockerd, so the stack does not hand it /var/run (root on this box)."""
    if subprocess.run(["bash", "-c", "command -v docker-compose || docker compose version"],
                      capture_output=True).returncode != 0:
        pytest.skip("no docker compose on this machine (make docker installs it)")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    assert ("bind", "/var/run", "/host/run") in launcher_mounts({}, tmp_path)
    k8s = launcher_mounts({"VERI_LAUNCHER_BACKEND": "kubernetes", "VERI_LAUNCHER_KUBECONFIG": str(kubeconfig),
                           "VERI_K8S_STACK_ADDRESS": "172.17.0.1"}, tmp_path)
    assert not [mount for mount in k8s if "/var/run" in mount[1] or "docker.sock" in mount[1]], k8s
    assert ("tmpfs", "", "/host/run") in k8s, k8s
