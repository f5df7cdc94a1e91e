"""Non-finite input samples on the GPU: found and (unless the policy is pass) replaced by 0 where
the block arrives, before the first op (native/ops/kernels/io.cu: gk_io_pull with mapped I/O,
gk_check_finite after the H2D copy otherwise); counted and located like on the cpu backend."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, QoS, stages
from pygpukit_dsp.io import NumpySink, NumpySource
from pygpukit_dsp.nonfinite import NonFiniteInput, zeroed

# realtime: latency mode with mapped I/O (the pull kernel checks); throughput: H2D copy + check kernel
QOS = {"realtime": QoS(class_="realtime", deadline_ms=100), "throughput": QoS(class_="throughput")}


def _signal(dtype, n=2000, channels=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((channels, n))
    if dtype == np.complex64:
        x = x + 1j * rng.standard_normal((channels, n))
    x = x.astype(dtype)
    x[1, 301] = np.nan
    x[2, 1500] = -np.inf if dtype == np.float32 else complex(0, np.inf)
    x[0, n - 3] = np.inf  # in the short final block
    return x


def _pipeline(qos, dtype):
    st = [stages.Sos(design={"kind": "butter", "order": 2, "cutoff_hz": 3000})] if dtype == np.float32 \
        else [stages.Gain(db=-3)]
    return Pipeline(st, sample_rate=48000, block_size=256, qos=QOS[qos])


@pytest.mark.gpu
@pytest.mark.parametrize("qos", sorted(QOS))
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_zero_replaces_before_the_first_op_and_counts(qos, dtype):
    x = _signal(dtype)
    p = _pipeline(qos, dtype)
    y = p.process(x, backend="cuda", nonfinite="zero")
    ref = p.process(zeroed(x), backend="cpu")
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("qos", sorted(QOS))
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_error_names_the_first_sample_as_the_cpu_backend_does(qos, dtype):
    x = _signal(dtype)
    p = _pipeline(qos, dtype)
    found = {}
    for backend in ("cpu", "cuda"):
        with pytest.raises(NonFiniteInput) as info:
            p.process(x, backend=backend)
        c = info.value.count
        found[backend] = (c.first_block, c.first_sample, c.first_channel, c.first_value)
    assert found["cuda"] == found["cpu"] == (1, 301, 1, "nan")


@pytest.mark.gpu
@pytest.mark.parametrize("qos", sorted(QOS))
def test_run_counts_every_one_in_the_summary(qos):
    x = _signal(np.float32)
    for policy, expect_nan in (("zero", False), ("pass", True)):
        p = _pipeline(qos, np.float32)
        p.nonfinite = policy
        p.source, p.sink = NumpySource(array=x), NumpySink()
        summary = p.run(backend="cuda")
        assert summary.backend == "cuda"
        assert summary.nonfinite["count"] == 3 and summary.nonfinite["first_sample"] == 301
        assert np.isnan(p.sink.result()).any() == expect_nan
