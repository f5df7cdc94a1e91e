"""correlate on CUDA: fir's native op with the taps conj(r[::-1]), against the CPU stage.

Relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (float32 direct sums or cuFFT overlap-save against
NumPy/pocketfft), and against scipy.signal.correlate itself within 2e-5.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.correlate import lower_correlate
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.correlate import Correlate

from .compare import both, rel_err, signal

TOL = 1e-5


def reference(L: int, complex_: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = rng.standard_normal(L)
    return r + 1j * rng.standard_normal(L) if complex_ else r


def test_lowering_is_fir_with_the_reversed_conjugate():
    r = reference(9, True, 0)
    st = Correlate(reference=r)
    s = SignalSpec(1000, 2, 64, dtype="complex64")
    desc = lower_correlate(st, s, st.output_spec(s))
    assert desc.kind == "fir" and desc.params["method"] == "direct"
    np.testing.assert_array_equal(desc.params["taps"], np.conj(r[::-1]))
    long = Correlate(reference=reference(5000, False, 1))  # beyond the direct kernel
    desc = lower_correlate(long, SignalSpec(1000, 2, 8192), long.output_spec(SignalSpec(1000, 2, 8192)))
    assert desc.params["method"] == "overlap_save" and desc.params["step"] == desc.params["nfft"] - 4999


@pytest.mark.gpu
@pytest.mark.parametrize("x_complex,r_complex", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("L,block", [(13, 97), (500, 1000), (5000, 8192)])
def test_matches_cpu_and_scipy(x_complex: bool, r_complex: bool, L: int, block: int):
    r = reference(L, r_complex, L)
    x = signal(2, block * 3 + 123, x_complex, seed=L)  # a short final block
    gpu, cpu = both(Correlate(reference=r), x, block)
    assert rel_err(gpu, cpu) < TOL
    ref = np.array([ss.correlate(xc.astype(np.complex128), r, mode="full")[:xc.size] for xc in x])
    assert rel_err(gpu, ref if (x_complex or r_complex) else ref.real) < 2e-5


@pytest.mark.gpu
def test_overlap_save_forced_on_a_short_reference():
    r = reference(31, True, 3)
    x = signal(3, 5000, True, seed=4)
    gpu, cpu = both(Correlate(reference=r, method="overlap_save"), x, 512)
    assert rel_err(gpu, cpu) < TOL
