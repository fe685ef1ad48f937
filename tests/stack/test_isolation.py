"""What a sandbox can and cannot reach in the compose stack (docs/architecture.md, "Isolation and per-bundle egress"):
every way out of a gVisor sandbox the probe (isolation_probe/probe.py) tries is its own assertion, named; and each
bundle's `egress` (open, none, a host list) enforced, a client that ignores HTTP(S)_PROXY included.

The web fixture stands in for the internet: it is on the rollouts network, where only open bundles'
sandboxes are. A listener on 0.0.0.0 on this host stands in for every host port."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.stack.test_run_harness import records
from veri.services.proxy.control_client import ControlClient

pytestmark = [pytest.mark.needs("docker"), pytest.mark.slow]
PROBE = Path(__file__).parent / "isolation_probe"
CONTRACT = {"OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
            "VERI_POLICY_BASE_URL", "VERI_POLICY_MODEL", "VERI_TASK_INPUT", "VERI_TASK", "VERI_TASK_INDEX",
            "VERI_ROLLOUT_INDEX", "VERI_ROLLOUT_ID", "VERI_MAX_TURNS", "VERI_OUTPUT_DIR"}
PROXY_VARIABLES = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"}
CONTROL_ROUTES = [  # (name, method, path, authorization): every one must be refused from a sandbox
    ("control: open a session, no token", "POST", "/control/sessions", None),
    ("control: proxy config, no token", "GET", "/control/config", None),
    ("control: proxy metrics, no token", "GET", "/metrics", None),
    ("control: announce a policy version, no token", "PUT", "/control/policy_version", None),
    ("control: replicas, own key as token", "GET", "/control/replicas", "Bearer $OWN_KEY"),
    ("spans: other rollout's, no token", "GET", "/control/sessions/$OTHER/spans", None),
    ("spans: other rollout's, own key as token", "GET", "/control/sessions/$OTHER/spans", "Bearer $OWN_KEY"),
    ("spans: other rollout's, a guessed token", "GET", "/control/sessions/$OTHER/spans", "Bearer " + "A" * 43),
    ("spans: other rollout's requests, own key", "GET", "/control/sessions/$OTHER/requests", "Bearer $OWN_KEY"),
    ("spans: own rollout's, own key as token", "GET", "/control/sessions/$OWN_ID/spans", "Bearer $OWN_KEY"),
    ("spans: a guessed rollout id, no token", "GET", "/control/sessions/r-00000000/spans", None),
    ("session: other rollout's, closed with own key", "POST", "/control/sessions/$OTHER/close", "Bearer $OWN_KEY"),
    ("session: other rollout's models with own key", "GET", "/r/$OTHER/v1/models", "Bearer $OWN_KEY"),
    ("session: other rollout's chat with own key", "POST", "/r/$OTHER/v1/chat/completions", "Bearer $OWN_KEY"),
    ("session: other rollout's messages with own key", "POST", "/r/$OTHER/v1/messages", "Bearer $OWN_KEY"),
]


class HostListener:
    """A TCP listener on 0.0.0.0 of this host that records who connected."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        self.peers: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.peers.append(peer[0])
            conn.close()


def host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return sorted({line.split()[3].split("/")[0] for line in out.splitlines()} - {"127.0.0.1"})


def ip_on(container, network: str) -> str:
    container.reload()
    return container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    for image in client.images.list(filters={"label": "org.veri.bundle"}):
        if image.labels.get("org.veri.bundle", "").startswith("isolation_probe"):
            client.images.remove(image.id, force=True)
    client.close()


@pytest.fixture(scope="module")
def trainer_standin(stack, client) -> Iterator[str]:
    """A listening port on the control network where the trainer's --metrics-port would be."""
    project = stack.env["VERI_PROJECT"]
    name = f"{project}-trainer-standin"
    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)
    container = client.containers.create("veri/runtime", ["python3", "-m", "http.server", "9100"], name=name,
                                         network=f"{project}_control", labels={"veri.test": "isolation"})
    try:
        container.start()
        client.networks.get(f"{project}_control").disconnect(container)
        client.networks.get(f"{project}_control").connect(container, aliases=["trainer"])
        yield ip_on(container, f"{project}_control")
    finally:
        container.remove(force=True)


