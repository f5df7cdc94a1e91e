"""shift, ddc, fir decimate, fm_demod and hilbert on CUDA (native/ops/shift.cpp, ddc.cpp, fm.cpp;
hilbert on fir.cpp) against the CPU stages, and their lowerings.

* no GPU: the lowerings' parameters (the 64-bit phase step, the modulated taps of ddc, fir
  decimate on the ddc op, hilbert on the fir op with complex taps);
* the fake CUDA driver (tests/native/fake_libcuda.c, no kernel runs): every op builds, runs
  blocks with and without graphs, a final partial block, and every split of its units;
* ``gpu``: whole signals streamed through Pipeline.process on both backends (state carried over
  several blocks, the last one partial) compared with relative error ||cuda - cpu|| / ||cpu||
  under the tolerances below (float32 sums in another order, sincospif against float64 exp,
  atan2f against float64 angle, a float32 chunked scan against float64 lfilter).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from pygpukit_dsp.errors import UnsupportedError
import scipy.signal as ss

import pygpukit_dsp.backends.cuda_ops  # noqa: F401  (registers the lowerings)
from pygpukit_dsp.backends.cuda_ops.fir import lower_fir
from pygpukit_dsp.backends.cuda_ops.fm import lower_fm_demod
from pygpukit_dsp.backends.cuda_ops.hilbert import lower_hilbert
from pygpukit_dsp.backends.cuda_ops.shift import lower_ddc, lower_shift, modulated_taps, phase_step
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.fir import Fir
from pygpukit_dsp.stages.fm import FmDemod
from pygpukit_dsp.stages.hilbert import Hilbert, analytic_taps, hilbert_taps
from pygpukit_dsp.stages.shift import Ddc, Shift

from .compare import both, rel_err, signal
from .test_cuda_engine import last_json, run_python
from .test_cuda_engine import fake_driver  # noqa: F401  (fixture)

FS = 48000.0
SHIFT_TOL = 1e-5
FIR_TOL = 1e-5
DDC_TOL = 2e-5
FM_TOL = 1e-5
DEEMPH_TOL = 3e-5


def spec(channels=3, block=1000, dtype="complex64", rate=FS) -> SignalSpec:
    return SignalSpec(sample_rate=rate, channels=channels, block_size=block, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# lowering (no GPU)

def test_phase_step_is_the_rounded_64_bit_fraction():
    for inc in (0.1, -0.1, 0.25, 1234.567 / FS, 1e-9, 0.75):
        step = phase_step(inc)
        assert -(1 << 63) <= step < 1 << 63
        err = (Fraction(step % (1 << 64), 1 << 64) - Fraction(inc)) % 1
        assert min(err, 1 - err) <= Fraction(1, 1 << 65)
    assert phase_step(0.0) == 0 and phase_step(-0.25) == -(1 << 62)


def test_shift_lowers_to_its_op_with_the_step():
    st = Shift(freq_hz=1200.0)
    s = spec(dtype="float32")
    desc = lower_shift(st, s, st.output_spec(s))
    assert desc.kind == "shift" and desc.params == {"step": phase_step(1200.0 / FS)}
    assert desc.spec_out.dtype == "complex64"


def test_ddc_lowers_to_modulated_taps_and_the_negative_step():
    taps = ss.firwin(63, 0.1)
    st = Ddc(freq_hz=5000.0, taps=taps, decimate=4)
    s = spec()
    desc = lower_ddc(st, s, st.output_spec(s))
    assert desc.kind == "ddc" and desc.params["decimate"] == 4
    assert desc.params["step"] == phase_step(-5000.0 / FS)
    g = desc.params["taps"]
    np.testing.assert_allclose(g, taps * np.exp(2j * np.pi * 5000.0 / FS * np.arange(63)), atol=1e-15)
    # r(m) * sum_l g[l] x[m - l] is the filter of the shifted input
    x = signal(1, 400, True, 5)[0].astype(np.complex128)
    n = np.arange(400)
    r = np.exp(-2j * np.pi * 5000.0 / FS * n)
    direct = ss.lfilter(taps, 1, x * r)
    np.testing.assert_allclose(r * ss.lfilter(g, 1, x), direct, atol=1e-12)
    assert np.iscomplexobj(modulated_taps(np.ones((2, 3)), 0.0))


def test_fir_decimate_lowers_to_the_ddc_op_without_rotation():
    st = Fir(taps=np.ones(8), decimate=4)
    s = spec(dtype="float32")
    desc = lower_fir(st, s, st.output_spec(s))
    assert desc.kind == "ddc" and desc.params["step"] == 0 and desc.params["decimate"] == 4
    assert desc.spec_out.block_size == 250 and desc.spec_out.dtype == "float32"
    assert lower_fir(Fir(taps=np.ones(8)), s, s).kind == "fir"  # decimate 1: the fir op as before


def test_hilbert_lowers_to_its_op_with_the_odd_taps():
    st = Hilbert(numtaps=127)
    s = spec(dtype="float32")
    desc = lower_hilbert(st, s, st.output_spec(s))
    assert desc.kind == "hilbert" and desc.spec_out.dtype == "complex64" and desc.params["numtaps"] == 127
    h = hilbert_taps(127)
    np.testing.assert_array_equal(desc.params["odd_taps"], h[64::2])  # h[d + 1], h[d + 3], ... (d = 63)
    assert desc.params["odd_taps"].size == 32
    # the symmetric form: x[n - d] + j * sum_j odd[j] * (x[n - d - m] - x[n - d + m]), m = 2j + 1
    x = signal(1, 600, False, 9)[0].astype(np.float64)
    xp = np.concatenate([np.zeros(126), x])
    n = np.arange(126, 726)
    imag = sum(o * (xp[n - 63 - (2 * j + 1)] - xp[n - 63 + (2 * j + 1)]) for j, o in enumerate(desc.params["odd_taps"]))
    np.testing.assert_allclose(imag, ss.lfilter(h, 1, x), atol=1e-12)


def test_a_hilbert_beyond_its_window_is_refused_on_cuda():
    st = Hilbert(numtaps=12035)  # (256 + 12034) floats: more than 48 KiB
    s = spec(channels=1, block=4096, dtype="float32")
    with pytest.raises(UnsupportedError) as e:
        lower_hilbert(st, s, st.output_spec(s))
    assert e.value.backend == "cuda" and "12033" in e.value.reason
    assert lower_hilbert(Hilbert(numtaps=12033), s, s.with_(dtype="complex64")).kind == "hilbert"


def test_fm_demod_passes_the_pole_only_with_deemphasis():
    s = spec()
    st = FmDemod(gain=2.0)
    assert lower_fm_demod(st, s, st.output_spec(s)).params == {"gain": 2.0}
    st = FmDemod(deemphasis_us=75)
    p = lower_fm_demod(st, s, st.output_spec(s)).params
    assert p["gain"] == 1.0 and p["pole"] == pytest.approx(np.exp(-1 / (FS * 75e-6)))


# ---------------------------------------------------------------------------------------------
# the fake driver: every op builds and queues its work

FAKE_SDR_SCRIPT = r"""
import json
import numpy as np
from pygpukit_dsp import _native

