"""`veri harness push --registry R BUNDLE|IMAGE`: a bundle's image (built first when given the folder)
tagged `R/<image>` and pushed, for clusters whose nodes pull from R (the kubernetes launcher's
`--registry R` names the same reference: core/registry.py)."""

from __future__ import annotations

from typing import Any

from veri.core.registry import registry_image


class PushError(RuntimeError):
    """The push failed; the message says why and what to do."""


def push_image(client: Any, image: str, registry: str) -> str:
    """Tags `image` as `R/image` and pushes it; returns the pushed reference."""
    target = registry_image(image, registry)
    repository, _, tag = target.rpartition(":")
    if "/" in tag or not repository:  # a port, not a tag: the image had none
        repository, tag = target, "latest"
    client.images.get(image).tag(repository, tag=tag)
    for event in client.images.push(repository, tag=tag, stream=True, decode=True):
        if "error" in event:
            detail = (event.get("errorDetail") or {}).get("message") or event["error"]
            raise PushError(f"pushing {repository}:{tag} failed: {detail} (log in with `docker login "
                            f"{registry.split('/')[0]}`; an http registry must be in dockerd's insecure-registries)")
    return f"{repository}:{tag}"
