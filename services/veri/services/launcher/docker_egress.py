"""Each sandbox's network, by its bundle's egress (core/egress.py), and the egress gateway the
docker backend starts for them.

Every sandbox network is internal and gives the host no address on it (`rollouts_network_options`):
no route out, no way to the host's ports, nor to 169.254.169.254. Besides the capture proxy:
  - open: `<rollouts>` itself (the proxy, the web fixture, the gateway), HTTP(S)_PROXY = the gateway
    with an open pass (public addresses; the gateway refuses the host's, the LAN's and link-local);
  - none: `<rollouts>-sealed`, which holds the proxy and nothing else; no proxy variables;
  - a host list: `<rollouts>-allowlist` (the proxy and the gateway), with a pass for those hosts and
    the capture proxy. A harness that ignores HTTP(S)_PROXY reaches nothing else: there is no route.
The gateway is the only container on `<rollouts>-out`, an ordinary bridge: its way to the internet.
compose.yaml makes the four networks. Where `<rollouts>-out` does not exist (tests' own networks)
an open bundle's sandbox is on `<rollouts>` alone, as before, with no way out.

The gateway runs veri's own code (`veri serve egress`) from the runtime image under runc, read-only,
no capabilities, as nobody; its pass key is made here, per backend, and never leaves it but to the
gateway's environment. One gateway per backend (`<rollouts>-egress-<launcher id>`), started on the
first sandbox that needs it, removed by `close`.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import structlog
from docker.errors import APIError, NotFound

from veri.core import egress, envs
from veri.services.launcher.errors import EgressProblem

log = structlog.get_logger("veri.services.launcher.egress")

GATEWAY_PORT = 3128
LABEL_GATEWAY = "veri.egress-gateway"
READY_TIMEOUT_S = 60.0


def network_names(rollouts: str) -> dict[str, str]:
    return {"open": rollouts, "none": f"{rollouts}-sealed", "allowlist": f"{rollouts}-allowlist",
            "out": f"{rollouts}-out"}


class DockerEgress:
    def __init__(self, client: Any, rollouts: str, launcher_id: str) -> None:
        self.client = client
        self.networks = network_names(rollouts)
        self.gateway_name = f"{rollouts}-egress-{re.sub(r'[^A-Za-z0-9_.-]', '-', launcher_id)}"[:63]
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._gateway: Any = None
        self._exists: dict[str, bool] = {}

    def sandbox(self, policy: egress.Egress, env: dict[str, str]) -> tuple[str, dict[str, str]]:
        """(the network, the variables to add) for a sandbox of a bundle with this egress (blocking)."""
        kind = egress.mode(policy)
        if kind == "none":
            return self._network("none", policy), {}
        if kind == "open":
            if not self._has(self.networks["out"]):
                return self.networks["open"], {}
            hosts = [egress.ANY_HOST]
        else:
            proxy = urlsplit(env.get(envs.OPENAI_BASE_URL, ""))
            hosts = [*policy, *([f"{proxy.hostname}:{proxy.port or 80}"] if proxy.hostname else [])]
        network = self._network(kind, policy)
        gateway = self._ensure_gateway()
        url = f"http://veri:{egress.sign_pass(self._key, hosts)}@{gateway}:{GATEWAY_PORT}"
        proxy_host = urlsplit(env.get(envs.OPENAI_BASE_URL, "")).hostname or ""
        no_proxy = ",".join(h for h in (proxy_host, "localhost", "127.0.0.1") if h)
        return network, {**dict.fromkeys(envs.PROXY_VARIABLES, url), **dict.fromkeys(envs.NO_PROXY_VARIABLES, no_proxy)}

    def close(self) -> None:
        with self._lock:
            if self._gateway is not None:
                _remove(self._gateway)
                self._gateway = None

    # --- networks and the gateway (blocking) ---------------------------------------------------------

    def _has(self, name: str) -> bool:
        if name not in self._exists:
            try:
                self.client.networks.get(name)
                self._exists[name] = True
            except NotFound:
                return False
        return self._exists[name]

    def _network(self, kind: str, policy: egress.Egress) -> str:
        name = self.networks[kind]
        if not self._has(name):
            raise EgressProblem(
                f"the bundle's egress = {policy!r} needs docker network {name!r}, which does not exist: start the "
                f"stack with `make up` (compose.yaml makes it), or create it: docker network create --internal "
                f"-o com.docker.network.bridge.inhibit_ipv4=true {name}")
        return name

    def _ensure_gateway(self) -> str:
        with self._lock:
            if self._gateway is not None:
                try:
                    self._gateway.reload()
                    if self._gateway.status == "running":
                        return self.gateway_name
                except NotFound:
                    pass
                log.warning("egress.gateway_restart", name=self.gateway_name)
            self._gateway = self._start_gateway()
            return self.gateway_name

    def remove_leftover_gateway(self) -> None:
        """The gateway a previous backend of this launcher id left behind (its key is gone with it)."""
        try:
            _remove(self.client.containers.get(self.gateway_name))
        except NotFound:
            pass

    def _start_gateway(self) -> Any:
        self.remove_leftover_gateway()
        image = os.environ.get(envs.VERI_RUNTIME_IMAGE) or "veri/runtime"
        try:
            container = self.client.containers.create(
                image, command=["veri", "serve", "egress", "--port", str(GATEWAY_PORT)], name=self.gateway_name,
                environment={envs.VERI_EGRESS_KEY: self._key.hex()}, network=self.networks["open"],
                user="65534:65534", read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges"],
                mem_limit="512m", pids_limit=1024, labels={LABEL_GATEWAY: self.gateway_name},
                restart_policy={"Name": "on-failure"}, detach=True)
            for kind in ("allowlist", "out"):
                if self._has(self.networks[kind]):
                    self.client.networks.get(self.networks[kind]).connect(container)
            container.start()
        except (APIError, NotFound) as exc:
            raise EgressProblem(f"could not start the egress gateway {self.gateway_name} from {image} ({exc}): "
                                f"build the runtime image (`make images`) or set {envs.VERI_RUNTIME_IMAGE}") from exc
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            container.reload()
            if container.status != "running" and container.status != "created":
                break
            if b"egress.listening" in container.logs(stdout=True, stderr=True, tail=20):
                log.info("egress.gateway_started", name=self.gateway_name, image=image)
                return container
            time.sleep(0.2)
        tail = container.logs(stdout=True, stderr=True, tail=20).decode(errors="replace")
        _remove(container)
        raise EgressProblem(f"the egress gateway {self.gateway_name} did not start: {tail.strip()[-1500:]}")


def _remove(container: Any) -> None:
    try:
        container.remove(force=True)
    except NotFound:
        pass
    except APIError as exc:
        if exc.status_code != 409:
            raise
