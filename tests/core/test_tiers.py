"""tests/tier_guess.py (the check on what a test declares it needs) finds a process a test starts through the helpers it calls (make test-fast leaves those
out): a @contextmanager helper, one imported inside the test, one called through its module."""

from __future__ import annotations

import inspect

import httpx
import pytest

import tests.servers as servers
from tests import tier_guess, tiers
from tests.servers import start_server

pytestmark = pytest.mark.needs("app")


def _reaches_a_process(function) -> bool:  # type: ignore[no-untyped-def]
    code = inspect.getsource(function)
    return bool(tier_guess.PROCESS.search("\n".join([code, *tier_guess._helpers(code, function.__globals__, set())])))


def starts_a_server() -> None:
    with start_server(["serve", "webfixture"]):
        pass


def imports_then_starts() -> None:
    from tests.servers import start_server

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
