"""The names a sandbox calls (the capture proxy, the egress gateway), pinned in its /etc/hosts.

A sandbox finds `proxy` (or the gateway) through docker's embedded DNS server, which lives inside
dockerd: while dockerd is stopped or restarting (live-restore keeps the containers running) every
lookup fails, and a harness mid-step loses its model server although the proxy still runs. So the
docker backend resolves the hosts of the sandbox's URL variables itself, on the sandbox's network,
and hands them to docker as `extra_hosts`. A container is found by its name or its compose service
name (the alias compose gives it); a container keeps its address across a restart-policy restart.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

TABLE_TTL_S = 5.0  # the proxy restarted a moment ago may be back on a new address: look again soon
COMPOSE_SERVICE = "com.docker.compose.service"


class PinnedHosts:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._tables: dict[str, tuple[float, dict[str, str]]] = {}

    def for_sandbox(self, network: str, env: Mapping[str, str]) -> dict[str, str]:
        """{host: address} for every container host named by a URL in `env` (blocking). Hosts not
        found on `network` are left to DNS (an outside host behind the egress gateway, say)."""
        names = {host for host in map(_url_host, env.values()) if host}
        if not names:
            return {}
        table = self._table(network)
        return {name: table[name] for name in sorted(names) if name in table}

    def _table(self, network: str) -> dict[str, str]:
        with self._lock:
            cached = self._tables.get(network)
            if cached and time.monotonic() - cached[0] < TABLE_TTL_S:
                return cached[1]
        table: dict[str, str] = {}
        for summary in self.client.api.containers(filters={"network": network}):
            address = ((summary.get("NetworkSettings") or {}).get("Networks") or {}).get(network, {}).get("IPAddress")
            if not address:
                continue
            labels = summary.get("Labels") or {}
            for name in [*(n.lstrip("/") for n in summary.get("Names") or []), labels.get(COMPOSE_SERVICE)]:
                if name:
                    table.setdefault(name, address)
        with self._lock:
            self._tables[network] = (time.monotonic(), table)
        return table


def _url_host(value: str) -> str | None:
    """The host of an http(s) URL that names a container (not an address, not localhost)."""
    if not value.startswith(("http://", "https://")):
        return None
    try:
        host = urlsplit(value).hostname
    except ValueError:
        return None
    if not host or host == "localhost" or _is_address(host):
        return None
    return host


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
