"""mypy.stubtest: _pygpukit_dsp_core.pyi (this tree's) against the installed compiled module.

What it tolerates is listed, each with its reason, in rust/pygpukit-python/stubtest-allowlist.txt.
The records' fields are checked by test_records.py (stubtest cannot see inside a dict).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE_SOURCE = REPO / "rust" / "pygpukit-python" / "python"
ALLOWLIST = REPO / "rust" / "pygpukit-python" / "stubtest-allowlist.txt"


def test_stub_matches_the_compiled_module(tmp_path):
    pytest.importorskip("mypy.stubtest", reason="mypy is not installed (it is in the `test` extra)")
    # MYPYPATH makes mypy read the stub of this tree; the run-time module is the installed one.
    env = {**os.environ, "MYPYPATH": str(PACKAGE_SOURCE)}
    cmd = [sys.executable, "-m", "mypy.stubtest", "pygpukit_dsp_core", "--allowlist", str(ALLOWLIST)]
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
