"""Fixtures of the web view's tests: ``gk-stream run --view`` as a bounded subprocess, and headless
Chromium (Debian's ``chromium`` and ``chromium-driver``) driven by Selenium.

Without aiohttp, Selenium or Chromium the tests that need them are skipped with the reason, except
where ``CI=true`` or ``GK_REQUIRE_BROWSER=1``: there a missing one fails them (.ci/run installs all).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import pygpukit_dsp

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_PARENT = Path(pygpukit_dsp.__file__).resolve().parents[1]
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = ("/usr/bin/chromedriver",)
URL = re.compile(r"view: (http://\S+)")


def required() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("GK_REQUIRE_BROWSER") == "1"


def need(what: str, why: str) -> None:
    """Skip for a missing tool (fail where the tools are required)."""
    if required():
        pytest.fail(f"{what} is required here (CI=true or GK_REQUIRE_BROWSER=1) but {why}")
    pytest.skip(f"{what}: {why}")


@pytest.fixture
def aiohttp_installed():
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        need("aiohttp", "it is not installed (pip install 'pygpukit-dsp[view]')")


def gk_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("GK_DEBUG", None)
    return env


class ViewRun:
    """A ``gk-stream run ... --view`` subprocess: its stderr read on a thread, its URL once printed."""

    def __init__(self, args: list[str], cwd: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "pygpukit_dsp.cli", "run", *map(str, args)], cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=gk_env())
        self.stderr_lines: list[str] = []
        self._url = threading.Event()
        self.url: str | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stdout = ""

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)
            m = URL.search(line)
            if m and self.url is None:
                self.url = m.group(1)
                self._url.set()
        self._url.set()

    def wait_url(self, timeout: float = 60.0) -> str:
        self._url.wait(timeout)
        if self.url is None:
            self.stop()
            raise AssertionError(f"gk-stream printed no view address; stderr:\n{''.join(self.stderr_lines)}")
        return self.url

    def stop(self, timeout: float = 30.0) -> int:
        """SIGINT (the run drains and prints its summary), then kill if it does not end in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=10)
        self.stdout += out or ""
        self._reader.join(5)
        return self.proc.returncode

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)


@pytest.fixture
def view_run(aiohttp_installed, tmp_path):
    """Start ``gk-stream run ARGS`` in ``tmp_path``; every run is stopped at the end of the test."""
    runs: list[ViewRun] = []

    def start(*args) -> ViewRun:
        r = ViewRun(list(args), tmp_path)
        runs.append(r)
        return r

    yield start
    for r in runs:
        r.stop()


def _first(paths: tuple[str, ...], name: str) -> str | None:
    return next((p for p in paths if os.path.exists(p)), None) or shutil.which(name)


@pytest.fixture
def browser(aiohttp_installed):
    """Headless Chromium through Selenium and Debian's chromedriver (no browser download)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        need("selenium", "it is not installed (the test extra)")
    binary, driver_path = _first(CHROMIUM, "chromium"), _first(CHROMEDRIVER, "chromedriver")
    if binary is None or driver_path is None:
        need("chromium", "Debian's chromium and chromium-driver are not installed "
                         "(apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1600", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    _STARTED.append(str(driver.capabilities.get("browserVersion")))
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(fn, timeout: float = 30.0, every: float = 0.1):
    """Poll ``fn()`` until it returns something true; that value (AssertionError at the timeout)."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        with contextlib.suppress(Exception):
            last = fn()
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"not reached within {timeout} s (last: {last!r})")


@pytest.fixture
def screenshots() -> Path | None:
    """Where the browser tests save the screenshots docs/view.md shows (GK_VIEW_SCREENSHOTS=docs/img)."""
    folder = os.environ.get("GK_VIEW_SCREENSHOTS")
    if not folder:
        return None
    path = Path(folder) if Path(folder).is_absolute() else ROOT / folder
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def poll():
    """wait_for, for the test modules (conftest is not importable under --import-mode=importlib)."""
    return wait_for


_STARTED: list[str] = []  # the browser version of each Chromium the tests started


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The log says that Chromium started (and which), as CI's record of the browser tests."""
    if _STARTED:
        terminalreporter.write_line(f"view browser tests: headless Chromium {_STARTED[0]} started "
                                    f"{len(_STARTED)} time(s)")
