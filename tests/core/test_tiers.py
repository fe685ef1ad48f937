"""A test's tiers follow from the needs it declares (tests/tiers.py), and a test whose code needs more than
it declares fails: tests/tier_guess.py, the check, finds a process a test starts through the helpers it
calls (make test-fast leaves those out): a @contextmanager helper, one imported inside the test, one
called through its module."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

import testkit.servers as servers
from testkit.servers import start_server
from tests import tier_guess, tiers

pytestmark = pytest.mark.needs("app")


def _reaches_a_process(function) -> bool:  # type: ignore[no-untyped-def]
    code = inspect.getsource(function)
    return bool(tier_guess.PROCESS.search("\n".join([code, *tier_guess._helpers(code, function.__globals__, set())])))


def starts_a_server() -> None:
    with start_server(["serve", "webfixture"]):
        pass


def imports_then_starts() -> None:
    from testkit.servers import start_server

    with start_server(["serve", "webfixture"]):
        pass


def through_its_module() -> None:
    with servers.start_server(["serve", "webfixture"]):
        pass


def through_a_helper_of_its_own() -> None:
    starts_a_server()


def in_process() -> None:
    from veri.services.webfixture.server import create_app

    with httpx.Client(transport=httpx.ASGITransport(create_app()), base_url="http://fixture") as client:
        client.get("/pages/1.html")


def test_a_server_started_by_any_way_of_calling_start_server_is_a_process():
    for function in (starts_a_server, imports_then_starts, through_its_module, through_a_helper_of_its_own):
        assert _reaches_a_process(function), function.__name__


def test_an_app_in_process_is_not():
    assert not _reaches_a_process(in_process)
    assert tier_guess.SERVICE.search(inspect.getsource(in_process))


def test_a_check_of_the_vendored_vllm_wheels_waits_for_them():
    """make test vendors the vLLM CPU wheels while the first pass runs: their check is in the second."""
    from tests.appliance.test_gpu_pins import test_each_record_is_its_vendored_wheels_metadata as check

    assert tier_guess.ITEM_VLLM.search(inspect.getsource(check))
    assert not tier_guess.ITEM_VLLM.search(inspect.getsource(test_an_app_in_process_is_not))


# A test as tiers.py sees one: its file, its function, its markers, its fixtures (none here).
def _item(function, *markers):  # type: ignore[no-untyped-def]
    marks = [*getattr(function, "pytestmark", []), *(marker.mark for marker in markers)]
    item = SimpleNamespace(path=Path(__file__), function=function, module=sys.modules[__name__],
                           nodeid=f"tests/core/test_tiers.py::{function.__name__}", _fixtureinfo=None,
                           iter_markers=lambda name=None: [m for m in marks if name in (None, m.name)],
                           stash=pytest.Stash())
    return item


def starts_a_subprocess() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def uses_docker(docker_client) -> None:  # type: ignore[no-untyped-def]
    docker_client.containers.list()


def test_a_test_that_starts_a_subprocess_without_declaring_it_fails_naming_the_need():
    item = _item(starts_a_subprocess)
    assert tiers.tiers_of(item) == {"unit"}  # what it declares: nothing
    with pytest.raises(pytest.fail.Exception, match=r'needs "process".*pytest.mark.needs\("process"\)'):
        tiers.check(item)


def test_a_test_that_uses_docker_without_declaring_it_fails():
    item = _item(uses_docker)
    assert tiers.tiers_of(item) == {"unit"}
    with pytest.raises(pytest.fail.Exception, match='needs "docker"'):
        tiers.check(item)


def test_a_declared_need_is_the_tier_and_passes_the_check():
    item = _item(starts_a_subprocess, pytest.mark.needs("process"))
    assert tiers.tiers_of(item) == {"process"}
    tiers.check(item)
    item = _item(uses_docker, pytest.mark.needs("docker"))
    assert tiers.tiers_of(item) == {"sandbox"}
    tiers.check(item)


def test_a_heavier_need_covers_a_process():
    item = _item(starts_a_subprocess, pytest.mark.needs("stack"))
    assert tiers.tiers_of(item) == {"stack"}
    tiers.check(item)


@pytest.mark.parametrize(("needs", "expected"), [
    ((), {"unit"}), (("app",), {"service"}), (("app", "process"), {"process"}), (("process", "docker"), {"sandbox"}),
    (("vllm",), {"vllm", "sandbox"}), (("stack", "vllm"), {"stack", "vllm"}), (("browser",), {"browser"}),
    (("kubernetes", "docker"), {"kubernetes", "sandbox"}),
])
def test_needs_map_to_tiers(needs, expected):
    assert tiers.tiers_for(set(needs), set()) == expected


def test_a_folder_declares_its_tier():
    assert tiers.tiers_for(set(), {"stack"}) == {"stack"}


def test_an_unknown_need_is_refused_with_the_known_ones():
    with pytest.raises(pytest.UsageError, match="unknown need.*'docker'"):
        tiers.fixture_needs("dockerd")