def run_probe(stack, tmp_path: Path, name: str, egress: str | None, task: dict) -> dict:
    bundle = tmp_path / name
    shutil.copytree(PROBE, bundle)
    manifest = f'name = "{name}"\nentrypoint = ["python", "probe.py"]\n' + (f"egress = {egress}\n" if egress else "")
    (bundle / "veri-harness.toml").write_text(manifest)
    out = tmp_path / f"{name}-out"
    done = stack.veri("run-harness", "--bundle", str(bundle), "--task", json.dumps({"prompt": "probe", **task}),
                      "--out", str(out), "--no-up")
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    [record] = records(out, 0)
    assert record.status == "completed", (record.episode.verdicts, (out / "task-0" / "rollout-0.log").read_text())
    [probe] = list(out.rglob("probe.json"))
    return json.loads(probe.read_text())


def http_attempts(stack, other: str) -> list[list]:
    # $PROXY, $OWN_ID, $OWN_KEY: the probe fills them in from its own environment
    attempts = [[name, f"$PROXY{path}".replace("$OTHER", other), {"Authorization": auth} if auth else {}, method]
                for name, method, path, auth in CONTROL_ROUTES]
    return attempts


def test_sandbox_isolation(stack, client, trainer_standin, tmp_path):
    project, rollouts = stack.env["VERI_PROJECT"], stack.env["VERI_ROLLOUTS_NETWORK"]
    containers = {c.labels["com.docker.compose.service"]: c
                  for c in client.containers.list(filters={"label": f"com.docker.compose.project={project}"})}
    listener = HostListener()
    other = ControlClient(stack.proxy_url, token=stack.control_token).open_session()
    host_ports = [listener.port, 2375, 2376, 22, int(stack.env["VERI_PROXY_PORT"]),
                  int(stack.env["VERI_CONSOLE_PORT"])]
    rollouts_gateway = client.networks.get(rollouts).attrs["IPAM"]["Config"][0].get("Gateway")
    tcp = [["policy", "policy", 8001], ["launcher", "launcher", 8002], ["console", "console", 8300],
           ["trainer (metrics port)", "trainer", 9100], ["trainer by address", trainer_standin, 9100],
           ["metadata service", "169.254.169.254", 80], ["console by address",
                                                         ip_on(containers["console"], f"{project}_console"), 8300]]
    tcp += [[f"control network: {service} by address", ip_on(containers[service], f"{project}_control"), port]
            for service, port in (("policy", 8001), ("launcher", 8002), ("proxy", 8000))]
    addresses = [*host_addresses(), *([rollouts_gateway] if rollouts_gateway else [])]
    tcp += [[f"host {address}:{port}", address, port] for address in addresses for port in host_ports]
    state = str(stack.state)
    task = {"tcp": tcp, "http": [*http_attempts(stack, other.rollout_id),
                                 ["own rollout's models", "$PROXY/r/$OWN_ID/v1/models",
                                  {"Authorization": "Bearer $OWN_KEY"}, "GET"],
                                 ["web fixture direct", "http://webfixture:8080/health", {}, "GET"]],
            "http_via_gateway": [["web fixture via gateway", "http://webfixture:8080/health"]],
            "archive_paths": ["/state", "/state/spans", "/state/jobs", "/state/control_token", state,
                              f"{state}/control_token"],
            "archive_markers": [state, "/state"]}
    result = run_probe(stack, tmp_path, "isolation_probe", None, task)
    attempts = result["attempts"]

    # The controls first: without them a blocked attempt could be a broken probe.
    assert attempts["own rollout's models"] == "REACHED 200", attempts["own rollout's models"]
    assert attempts["web fixture direct"] == "REACHED 200", attempts["web fixture direct"]
    assert attempts["web fixture via gateway"] == "REACHED 200", attempts["web fixture via gateway"]
    escapes = {name: outcome for name, outcome in attempts.items()
               if not name.startswith(("own rollout", "web fixture")) and not outcome.startswith("blocked")}
    for name, outcome in attempts.items():
        if name.startswith(("own rollout", "web fixture")):
            continue
        assert outcome.startswith("blocked"), f"sandbox escape: {name}: {outcome} (all escapes: {escapes})"
    for name in [a[0] for a in tcp]:  # every one tried both ways
        assert f"{name} direct" in attempts and f"{name} via gateway" in attempts, name
    assert not listener.peers, f"the 0.0.0.0 listener on this host was reached from {listener.peers}"

    image_env = {item.split("=", 1)[0] for item in client.images.get("veri/base").attrs["Config"]["Env"]}
    assert CONTRACT <= set(result["env"])
    leaked = set(result["env"]) - CONTRACT - PROXY_VARIABLES - image_env - {"HOSTNAME", "HOME", "PWD", "SHLVL", "_"}
    assert not leaked, f"host variables leaked into the sandbox: {leaked}"
    every_environ = "\n".join(result["environs"])
    assert "do-not-leak" not in every_environ, "the host's environment (VERI_TEST_HOST_SECRET) reached a process"
    assert stack.control_token not in every_environ, "the control token reached a sandbox process"
    assert "VERI_CONTROL_TOKEN" not in every_environ and "VERI_EGRESS_KEY" not in every_environ


