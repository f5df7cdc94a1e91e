"""GPU array protocols (pygpukit_dsp/arrays_interop.py): parsing ``__cuda_array_interface__`` and
DLPack metadata (fake producers: their memory is never touched), host DLPack arrays through the
host path, and the structured errors for layouts, dtypes and devices the engine cannot take."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, arrays_interop as ai, stages
from pygpukit_dsp.errors import ConfigError


class Cai:
    def __init__(self, shape, typestr="<f4", strides=None, ptr=0x7000_0000, version=3, stream=None, **extra):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "version": version, "strides": strides, "stream": stream, **extra}


def test_cai_c_contiguous_block():
    info = ai.inspect(Cai((2, 256)))
    assert (info.ptr, info.shape, info.dtype, info.row_bytes, info.contiguous) == \
        (0x7000_0000, (2, 256), np.dtype(np.float32), 1024, True)
    assert info.framework == "other" and info.device is None and info.stream is None


def test_cai_one_dimensional_is_one_channel_and_complex_is_taken():
    info = ai.inspect(Cai((100,), typestr="<c8"))
    assert info.shape == (1, 100) and info.dtype == np.complex64 and info.row_bytes == 800


def test_cai_rows_with_a_pitch_are_a_slice_along_samples():
    info = ai.inspect(Cai((3, 64), strides=(4 * 1000, 4), ptr=0x1000 + 0x40))
    assert info.row_bytes == 4000 and not info.contiguous and info.ptr == 0x1040


def test_cai_v3_stream_is_the_callers_stream_without_a_framework():
    info = ai.inspect(Cai((1, 8), stream=12345))
    assert info.stream == 12345 and ai.caller_stream(info) == 12345
    assert ai.caller_stream(ai.inspect(Cai((1, 8), version=2, stream=5))) == 0  # v2 has no stream
    assert ai.caller_stream(info, stream=7) == 7


@pytest.mark.parametrize("kwargs, words", [
    ({"typestr": "<f8"}, "float64"),
    ({"typestr": "<i2"}, "int16"),
    ({"shape": (2, 3, 4)}, "shape (2, 3, 4)"),
    ({"strides": (4, 8)}, "not contiguous"),
    ({"strides": (8, 4)}, "overlap"),
])
def test_cai_layouts_the_engine_cannot_take_are_config_errors(kwargs, words):
    shape = kwargs.pop("shape", (2, 16))
    with pytest.raises(ConfigError) as info:
        ai.inspect(Cai(shape, **kwargs))
    assert words in info.value.message
    assert "(channels, n)" in (info.value.hint or "")


def test_wrong_gpu_is_a_config_error_naming_both():
    class OnGpu1(Cai):
        def __dlpack__(self, stream=None):
            raise AssertionError("CAI is read first")

        def __dlpack_device__(self):
            return (ai.KDL_CUDA, 1)

    info = ai.inspect(OnGpu1((1, 8)))
    assert info.device == 1
    with pytest.raises(ConfigError) as err:
        ai.check_device(info, 0)
    assert "GPU 1" in err.value.message and "GPU 0" in err.value.message


def test_stream_handles_from_objects():
    class CupyLike:
        ptr = 99

    class TorchLike:
        cuda_stream = 42

    assert ai.stream_handle(CupyLike()) == 99 and ai.stream_handle(TorchLike()) == 42
    assert ai.stream_handle(None) == 0 and ai.stream_handle(2) == 2
    with pytest.raises(ConfigError):
        ai.stream_handle("fast")


# ------------------------------------------------------------------------------------------ DLPack
class FakeDLPack:
    """A producer of a real DLPack capsule over host memory it owns, claiming a CUDA device."""

    def __init__(self, array: np.ndarray, device=(ai.KDL_CUDA, 0), strides=None):
        self.array = array
        self.device = device
        self.deleted = 0
        self.streams = []
        self._shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        self._strides = None if strides is None else (ctypes.c_int64 * array.ndim)(*strides)
        code, bits = (2, 32) if array.dtype == np.float32 else (5, 64) if array.dtype == np.complex64 else (2, 64)
        t = ai._DLTensor(ctypes.c_void_p(array.ctypes.data), ai._DLDevice(*device), array.ndim,
                         ai._DLDataType(code, bits, 1), self._shape,
                         None if strides is None else self._strides, 0)
        self._deleter = ai._DLManagedTensor._fields_[2][1](self._delete)
        self.managed = ai._DLManagedTensor(t, None, self._deleter)

    def _delete(self, ptr):
        self.deleted += 1

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        make = ctypes.pythonapi.PyCapsule_New
        make.restype = ctypes.py_object
        make.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return make(ctypes.addressof(self.managed), b"dltensor", None)


def test_dlpack_cuda_array_is_read_from_its_capsule_and_released():
    a = np.zeros((2, 32), np.float32)
    producer = FakeDLPack(a)
    info = ai.inspect(producer, stream=5)
    assert (info.ptr, info.shape, info.dtype, info.row_bytes, info.device) == (a.ctypes.data, (2, 32),
                                                                                np.dtype(np.float32), 128, 0)
    assert producer.streams == [5]  # the consumer's stream, handed to the producer
    del info
    assert producer.deleted == 1  # the consumer ran the deleter once


def test_dlpack_legacy_stream_when_none_is_given_and_strides_in_elements():
    a = np.zeros((2, 64), np.float32)
    producer = FakeDLPack(a, strides=(64, 1))
    info = ai.inspect(producer)
    assert producer.streams == [ai.LEGACY_STREAM] and info.row_bytes == 256


def test_dlpack_float64_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        ai.inspect(FakeDLPack(np.zeros((1, 8), np.float64)))
    assert "float64" in info.value.message


def test_dlpack_device_kinds():
    assert ai.is_device_array(FakeDLPack(np.zeros((1, 4), np.float32)))
    assert not ai.is_device_array(FakeDLPack(np.zeros((1, 4), np.float32), device=(ai.KDL_CPU, 0)))
    assert not ai.is_device_array(np.zeros(3))
    with pytest.raises(ConfigError) as info:
        ai.as_host_array(FakeDLPack(np.zeros((1, 4), np.float32), device=(10, 0)))
    assert "ROCm" in info.value.message


# --------------------------------------------------------------------------------- host path (cpu)
class HostDLPackOnly:
    """A CPU array that speaks DLPack only (no __array__): taken with np.from_dlpack."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def _pipe():
    return Pipeline([stages.Fir(taps=[0.5, 0.25, 0.25])], sample_rate=1000, channels=2, block_size=16,
                    backend="cpu")


def test_host_dlpack_array_goes_through_the_host_path_on_cpu():
    x = np.random.default_rng(0).standard_normal((2, 50)).astype(np.float32)
    np.testing.assert_array_equal(_pipe().process(HostDLPackOnly(x)), _pipe().process(x))


def test_torch_cpu_tensor_goes_through_the_host_path_on_cpu():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((2, 40)).astype(np.float32)
    np.testing.assert_array_equal(_pipe().process(torch.from_numpy(x)), _pipe().process(x))


def test_gpu_array_on_the_cpu_backend_is_refused_before_any_block():
    with pytest.raises(ConfigError) as info:
        _pipe().process(Cai((2, 64)))
    assert "cpu backend" in info.value.message and "backend='cuda'" in info.value.hint
