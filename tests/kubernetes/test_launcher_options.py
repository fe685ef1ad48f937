"""`veri serve launcher --backend kubernetes` options for a stack outside the cluster (compose.kubernetes.yaml):
`--host-alias NAME=IP` and the output root's node path from `--host-path` (test_kubelet_stack.py runs them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from veri.launcher.app import _on_host

VERI = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "veri"


@pytest.mark.parametrize("alias", ["proxy", "proxy=", "=10.0.0.5", "proxy=my-host"])
def test_a_host_alias_must_be_name_equals_ip(alias: str) -> None:
    done = subprocess.run([str(VERI), "serve", "launcher", "--backend", "kubernetes",
                           "--host-alias", alias], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"--host-alias {alias!r} is not NAME=IP" in done.stderr and "proxy=10.0.0.5" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_output_root_on_the_node_follows_the_longest_host_path() -> None:
    paths = {"/state": "/srv/veri/state", "/state/outputs": "/mnt/shared/outputs"}
    assert _on_host(Path("/state/outputs"), paths) == "/mnt/shared/outputs"
    assert _on_host(Path("/state/other"), paths) == "/srv/veri/state/other"
    assert _on_host(Path("/elsewhere"), paths) is None  # as this process sees it