@pytest.mark.parametrize("egress, gateway_reaches_web", [
    ('"none"', False),
    ('["webfixture:8080"]', True),
    ('["example.com"]', False),
])
def test_bundle_egress_is_enforced(stack, client, tmp_path, egress, gateway_reaches_web):
    """A harness that ignores the proxy variables (direct, by name and by address) reaches nothing."""
    rollouts = stack.env["VERI_ROLLOUTS_NETWORK"]
    project = stack.env["VERI_PROJECT"]
    [webfixture] = client.containers.list(filters={"label": [f"com.docker.compose.project={project}",
                                                             "com.docker.compose.service=webfixture"]})
    address = ip_on(webfixture, rollouts)
    task = {"tcp": [["policy", "policy", 8001], ["metadata service", "169.254.169.254", 80],
                    ["web fixture by address", address, 8080]],
            "http": [["own rollout's models", "$PROXY/r/$OWN_ID/v1/models", {"Authorization": "Bearer $OWN_KEY"},
                      "GET"],
                     ["web fixture direct by name", "http://webfixture:8080/health", {}, "GET"],
                     ["web fixture direct by address", f"http://{address}:8080/health", {}, "GET"]],
            "http_via_gateway": [["web fixture via gateway", "http://webfixture:8080/health"]]}
    name = {'"none"': "isolation_probe_none", '["webfixture:8080"]': "isolation_probe_allow"}.get(
        egress, "isolation_probe_deny")
    attempts = run_probe(stack, tmp_path, name, egress, task)["attempts"]
    assert attempts["own rollout's models"] == "REACHED 200", attempts
    for check in ("web fixture direct by name", "web fixture direct by address", "web fixture by address direct",
                  "policy direct", "policy via gateway", "metadata service direct", "metadata service via gateway"):
        assert attempts[check].startswith("blocked"), f"egress = {egress}: {check}: {attempts[check]}"
    via = attempts["web fixture via gateway"]
    if gateway_reaches_web:
        assert via == "REACHED 200", f"egress = {egress}: the listed host through the gateway: {via}"
    else:
        assert via.startswith("blocked"), f"egress = {egress}: web fixture via gateway: {via}"


def test_listener_is_reachable_from_this_host():
    """The host listener works (so its silence in test_sandbox_isolation means something)."""
    listener = HostListener()
    with socket.create_connection(("127.0.0.1", listener.port), timeout=5):
        pass
    for _ in range(50):
        if listener.peers:
            break
        threading.Event().wait(0.05)
    assert listener.peers == ["127.0.0.1"]
