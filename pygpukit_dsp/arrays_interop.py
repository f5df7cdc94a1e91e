"""GPU arrays in and out: ``__cuda_array_interface__`` and DLPack, with no host copy.

:meth:`Pipeline.process <pygpukit_dsp.pipeline.Pipeline.process>`, ``CudaEngine.process`` and
the ``callback`` source and sink take any array that lives on a GPU and says so through one of
the two protocols (CuPy, PyTorch, JAX, Numba):

* ``__cuda_array_interface__`` (read first when present): pointer, shape, ``typestr``,
  ``strides`` and, in version 3, the ``stream`` its producer queued it on;
* ``__dlpack__`` with ``__dlpack_device__``: ``(2, id)`` (kDLCUDA) is a device array, read from
  the capsule ``__dlpack__(stream=...)`` returns; ``(1, 0)`` (kDLCPU: NumPy, CPU tensors) is a
  host array, taken with :func:`numpy.from_dlpack` by the ordinary host path.

A block is ``(channels, n)`` (or ``(n,)`` for one channel) of float32 or complex64, samples
contiguous in each row (a C-contiguous array, or a slice of one along samples); anything else is
a ConfigError naming the layout expected. Outputs come back in the input's framework: CuPy in,
CuPy out; torch in, torch out (on the input's device); anything else: CuPy when it is installed,
else a :class:`DeviceArray` (``__cuda_array_interface__`` only).

Ordering: the caller's stream is ``stream=`` (a handle, or a CuPy/torch stream object), else the
framework's current stream (CuPy, torch), else the array's own CAI ``stream``, else the legacy
default stream. The engine's work waits for what is queued there, and what is queued there
after the call waits for the engine's work: the output is ready in stream order on that stream,
and nothing waits on the host (docs/cuda.md, "GPU arrays").

Layer: core (imports numpy, ctypes and ``errors``; CuPy and torch only when an array of theirs
is given).
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ConfigError

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
_KDL_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
              10: "ROCm", 11: "ROCm host", 13: "CUDA managed", 14: "oneAPI"}
# CUDA stream handles with a meaning of their own (CAI v3 and DLPack say the same)
LEGACY_STREAM = 1
PER_THREAD_STREAM = 2
DTYPES = {"float32": np.dtype(np.float32), "complex64": np.dtype(np.complex64)}
LAYOUT = ("a (channels, n) array of float32 or complex64 (or (n,) for one channel), samples contiguous "
          "in each row: a C-contiguous array or a slice of one along samples")


@dataclass(frozen=True)
class DeviceArrayInfo:
    """What the engine needs of a GPU array: where it is, its layout, its producer's stream."""

    ptr: int                      # device address of element [0, 0]
    shape: tuple[int, int]        # (channels, n): a 1-D array is one channel
    dtype: np.dtype
    row_bytes: int                # bytes from one channel's row to the next
    device: int | None            # the GPU (CUDA ordinal); None: the protocol did not say
    stream: int | None            # the producer's stream (CAI v3 'stream'); None: not given
    framework: str                # "cupy", "torch" or "other"
    obj: Any                      # the array (kept alive with the info)

    @property
    def contiguous(self) -> bool:
        return self.shape[0] <= 1 or self.row_bytes == self.shape[1] * self.dtype.itemsize


def framework_of(x: Any) -> str:
    module = type(x).__module__ or ""
    root = module.split(".", 1)[0]
    return root if root in ("cupy", "torch") else "other"


def dlpack_device(x: Any) -> tuple[int, int] | None:
    fn = getattr(x, "__dlpack_device__", None)
    if fn is None or not callable(getattr(x, "__dlpack__", None)):
        return None
    try:
        kind, index = fn()
    except Exception as exc:  # a producer that cannot say where it is
        raise ConfigError(f"{type(x).__name__}.__dlpack_device__() failed: {type(exc).__name__}: {exc}") from None
    return int(kind), int(index)


def is_device_array(x: Any) -> bool:
    """True for an array on a GPU (CAI, or DLPack on kDLCUDA / kDLCUDAManaged)."""
    if isinstance(x, np.ndarray):
        return False
    if hasattr(x, "__cuda_array_interface__"):
        return True
    dev = dlpack_device(x)
    return dev is not None and dev[0] in (KDL_CUDA, KDL_CUDA_MANAGED)


