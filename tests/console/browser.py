"""Headless Debian chromium driven by Selenium for the console's browser tests: a fresh profile each
time, downloads into a folder the test reads, screenshots under build/test-artifacts/console/."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "build" / "test-artifacts" / "console"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000",
         "--disable-dev-shm-usage"]


def missing_browser() -> str:
    """'' when chromium and chromedriver are installed, else what to run."""
    if shutil.which("chromium") and shutil.which("chromedriver"):
        return ""
    return "chromium / chromedriver missing: make chromium (apt-get install -y chromium chromium-driver)"


@contextlib.contextmanager
def chromium(downloads: Path) -> Iterator[webdriver.Chrome]:
    with tempfile.TemporaryDirectory(prefix="veri-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium") or "chromium"
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                                  "download.prompt_for_download": False})
        driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver") or "chromedriver"))
        try:
            driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
            driver.set_page_load_timeout(30)
            yield driver
        finally:
            driver.quit()


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except StaleElementReferenceException:  # the page swapped the element out between find and read
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
