from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.elementwise import Db, Magnitude, Power

from .conftest import assert_documented, config_error, rel_err, run_stage, signal


@pytest.mark.parametrize("cls", [Power, Magnitude, Db])
def test_documented(cls):
    assert_documented(cls)


@pytest.mark.parametrize("complex_", [False, True])
def test_power_and_magnitude_time(rng, complex_):
    x = signal(rng, (2, 300), complex_)
    spec = SignalSpec(1000, 2, 128, dtype="complex64" if complex_ else "float32")
    p = run_stage(Power(), spec, x)
    m = run_stage(Magnitude(), spec, x)
    assert p.dtype == m.dtype == np.float32
    assert rel_err(p, np.abs(x.astype(np.complex128)) ** 2) < 1e-6
    assert rel_err(m, np.abs(x.astype(np.complex128))) < 1e-6


def test_power_frames_domain(rng):
    x = signal(rng, (1, 6, 5), complex_=True)
    spec = SignalSpec(10, 1, 3, dtype="complex64", domain="frames", bins=5)
    out_spec = Power().output_spec(spec)
    assert out_spec == spec.with_(dtype="float32")
    assert rel_err(run_stage(Power(), spec, x), np.abs(x) ** 2) < 1e-6


@pytest.mark.parametrize("kind,scale", [("power", 10), ("amplitude", 20)])
def test_db(rng, kind, scale):
    x = np.abs(signal(rng, (2, 200))) + 1e-3
    x[0, :5] = [0.0, -1.0, 1e-30, 2.0, 4.0]
    stage = Db(kind=kind, ref=2.0, floor_db=-60.0)
    out = run_stage(stage, SignalSpec(1000, 2, 64), x)
    ref = scale * np.log10(np.maximum(x.astype(np.float64) / 2.0, 10 ** (-60 / scale)))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
    assert out[0, 0] == pytest.approx(-60.0) and out[0, 1] == pytest.approx(-60.0)
    assert out[0, 3] == pytest.approx(0.0, abs=1e-6)


def test_db_defaults():
    out = run_stage(Db(), SignalSpec(1, 1, 3), np.array([[1.0, 100.0, 0.0]], np.float32))
    np.testing.assert_allclose(out, [[0.0, 20.0, -200.0]], atol=1e-4)


@pytest.mark.parametrize("kind", ["power", "amplitude"])
def test_db_of_complex_is_the_level_of_the_amplitude(rng, kind):
    x = signal(rng, (2, 7, 9), complex_=True)
    spec = SignalSpec(10, 2, 7, dtype="complex64", domain="frames", bins=9)
    assert Db(kind=kind).output_spec(spec).dtype == "float32"
    out = run_stage(Db(kind=kind), spec, x)
    ref = 20 * np.log10(np.abs(x.astype(np.complex128)))  # same dB level for either kind
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("kind", ["power", "amplitude"])
@pytest.mark.parametrize("floor_db", [-200.0, -120.0, -120.1, -23.0, -11.5, -1.0, -0.5])
def test_db_output_is_never_below_the_floor(kind, floor_db):
    """Zeros, negatives, the level floor and the values just above it: the rounded level floor's log
    lands an ulp below floor_db for some floors (-1.0, -11.5, -23.0) unless the dB value is clipped."""
    level = np.float32(10 ** (floor_db / (10 if kind == "power" else 20)))
    x = np.nextafter(np.full(3000, level, np.float32), np.float32(1)).view(np.int32) + np.arange(3000,
                                                                                                 dtype=np.int32)
    x = x.view(np.float32)
    x[:3] = [0.0, -1.0, level]
    out = run_stage(Db(kind=kind, floor_db=floor_db), SignalSpec(1000, 1, 1024), x[None])
    assert out.astype(np.float64).min() >= floor_db
    f32 = np.float32(floor_db)  # zeros give floor_db, or the float32 just above it (-120.1)
    assert out[0, 0] == out[0, 1] == (f32 if f32 >= floor_db else np.nextafter(f32, np.float32(0)))


def test_db_keeps_nan():
    out = run_stage(Db(floor_db=-50), SignalSpec(1000, 1, 4), np.array([[np.nan, 0.0, 1.0, 10.0]], np.float32))
    assert np.isnan(out[0, 0]) and out[0, 1] == -50.0


def test_db_param_rules():
    assert "ref" in str(config_error(Db, ref=0))
    assert "floor_db" in str(config_error(Db, floor_db=-500))
    assert "kind" in str(config_error(Db, kind="energy"))
    assert "did you mean 'floor_db'" in str(config_error(Db, flor_db=-10))


def test_no_params_allowed():
    assert "unknown parameter" in str(config_error(Power, gain=2))


def test_fft_then_db_is_the_level_stages_md_describes():
    """docs/stages.md: db of complex input uses |x|^2 (kind power) or |x| (kind amplitude), so fft -> db
    equals fft -> power -> db and fft -> magnitude -> db (kind amplitude); it is no error."""
    from pathlib import Path

    from pygpukit_dsp import Pipeline
    from pygpukit_dsp.stages import Fft

    x = np.random.default_rng(5).standard_normal((1, 1024)).astype(np.float32)

    def run(*chain):
        return Pipeline([Fft(n=256), *chain], sample_rate=1000, channels=1, block_size=256).process(x, backend="cpu")

    direct = run(Db())
    np.testing.assert_array_equal(direct, run(Power(), Db()))
    np.testing.assert_allclose(run(Db(kind="amplitude")), run(Magnitude(), Db(kind="amplitude")), atol=1e-4)
    section = (Path(__file__).resolve().parents[2] / "docs" / "stages.md").read_text().split("## db\n")[1]
    section = section.split("\n## ")[0]
    assert "complex input is an error" not in section
    assert "`kind: power` uses `|x|²`, `kind: amplitude` uses `|x|`" in " ".join(section.split())