def as_host_array(x: Any) -> Any:
    """``x`` unchanged, or a NumPy view of a host array that only speaks DLPack (kDLCPU). A DLPack
    array on a device this package cannot read is a ConfigError."""
    if isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__"):
        return x
    dev = dlpack_device(x)
    if dev is None:
        return x
    if dev[0] in (KDL_CPU, KDL_CUDA_HOST):
        return np.from_dlpack(x)
    if dev[0] in (KDL_CUDA, KDL_CUDA_MANAGED):
        return x
    raise ConfigError(f"a {type(x).__name__} on a {_KDL_NAMES.get(dev[0], f'DLPack device type {dev[0]}')} "
                      "device cannot be processed", hint="give a NumPy array, or a CUDA array with the cuda backend")


# ---------------------------------------------------------------------------------------------- CAI
def _cai_dtype(typestr: str, what: str) -> np.dtype:
    try:
        dt = np.dtype(typestr)
    except TypeError:
        raise ConfigError(f"{what} has typestr {typestr!r}, which is not a NumPy dtype", hint=LAYOUT) from None
    return dt


def _framework_device(x: Any, framework: str) -> int | None:
    try:
        if framework == "cupy":
            return int(x.device.id)
        if framework == "torch":
            return int(x.device.index) if x.device.type == "cuda" else None
    except AttributeError:
        return None
    return None


def _from_cai(x: Any, what: str) -> DeviceArrayInfo:
    cai = x.__cuda_array_interface__
    try:
        shape = tuple(int(s) for s in cai["shape"])
        ptr = int(cai["data"][0])
        typestr = str(cai["typestr"])
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise ConfigError(f"{what}'s __cuda_array_interface__ lacks {exc} (shape, typestr, data are required)") from None
    dtype = _cai_dtype(typestr, what)
    strides = cai.get("strides")
    if strides is not None:
        strides = tuple(int(s) for s in strides)
    stream = cai.get("stream") if int(cai.get("version", 0)) >= 3 else None
    framework = framework_of(x)
    device = _framework_device(x, framework)
    if device is None:
        dev = dlpack_device(x)
        device = dev[1] if dev is not None and dev[0] in (KDL_CUDA, KDL_CUDA_MANAGED) else None
    return _info(ptr, shape, dtype, strides, device, None if stream is None else int(stream), framework, x, what)


# ------------------------------------------------------------------------------------------- DLPack
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    """DLPack's DLManagedTensor (its fields are set below: the deleter takes a pointer to it)."""


_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor)))]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.restype = ctypes.c_int
_capsule_rename.argtypes = [ctypes.py_object, ctypes.c_char_p]
_DL_FLOAT, _DL_COMPLEX = 2, 5


class _DLPackHold:
    """Owns a consumed DLPack tensor: its deleter runs when this is dropped (DLPack's rule for
    the consumer). Kept with the array's info, beside the producer's array itself."""

    def __init__(self, capsule: Any, managed: "ctypes._Pointer[_DLManagedTensor]"):
        self._managed = managed
        _capsule_rename(capsule, b"used_dltensor")  # the capsule's destructor no longer deletes it

    def __del__(self) -> None:
        managed, self._managed = self._managed, None
        if managed is not None and managed.contents.deleter:
            managed.contents.deleter(managed)


