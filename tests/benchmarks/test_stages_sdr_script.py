"""benchmarks/stages_sdr.py without a GPU: every case is a valid one-stage pipeline, and the NumPy
counterparts compute what the stage computes (the GPU timings run on the GPU machine)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from .conftest import BENCHMARKS

_spec = importlib.util.spec_from_file_location("_gk_stages_sdr", BENCHMARKS / "stages_sdr.py")
sdr = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = sdr  # dataclasses look their module up
_spec.loader.exec_module(sdr)


@pytest.mark.parametrize("case", sdr.CASES, ids=[c.name for c in sdr.CASES])
def test_every_case_is_a_pipeline_that_runs_on_cpu(case):
    block = sdr.make_block(2, 4096, case.dtype)
    p = sdr.pipeline_of(case, 2, 4096)
    y = p.process(block, backend="cpu")
    assert y.shape[0] == 2 and y.shape[1] == p.specs().output.block_size


@pytest.mark.parametrize("name", ["fm_demod", "fm_demod 75us"])
def test_the_numpy_counterparts_compute_the_stage_after_its_first_sample(name):
    case = next(c for c in sdr.CASES if c.name == name)
    block = sdr.make_block(1, 4096, case.dtype)
    ours = sdr.pipeline_of(case, 1, 4096).process(block, backend="cpu")
    theirs = sdr.numpy_counterpart(case.counterparts[1])(block)
    if name == "fm_demod":
        np.testing.assert_allclose(ours[:, 1:], theirs, atol=2e-6)
    else:  # the counterpart's filter starts at the second sample; the stage's at the first (0)
        np.testing.assert_allclose(ours[:, 200:], theirs[:, 199:], atol=1e-5)
