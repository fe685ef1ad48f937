"""The security review's checkable claims (docs/security.md): the state folder and control token are
private, the token is compared in constant time everywhere, and `make down && make up` rotates it."""

from __future__ import annotations

import ast
import re
import stat
import subprocess
from pathlib import Path

import docker
import httpx
import pytest

from tests.stack.conftest import REPO

# the stack's first make up may rebuild veri/runtime
pytestmark = [pytest.mark.needs("docker"), pytest.mark.timeout(1500)]

SERVICES = REPO / "services" / "veri"
# Names that hold a secret a client presents: a comparison with == would leak it byte by byte in time.
SECRET_NAME = re.compile(r"(^|_)(token|api_key|presented|presented_key|secret|password)$", re.IGNORECASE)


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name(node.func.value) if isinstance(node.func, ast.Attribute) else ""  # x.strip() -> x
    return ""


def secret_equality_compares(root: Path) -> list[str]:
    """`==` / `!=` with a secret-named operand, as `path:line` under `root`, in every module there."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Compare) or not any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                continue
            operands = [node.left, *node.comparators]
            if any(SECRET_NAME.search(_name(o)) for o in operands) and not any(
                    isinstance(o, ast.Constant) and o.value in (None, "") for o in operands):
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def test_the_check_finds_an_equality_compare(tmp_path):
    (tmp_path / "auth.py").write_text("def ok(presented, settings):\n"
                                      "    if settings.token is None or settings.token == '':\n"
                                      "        return True\n"
                                      "    return presented.strip() == settings.token\n")
    assert secret_equality_compares(tmp_path) == ["auth.py:4"]


def test_tokens_and_keys_are_compared_in_constant_time():
    assert secret_equality_compares(SERVICES) == [], "compare secrets with secrets.compare_digest"
    users = [p for p in SERVICES.rglob("*.py") if "compare_digest" in p.read_text()]
    assert {p.relative_to(SERVICES).as_posix() for p in users} >= {"core/auth.py", "services/console/guard.py",
                                                                   "services/proxy/store/sessions.py"}
    # every control route checks its token through the one rule (core/auth.py)
    for route in ("services/proxy/control/auth.py", "services/launcher/deps.py", "services/policy/hf/routes.py"):
        assert "from veri.core.auth import" in (SERVICES / route).read_text(), route


@pytest.mark.slow
def test_state_folder_and_control_token_are_private(stack):
    assert stat.S_IMODE(stack.state.stat().st_mode) == 0o700
    token = stack.state / "control_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text().strip()) >= 40  # secrets.token_urlsafe(32): 256 bits


LAUNCHER_METRICS = """
import os, sys, urllib.error, urllib.request
headers = {"Authorization": "Bearer " + os.environ["TOKEN"]} if os.environ.get("TOKEN") else {}
try:
    print(urllib.request.urlopen(urllib.request.Request("http://launcher:8002/metrics", headers=headers)).status)
except urllib.error.HTTPError as error:
    print(error.code)
"""


@pytest.mark.slow
def test_the_launcher_needs_the_control_token(stack):
    """The launcher is on the control network only; there too it answers only the stack's token."""
    client = docker.from_env()
    [proxy] = client.containers.list(filters={"label": [f"com.docker.compose.project={stack.env['VERI_PROJECT']}",
                                                        "com.docker.compose.service=proxy"]})

    def status(token: str) -> str:
        return proxy.exec_run(["python3", "-c", LAUNCHER_METRICS], environment={"TOKEN": token}).output.decode().strip()

    assert status("") == "401"
    assert status("not-the-token") == "401"
    assert status(stack.control_token) == "200"


def _control_status(stack, token: str) -> int:
    return httpx.get(f"{stack.proxy_url}/control/replicas", headers={"Authorization": f"Bearer {token}"},
                     timeout=30).status_code


@pytest.mark.slow
def test_make_down_and_up_rotates_the_control_token(stack):
    def make(target: str) -> None:
        done = subprocess.run(["make", "--no-print-directory", target], cwd=REPO, env=stack.env,
                              capture_output=True, text=True, timeout=1200)  # may rebuild veri/runtime
        assert done.returncode == 0, f"make {target}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    first = stack.control_token
    assert _control_status(stack, first) == 200
    assert _control_status(stack, first[:-1] + ("A" if first[-1] != "A" else "B")) == 401
    make("up")  # on the running stack (as make train does): the token stays
    assert stack.control_token == first
    make("down")
    make("up")
    second = stack.control_token
    assert second != first
    assert _control_status(stack, first) == 401
    assert _control_status(stack, second) == 200