def _from_dlpack(x: Any, device: tuple[int, int], stream: int | None, what: str) -> DeviceArrayInfo:
    # The consumer's stream: the producer makes it wait for its work on the array (DLPack's stream
    # protocol; 1 is the legacy default stream, 0 is not allowed)
    wanted = LEGACY_STREAM if not stream else int(stream)
    try:
        capsule = x.__dlpack__(stream=wanted)
    except TypeError:  # an older producer without the stream argument
        capsule = x.__dlpack__()
    address = _capsule_pointer(capsule, b"dltensor")
    if not address:
        raise ConfigError(f"{what}'s __dlpack__() did not return a 'dltensor' capsule")
    managed = ctypes.cast(address, ctypes.POINTER(_DLManagedTensor))
    hold = _DLPackHold(capsule, managed)
    t = managed.contents.dl_tensor
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    code, bits, lanes = int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes)
    if lanes != 1 or (code, bits) not in ((_DL_FLOAT, 32), (_DL_COMPLEX, 64)):
        kind = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}.get(code, f"code {code}")
        raise ConfigError(f"{what} holds {kind}{bits}" + (f"x{lanes}" if lanes != 1 else "") + " values",
                          hint=LAYOUT)
    dtype = np.dtype(np.float32) if code == _DL_FLOAT else np.dtype(np.complex64)
    strides = None
    if t.strides:
        strides = tuple(int(t.strides[i]) * dtype.itemsize for i in range(ndim))  # DLPack counts elements
    ptr = int(t.data or 0) + int(t.byte_offset)
    return _info(ptr, shape, dtype, strides, device[1], None, framework_of(x), (x, hold), what)


# ------------------------------------------------------------------------------------------- layout
def _info(ptr: int, shape: tuple[int, ...], dtype: np.dtype, strides: tuple[int, ...] | None,
          device: int | None, stream: int | None, framework: str, obj: Any, what: str) -> DeviceArrayInfo:
    if dtype not in DTYPES.values():
        raise ConfigError(f"{what} holds {dtype} values; device arrays must be float32 or complex64 (they are "
                          "not converted on the way in)", hint=f"convert it first (e.g. x.astype('float32')); {LAYOUT}")
    item = dtype.itemsize
    if len(shape) == 1:
        shape, strides = (1, shape[0]), None if strides is None else (shape[0] * item, strides[0])
    if len(shape) != 2:
        raise ConfigError(f"{what} has shape {shape}", hint=LAYOUT)
    channels, n = shape
    if strides is None:
        strides = (n * item, item)
    if n > 1 and strides[1] != item:
        raise ConfigError(f"{what} of shape {shape} has strides {strides} (bytes): its samples are not "
                          f"contiguous (stride {item} expected along samples)", hint=LAYOUT)
    row = strides[0] if channels > 1 else n * item
    if channels > 1 and row < n * item:
        raise ConfigError(f"{what} of shape {shape} has strides {strides} (bytes): its rows overlap or run "
                          "backwards", hint=LAYOUT)
    return DeviceArrayInfo(ptr=ptr, shape=(int(channels), int(n)), dtype=dtype, row_bytes=int(row), device=device,
                           stream=stream, framework=framework, obj=obj)


def inspect(x: Any, *, what: str = "the array", stream: Any = None) -> DeviceArrayInfo:
    """The :class:`DeviceArrayInfo` of a GPU array (ConfigError for a layout the engine cannot
    take); ``stream`` is handed to a DLPack producer as the consumer's stream."""
    if hasattr(x, "__cuda_array_interface__"):
        return _from_cai(x, what)
    dev = dlpack_device(x)
    if dev is None or dev[0] not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ConfigError(f"{what} ({type(x).__name__}) is not a GPU array",
                          hint="GPU arrays expose __cuda_array_interface__ or __dlpack__ on a CUDA device")
    return _from_dlpack(x, dev, stream_handle(stream) if stream is not None else None, what)


def check_device(info: DeviceArrayInfo, gpu: int, what: str = "the array") -> None:
    """ConfigError unless the array is on GPU ``gpu`` (an array that does not say is taken as there)."""
    if info.device is not None and info.device != gpu:
        raise ConfigError(f"{what} is on GPU {info.device}, but the engine runs on GPU {gpu}",
                          hint=f"move it there first, or run the pipeline with device: {info.device}")


# ------------------------------------------------------------------------------------------ streams
def stream_handle(stream: Any) -> int:
    """A CUDA stream handle (int) from an int, a CuPy stream (``.ptr``) or a torch stream
    (``.cuda_stream``); None is the legacy default stream (0)."""
    if stream is None:
        return 0
    for attr in ("ptr", "cuda_stream"):
        value = getattr(stream, attr, None)
        if value is not None:
            return int(value)
    if isinstance(stream, (int, np.integer)) and int(stream) >= 0:
        return int(stream)
    raise ConfigError(f"stream={stream!r} is not a CUDA stream",
                      hint="give a stream handle (int), a cupy.cuda.Stream or a torch.cuda.Stream")


