"""The parallel-scan form of the CUDA sos op (backends/cuda_ops/sos_scan.py, native/ops/sos.cpp,
kernels/sos.cu): when the lowering takes it, its float64 transition matrices, and the algorithm
itself, emulated here in NumPy step by step as the kernels run it and compared with
scipy.signal.sosfilt over a stream; on the GPU, the op against sosfilt.

Tolerances. The emulation runs in float64 like the kernels: it differs from sosfilt only by the
rounding of the chunk-state combination (a few dozen 16 x 16 products), 1e-12 relative to the
signal's RMS. The GPU output is rounded to float32 (relative 6e-8 of each sample, a few times
that of the RMS at the peaks); max |gpu - sosfilt| <= 1e-5 RMS leaves a wide margin for that and
for float64 rounding amplified by poles near the unit circle, and is far below what a wrong
carry gives (an error of the order of the signal).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.signal as ss

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops import sos_scan
from pygpukit_dsp.backends.cuda_ops.sos import lower_sos
from pygpukit_dsp.backends.cuda_ops.sos_scan import (SCAN_STATE, chunk_length, group_length,
                                                      matrix_power_of_two, one_sample_transition,
                                                      scan_plan, takes_scan)
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.sos import Sos

from .compare import signal

# the benchmark's filter (benchmarks/sos_vs_cupyx.py): an 8-section elliptic band-pass
ELLIP8 = ss.ellip(8, 0.5, 60, [0.1, 0.25], btype="bandpass", output="sos")


def max_err_over_rms(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(y - ref)) / np.sqrt(np.mean(np.abs(ref) ** 2)))


# ------------------------------------------------------------------------------------- the rule

@pytest.mark.parametrize("sections,lanes,block,scan", [
    (8, 16, 65536, True),      # 16 ch x 65536
    (8, 1, 1 << 20, True),     # one long channel
    (8, 64, 256, False),       # small blocks keep the one-launch kernel
    (8, 16, 4095, False),
    (8, 16, 4096, True),
    (9, 16, 65536, False),     # more than 8 sections: the state does not fit the scan's registers
    (8, 1024, 65536, True),
    (8, 1025, 65536, False),   # enough lanes to fill the GPU one thread per lane
])
def test_the_scan_is_taken_by_block_shape(sections, lanes, block, scan):
    assert takes_scan(sections, lanes, block) is scan


@pytest.mark.parametrize("channels,block,complex_,scan", [
    (16, 65536, False, True), (1, 1 << 20, False, True), (64, 256, False, False),
    (512, 8192, True, True), (513, 8192, True, False),  # a complex channel is two lanes
])
def test_lowering_adds_the_scan_plan_only_where_it_is_taken(channels, block, complex_, scan):
    stage = Sos(sos=ELLIP8)
    spec = SignalSpec(sample_rate=48000, channels=channels, block_size=block,
                      dtype="complex64" if complex_ else "float32")
    params = lower_sos(stage, spec, stage.output_spec(spec)).params
    np.testing.assert_array_equal(params["sos"], ELLIP8)
    assert ("scan_chunk" in params) is scan
    if scan:
        plan = scan_plan(ELLIP8, channels * (2 if complex_ else 1), block)
        assert params["scan_chunk"] == plan.chunk and params["scan_group"] == plan.per_group
        assert params["scan_phi"].shape == params["scan_phi_group"].shape == (SCAN_STATE, SCAN_STATE)
        assert params["scan_phi"].dtype == np.float64


@pytest.mark.parametrize("lanes,block,chunk,chunks,per_group,groups", [
    (16, 65536, 64, 1024, 32, 32),
    (1, 1 << 20, 64, 16384, 128, 128),
    (2, 1 << 16, 32, 2048, 64, 32),
    (1, 100001, 32, 3126, 64, 49),          # a last chunk of one sample, a shorter last group
    (1024, 1 << 17, 4096, 32, 8, 4),        # the chunk stops growing at 4096
])
def test_chunking_fills_the_gpu_and_keeps_the_walks_short(lanes, block, chunk, chunks, per_group, groups):
    plan = scan_plan(ELLIP8, lanes, block)
    assert (plan.chunk, plan.chunks, plan.per_group, plan.groups) == (chunk, chunks, per_group, groups)
    assert chunk_length(lanes, block) == chunk and group_length(chunks) == per_group


# --------------------------------------------------------------------- the transition matrices

def sosfilt_state_after(sos: np.ndarray, state: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sosfilt's final state (flattened as the op's 2s, 2s+1) from ``state`` over input ``x``."""
    s = sos.shape[0]
    _, zf = ss.sosfilt(sos, x, zi=state[:2 * s].reshape(s, 2))
    return zf.reshape(-1)


