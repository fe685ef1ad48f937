"""Each rollout's egress from its bundle: the image's `org.veri.egress` label (what `veri harness build`
bakes in, and what the docker backend reads from its daemon), read here from the registry the nodes
pull from (the distribution API: manifest -> config blob -> Labels), once per image (tags are content
hashes). Without `--registry` (images preloaded on the nodes) there is nothing to read: the launcher's
`--sandbox-egress` applies to every rollout.

Kubernetes NetworkPolicy has addresses, not host names: `open` -> the `web` policy, `none` -> `none`,
and an allowlist -> `none` too (only the proxy: an allowlist needs the egress gateway, which is not
deployed on Kubernetes), said once per image. A label that cannot be read fails the rollout
(infrastructure_error naming the fix): a sandbox never gets more than its bundle allows.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import structlog

from veri.core import egress as egress_policy
from veri.services.launcher.errors import ImageProblem
from veri.services.launcher.kubernetes.objects import Egress

log = structlog.get_logger("veri.services.launcher.kubernetes")

MANIFEST_TYPES = ", ".join((
    "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json"))


class ImageEgress:
    def __init__(self, registry: str | None, fallback: Egress, insecure: bool = False) -> None:
        self.registry = registry
        self.fallback = fallback
        self.scheme = "http" if insecure else "https"
        self._cache: dict[str, Egress] = {}
        self._lock = threading.Lock()

    def of(self, image: str) -> Egress:
        """Blocking (the backend's pool). Raises ImageProblem when the label cannot be read."""
        if self.registry is None:
            return self.fallback
        with self._lock:
            if image in self._cache:
                return self._cache[image]
        label = self._label(image)
        try:
            policy = egress_policy.from_label(label)
        except egress_policy.EgressError as exc:
            raise ImageProblem(str(exc)) from None
        mode = egress_policy.mode(policy)
        if mode == "allowlist":
            log.warning("egress allowlist on Kubernetes: the rollout pods reach only the proxy (allowlists need "
                        "the egress gateway, which the kubernetes backend does not run)", image=image, hosts=policy)
        chosen: Egress = "web" if mode == "open" else "none"
        with self._lock:
            self._cache[image] = chosen
        return chosen

    def _label(self, image: str) -> str | None:
        assert self.registry is not None
        config = registry_config(self.registry, image, self.scheme)
        return (config.get("Labels") or {}).get(egress_policy.LABEL_EGRESS)


def registry_config(registry: str, image: str, scheme: str = "https") -> dict[str, Any]:
    """The image's config (its config blob's `config`: Labels, User, WorkingDir, Env) from `registry`, as
    the nodes pull it (blocking). Raises ImageProblem, naming the fix, when it cannot be read."""
    host, _, prefix = registry.partition("/")
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        name, tag = image, "latest"
    repository = f"{prefix}/{name}" if prefix else name
    base = f"{scheme}://{host}/v2/{repository}"
    try:
        with httpx.Client(timeout=30) as http:
            manifest = _get(http, f"{base}/manifests/{tag}", repository, MANIFEST_TYPES)
            if "manifests" in manifest:  # an index: the linux/amd64 image
                entry = next((m for m in manifest["manifests"]
                              if (m.get("platform") or {}).get("architecture") == "amd64"), None)
                if entry is None:
                    raise ImageProblem(f"{host}/{repository}:{tag} has no linux/amd64 image")
                manifest = _get(http, f"{base}/manifests/{entry['digest']}", repository, MANIFEST_TYPES)
            config = _get(http, f"{base}/blobs/{manifest['config']['digest']}", repository, "*/*")
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        raise ImageProblem(f"cannot read {image!r}'s config from registry {registry} "
                           f"({type(exc).__name__}: {exc}): push it with `veri harness push --registry "
                           f"{registry} BUNDLE` (an http registry: --registry-insecure)") from None
    found: dict[str, Any] = config.get("config") or {}
    return found


def _get(http: httpx.Client, url: str, repository: str, accept: str) -> dict[str, Any]:
    response = http.get(url, headers={"Accept": accept}, follow_redirects=True)
    if response.status_code == 401:  # anonymous pull token (the distribution spec's bearer flow)
        token = _anonymous_token(http, response.headers.get("www-authenticate", ""), repository)
        response = http.get(url, headers={"Accept": accept, "Authorization": f"Bearer {token}"},
                            follow_redirects=True)
    response.raise_for_status()
    return json.loads(response.content)


def _anonymous_token(http: httpx.Client, challenge: str, repository: str) -> str:
    scheme, _, params = challenge.partition(" ")
    if scheme.lower() != "bearer":
        raise httpx.HTTPError(f"the registry wants {scheme or 'credentials'}: a pull secret is not supported here")
    fields = dict(part.split("=", 1) for part in params.split(",") if "=" in part)
    fields = {k.strip(): v.strip().strip('"') for k, v in fields.items()}
    answer = http.get(fields["realm"], params={"service": fields.get("service", ""),
                                                "scope": f"repository:{repository}:pull"})
    answer.raise_for_status()
    body = answer.json()
    return str(body.get("token") or body.get("access_token"))