def caller_stream(info: DeviceArrayInfo, stream: Any = None) -> int:
    """The stream a device block is ordered on (module doc, "Ordering")."""
    if stream is not None:
        return stream_handle(stream)
    if info.framework == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    if info.framework == "torch":
        import torch

        return int(torch.cuda.current_stream(info.device).cuda_stream)
    if info.stream is not None:
        return int(info.stream)
    return 0


# ------------------------------------------------------------------------------------------ outputs
class DeviceArray:
    """GPU memory from the engine's device pool, exposing ``__cuda_array_interface__`` (v3): the
    output of a device block whose input came from neither CuPy nor torch while CuPy is not
    installed. Hand it to any CAI consumer (``numba.cuda.as_cuda_array``, ``cupy.asarray``,
    ``torch.as_tensor``); :meth:`to_numpy` copies it to the host after the device is idle. It
    speaks CAI only (no ``__dlpack__``)."""

    def __init__(self, device: Any, shape: tuple[int, ...], dtype: Any, *, stream: int = 0):
        from . import _native

        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._device = device
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._buffer = _native.DeviceBuffer(device, max(nbytes, 16))
        self.nbytes = nbytes
        self._stream = int(stream)

    @property
    def ptr(self) -> int:
        return int(self._buffer.ptr)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # CAI v3: 0 is not a valid stream value; the legacy default stream is 1
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": self._stream or LEGACY_STREAM}

    def to_numpy(self) -> np.ndarray:
        """A host copy, after every queued GPU work of the device is done (cuCtxSynchronize)."""
        self._device.synchronize()
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self._buffer.copy_to_host(out)
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, gpu={self._device.index})"


def _cupy_or_none() -> Any:
    if "cupy" in sys.modules:
        return sys.modules["cupy"]
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def empty_like_input(info: DeviceArrayInfo, shape: tuple[int, ...], dtype: np.dtype, gpu: int,
                     native_device: Any, stream: int) -> tuple[Any, int]:
    """A new array of ``shape``/``dtype`` on GPU ``gpu`` in the input's framework, and its device
    address (module doc)."""
    if info.framework == "torch":
        import torch

        t = torch.empty(shape, dtype=torch.float32 if dtype == np.float32 else torch.complex64,
                        device=f"cuda:{gpu}")
        return t, int(t.data_ptr())
    cupy = _cupy_or_none()
    if info.framework == "cupy" or cupy is not None:
        with cupy.cuda.Device(gpu):
            a = cupy.empty(shape, dtype=dtype)
        return a, int(a.data.ptr)
    a = DeviceArray(native_device, shape, dtype, stream=stream)
    return a, a.ptr



def concatenate(parts: list[Any], what: str) -> Any:
    """GPU arrays of one framework joined along samples, on the GPU (CuPy, torch); a ConfigError
    for other frameworks (return whole blocks from them)."""
    framework = framework_of(parts[0])
    if any(framework_of(p) != framework for p in parts):
        raise ConfigError(f"{what} returned GPU arrays of different frameworks")
    if framework == "cupy":
        import cupy

        return cupy.concatenate(parts, axis=1)
    if framework == "torch":
        import torch

        return torch.cat(parts, dim=1)
    raise ConfigError(f"{what} returned {type(parts[0]).__name__} arrays shorter than the block, which cannot be "
                      "joined on the GPU here: return whole blocks (n samples per call), or CuPy/torch arrays")


def to_host(x: Any) -> np.ndarray:
    """A NumPy copy of a GPU array, made by its own framework (CuPy, torch, DeviceArray), after
    the work queued on its stream."""
    framework = framework_of(x)
    if framework == "cupy":
        import cupy

        return cupy.asnumpy(x)
    if framework == "torch":
        return x.detach().cpu().numpy()
    if isinstance(x, DeviceArray):
        return x.to_numpy()
    cupy = _cupy_or_none()
    if cupy is not None:
        return cupy.asnumpy(cupy.asarray(x))
    raise ConfigError(f"a {type(x).__name__} GPU array cannot be copied to the host here", hint="install CuPy")