def test_one_sample_transition_is_sosfilt_over_one_zero_sample():
    a = one_sample_transition(ELLIP8)
    for d in range(SCAN_STATE):
        e = np.zeros(SCAN_STATE)
        e[d] = 1.0
        want = np.zeros(SCAN_STATE)
        if d < 2 * ELLIP8.shape[0]:
            want[:2 * ELLIP8.shape[0]] = sosfilt_state_after(ELLIP8, e, np.zeros(1))
        np.testing.assert_allclose(a[:, d], want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("sos", [ELLIP8, ss.butter(3, 0.02, output="sos")])  # 8 and 2 sections
@pytest.mark.parametrize("length", [64, 4096])
def test_phi_is_the_state_transition_over_a_chunk_with_zero_input(sos, length):
    # A^L by squaring against sosfilt run over L zero samples from each unit state
    phi = matrix_power_of_two(one_sample_transition(sos), length)
    D = 2 * sos.shape[0]
    for d in range(D):
        e = np.zeros(SCAN_STATE)
        e[d] = 1.0
        want = sosfilt_state_after(sos, e, np.zeros(length))
        np.testing.assert_allclose(phi[:D, d], want, rtol=0, atol=1e-12 * max(1.0, np.abs(want).max()))
    assert not phi[D:].any() and not phi[:, D:].any()  # the padding stays zero


def test_powers_must_be_powers_of_two():
    with pytest.raises(ValueError):
        matrix_power_of_two(np.eye(2), 48)
    with pytest.raises(ValueError):
        one_sample_transition(np.tile(ELLIP8[:1], (9, 1)))


# ------------------------------------------------------------------ the algorithm, in NumPy

class ScanEmulation:
    """The five steps of the op on one stream of (lanes, block) float64 blocks, as the kernels run
    them (sosfilt stands in for a chunk's sequential cascade, which the kernels run as sosfilt)."""

    def __init__(self, sos: np.ndarray, lanes: int, block: int):
        self.sos, self.S = sos, sos.shape[0]
        self.plan = scan_plan(sos, lanes, block)
        self.zi = np.zeros((lanes, SCAN_STATE))  # the op's state, zero-padded

    def _chunk(self, x: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y, zf = ss.sosfilt(self.sos, x, zi=state[:2 * self.S].reshape(self.S, 2))
        out = np.zeros(SCAN_STATE)
        out[:2 * self.S] = zf.reshape(-1)
        return y, out

    def process(self, x: np.ndarray) -> np.ndarray:
        p = self.plan
        lanes, n = x.shape
        bounds = [(c * p.chunk, min((c + 1) * p.chunk, n)) for c in range(p.chunks)]
        y = np.zeros_like(x)
        for lane in range(lanes):
            # 1. each chunk from a zero state
            zf = np.array([self._chunk(x[lane, a:b], np.zeros(SCAN_STATE))[1] for a, b in bounds])
            # 2. each group's own contribution, from a zero state
            agg = np.zeros((p.groups, SCAN_STATE))
            for g in range(p.groups):
                s = np.zeros(SCAN_STATE)
                for c in range(g * p.per_group, min((g + 1) * p.per_group, p.chunks)):
                    s = p.phi @ s + zf[c]
                agg[g] = s
            # 3. each group's true start, from the stream's state
            gstart, s = np.zeros((p.groups, SCAN_STATE)), self.zi[lane]
            for g in range(p.groups):
                gstart[g] = s
                s = p.phi_group @ s + agg[g]
            # 4. each chunk's true start
            starts = np.zeros((p.chunks, SCAN_STATE))
            for g in range(p.groups):
                s = gstart[g]
                for c in range(g * p.per_group, min((g + 1) * p.per_group, p.chunks)):
                    starts[c] = s
                    s = p.phi @ s + zf[c]
            # 5. each chunk again from its true start; the last chunk's final state is kept
            for c, (a, b) in enumerate(bounds):
                y[lane, a:b], fin = self._chunk(x[lane, a:b], starts[c])
            self.zi[lane] = fin
        return y


@pytest.mark.parametrize("sos,lanes,block,total", [
    (ELLIP8, 2, 4096, 3 * 4096 + 1000),          # 128 chunks of 32 in 8 groups of 16, several blocks
    (ELLIP8, 1, 100001, 100001 + 5000),          # last chunk of one sample, shorter last group
    (ss.cheby1(8, 0.5, 0.06, output="sos"), 3, 5000, 2 * 5000 + 77),  # 4 sections, 157 chunks, the last of 8
])
def test_the_chunked_scan_equals_sosfilt_over_a_stream(sos, lanes, block, total):
    x = signal(lanes, total, False, seed=block).astype(np.float64)
    emu = ScanEmulation(sos, lanes, block)
    parts = []
    for a in range(0, total, block):
        xb = np.zeros((lanes, block))
        xb[:, :min(block, total - a)] = x[:, a:a + block]  # the final block zero-padded, as on the GPU
        parts.append(emu.process(xb)[:, :min(block, total - a)])
    ref = ss.sosfilt(sos, x, axis=-1)
    assert max_err_over_rms(np.concatenate(parts, axis=1), ref) < 1e-10


def test_the_emulated_state_after_a_block_is_sosfilt_state():
    x = signal(2, 8192, False, seed=4).astype(np.float64)
    emu = ScanEmulation(ELLIP8, 2, 8192)
    emu.process(x)
    _, zf = ss.sosfilt(ELLIP8, x, axis=-1, zi=np.zeros((8, 2, 2)))
    np.testing.assert_allclose(emu.zi, zf.transpose(1, 0, 2).reshape(2, 16), rtol=0,
                               atol=1e-12 * np.abs(zf).max())


def test_module_names_the_limits_it_documents():
    assert (sos_scan.SCAN_MAX_SECTIONS, sos_scan.SCAN_MIN_BLOCK, sos_scan.SCAN_MAX_LANES) == (8, 4096, 1024)


# ------------------------------------------------------------------------------------ on the GPU

def run_cuda(sos: np.ndarray, x: np.ndarray, block: int) -> np.ndarray:
    return Pipeline([Sos(sos=sos)], sample_rate=48000, block_size=block).process(x, backend="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
def test_gpu_16_channels_of_65536_match_sosfilt(complex_: bool):
    x = signal(16, 3 * 65536, complex_, seed=16)  # three blocks: the state carried between them
    y = run_cuda(ELLIP8, x, 65536)
    ref = ss.sosfilt(ELLIP8, x.astype(np.complex128 if complex_ else np.float64), axis=-1)
    assert y.dtype == x.dtype and max_err_over_rms(y, ref) < 1e-5


@pytest.mark.gpu
def test_gpu_one_channel_of_2_20_matches_sosfilt_with_an_odd_final_block():
    x = signal(1, 2 * (1 << 20) + 12345, False, seed=20)
    y = run_cuda(ELLIP8, x, 1 << 20)
    assert max_err_over_rms(y, ss.sosfilt(ELLIP8, x.astype(np.float64), axis=-1)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
def test_gpu_one_sample_last_chunk_and_short_last_group(complex_: bool):
    # 100001 samples: 3126 chunks of 32, the last of one sample; groups of 64, the last of 54
    x = signal(1, 3 * 100001 + 999, complex_, seed=1)
    y = run_cuda(ELLIP8, x, 100001)
    ref = ss.sosfilt(ELLIP8, x.astype(np.complex128 if complex_ else np.float64), axis=-1)
    assert max_err_over_rms(y, ref) < 1e-5


@pytest.mark.gpu
def test_gpu_small_blocks_keep_the_one_thread_per_lane_kernel_and_agree():
    # 2048-sample blocks (< 4096: one thread per lane) and 8192 (the scan) on the same signal
    x = signal(4, 8 * 8192 + 100, False, seed=7)
    ref = ss.sosfilt(ELLIP8, x.astype(np.float64), axis=-1)
    small, large = run_cuda(ELLIP8, x, 2048), run_cuda(ELLIP8, x, 8192)
    assert max_err_over_rms(small, ref) < 1e-5 and max_err_over_rms(large, ref) < 1e-5
    assert max_err_over_rms(small, large) < 2e-5


# ------------------------------------------------- the kernels themselves, compiled for the CPU

KERNELS = Path(__file__).resolve().parents[2] / "native" / "ops" / "kernels" / "sos.cu"
HARNESS = Path(__file__).resolve().parents[1] / "native" / "sos_kernels_on_cpu.cpp"
F32P, F64P = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_double)


@pytest.fixture(scope="module")
def cpu_kernels(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """sos.cu built for the CPU by tests/native/sos_kernels_on_cpu.cpp (threads for a CTA's
    threads, barriers for __syncwarp): the kernels' own code, run here without a GPU."""
    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the kernels for the CPU")
    folder = tmp_path_factory.mktemp("sos_kernels_on_cpu")
    src = KERNELS.read_text()
    src = src.replace('#include "gk_common.cuh"', "")
    src = src.replace("extern __shared__ double sos_shared[];", "__shared__ double sos_shared[8192];")
    (folder / "sos_kernels.inc").write_text(src)
    lib = folder / "libsos_kernels_on_cpu.so"
    subprocess.run([compiler, "-std=c++20", "-O2", "-shared", "-fPIC", "-pthread",
                    f'-DSOS_KERNELS="{folder / "sos_kernels.inc"}"', "-o", str(lib), str(HARNESS)],
                   check=True, timeout=300)
    dll = ctypes.CDLL(str(lib))
    i64, i32 = ctypes.c_int64, ctypes.c_int
    dll.cpu_sos_samples.argtypes = [F32P, F32P, F64P, F64P, i32, i64, i64, i32, i64, i64]
    dll.cpu_sos_scan.argtypes = [F32P, F32P, F64P, F64P, i32, i64, i64, i32, i64, i64, F64P, F64P, i64]
    return dll


def ptr(a: np.ndarray, kind):
    return a.ctypes.data_as(kind)


class CpuKernelStream:
    """One stream through the kernels on the CPU, block by block as the engine feeds the op: the
    final block zero-padded, the state in float64 between blocks (zi[(2 s + k) * lanes + lane])."""

    def __init__(self, dll: ctypes.CDLL, sos: np.ndarray, channels: int, block: int, complex_: bool,
                 scan: bool, per_unit: int = 0):
        self.dll, self.S, self.channels, self.block, self.complex_ = dll, sos.shape[0], channels, block, complex_
        self.lanes = channels * (2 if complex_ else 1)
        self.coef = np.ascontiguousarray(sos[:, [0, 1, 2, 4, 5]], dtype=np.float64)
        self.zi = np.zeros(2 * self.S * self.lanes)
        self.plan = scan_plan(sos, self.lanes, block) if scan else None
        self.per_unit = per_unit

    def process(self, x: np.ndarray) -> np.ndarray:
        dtype = np.complex64 if self.complex_ else np.float32
        xb = np.zeros((self.channels, self.block), dtype)
        xb[:, :x.shape[1]] = x
        out = np.zeros_like(xb)
        args = (ptr(out.view(np.float32), F32P), ptr(xb.view(np.float32), F32P), ptr(self.zi, F64P),
                ptr(self.coef, F64P), self.S, self.block, self.lanes, int(self.complex_))
        if self.plan is None:
            self.dll.cpu_sos_samples(*args, 0, self.block)
        else:
            p = self.plan
            self.dll.cpu_sos_scan(*args, p.chunk, p.per_group, ptr(p.phi, F64P), ptr(p.phi_group, F64P),
                                  self.per_unit)
        return out[:, :x.shape[1]]

    def run(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([self.process(x[:, a:a + self.block]) for a in range(0, x.shape[1], self.block)],
                              axis=1)


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("channels,block,total", [
    (2, 4096, 3 * 4096 + 1001),     # 128 chunks of 32 in 8 groups, an odd final block
    (1, 100001, 100001 + 4321),     # a last chunk of one sample, a shorter last group
])
def test_cpu_built_scan_kernels_match_sosfilt_over_a_stream(cpu_kernels, channels, block, total, complex_):
    x = signal(channels, total, complex_, seed=total)
    y = CpuKernelStream(cpu_kernels, ELLIP8, channels, block, complex_, scan=True).run(x)
    ref = ss.sosfilt(ELLIP8, x.astype(np.complex128 if complex_ else np.float64), axis=-1)
    assert y.dtype == x.dtype and max_err_over_rms(y, ref) < 1e-5


def test_cpu_built_scan_kernels_on_16_channels_of_65536(cpu_kernels):
    x = signal(16, 65536 + 5000, False, seed=65536)
    y = CpuKernelStream(cpu_kernels, ELLIP8, 16, 65536, False, scan=True).run(x)
    assert max_err_over_rms(y, ss.sosfilt(ELLIP8, x.astype(np.float64), axis=-1)) < 1e-5


def test_cpu_built_scan_kernels_on_one_channel_of_2_20(cpu_kernels):
    x = signal(1, 1 << 20, False, seed=20)
    y = CpuKernelStream(cpu_kernels, ELLIP8, 1, 1 << 20, False, scan=True).run(x)
    assert max_err_over_rms(y, ss.sosfilt(ELLIP8, x.astype(np.float64), axis=-1)) < 1e-5


@pytest.mark.parametrize("per_unit", [1, 7, 64])
def test_cpu_built_scan_kernels_in_units_are_bit_identical_to_the_whole_block(cpu_kernels, per_unit):
    # units 0..G-1 (step 1 of a unit group each), G..2G-1 (step 5; unit G first steps 2-4)
    x = signal(3, 2 * 5000 + 99, True, seed=per_unit)
    whole = CpuKernelStream(cpu_kernels, ELLIP8, 3, 5000, True, scan=True).run(x)
    split = CpuKernelStream(cpu_kernels, ELLIP8, 3, 5000, True, scan=True, per_unit=per_unit).run(x)
    np.testing.assert_array_equal(split, whole)


def test_cpu_built_small_block_kernel_matches_sosfilt_and_the_scan(cpu_kernels):
    x = signal(40, 4 * 4096 + 17, False, seed=40)
    ref = ss.sosfilt(ELLIP8, x.astype(np.float64), axis=-1)
    lanes_form = CpuKernelStream(cpu_kernels, ELLIP8, 40, 256, False, scan=False).run(x)
    scan_form = CpuKernelStream(cpu_kernels, ELLIP8, 40, 4096, False, scan=True).run(x)
    assert max_err_over_rms(lanes_form, ref) < 1e-5 and max_err_over_rms(scan_form, ref) < 1e-5


def test_cpu_built_scan_kernels_with_two_sections(cpu_kernels):
    sos = ss.butter(4, 0.01, output="sos")  # poles near z = 1: the chunk transition decays slowly
    x = signal(2, 3 * 8192, False, seed=2)
    y = CpuKernelStream(cpu_kernels, sos, 2, 8192, False, scan=True).run(x)
    assert max_err_over_rms(y, ss.sosfilt(sos, x.astype(np.float64), axis=-1)) < 1e-5
