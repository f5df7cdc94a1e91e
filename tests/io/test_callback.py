import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.io.callback import CallbackSink, CallbackSource
from pygpukit_dsp.signal import SignalSpec


def chunks(sizes, channels=1):
    """A callback that returns arrays of the given sizes (ignoring n), then None."""
    it = iter(sizes)
    count = [0]

    def fn(n):
        m = next(it, None)
        if m is None:
            return None
        out = count[0] + np.arange(m, dtype=np.float64)
        count[0] += m
        return out if channels == 1 else np.vstack([out] * channels)
    return fn


def test_source_recuts_returned_arrays_into_reads_of_n():
    src = CallbackSource(fn=chunks([3, 10, 1, 5]))
    fmt = src.open(StreamFormat(sample_rate=100))
    assert (fmt.channels, fmt.dtype, fmt.length) == (1, "float32", None)
    sizes, values = [], []
    while (b := src.read(4)).shape[1]:
        sizes.append(b.shape[1])
        values.append(b)
    assert sizes == [4, 4, 4, 4, 3]  # short only at the end
    np.testing.assert_array_equal(np.concatenate(values, axis=1)[0], np.arange(19))
    assert src.read(4).shape == (1, 0)


def test_source_checks_shape_and_dtype_of_what_the_function_returns():
    src = CallbackSource(fn=lambda n: np.zeros((3, n)))
    src.open(StreamFormat(sample_rate=1, channels=2))
    with pytest.raises(StreamFault, match=r"returned shape \(3, 8\); expected \(2, m\)"):
        src.read(8)
    src = CallbackSource(fn=lambda n: np.zeros(n, np.complex64))
    src.open(StreamFormat(sample_rate=1))
    with pytest.raises(StreamFault, match="complex samples but the pipeline is float32"):
        src.read(8)


def test_source_wraps_exceptions_of_the_function():
    def boom(n):
        raise RuntimeError("sensor unplugged")
    src = CallbackSource(fn=boom)
    src.open(StreamFormat(sample_rate=1))
    with pytest.raises(StreamFault, match="raised RuntimeError: sensor unplugged"):
        src.read(1)


MODULE = '''
import numpy as np
received = []
def make(n):
    return np.ones((2, n), np.float32)
def keep(block):
    received.append(block.copy())
class Holder:
    def method(self, n):
        return None
holder = Holder()
'''


@pytest.fixture
def module_dir(tmp_path):
    (tmp_path / "gk_cb_test_mod.py").write_text(MODULE)
    return tmp_path


def test_function_is_imported_from_the_yaml_folder(module_dir):
    import sys

    src = CallbackSource(function="gk_cb_test_mod:make", base_dir=module_dir)
    assert str(module_dir) not in sys.path  # only while importing
    src.open(StreamFormat(sample_rate=1, channels=2))
    np.testing.assert_array_equal(src.read(3), np.ones((2, 3)))
    assert CallbackSource(function="gk_cb_test_mod:holder.method", base_dir=module_dir).to_config() == {
        "type": "callback", "function": "gk_cb_test_mod:holder.method"}


def test_function_import_errors_point_at_the_function_value(module_dir):
    with pytest.raises(ConfigError, match="cannot import module 'no_such_mod_xyz'") as e:
        CallbackSource(function="no_such_mod_xyz:f", base_dir=module_dir)
    assert e.value.path == ("function",) and str(module_dir) in e.value.hint
    with pytest.raises(ConfigError, match="has no attribute 'mak'") as e:
        CallbackSink(function="gk_cb_test_mod:mak", base_dir=module_dir)
    assert e.value.hint == "did you mean 'make'?"
    with pytest.raises(ConfigError, match="not a function"):
        CallbackSink(function="gk_cb_test_mod:received", base_dir=module_dir)
    with pytest.raises(ConfigError, match="not of the form 'module:function'"):
        CallbackSink(function="gk_cb_test_mod.make")
    with pytest.raises(ConfigError, match="exactly one of"):
        CallbackSink()


