"""bench/ imports nothing from tests/: the helpers both use live in testkit/, which imports nothing from
tests/ either (a benchmark runs without the suite's fixtures, conftests or tier markers)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def imports_of_tests(path: Path, root: Path = REPO) -> list[str]:
    """Every `import tests...` / `from tests... import` in the file, at any depth (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        found += [f"{path.relative_to(root)}:{node.lineno}: {name}" for name in names
                  if name == "tests" or name.startswith("tests.")]
    return found


def test_bench_and_testkit_import_nothing_from_tests():
    files = [*(REPO / "bench").rglob("*.py"), *(REPO / "testkit").rglob("*.py")]
    assert len(files) > 20, files
    found = [line for path in files for line in imports_of_tests(path)]
    assert not found, "move what these need from tests/ to testkit/:\n" + "\n".join(found)


def test_an_import_inside_a_function_counts(tmp_path: Path):
    source = tmp_path / "probe.py"
    source.write_text("import json\n\n\ndef f():\n    from tests.servers import start_server\n")
    assert imports_of_tests(source, root=tmp_path) == ["probe.py:5: tests.servers"]
