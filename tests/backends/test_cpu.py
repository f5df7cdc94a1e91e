"""pygpukit_dsp/backends/cpu.py: the CPU engine's process(), with and without out=."""
import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cpu import CpuEngine


def _engine():
    p = Pipeline([stages.Fir(taps=np.hanning(16)), stages.Mix(matrix=np.ones((2, 4)) / 4)],
                 sample_rate=1000, channels=4, block_size=32, backend="cpu")
    return CpuEngine(p, p.specs(), BackendChoice("cpu", "test"))


def test_process_into_out_equals_a_new_array_and_a_short_block_is_a_view():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((4, 32)).astype(np.float32) for _ in range(3)]
    a, b = _engine(), _engine()
    out = np.empty((2, 32), np.float32)
    for x in xs:
        y = a.process(x)
        assert b.process(x, out=out) is out and np.array_equal(out, y)
    y = a.process(xs[0][:, :10], final=True)
    r = b.process(xs[0][:, :10], final=True, out=out)
    assert r.shape == (2, 10) and np.shares_memory(r, out) and np.array_equal(r, y)


@pytest.mark.parametrize("bad", [np.empty((2, 10), np.float32), np.empty((2, 32), np.float64),
                                 np.empty((2, 64), np.float32)[:, ::2]], ids=["shape", "dtype", "strided"])
def test_a_wrong_out_is_refused_before_the_block_runs(bad):
    e = _engine()
    with pytest.raises(ValueError, match=r"full output block's shape \(2, 32\)"):
        e.process(np.zeros((4, 32), np.float32), out=bad)
    assert e.counters()["blocks"] == 0
