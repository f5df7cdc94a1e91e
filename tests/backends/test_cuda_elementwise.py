"""power, magnitude, db and the fused power->db / magnitude->db on CUDA
(native/ops/elementwise.cpp, kernels/elementwise.cu) against the CPU stages.

Tolerances: power/magnitude of float32 exact (x*x, |x|); complex |x|^2 and hypot within
relative 1e-6 (NVRTC may contract re*re + im*im into an FMA); dB within 1e-4 dB absolute
(log10f vs NumPy's log10 differ by an ulp or two).
"""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends.cuda_lowering import lower_pipeline
from pygpukit_dsp.backends.cuda_ops.elementwise import db_constants, lower_db
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.elementwise import DbProcessor

from .compare import run_both


def real_signal(shape, seed=0):
    x = (np.random.default_rng(seed).standard_normal(shape) * 3).astype(np.float32)
    x.flat[:4] = [0.0, -0.0, -2.0, 1e-30]  # zeros and negatives hit the dB floor
    return x


def complex_signal(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    x.flat[:2] = [0, 1e-20]
    return x


# ------------------------------------------------------------------ lowering (no GPU)


def test_db_constants_equal_the_cpu_processor():
    for params in (dict(), dict(ref=2.5, floor_db=-90.0, kind="amplitude")):
        db = stages.Db(**params)
        cpu = DbProcessor(db.params)
        c = db_constants(db.params)
        assert np.float32(c["scale"]) == cpu.scale and np.float32(c["inv_ref"]) == cpu.inv_ref
        assert np.float32(c["floor"]) == cpu.floor and np.float32(c["floor_db"]) == cpu.floor_db


def test_db_of_complex_input_lowers_to_a_fused_level():
    spec = SignalSpec(100.0, 1, 16, "complex64", "frames", 9)
    out = spec.with_(dtype="float32")
    assert lower_db(stages.Db(), spec, out).kind == "power_db"
    assert lower_db(stages.Db(kind="amplitude"), spec, out).kind == "magnitude_db"
    assert lower_db(stages.Db(), out, out).kind == "db"


def test_power_then_db_is_fused_into_one_op():
    p = Pipeline([stages.Gain(db=1), stages.Power(name="pw"), stages.Db(name="lvl"), stages.Magnitude(),
                  stages.Db(kind="amplitude")], sample_rate=1000, channels=1, block_size=16)
    ops = lower_pipeline(p, p.specs())
    assert [(o.kind, o.name) for o in ops] == [("gain", "gain"), ("power_db", "pw+lvl"),
                                                ("magnitude_db", "magnitude+db")]
    assert ops[1].spec_in.dtype == "float32" and ops[1].spec_out.dtype == "float32"


# ------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("block", [64, 250])
def test_power_and_magnitude_float32_exact(block):
    x = real_signal((3, 1001))
    for st in (stages.Power(), stages.Magnitude()):
        p = Pipeline([st], sample_rate=1000, block_size=block)
        np.testing.assert_array_equal(p.process(x, backend="cuda"), p.process(x, backend="cpu"))


@pytest.mark.gpu
def test_power_and_magnitude_complex64():
    x = complex_signal((2, 777), seed=1)
    for st in (stages.Power(), stages.Magnitude()):
        p = Pipeline([st], sample_rate=1000, block_size=128)
        y, ref = p.process(x, backend="cuda"), p.process(x, backend="cpu")
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-30)


@pytest.mark.gpu
@pytest.mark.parametrize("params", [dict(), dict(ref=0.5, floor_db=-60.0), dict(kind="amplitude", floor_db=-120.0)])
def test_db_of_real_input(params):
    x = real_signal((2, 900), seed=2)
    x[1, 5] = np.nan  # let through to the stage (nonfinite: pass): db keeps a NaN a NaN
    p = Pipeline([stages.Db(**params)], sample_rate=1000, block_size=256, nonfinite="pass")
    y, ref = p.process(x, backend="cuda"), p.process(x, backend="cpu")
    assert np.isnan(y[1, 5]) and np.isnan(ref[1, 5])
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["power", "amplitude"])
def test_db_of_complex_spectrum(kind):
    spec = SignalSpec(100.0, 2, 8, "complex64", "frames", 17)
    x = complex_signal((2, 19, 17), seed=3)
    y, ref = run_both([stages.Db(kind=kind, floor_db=-150.0)], spec, x)
    assert y.shape == ref.shape == x.shape
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("complex_input", [False, True])
def test_fused_power_db_and_magnitude_db_equal_the_two_cpu_stages(complex_input):
    x = complex_signal((3, 1000), seed=4) if complex_input else real_signal((3, 1000), seed=4)
    for chain in ([stages.Power(), stages.Db(ref=2.0)], [stages.Magnitude(), stages.Db(kind="amplitude")]):
        p = Pipeline(chain, sample_rate=1000, block_size=300)
        y, ref = p.process(x, backend="cuda"), p.process(x, backend="cpu")
        np.testing.assert_allclose(y, ref, rtol=0, atol=1e-4)


# floor_db values whose rounded level floor gives a log an ulp below floor_db (found on the CPU)
CROSSING_FLOORS = [-1.0, -0.5, -11.5, -23.0, -120.1]


def near_the_floor(floor: np.float32, n: int = 4000) -> np.ndarray:
    """Zeros, negatives, the level floor and the float32 values just above it."""
    steps = np.nextafter(np.full(n, floor, np.float32), np.float32(1)).view(np.int32) + np.arange(n, dtype=np.int32)
    x = steps.view(np.float32)
    x[:3] = [0.0, -1.0, floor]
    return x


@pytest.mark.gpu
@pytest.mark.parametrize("floor_db", CROSSING_FLOORS)
@pytest.mark.parametrize("kind", ["power", "amplitude"])
def test_the_db_floor_is_never_crossed(floor_db, kind):
    """Every db kernel (real, power -> db, magnitude -> db, complex spectra) clips after the log:
    no output below floor_db, and zeros give the same floor as the CPU stage."""
    db = stages.Db(floor_db=floor_db, kind=kind)
    cpu = DbProcessor(db.params)
    level = near_the_floor(cpu.floor)
    cases = [([db], level[None])]
    cases.append(([stages.Power(), db], np.sqrt(np.abs(level))[None]) if kind == "power"
                 else ([stages.Magnitude(), db], level[None]))
    for chain, x in cases:
        p = Pipeline(chain, sample_rate=1000, block_size=512)
        y = p.process(x, backend="cuda")
        assert y.astype(np.float64).min() >= floor_db, chain
        assert y[0, 0] == cpu.floor_db
    spec = SignalSpec(100.0, 1, 4, "complex64", "frames", 1000)
    level_c = level[:1000] if kind == "amplitude" else np.sqrt(np.abs(level[:1000]))
    z = (level_c * np.exp(1j * np.linspace(0, 6, 1000))).astype(np.complex64).reshape(1, 1, 1000)
    y, ref = run_both([db], spec, np.repeat(z, 4, axis=1))
    assert y.astype(np.float64).min() >= floor_db and ref.astype(np.float64).min() >= floor_db
