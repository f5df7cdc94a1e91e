"""The custom ``kernel`` stage's Python side: parameters, spec, YAML, and the cpu refusal.

Its GPU behaviour is tested in tests/backends/test_cuda_kernel.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pygpukit_dsp import Pipeline
from pygpukit_dsp.errors import ConfigError, UnsupportedError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages import Kernel, stage_class

from .conftest import assert_documented, config_error

SRC = 'extern "C" __global__ void k(const float* a, float* b, long long c, long long n, long long ri, long long ro) {}'
REPO = Path(__file__).resolve().parents[2]


def test_registered_and_documented():
    assert stage_class("kernel") is Kernel
    assert_documented(Kernel)


def test_exactly_one_source(tmp_path):
    (tmp_path / "x.cu").write_text(SRC)
    assert "none was given" in str(config_error(Kernel, entry="k"))
    assert "not 'source' and 'source_file'" in str(config_error(Kernel, entry="k", source=SRC, source_file="x.cu",
                                                                base_dir=tmp_path))
    assert "source is empty" in str(config_error(Kernel, entry="k", source="  \n"))


def test_entry_threads_and_grid_are_checked():
    assert "C identifier" in str(config_error(Kernel, entry="my-kernel", source=SRC))
    assert "threads" in str(config_error(Kernel, entry="k", source=SRC, threads=2048))
    assert "grid" in str(config_error(Kernel, entry="k", source=SRC, grid=0))
    st = Kernel(entry="k", source=SRC, grid=12, threads=64)
    assert st.params.grid == 12 and st.params.threads == 64 and st.params.params == []


def test_params_are_the_float_scalars_from_python_too():
    st = Kernel(entry="k", source=SRC, params=[0.5, 2], name="mine")
    assert st.params.params == [0.5, 2.0] and st.name == "mine"
    assert "params" in str(config_error(Kernel, entry="k", source=SRC, params=["x"]))


def test_source_file_is_resolved_against_base_dir(tmp_path):
    (tmp_path / "g.cu").write_text(SRC)
    st = Kernel(entry="k", source_file="g.cu", base_dir=tmp_path)
    assert st.source_text() == SRC
    assert "file not found" in str(config_error(Kernel, entry="k", source_file="missing.cu", base_dir=tmp_path))


def test_output_spec_keeps_items_and_changes_channels_or_dtype():
    spec = SignalSpec(1000.0, 4, 64)
    assert Kernel(entry="k", source=SRC).output_spec(spec) == spec
    out = Kernel(entry="k", source=SRC, output={"channels": 1, "dtype": "complex64"}).output_spec(spec)
    assert out == spec.with_(channels=1, dtype="complex64")
    frames = SignalSpec(100.0, 2, 8, "complex64", "frames", 33)
    assert Kernel(entry="k", source=SRC, output={"dtype": "float32"}).output_spec(frames) == \
        frames.with_(dtype="float32")


def test_cpu_implementation_is_refused():
    with pytest.raises(UnsupportedError) as info:
        Kernel(entry="k", source=SRC, name="custom").cpu(SignalSpec(1000.0, 1, 16))
    assert info.value.stage == "custom" and info.value.backend == "cpu"
    assert "runs only on the cuda backend" in info.value.reason


def test_cpu_backend_refuses_it_at_open_time_before_any_block():
    p = Pipeline([Kernel(entry="k", source=SRC)], sample_rate=1000, channels=1, block_size=16, backend="cpu")
    with pytest.raises(UnsupportedError, match="runs only on the cuda backend"):
        p.process(np.zeros((1, 64), np.float32))


def test_auto_without_a_gpu_fails_at_start_with_the_reason():
    code = textwrap.dedent(f"""
    import json
    import numpy as np
    from pygpukit_dsp import Pipeline
    from pygpukit_dsp.errors import UnsupportedError
    from pygpukit_dsp.io import CallbackSource
    from pygpukit_dsp.stages import Kernel
    reads = []
    def source(n):
        reads.append(n)
        return np.zeros((1, n), np.float32)
    p = Pipeline([Kernel(entry="k", source={SRC!r})], sample_rate=1000, channels=1, block_size=16,
                 source=CallbackSource(fn=source))
    try:
        p.run(blocks=3)
    except UnsupportedError as exc:
        print(json.dumps({{"error": str(exc), "reads": len(reads)}}))
    """)
    import pygpukit_dsp

    package_parent = Path(pygpukit_dsp.__file__).resolve().parents[1]  # the package under test
    env = dict(os.environ, GK_LIBCUDA="/nonexistent/libcuda.so.1",
               PYTHONPATH=os.pathsep.join([str(package_parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(package_parent).anchor)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "runs only on the cuda backend" in out["error"]
    assert "backend 'auto' chose cpu because CUDA driver not detected" in out["error"]
    assert out["reads"] == 0  # refused before the first block was read


def test_yaml_round_trip(tmp_path):
    (tmp_path / "k.cu").write_text(SRC)
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""
        version: 1
        name: custom
        sample_rate: 48000
        channels: 2
        stages:
          - type: kernel
            name: mine
            entry: k
            source_file: k.cu
            threads: 128
            params: [0.5]
            output: {channels: 1}
    """))
    p = Pipeline.from_yaml(tmp_path / "p.yaml")
    st = p.stages[0]
    assert isinstance(st, Kernel) and st.source_text() == SRC
    cfg = st.to_config()
    assert cfg == {"type": "kernel", "name": "mine", "source_file": "k.cu", "entry": "k", "threads": 128,
                   "output": {"channels": 1}, "params": [0.5]}
    assert p.specs().output.channels == 1