def test_sink_hands_every_block_to_the_function(module_dir):
    sink = CallbackSink(function="gk_cb_test_mod:keep", base_dir=module_dir)
    sink.open(SignalSpec(10, 1, 4))
    sink.write(np.ones((1, 4), np.float32))
    sink.write(np.zeros((1, 2), np.float32))
    import sys

    mod = sys.modules["gk_cb_test_mod"]  # imported by the sink from module_dir
    assert [b.shape for b in mod.received] == [(1, 4), (1, 2)]
    assert sink.stats()["samples"] == 6


def test_python_callables_cannot_be_written_to_yaml():
    with pytest.raises(ConfigError, match="cannot be written to YAML") as e:
        CallbackSink(fn=print).to_config()
    assert "module:attr" in e.value.hint


def test_sink_wraps_exceptions():
    def bad(block):
        raise ValueError("disk full")
    sink = CallbackSink(fn=bad)
    sink.open(SignalSpec(10, 1, 4))
    with pytest.raises(StreamFault, match="raised ValueError: disk full"):
        sink.write(np.zeros((1, 4), np.float32))


# GPU arrays (the protocols: pygpukit_dsp/arrays_interop.py). FakeGpu speaks CAI over NumPy
# memory: enough for the source's checks and re-cutting, which never touch the data.
class FakeGpu:
    def __init__(self, a):
        self.a = a
        self.shape = a.shape
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "version": 3,
                                         "data": (a.ctypes.data, False), "strides": a.strides, "stream": None}

    def __getitem__(self, key):
        return FakeGpu(self.a[key])

    def reshape(self, *shape):
        return FakeGpu(self.a.reshape(*shape))


def test_source_passes_gpu_arrays_through_and_recuts_them_on_the_gpu():
    x = np.arange(24, dtype=np.float32).reshape(1, 24)
    parts = iter([FakeGpu(x[:, :16]), FakeGpu(x[0, 16:].copy())])
    src = CallbackSource(fn=lambda n: next(parts, None))
    src.open(StreamFormat(sample_rate=100))
    first, second = src.read(8), src.read(8)
    assert isinstance(first, FakeGpu) and isinstance(second, FakeGpu)  # no host copy
    np.testing.assert_array_equal(second.a, x[:, 8:16])
    third = src.read(8)  # a 1-D GPU array is one channel
    assert third.shape == (1, 8) and src.stats()["samples"] == 24


def test_source_gpu_arrays_are_checked_not_converted():
    src = CallbackSource(fn=lambda n: FakeGpu(np.zeros((1, n), np.float64)))
    src.open(StreamFormat(sample_rate=100))
    with pytest.raises(StreamFault, match="not converted"):
        src.read(4)


def test_source_gpu_parts_of_an_unknown_framework_must_be_whole_blocks():
    src = CallbackSource(fn=lambda n: FakeGpu(np.zeros((1, 3), np.float32)))
    src.open(StreamFormat(sample_rate=100))
    with pytest.raises(StreamFault, match="whole blocks"):
        src.read(8)


def test_gpu_source_on_the_cpu_backend_faults_at_its_first_block():
    from pygpukit_dsp import Pipeline, stages

    p = Pipeline([stages.Gain(db=0.0)], sample_rate=100, block_size=8,
                 source=CallbackSource(fn=lambda n: FakeGpu(np.zeros((1, n), np.float32))), sink=CallbackSink(fn=print))
    with pytest.raises(StreamFault) as info:
        p.run(blocks=2, backend="cpu")
    assert info.value.block == 0 and "cpu backend" in str(info.value)


def test_sink_that_wants_gpu_arrays_refuses_host_blocks():
    sink = CallbackSink(fn=lambda b: None, device_arrays=True)
    sink.open(SignalSpec(sample_rate=100, channels=1, block_size=4))
    with pytest.raises(StreamFault, match="device_arrays"):
        sink.write(np.zeros((1, 4), np.float32))


def test_sink_hands_gpu_blocks_over_as_they_are_with_device_arrays():
    got = []
    sink = CallbackSink(fn=got.append, device_arrays=True)
    sink.open(SignalSpec(sample_rate=100, channels=1, block_size=4))
    block = FakeGpu(np.zeros((1, 4), np.float32))
    sink.write(block)
    assert got == [block] and sink.stats()["samples"] == 4
