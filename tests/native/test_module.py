"""native/jit/module.cpp and the launch binding: module load, function lookup, argument packing.

The fake driver records each launch (dimensions and the first 8 bytes of every parameter), so
the packing of DeviceBuffers and NumPy scalars is checked without a GPU.
"""

from __future__ import annotations

import pytest

from .conftest import run_python

pytestmark = pytest.mark.usefixtures("nvrtc_available")


def test_kernel_arguments_reach_the_driver_as_their_c_types(fake_libcuda, tmp_path):
    out = run_python(f"""
        import ctypes, struct
        import numpy as np
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        fake.fake_cuda_last_dim.restype = ctypes.c_uint
        d = _native.Device(0)
        kernel = d.load_module('elementwise').function('gk_gain_c64')
        buf = _native.DeviceBuffer(d, 1024)
        s = _native.Stream(d)
        kernel.launch((3, 2), 128, [buf, np.float32(2.5), np.complex64(1 - 2j), np.uint64(7),
                                    np.int32(-3), struct.pack('<q', 99)], stream=s, shared_mem=64)
        print([fake.fake_cuda_last_dim(i) for i in range(7)])
        raw = ctypes.create_string_buffer(8)
        params = []
        for i in range(6):
            fake.fake_cuda_last_param(i, raw)
            params.append(raw.raw)
        print(struct.unpack('<Q', params[0])[0] == buf.ptr)
        print(struct.unpack('<f', params[1][:4])[0], struct.unpack('<2f', params[2]),
              struct.unpack('<Q', params[3])[0], struct.unpack('<i', params[4][:4])[0],
              struct.unpack('<q', params[5])[0])
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_PARAM_COUNT="6", GK_CACHE_DIR=str(tmp_path))
    assert out.splitlines() == [
        "[3, 2, 1, 128, 1, 1, 64]",
        "True",
        "2.5 (1.0, -2.0) 7 -3 99",
    ]


def test_argument_count_and_sizes_are_checked_when_the_driver_knows_them(fake_libcuda, tmp_path):
    out = run_python(f"""
        import ctypes
        import numpy as np
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        d = _native.Device(0)
        kernel = d.load_module('elementwise').function('gk_gain_f32')
        print(kernel.parameter_sizes)
        buf = _native.DeviceBuffer(d, 64)
        for args in ([buf, buf, np.float32(2)],
                     [buf, buf, np.float64(2), np.uint64(16)],
                     [buf, buf, np.float32(2), np.uint64(16)]):
            try:
                kernel.launch(1, 32, args)
                print('launched', fake.fake_cuda_launches())
            except ValueError as exc:
                print(exc)
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_PARAM_SIZES="8,8,4,8", GK_CACHE_DIR=str(tmp_path))
    assert out.splitlines() == [
        "[8, 8, 4, 8]",
        "kernel 'gk_gain_f32' takes 4 arguments, got 3",
        "kernel 'gk_gain_f32' argument 2 must be 4 bytes, got 8 (check the NumPy scalar type)",
        "launched 1",
    ]


def test_parameter_sizes_are_none_when_the_driver_cannot_tell(fake_libcuda, tmp_path):
    out = run_python("""
        from pygpukit_dsp import _native
        d = _native.Device(0)
        print(d.load_module('elementwise').function('gk_gain_f32').parameter_sizes)
    """, GK_LIBCUDA=fake_libcuda, GK_CACHE_DIR=str(tmp_path))
    assert out.strip() == "None"


