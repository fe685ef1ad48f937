"""Harness images in a registry: `veri harness push --registry R` pushes `veri/harness-x:h` as
`R/veri/harness-x:h`, and the kubernetes launcher (`--registry R`) names that same reference in each
rollout pod. One function, so the two can never disagree."""

from __future__ import annotations

import re

# host[:port][/path]: no scheme (docker names have none), no tag or digest (the image brings its own).
REGISTRY = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._-]+)*")


class RegistryError(ValueError):
    """A registry the images cannot be named under; the message names the fix."""


def check_registry(registry: str) -> str:
    value = registry.strip().rstrip("/")
    if "://" in value:
        raise RegistryError(f"registry {registry!r}: drop the scheme, e.g. registry.example:5000 "
                            "(docker talks https, or http to one in the daemon's insecure-registries)")
    if not REGISTRY.fullmatch(value):
        raise RegistryError(f"registry {registry!r} is not host[:port][/path] in lowercase, "
                            "e.g. registry.example:5000 or registry.example/team")
    return value


def registry_image(image: str, registry: str | None) -> str:
    """The image as nodes pull it from `registry` (None: the image as it is)."""
    return f"{check_registry(registry)}/{image}" if registry else image