dev = _native.Device(0)

def op(kind, ch, items, params, dtype="float32", out=None):
    oc, oi, od = out
    return {"kind": kind, "name": kind, "in": (ch, items, 0, dtype), "out": (oc, oi, 0, od), "params": params}

g = np.exp(0.1j * np.arange(63))
cases = {
    "shift_f32": op("shift", 3, 1000, {"step": -123456789}, out=(3, 1000, "complex64")),
    "shift_c64": op("shift", 3, 1000, {"step": 1 << 62}, "complex64", out=(3, 1000, "complex64")),
    "ddc_cc": op("ddc", 3, 1000, {"taps": g, "decimate": 4, "step": 99}, "complex64", out=(3, 250, "complex64")),
    "ddc_rc": op("ddc", 2, 960, {"taps": g, "decimate": 8, "step": -5}, out=(2, 120, "complex64")),
    "fir_dec_rr": op("ddc", 64, 4096, {"taps": np.ones(127), "decimate": 2, "step": 0}, out=(64, 2048, "float32")),
    "fir_dec_cr": op("ddc", 2, 1000, {"taps": np.ones((2, 5)), "decimate": 5, "step": 0}, "complex64",
                     out=(2, 200, "complex64")),
    "fir_dec_one_tap": op("ddc", 1, 64, {"taps": np.ones(1), "decimate": 2, "step": 0}, out=(1, 32, "float32")),
    "fir_dec_plain": op("ddc", 2, 1280, {"taps": np.ones(4161) + 0j, "decimate": 64, "step": 0}, "complex64",
                        out=(2, 20, "complex64")),
    "fm": op("fm_demod", 3, 1000, {"gain": 1.0}, "complex64", out=(3, 1000, "float32")),
    "fm_real": op("fm_demod", 3, 1000, {"gain": 2.0}, out=(3, 1000, "float32")),
    "fm_deemph": op("fm_demod", 3, 1000, {"gain": 1.0, "pole": 0.75}, "complex64", out=(3, 1000, "float32")),
    "fm_deemph_tiled": op("fm_demod", 2, 20000, {"gain": 1.0, "pole": 0.99}, out=(2, 20000, "float32")),
    "hilbert_fir": op("fir", 2, 1000, {"taps": np.ones(127) + 1j, "method": "direct"}, out=(2, 1000, "complex64")),
    "hilbert": op("hilbert", 64, 4096, {"numtaps": 127, "odd_taps": np.ones(32)}, out=(64, 4096, "complex64")),
}
res = {"units": {}, "runs": {}}
for name, o in cases.items():
    outcome = []
    for graph in (False, True):
        e = _native.StreamEngine(dev, [o], use_graph=graph)
        ch, items = o["in"][:2]
        x = np.zeros((ch, items), np.complex64 if o["in"][3] == "complex64" else np.float32)
        for b in range(3):
            y = e.process(b % 2, x, False)
            outcome.append(list(y.shape))
        y = e.process(0, np.ascontiguousarray(x[:, :items - 3]), True)  # a final partial block
        outcome.append(list(y.shape))
        U = res["units"][name] = e.units_per_block
        for cuts in ([U // 2], list(range(1, U)), []):
            e.process_split(1, x, False, [c for c in cuts if 0 < c < U])
        e.close()
    res["runs"][name] = outcome
try:
    _native.StreamEngine(dev, [op("ddc", 1, 1000, {"taps": np.ones(3), "decimate": 3, "step": 0},
                                  out=(1, 333, "float32"))])
except ValueError as exc:
    res["bad_block"] = str(exc)
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def fake_sdr(fake_driver: str) -> dict:  # noqa: F811
    return last_json(run_python(FAKE_SDR_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0", timeout=300))


def test_fake_every_op_runs_full_final_and_split_blocks(fake_sdr):
    runs = fake_sdr["runs"]
    assert runs["shift_f32"] == [[3, 1000]] * 3 + [[3, 997]] + [[3, 1000]] * 3 + [[3, 997]]
    assert runs["ddc_cc"] == ([[3, 250]] * 3 + [[3, 250]]) * 2  # ceil(997 / 4) = 250
    assert runs["ddc_rc"] == ([[2, 120]] * 3 + [[2, 120]]) * 2  # ceil(957 / 8) = 120
    assert runs["fir_dec_cr"] == ([[2, 200]] * 3 + [[2, 200]]) * 2  # ceil(997 / 5) = 200
    assert runs["fir_dec_rr"] == ([[64, 2048]] * 3 + [[64, 2047]]) * 2  # ceil(4093 / 2)
    assert runs["fir_dec_one_tap"] == ([[1, 32]] * 3 + [[1, 31]]) * 2
    assert runs["fir_dec_plain"] == ([[2, 20]] * 3 + [[2, 20]]) * 2
    for name in ("fm", "fm_real", "fm_deemph", "fm_deemph_tiled", "hilbert_fir"):
        assert runs[name][3] == [runs[name][0][0], runs[name][0][1] - 3]  # the final block's items
    assert runs["hilbert"] == ([[64, 4096]] * 3 + [[64, 4093]]) * 2


def test_fake_units_of_the_new_ops(fake_sdr):
    u = fake_sdr["units"]
    assert u["shift_f32"] == u["fm_deemph"] == u["fm_deemph_tiled"] == u["fm"] == 1
    assert u["fir_dec_rr"] == 32  # 2048 outputs x 64 channels: ranges of 64 outputs (4096 over the channels)
    assert u["ddc_cc"] == 1  # 250 outputs x 3 channels: below one unit's worth
    assert u["hilbert"] == 64  # 4096 outputs x 64 channels: ranges of 64 outputs


def test_fake_a_block_not_a_multiple_of_decimate_is_refused(fake_sdr):
    assert "multiple of decimate" in fake_sdr["bad_block"]


# ---------------------------------------------------------------------------------------------
# GPU against the CPU stages

N = 3 * 1000 + 357


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("freq_hz", [1234.5, -20000.0])
def test_shift_matches_cpu(complex_, freq_hz):
    x = signal(3, N, complex_, seed=1)
    gpu, cpu = both(Shift(freq_hz=freq_hz), x, 1000)
    assert rel_err(gpu, cpu) < SHIFT_TOL


@pytest.mark.gpu
def test_shift_stays_on_phase_over_many_blocks():
    n = 1 << 22  # 4M samples in blocks of 4096: the device sample index against the exact phase
    x = np.ones((1, n), np.complex64)
    gpu, cpu = both(Shift(freq_hz=1234.567), x, 4096)
    assert np.max(np.abs(gpu - cpu)) < 2e-6


@pytest.mark.gpu
@pytest.mark.parametrize("complex_x", [True, False])
@pytest.mark.parametrize("D,L", [(2, 31), (5, 64), (8, 127), (10, 1001)])
def test_fir_decimate_matches_cpu(complex_x, D, L):
    x = signal(3, N, complex_x, seed=D)
    taps = ss.firwin(L, 0.8 / D) if L % 2 else np.random.default_rng(L).standard_normal(L) / np.sqrt(L)
    gpu, cpu = both(Fir(taps=taps, decimate=D), x, 1000)
    assert gpu.shape[1] == -(-N // D)
    assert rel_err(gpu, cpu) < FIR_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("complex_x", [True, False])
@pytest.mark.parametrize("L", [257, 4161])  # complex: tiles of 64 outputs; beyond 48 KiB: the plain kernel
def test_fir_decimate_by_64_matches_cpu(complex_x, L):
    n = 3 * 1280 + 357
    x = signal(2, n, complex_x, seed=L)
    taps = np.random.default_rng(L).standard_normal(L) / np.sqrt(L)
    gpu, cpu = both(Fir(taps=taps, decimate=64), x, 1280)
    assert gpu.shape[1] == -(-n // 64)
    assert rel_err(gpu, cpu) < FIR_TOL


@pytest.mark.gpu
def test_fir_decimate_complex_and_per_channel_taps_match_cpu():
    x = signal(2, 4001, False, seed=3)
    rng = np.random.default_rng(4)
    taps = rng.standard_normal((2, 40)) + 1j * rng.standard_normal((2, 40))
    gpu, cpu = both(Fir(taps=taps, decimate=4), x, 400)
    assert rel_err(gpu, cpu) < FIR_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("D,numtaps", [(1, 31), (4, 63), (8, 127)])
def test_ddc_matches_cpu(complex_, D, numtaps):
    x = signal(3, N, complex_, seed=numtaps)
    st = Ddc(freq_hz=6000.0, design={"numtaps": numtaps, "cutoff_hz": 0.4 * FS / D / 2 + 100}, decimate=D)
    gpu, cpu = both(st, x, 1000)
    assert gpu.shape[1] == -(-N // D)
    assert rel_err(gpu, cpu) < DDC_TOL


@pytest.mark.gpu
def test_ddc_many_blocks_keep_the_phase():
    n = 1 << 21
    t = np.arange(n)
    x = np.exp(2j * np.pi * 10000.0 / FS * t)[None, :].astype(np.complex64)
    gpu, cpu = both(Ddc(freq_hz=10000.0, taps=ss.firwin(63, 0.05), decimate=8), x, 4096)
    assert np.max(np.abs(gpu - cpu)) < 5e-5


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("gain", [1.0, -2.5])
def test_fm_demod_matches_cpu(complex_, gain):
    x = signal(3, N, complex_, seed=7)
    gpu, cpu = both(FmDemod(gain=gain), x, 1000)
    assert rel_err(gpu, cpu) < FM_TOL
    np.testing.assert_allclose(gpu[:, 0], cpu[:, 0], rtol=1e-6, atol=0)  # the first sample: angle(x * 0), 0 or +-pi


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("us,block", [(50, 1000), (75, 1000), (75, 100), (75, 65536)])
def test_fm_demod_deemphasis_matches_cpu(complex_, us, block):
    x = signal(2, 3 * block + 357, complex_, seed=us + block)
    gpu, cpu = both(FmDemod(deemphasis_us=us, gain=0.5), x, block, rate=240000.0)
    assert rel_err(gpu, cpu) < DEEMPH_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("block", [16385, 300001])
def test_fm_demod_deemphasis_of_long_blocks_matches_cpu(complex_, block):
    # above 16384 samples the scan runs over tiles of 4096 (fm.cu); at 50 Msps the pole is
    # 0.99973, so a tile's start value still weighs a^4096 = 0.34 at its end: every carry counts
    x = signal(2, 2 * block + 4097, complex_, seed=block)
    gpu, cpu = both(FmDemod(deemphasis_us=75, gain=0.5), x, block, rate=50e6)
    assert rel_err(gpu, cpu) < DEEMPH_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("numtaps", [3, 31, 127, 255, 12033])
def test_hilbert_matches_cpu(numtaps):
    x = signal(3, N, False, seed=numtaps)
    gpu, cpu = both(Hilbert(numtaps=numtaps), x, 1000)
    assert rel_err(gpu, cpu) < FIR_TOL


@pytest.mark.gpu
def test_the_fm_receiver_chain_matches_cpu():
    from pygpukit_dsp.stages.resample import Resample

    fs = 960000.0
    n = 96000 * 3 + 960 * 7
    t = np.arange(n) / fs
    phase = 2 * np.pi * 75e3 * np.cumsum(np.sin(2 * np.pi * 1000.0 * t)) / fs
    x = np.exp(1j * (2 * np.pi * 100e3 * t + phase))[None, :].astype(np.complex64)
    chain = [Ddc(freq_hz=100e3, design={"numtaps": 127, "cutoff_hz": 100e3}, decimate=4),
             FmDemod(gain=240000.0 / (2 * np.pi * 75e3), deemphasis_us=75), Resample(up=1, down=5)]
    gpu, cpu = both(chain, x, 9600, rate=fs)
    assert rel_err(gpu, cpu) < DEEMPH_TOL


# ---------------------------------------------------------------------------------------------
# GPU: the units of ddc (fir decimate) and hilbert, split in chunks, give the unsplit result

@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
def test_ddc_splits_over_output_samples(complex_):
    from .test_cuda_chunked import check_split_stream, time_spec

    st = Ddc(freq_hz=3000.0, taps=ss.firwin(63, 0.1), decimate=4)
    assert check_split_stream([st], time_spec(4, 24000, complex_), exact=True, kinds=["ddc"], cpu_rtol=DDC_TOL) > 4


@pytest.mark.gpu
def test_fir_decimate_and_hilbert_split_over_output_samples():
    from .test_cuda_chunked import check_split_stream, time_spec

    st = Fir(taps=ss.firwin(127, 0.1), decimate=2)
    assert check_split_stream([st], time_spec(4, 24000), exact=True, kinds=["ddc"]) > 4
    assert check_split_stream([Hilbert(numtaps=127)], time_spec(4, 12000), exact=True, kinds=["hilbert"]) > 4
