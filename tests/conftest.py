"""Shared pytest setup: tests marked ``gpu`` run only where CUDA is usable.

They are skipped, with the reason, only when ``cuda_usable()`` says no. On the GPU machine set
``GK_REQUIRE_GPU=1`` so that an unusable CUDA stops the run instead of skipping them.

Tests marked ``multi_gpu`` (always also ``gpu``) need two or more usable GPUs: a one-GPU machine
legitimately cannot run them, so there they are skipped with the count and the reason. On a
machine lent with several GPUs set ``GK_REQUIRE_MULTI_GPU=1``: fewer than two usable GPUs then
stops the run instead (as GK_REQUIRE_GPU does for one).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

# The tests' caches (kernels compiled at run time, the calibrations of the fake drivers some tests
# load) go to a folder of their own that is removed afterwards, never into the user's ~/.cache.
# A GK_CACHE_DIR given by the caller (the GPU machine's run) is kept.
if "GK_CACHE_DIR" not in os.environ:
    os.environ["GK_CACHE_DIR"] = tempfile.mkdtemp(prefix="gk-test-cache-")
    atexit.register(shutil.rmtree, os.environ["GK_CACHE_DIR"], True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    multi_items = [item for item in items if item.get_closest_marker("multi_gpu")]
    for item in multi_items:  # a multi-GPU test is a GPU test: `pytest -m gpu` runs it too
        if not item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.gpu)
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from pygpukit_dsp.capabilities import capabilities, usable_from, usable_gpus

    caps = capabilities()
    usable, why = usable_from(caps)
    if not usable:
        if os.environ.get("GK_REQUIRE_GPU") == "1" or (multi_items and os.environ.get("GK_REQUIRE_MULTI_GPU") == "1"):
            raise pytest.UsageError(f"GK_REQUIRE_GPU=1 / GK_REQUIRE_MULTI_GPU=1 but CUDA is not usable: {why}")
        skip = pytest.mark.skip(reason=f"CUDA not usable here: {why}")
        for item in gpu_items:
            item.add_marker(skip)
        config._gk_gpu_skipped = (len(gpu_items), why)  # type: ignore[attr-defined]
        return
    if not multi_items:
        return
    gpus = usable_gpus(caps)
    if len(gpus) >= 2:
        return
    why = (f"this machine has {len(gpus)} usable GPU ({', '.join(f'GPU {g}' for g in gpus)}) of "
           f"{len(caps.get('gpus', []))}; the test needs two or more")
    if os.environ.get("GK_REQUIRE_MULTI_GPU") == "1":
        raise pytest.UsageError(f"GK_REQUIRE_MULTI_GPU=1 but {why}")
    skip = pytest.mark.skip(reason=f"multi-GPU test: {why}")
    for item in multi_items:
        item.add_marker(skip)
    config._gk_multi_gpu_skipped = (len(multi_items), why)  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    skipped = getattr(config, "_gk_gpu_skipped", None)
    if skipped:
        n, why = skipped
        terminalreporter.write_line(f"{n} tests marked gpu skipped: CUDA not usable here: {why}")
    skipped = getattr(config, "_gk_multi_gpu_skipped", None)
    if skipped:
        n, why = skipped
        terminalreporter.write_line(f"{n} tests marked multi_gpu skipped: {why} "
                                    "(GK_REQUIRE_MULTI_GPU=1 makes this an error)")


class GkProcess:
    """gk-stream in a fresh interpreter, the way a user runs it (tests of signals and faults)."""

    def __init__(self, cwd):
        import pygpukit_dsp

        self.cwd = str(cwd)
        self.env = dict(os.environ)
        parent = str(__import__("pathlib").Path(pygpukit_dsp.__file__).resolve().parents[1])
        self.env["PYTHONPATH"] = os.pathsep.join([parent, *filter(None, [self.env.get("PYTHONPATH")])])

    def start(self, *args):
        import subprocess
        import sys

        return subprocess.Popen([sys.executable, "-m", "pygpukit_dsp.cli", *map(str, args)], cwd=self.cwd,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, *args, timeout=120):
        proc = self.start(*args)
        out, err = proc.communicate(timeout=timeout)
        proc.stdout_text, proc.stderr_text = out, err
        return proc


@pytest.fixture
def gk_process(tmp_path):
    """A GkProcess working in tmp_path."""
    return GkProcess(tmp_path)


SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's python3: GNU Radio's Python bindings live there, not in the venv


@pytest.fixture(scope="session")
def gnuradio_python() -> str:
    """The system python3 that imports GNU Radio (gnuradio.zeromq, pmt). Without it the GNU Radio
    tests skip, unless GK_REQUIRE_GNURADIO=1 (set by .ci/run, which installs Debian's gnuradio):
    then they fail."""
    import subprocess

    reason = None
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        reason = f"{SYSTEM_PYTHON} is missing"
    else:
        r = subprocess.run([SYSTEM_PYTHON, "-c", "import gnuradio.zeromq, pmt; from gnuradio import gr; "
                            "print(gr.version())"], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            reason = f"{SYSTEM_PYTHON} cannot import GNU Radio: {r.stderr.strip().splitlines()[-1:]}"
    if reason is None:
        return SYSTEM_PYTHON
    if os.environ.get("GK_REQUIRE_GNURADIO", "") == "1":
        pytest.fail(f"GK_REQUIRE_GNURADIO=1 but {reason} (apt-get install gnuradio)")
    pytest.skip(f"{reason}; the GNU Radio tests need Debian's gnuradio (apt-get install gnuradio)")
