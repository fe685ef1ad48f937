"""Paths into the package that the code and the tests spell out (a mount of a module into an image, a pins
file a test reads): after a move, each one left behind fails only in the tier that uses it, often the
slowest. This finds them in the fast tier instead."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = [path for folder in ("services", "tests", "bench", "scripts", "testkit") if (REPO / folder).is_dir()
           for path in sorted((REPO / folder).rglob("*.py"))]
# "services/veri/x/y.py" in a string (an image's /src/services/veri/... too: the image copies the tree).
SLASHED = re.compile(r"services/veri/[\w./-]*\w")
# ROOT / "services" / "veri" / "x" / "y.py"
JOINED = re.compile(r'"services"\s*/\s*"veri"((?:\s*/\s*"[\w.-]+")+)')


def named_paths(text: str) -> list[str]:
    found = [match.group(0) for match in SLASHED.finditer(text)]
    found += ["services/veri/" + "/".join(re.findall(r'"([\w.-]+)"', match.group(1)))
              for match in JOINED.finditer(text)]
    return found


def test_every_package_path_the_code_names_exists():
    checked, missing = 0, {}
    for source in SOURCES:
        if source.resolve() == Path(__file__).resolve():
            continue
        paths = named_paths(source.read_text(encoding="utf-8"))
        checked += len(paths)
        if gone := sorted({path for path in paths if not (REPO / path).exists() and "__pycache__" not in path}):
            missing[str(source.relative_to(REPO))] = gone
    assert checked > 5, checked  # a pattern that matches nothing is broken
    assert not missing, f"the code names package paths that do not exist (moved by a relayout?): {missing}"


def test_a_path_left_behind_is_caught():
    text = ('WORKER = ROOT / "services" / "veri" / "policy" / "vllm" / "worker.py"\n'
            'MOUNT = "/src/services/veri/services/policy/vllm/worker.py"')
    assert named_paths(text) == ["services/veri/services/policy/vllm/worker.py",
                                 "services/veri/policy/vllm/worker.py"]
    assert not (REPO / "services/veri/policy/vllm/worker.py").exists()
