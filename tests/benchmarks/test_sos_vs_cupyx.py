"""benchmarks/sos_vs_cupyx.py: its filter and shapes are the ones the scan form is for, and its
half that times our op runs end to end on the fake CUDA driver (whose kernels do nothing, so the
figures and the error mean nothing here); the cupyx half needs CuPy and a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OURS_SCRIPT = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import sos_vs_cupyx as b
x = np.ones((2, 8192), np.float32)
res, form = b.ours(x, blocks=20, warmup=2)
print(json.dumps({"form": form, "keys": sorted(res)}))
"""


def test_the_filter_and_shapes_take_the_scan():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sos_vs_cupyx as b
    from pygpukit_dsp.backends.cuda_ops.sos_scan import takes_scan

    assert b.SOS.shape == (8, 6)
    assert b.SHAPES == [(16, 65536), (1, 1 << 20)]
    assert all(takes_scan(8, ch, n) for ch, n in b.SHAPES)


def test_our_half_runs_on_the_fake_driver(fake_engine_driver: str):
    import pygpukit_dsp

    env = dict(os.environ, GK_LIBCUDA=fake_engine_driver, GK_JIT_DISK_CACHE="0",
               PYTHONPATH=os.pathsep.join([str(Path(pygpukit_dsp.__file__).resolve().parents[1]),
                                           os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", OURS_SCRIPT, str(ROOT / "benchmarks")], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT.anchor)  # not the checkout: the package installed
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"form": "scan", "keys": ["max_err_over_rms", "p50_us", "p99_us"]}
