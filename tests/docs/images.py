"""The images the make targets build, read from the files that build them, for the docs checks that name them:
every `$PREFIX/<name>` of scripts/docker/ and `$(IMAGE_PREFIX)/<name>` of the Makefile and mk/, and the harness
images `veri harness build` tags (services/veri/tools/harness/build.py)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "scripts/docker").glob("*.sh"))
MAKEFILES = [REPO / "Makefile", *sorted((REPO / "mk").glob("*.mk"))]
SCRIPT_IMAGE = re.compile(r"\$\{?PREFIX\}?/([a-z][a-z0-9-]*)")
MAKE_IMAGE = re.compile(r"\$\(IMAGE_PREFIX\)/([a-z][a-z0-9-]*)")
HARNESS_IMAGE = 'f"{prefix}/harness-{name}"'  # tools/harness/build.py's tag: one image per bundle
BUILT_BY_IMAGES_SH = re.compile(r'build-image\.sh" "\$PREFIX/([a-z][a-z0-9-]*)"')


def built_images() -> set[str]:
    """Every image name (without the prefix) that a make target builds or tags; `harness-<name>` for bundles."""
    names = {name for path in SCRIPTS for name in SCRIPT_IMAGE.findall(path.read_text(encoding="utf-8"))}
    names |= {name for path in MAKEFILES for name in MAKE_IMAGE.findall(path.read_text(encoding="utf-8"))}
    if HARNESS_IMAGE in (REPO / "services/veri/tools/harness/build.py").read_text(encoding="utf-8"):
        names.add("harness-<name>")
    return names


def make_images() -> list[str]:
    """What `make images` builds, in order: the OS base (os-base.sh), then each build-image.sh of images.sh."""
    script = (REPO / "scripts/docker/images.sh").read_text(encoding="utf-8")
    os_base = ["os-base"] if "os-base.sh" in script else []
    return os_base + BUILT_BY_IMAGES_SH.findall(script)


def named(image: str, text: str) -> bool:
    """Whether `text` names `veri/<image>` itself (`veri/vllm` is not named by `veri/vllm-cpu`)."""
    return re.search(rf"veri/{re.escape(image)}(?![\w-])", text) is not None