def test_ambiguous_or_wrong_arguments_are_refused_before_launch(fake_libcuda, tmp_path):
    out = run_python(f"""
        import ctypes
        import numpy as np
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        d = _native.Device(0)
        kernel = d.load_module('elementwise').function('gk_gain_f32')
        buf = _native.DeviceBuffer(d, 64)
        cases = [
            (1, 1, [buf, 2.0]),
            (1, 1, [buf, 3]),
            (1, 1, [_native.PinnedBuffer(d, 64)]),
            (1, 1, [np.zeros(2, np.float32)]),
            (0, 1, [buf]),
            (1, (32, 33), [buf]),
            ((1, 1, 1, 1), 1, [buf]),
            ('1', 1, [buf]),
        ]
        for grid, block, args in cases:
            try:
                kernel.launch(grid, block, args)
            except (TypeError, ValueError) as exc:
                print(type(exc).__name__ + ':', exc)
        print('launches', fake.fake_cuda_launches())
    """, GK_LIBCUDA=fake_libcuda, GK_CACHE_DIR=str(tmp_path))
    lines = out.splitlines()
    assert lines[0].startswith("TypeError: kernel 'gk_gain_f32' argument 1 is a Python float, whose "
                               "C type is ambiguous; wrap it in a NumPy scalar")
    assert lines[1].startswith("TypeError: kernel 'gk_gain_f32' argument 1 is a Python int")
    assert lines[2].startswith("TypeError: kernel 'gk_gain_f32' argument 0 is a PinnedBuffer")
    assert lines[3].startswith("TypeError: kernel 'gk_gain_f32' argument 0 is an array")
    assert lines[4] == "ValueError: grid dimensions must be between 1 and 2**31-1, got 0"
    assert lines[5] == ("ValueError: kernel 'gk_gain_f32': a block of 1056 threads exceeds its "
                        "limit of 1024")
    assert lines[6] == "ValueError: grid must have 1 to 3 dimensions"
    assert lines[7] == "TypeError: grid must be an int or a tuple of up to 3 ints"
    assert lines[8] == "launches 0"


def test_modules_are_loaded_once_per_device_and_unloaded_when_dropped(fake_libcuda, tmp_path):
    out = run_python(f"""
        import ctypes, gc
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        d = _native.Device(0)
        a = d.load_module('elementwise')
        b = d.load_module('elementwise')
        print(a is b, fake.fake_cuda_live_modules(), a.name, a.device == d)
        c = d.load_module('elementwise', fast_math=True)   # another cubin: another module
        print(c is a, fake.fake_cuda_live_modules())
        k = a.function('gk_power_c64')
        del a, b, c
        gc.collect()
        print(fake.fake_cuda_live_modules(), k.name)  # the kernel keeps its module loaded
        del k
        gc.collect()
        print(fake.fake_cuda_live_modules())
    """, GK_LIBCUDA=fake_libcuda, GK_CACHE_DIR=str(tmp_path))
    assert out.splitlines() == [
        "True 1 elementwise True",
        "False 2",
        "1 gk_power_c64",
        "0",
    ]


def test_a_missing_function_or_a_bad_image_is_a_device_error(fake_libcuda, tmp_path):
    out = run_python(f"""
        from pygpukit_dsp import _native
        from pygpukit_dsp.errors import DeviceError
        d = _native.Device(0)
        try:
            d.load_module('elementwise').function('gk_missing_kernel')
        except DeviceError as exc:
            print(exc)
        try:
            d.load_cubin(b'definitely not a cubin', 'junk')
        except DeviceError as exc:
            print(exc.call, exc.code)
    """, GK_LIBCUDA=fake_libcuda, GK_CACHE_DIR=str(tmp_path))
    assert out.splitlines() == [
        "module 'elementwise' has no kernel named 'gk_missing_kernel' (is it declared "
        "extern \"C\" __global__?)",
        "cuModuleLoadData 200",
    ]


def test_a_failed_launch_names_the_kernel(fake_libcuda, tmp_path):
    out = run_python(f"""
        import numpy as np
        from pygpukit_dsp import _native
        from pygpukit_dsp.errors import DeviceError
        d = _native.Device(0)
        k = d.load_module('elementwise').function('gk_power_f32')
        buf = _native.DeviceBuffer(d, 64)
        try:
            k.launch(1, 32, [buf, buf, np.uint64(16)])
        except DeviceError as exc:
            print(exc)
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_LAUNCH_ERROR="1", GK_CACHE_DIR=str(tmp_path))
    assert out.strip() == ("cuLaunchKernel failed: CUDA_ERROR_NOT_SUPPORTED (operation not "
                           "supported) while launching kernel 'gk_power_f32'")
