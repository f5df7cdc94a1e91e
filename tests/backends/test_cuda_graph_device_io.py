"""GPU arrays into and out of a flowgraph on the cuda backend (backends/cuda_device_io.GraphDeviceBlocks):
one GPU array per source in, one per sink out of the input's framework, equal to the host path,
with no H2D or D2H (the engine's counters), short final blocks, NaN/Inf found per source, and the
errors for mixed or wrong arrays."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.nonfinite import NonFiniteInput

from .compare import rel_err
from .test_cuda_graph import MIXED_FORMAT, _engine, _mixed_inputs, mixed

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("block, n", [(64, 64 * 6), (37, 37 * 4 + 11)])
def test_graph_process_of_cupy_arrays_gives_cupy_arrays_equal_to_the_host_path(block, n):
    cp = pytest.importorskip("cupy")
    g, x = mixed(block), _mixed_inputs(n)
    host = g.process(x, backend="cuda")
    dev = g.process({k: cp.asarray(v) for k, v in x.items()}, backend="cuda")
    assert set(dev) == set(host)
    for name, y in dev.items():
        assert isinstance(y, cp.ndarray) and y.shape == host[name].shape and y.dtype == host[name].dtype, name
        assert rel_err(cp.asnumpy(y), host[name]) < 1e-6, name


def test_device_blocks_make_no_host_copy_and_one_device_copy_per_source_and_sink():
    cp = pytest.importorskip("cupy")
    g, x = mixed(64), _mixed_inputs(64 * 5 + 9)
    eng = _engine(g, MIXED_FORMAT)
    try:
        a, b = cp.asarray(x["a"]), cp.asarray(x["b"])
        outs = [eng.process((a[:, s:s + 64], b[:, s:s + 64]), final=s + 64 >= a.shape[1]) for s in range(0, 329, 64)]
        eng.synchronize()
        c = eng.counters()
    finally:
        eng.close()
    assert (c["h2d_copies"], c["d2h_copies"]) == (0, 0)
    assert (c["device_blocks"], c["d2d_in"], c["d2d_out"]) == (6, 12, 24)
    assert c["graph_launches"] == 5 and c["eager_blocks"] == 1
    assert all(o.shape[1] == 9 for o in outs[-1])
    host = mixed(64).process(x, backend="cpu")
    got = {name: cp.asnumpy(cp.concatenate([o[k] for o in outs], axis=1))
           for k, name in enumerate(("sum", "both", "sq", "lo"))}
    for name in got:
        assert rel_err(got[name], host[name]) < 1e-6, name


def test_torch_inputs_give_torch_outputs():
    torch = pytest.importorskip("torch")
    g, x = mixed(128), _mixed_inputs(128 * 3)
    dev = g.process({k: torch.from_numpy(v).cuda() for k, v in x.items()}, backend="cuda")
    host = mixed(128).process(x, backend="cpu")
    for name, y in dev.items():
        assert isinstance(y, torch.Tensor) and y.is_cuda, name
        assert rel_err(y.cpu().numpy(), host[name]) < 1e-6, name


def test_a_nan_is_found_in_its_source_at_its_sample():
    cp = pytest.importorskip("cupy")
    x = _mixed_inputs(64 * 4)
    x["b"][1, 64 * 2 + 7] = np.nan
    arrays = {k: cp.asarray(v) for k, v in x.items()}
    with pytest.raises(NonFiniteInput) as info:
        mixed(64).process(arrays, backend="cuda")
    count = info.value.count
    assert (count.first_block, count.first_sample, count.first_channel) == (2, 64 * 2 + 7, 1)
    assert "source 'b'" in str(info.value)
    zeroed = mixed(64).process(arrays, backend="cuda", nonfinite="zero")
    x["b"][1, 64 * 2 + 7] = 0
    host = mixed(64).process(x, backend="cpu")
    for name in host:
        assert rel_err(cp.asnumpy(zeroed[name]), host[name]) < 1e-6, name


def test_mixed_host_and_gpu_arrays_and_the_cpu_backend_are_refused_before_a_block():
    cp = pytest.importorskip("cupy")
    x = _mixed_inputs(128)
    with pytest.raises(ConfigError, match="some sources and host arrays"):
        mixed(64).process({"a": cp.asarray(x["a"]), "b": x["b"]}, backend="cuda")
    with pytest.raises(ConfigError, match="cpu backend"):
        mixed(64).process({k: cp.asarray(v) for k, v in x.items()}, backend="cpu")
    with pytest.raises(ConfigError, match="float64"):
        mixed(64).process({"a": cp.asarray(x["a"], dtype=cp.float64), "b": cp.asarray(x["b"])}, backend="cuda")
