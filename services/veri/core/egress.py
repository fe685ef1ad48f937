"""Per-bundle egress: what a sandbox may reach besides the capture proxy.

A bundle's manifest says `egress = "open"` (the default), `"none"`, or a list of hosts (`"pypi.org"`,
`"api.example.com:443"`, `"*.example.com"`). The launcher puts each sandbox on a network that holds
nothing else it could use (services/launcher/docker_backend.py), and the egress gateway (veri/egress/) is the
only way out of those networks: it forwards a request only with a pass the launcher signed for that
sandbox's policy. A pass is the policy and its HMAC under a key only the launcher and its gateway
hold, so a sandbox can use its own pass and cannot widen it.

This file is the shared part (the launcher signs, the gateway checks): the manifest's values, the
pass, and which host a policy allows.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Literal

EGRESS_OPEN = "open"
EGRESS_NONE = "none"
ANY_HOST = "*"  # the one entry of an open policy's pass
LABEL_EGRESS = "org.veri.egress"  # the bundle image's label: its manifest's egress, as JSON
MAX_ALLOWED_HOSTS = 64

EgressMode = Literal["open", "none", "allowlist"]
Egress = str | list[str]  # "open" | "none" | hosts

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
HOST_ENTRY = re.compile(rf"(?P<host>(?:\*\.)?{_LABEL}(?:\.{_LABEL})*)(?::(?P<port>[0-9]{{1,5}}))?")
EGRESS_FIX = ('egress = "open" (the default: the web through the egress gateway), "none" (only the capture '
              'proxy), or a list of hosts, e.g. egress = ["pypi.org", "api.example.com:443", "*.example.com"]')


class EgressError(ValueError):
    """An egress value the manifest may not have; the message names the entry and the fix."""


def check_entry(entry: str) -> str:
    """One allowlist entry, lowercased; an EgressError naming the fix when it is not a host[:port]."""
    if not isinstance(entry, str):
        raise EgressError(f"egress entry {entry!r} is not a string: {EGRESS_FIX}")
    value = entry.strip().lower()
    if "://" in value or "/" in value:
        raise EgressError(f"egress entry {entry!r} is a URL: name the host alone (e.g. \"pypi.org\" or "
                          "\"pypi.org:443\"), without scheme or path")
    match = HOST_ENTRY.fullmatch(value)
    if match is None or len(match["host"]) > 253:
        raise EgressError(f"egress entry {entry!r} is not a host name or host:port (letters, digits, - and ., "
                          "an optional leading *. for every subdomain): e.g. \"api.example.com:443\"")
    if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
        raise EgressError(f"egress entry {entry!r}: the port must be 1-65535")
    return value


def normalize(value: object) -> Egress:
    """The manifest's egress, checked: "open", "none" or a list of lowercased host[:port] entries."""
    if value in (EGRESS_OPEN, EGRESS_NONE):
        return str(value)
    if isinstance(value, str):
        raise EgressError(f"egress = {value!r} is not a mode: {EGRESS_FIX}")
    if not isinstance(value, list):
        raise EgressError(f"egress must be a string or a list of hosts: {EGRESS_FIX}")
    if not value:
        raise EgressError('egress = [] allows nothing: write egress = "none" to say so')
    if len(value) > MAX_ALLOWED_HOSTS:
        raise EgressError(f"egress lists {len(value)} hosts, more than {MAX_ALLOWED_HOSTS}: use \"*.domain\" "
                          "entries, or egress = \"open\"")
    return sorted({check_entry(entry) for entry in value})


def mode(egress: Egress) -> EgressMode:
    if egress == EGRESS_OPEN:
        return "open"
    if egress == EGRESS_NONE:
        return "none"
    return "allowlist"


def from_label(label: str | None) -> Egress:
    """An image's egress label (absent on images built before egress existed: open)."""
    if not label:
        return EGRESS_OPEN
    try:
        return normalize(json.loads(label))
    except (ValueError, EgressError) as exc:
        raise EgressError(f"the image's {LABEL_EGRESS} label {label!r} is invalid ({exc}): rebuild it with "
                          "`veri harness build BUNDLE`") from None


def sign_pass(key: bytes, hosts: list[str]) -> str:
    """A pass for these hosts ([ANY_HOST]: open): url-safe, fit for a proxy URL's password."""
    body = base64.urlsafe_b64encode(json.dumps(hosts, separators=(",", ":")).encode()).decode().rstrip("=")
    mac = base64.urlsafe_b64encode(hmac.new(key, body.encode(), hashlib.sha256).digest()).decode().rstrip("=")
    return f"{body}.{mac}"


def read_pass(key: bytes, token: str) -> list[str] | None:
    """The hosts a pass allows, or None for a pass this key did not sign."""
    body, _, mac = token.partition(".")
    expected = base64.urlsafe_b64encode(hmac.new(key, body.encode(), hashlib.sha256).digest()).decode().rstrip("=")
    if not mac or not hmac.compare_digest(mac, expected):
        return None
    try:
        hosts = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except ValueError:
        return None
    return [str(h) for h in hosts] if isinstance(hosts, list) else None


def host_allowed(hosts: list[str], host: str, port: int) -> bool:
    """Whether a pass's hosts allow host:port (ANY_HOST: every name; the gateway still refuses addresses)."""
    host = host.lower().rstrip(".")
    for entry in hosts:
        if entry == ANY_HOST:
            return True
        match = HOST_ENTRY.fullmatch(entry)
        if match is None:  # not an entry a manifest accepts (an IPv6 literal): it allows nothing
            continue
        name, wanted_port = match["host"], match["port"]
        if wanted_port and int(wanted_port) != port:
            continue
        if name.startswith("*."):
            if host.endswith(name[1:]):
                return True
        elif host == name:
            return True
    return False
