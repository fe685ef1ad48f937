"""The tiers a test's code looks like it needs, guessed from its source: kept as a check on what the test
declares (tests/tiers.py), never as its tier. A test whose file, own code, fixtures or the test helpers
they call (tests/, bench/) start a process, use docker, a browser, vLLM... without declaring it fails
with the need to declare.

What the guess reads: the file's text (MODULE_*), or the test's own code, its fixtures' code and names
(ITEM_*). A file that runs its CLI in a helper (tests/proxy/test_codex.py) goes whole; one that mixes
(tests/demo/test_bundles.py: the Claude bundle needs the CLI, the OpenAI one does not) per test.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

MODULE_SANDBOX = re.compile(r"^from (tests|testkit)\.(claude_code|codex) import|docker\.from_env", re.MULTILINE)
ITEM_SANDBOX = re.compile(r"docker_client|run_sandboxed|\[\"docker\"|claude_binary|codex_binary")
# A run of a bundle whose image ships the CLI (tests/demo/conftest.py runs it with the host's binary).
OWN_SANDBOX = re.compile(r"(run_bundle\(|bundle=BUNDLES / )\"url_extract_(claude|codex)\""
                         r"|image_bin\(\"veri/base-(claude|codex)-agent\"")
MODULE_BROWSER = re.compile(r"^from tests\.console\.browser import", re.MULTILINE)
ITEM_BROWSER = re.compile(r"chromium\(")
MODULE_VLLM = re.compile(r"^(IMAGE|CONFIG) = .*vllm", re.MULTILINE)  # the veri/vllm* images, a vLLM job
ITEM_VLLM = re.compile(r"wheel_pattern\(")  # the vendored vLLM wheels, which make images-vllm-cpu fetches
SERVICE = re.compile(r"TestClient|ASGITransport|uvicorn\.Server\(")
# A process of its own, in the test's code, its fixtures' or the test helpers they call (testkit/servers.py's
# start_server among them): by the call that starts it.
PROCESS = re.compile(r"subprocess\.(run|Popen|check_call|check_output)\(|\bPopen\(|create_subprocess_exec\(")


@functools.cache
def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@functools.cache
def _source(function) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


def _own_code(item: pytest.Item) -> str:
    function = getattr(item, "function", None)
    source = _source(function) if function is not None else ""
    return source[source.find("def "):]  # not its decorators: a parameter naming a bundle runs nothing


def _fixture_code(item: pytest.Item) -> str:
    """The source of the fixtures the test uses (from any conftest): `policy_server` starts a server."""
    info = getattr(item, "_fixtureinfo", None)
    parts = []
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        parts += [_source(fixture.func) for fixture in defs]
    return "\n".join(parts)


def _helpers(code: str, namespace: dict, seen: set[str]) -> list[str]:
    """The source of the functions and classes of tests/, testkit/ and bench/ that `code` calls (imported where the
    module or the code itself imports them), and of those they call."""
    namespace = {**namespace, **_local_imports(code)}
    found = []
    for name in set(re.findall(r"\b([A-Za-z_][\w.]*)\(", code)) - seen:  # f(...) and module.f(...)
        seen.add(name)
        head, *attributes = name.split(".")
        target = namespace.get(head)
        for attribute in attributes:
            target = getattr(target, attribute, None)
        target = inspect.unwrap(target) if callable(target) else target  # a @contextmanager's own function
        if not (inspect.isfunction(target) or inspect.isclass(target)) or not _ours(target):
            continue
        source = _source(target)
        found += [source, *_helpers(source, getattr(target, "__globals__", vars(inspect.getmodule(target))), seen)]
    return found


def _local_imports(code: str) -> dict:
    """`from tests.x import a, b` (or testkit., bench.) inside a function: a and b."""
    names = {}
    imports = re.findall(r"^\s*from ((?:tests|testkit|bench)[\w.]*) import ([\w, ]+)$", code, re.MULTILINE)
    for module, imported in imports:
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            continue
        names |= {name.strip(): getattr(loaded, name.strip(), None) for name in imported.split(",")}
    return names


def _ours(target) -> bool:  # type: ignore[no-untyped-def]
    """Test code: tests/, testkit/ and bench/ (the reliability scenarios some tests run), not the product."""
    try:
        path = Path(inspect.getsourcefile(target) or "").resolve()
    except TypeError:
        return False
    return any(path.is_relative_to(TESTS.parent / folder) for folder in ("tests", "testkit", "bench"))


def _reached_code(item: pytest.Item) -> str:
    """The test's own code and its fixtures', with the test helpers both call (tests/, testkit/, bench/)."""
    info = getattr(item, "_fixtureinfo", None)
    functions = [getattr(item, "function", None)]
    functions += [fixture.func for defs in (info.name2fixturedefs.values() if info else ()) for fixture in defs]
    parts, seen = [], set()
    for function in functions:
        if function is None:
            continue
        code = _source(function)
        namespace = getattr(function, "__globals__", None) or vars(getattr(item, "module", None) or object)
        parts += [code, *_helpers(code, namespace, seen)]
    return "\n".join(parts)


def guessed_tiers(item: pytest.Item, folder_tiers: set[str]) -> set[str]:
    """The tiers the test's source looks like it needs (unit when none), given the tiers its folder declares
    (tests/tiers.py's FOLDERS): what its declarations must cover."""
    path = Path(item.path)
    module, own, fixtures = _text(path), _own_code(item), _fixture_code(item)
    found = set(folder_tiers)
    if MODULE_VLLM.search(module) or ITEM_VLLM.search(own):
        found.add("vllm")
    if MODULE_BROWSER.search(module) or ITEM_BROWSER.search(own):
        found.add("browser")
    if (MODULE_SANDBOX.search(module) or ITEM_SANDBOX.search(own + fixtures) or OWN_SANDBOX.search(own)
            or ("vllm" in found and "stack" not in found)):
        found.add("sandbox")
    if not found and PROCESS.search(_reached_code(item)):
        found.add("process")
    elif not found and (SERVICE.search(module) or SERVICE.search(fixtures)):
        found.add("service")
    return found or {"unit"}