def test_yaml_errors_point_at_the_stage(tmp_path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""
        version: 1
        name: custom
        sample_rate: 48000
        channels: 2
        stages:
          - type: kernel
            entry: k
            sourc: "x"
    """))
    with pytest.raises(ConfigError) as info:
        Pipeline.from_yaml(tmp_path / "p.yaml")
    assert "p.yaml:" in str(info.value) and "did you mean 'source'" in str(info.value)


def test_state_declaration_is_checked_and_lowered():
    from pygpukit_dsp.backends.cuda_ops.kernel import lower_kernel

    spec = SignalSpec(1000.0, 3, 64)
    st = Kernel(entry="k", source=SRC, state={"shape": [3, 2], "dtype": "complex64"})
    assert st.params.state.elements == 6 and st.state_bytes(spec) == 48
    desc = lower_kernel(st, spec, spec)
    assert desc.params["state_elements"] == 6 and desc.params["state_dtype"] == "complex64"
    one = Kernel(entry="k", source=SRC, state={"shape": 5})
    assert one.params.state.dtype == "float32" and one.state_bytes(spec) == 20
    # no state: the op gets none, and the kernel's arguments are as before
    plain = lower_kernel(Kernel(entry="k", source=SRC), spec, spec)
    assert plain.params["state_elements"] == 0 and Kernel(entry="k", source=SRC).state_bytes(spec) == 0
    assert "shape" in str(config_error(Kernel, entry="k", source=SRC, state={"shape": [3, 0]}))
    assert "shape" in str(config_error(Kernel, entry="k", source=SRC, state={"shape": []}))
    assert "dtype" in str(config_error(Kernel, entry="k", source=SRC, state={"shape": 2, "dtype": "int8"}))
    assert "split: channels cannot be used with state" in str(
        config_error(Kernel, entry="k", source=SRC, state={"shape": 2}, split="channels"))


def test_state_round_trips_through_yaml(tmp_path):
    (tmp_path / "p.yaml").write_text(textwrap.dedent(f"""
        version: 1
        name: custom
        sample_rate: 48000
        channels: 2
        stages:
          - type: kernel
            entry: k
            source: '{SRC}'
            state: {{shape: [2], dtype: float32}}
    """))
    st = Pipeline.from_yaml(tmp_path / "p.yaml").stages[0]
    assert st.params.state.elements == 2
    assert st.to_config()["state"] == {"shape": [2]}
