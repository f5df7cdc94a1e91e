"""Chunked blocks: the throughput ops split a full block into units (Op::units /
Op::enqueue_units) and any split of the units into consecutive chunks gives the full block's
result, streaming state included.

Every test streams the same signal through two CUDA engines of one pipeline: ``split`` runs each
full block as the chunks between a list of cuts (``CudaEngine.process_split``: one cut, many
cuts, every unit on its own, a seeded random list, and no cut), ``whole`` runs it with
``process()``; the final partial block goes through ``process(final=True)`` on both. The
outputs must agree block by block, and the whole stream must match the CPU backend.

Tolerances (relative Frobenius error unless "exact"):
* exact: ops whose units compute every output exactly as the full block does (element-wise
  ops, the direct FIR, the small-matrix mix kernel, average over whole groups);
* 1e-6: average with groups cut by unit boundaries (float64 sums in another order);
* 1e-5: cuFFT and cuBLAS paths (a unit's plan / gemm has another batch or width);
* against the CPU: 1e-5, 1e-4 for averaged power spectra (as the per-op tests).

Units were later given to the ops that ran as one chunk (the end of this file): sos (sample ranges;
the scan form's steps over chunk groups), resample (output samples), channelizer (output
frames: another cuFFT batch, 1e-5), gain (floats), delay (channels), kernel (channels, with
``split: channels``) and fir_mix (time tiles); all but the channelizer bit-identical.
"""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cpu import CpuEngine
from pygpukit_dsp.pipeline import Pipeline, SpecChain
from pygpukit_dsp.signal import SignalSpec

from .compare import rel_err

pytestmark = pytest.mark.gpu


# ---------------------------------------------------------------------------------------------
# helpers

def cut_lists(units: int, seed: int) -> list[list[int]]:
    """One cut, many cuts, every unit separately, seeded random cuts, no cut (in that order)."""
    rng = np.random.default_rng(seed)
    inner = np.arange(1, units)
    random = sorted(int(c) for c in rng.choice(inner, size=int(rng.integers(1, units)), replace=False))
    return [[units // 2], list(range(2, units, 2)) or [1], list(range(1, units)), random, []]


def chain_of(stage_list: list, spec_in: SignalSpec) -> SpecChain:
    specs = [spec_in]
    for st in stage_list:
        specs.append(st.output_spec(specs[-1]))
    return SpecChain(tuple(specs))


def cpu_stream(stage_list: list, spec_in: SignalSpec, x: np.ndarray) -> np.ndarray:
    eng = CpuEngine(Pipeline(list(stage_list)), chain_of(stage_list, spec_in), BackendChoice("cpu", "test"))
    n, bs = x.shape[1], spec_in.block_size
    return np.concatenate([eng.process(x[:, s:s + bs], final=s + bs >= n) for s in range(0, n, bs)], axis=1)


def signal(shape: tuple, complex_: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if complex_:
        return (x + 1j * rng.standard_normal(shape)).astype(np.complex64)
    return x.astype(np.float32)


def check_split_stream(stage_list: list, spec_in: SignalSpec, *, exact: bool = False,
                       rtol: float = 1e-5, cpu_rtol: float = 1e-5, kinds: list[str] | None = None,
                       cuts_used: tuple[int, ...] = (0, 1, 2, 3, 4), partial: int | None = None,
                       seed: int = 0, cpu: bool = True) -> int:
    """Stream full blocks split as ``cut_lists`` says (one list per block, state carried) and a
    partial final block; compare with the unsplit engine and the CPU. Returns units_per_block."""
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    bs = spec_in.block_size
    partial = bs // 3 + 1 if partial is None else partial
    shape = (spec_in.channels, bs * len(cuts_used) + partial) + ((spec_in.bins,) if spec_in.bins else ())
    x = signal(shape, spec_in.dtype == "complex64", seed)
    chain = chain_of(stage_list, spec_in)
    split = CudaEngine(Pipeline(list(stage_list)), chain, BackendChoice("cuda", "test"))
    whole = CudaEngine(Pipeline(list(stage_list)), chain, BackendChoice("cuda", "test"))
    try:
        if kinds is not None:
            assert [op.kind for op in split.ops] == kinds
        units = split.units_per_block
        assert units > 1, f"a block of {shape[1:]} should split into units, got {units}"
        assert whole.units_per_block == units  # deterministic from the layout
        lists = cut_lists(units, seed)
        outs = []
        for i, which in enumerate(cuts_used):
            block = x[:, i * bs:(i + 1) * bs]
            a = split.process_split(block, lists[which])
            b = whole.process(block)
            assert a.shape == b.shape and a.dtype == b.dtype
            if exact:
                np.testing.assert_array_equal(a, b, err_msg=f"block {i}, cuts {lists[which]}")
            else:
                assert rel_err(a, b) < rtol, (i, lists[which], rel_err(a, b))
            outs.append(a)
        tail = x[:, len(cuts_used) * bs:]
        a, b = split.process(tail, final=True), whole.process(tail, final=True)
        if exact:
            np.testing.assert_array_equal(a, b)
        else:
            assert rel_err(a, b) < rtol
        outs.append(a)
    finally:
        split.close()
        whole.close()
    if cpu:  # (a custom kernel has no CPU implementation: its test checks the numbers itself)
        y, ref = np.concatenate(outs, axis=1), cpu_stream(stage_list, spec_in, x)
        assert y.shape == ref.shape and y.dtype == ref.dtype
        assert rel_err(y, ref) < cpu_rtol
    return units


def time_spec(channels: int, block: int, complex_: bool = False, rate: float = 48000.0) -> SignalSpec:
    return SignalSpec(rate, channels, block, "complex64" if complex_ else "float32")


def frames_spec(channels: int, frames: int, bins: int, complex_: bool) -> SignalSpec:
    return SignalSpec(100.0, channels, frames, "complex64" if complex_ else "float32", "frames", bins)


# ---------------------------------------------------------------------------------------------
# fft family: units over the block's transforms (channel x frame rows)

@pytest.mark.parametrize("complex_", [False, True])
def test_fft_splits_over_frames(complex_: bool):
    # 2 ch x 64 frames of 256: 128 transforms, 16 a unit -> 8 units
    assert check_split_stream([stages.Fft(n=256)], time_spec(2, 256 * 64, complex_), kinds=["fft"]) == 8


def test_rfft_with_odd_rows_and_a_shorter_last_unit():
    # rows of 100 samples / 51 bins: units of 42 transforms (16-byte offsets), the last of 2
    assert check_split_stream([stages.Rfft(n=100)], time_spec(2, 100 * 64), kinds=["rfft"]) == 4


def test_ifft_splits_over_frames():
    check_split_stream([stages.Ifft()], frames_spec(3, 40, 128, True), kinds=["ifft"])


@pytest.mark.parametrize("n,bins", [(128, 65), (129, 65)])
def test_irfft_splits_over_frames(n: int, bins: int):
    check_split_stream([stages.Irfft(n=n)], frames_spec(2, 96, bins, True), kinds=["irfft"])


def test_one_transform_per_channel_splits_over_channels():
    check_split_stream([stages.Fft(n=4096)], time_spec(16, 4096, True), kinds=["fft"])


# ---------------------------------------------------------------------------------------------
# stft: units over frame rows; the history is read by every unit and updated after the last

@pytest.mark.parametrize("complex_", [False, True])
def test_stft_with_overlap_carries_its_history_across_split_blocks(complex_: bool):
    st = stages.Stft(nfft=256, hop=64)
    units = check_split_stream([st], time_spec(2, 64 * 128, complex_), kinds=["stft"])
    assert units == 16  # 256 frames of 256 samples, 16 a unit


def test_stft_history_longer_than_a_unit():
    # nfft 1024 with hop 32: a frame reaches 31 hops back, over several units' frames
    check_split_stream([stages.Stft(nfft=1024, hop=32)], time_spec(1, 32 * 256), kinds=["stft"])


# ---------------------------------------------------------------------------------------------
# the fused W2 op: every unit runs all CTAs over a slice of their frames; reduce in the last

@pytest.mark.parametrize("nfft,frames", [(1024, 512), (4096, 1024)])
def test_fused_stft_power_average_splits_over_frame_steps(nfft: int, frames: int):
    st = [stages.Stft(nfft=nfft, hop=nfft), stages.Power(), stages.Average(frames=frames)]
    spec = time_spec(1, 1 << 22, True, rate=1e6)  # 4 Mi samples: units of >= 1 Mi samples
    check_split_stream(st, spec, kinds=["stft_power_average"], rtol=1e-5, cpu_rtol=1e-4,
                       cuts_used=(0, 2, 3), partial=(1 << 21) + nfft // 2)


# ---------------------------------------------------------------------------------------------
# element-wise: element ranges, bit-identical

@pytest.mark.parametrize("stage_list,complex_", [
    ([stages.Power()], True),
    ([stages.Power()], False),
    ([stages.Magnitude()], True),
    ([stages.Db(kind="power")], False),
    ([stages.Power(), stages.Db(kind="power")], True),  # fused power_db
])
def test_elementwise_splits_over_element_ranges(stage_list, complex_: bool):
    spec = frames_spec(2, 64, 129, complex_)  # 16512 elements: 5 units of 4096 (last 128)
    assert check_split_stream(stage_list, spec, exact=True) == 5


def test_elementwise_time_domain():
    check_split_stream([stages.Magnitude()], time_spec(3, 10000), exact=True)


# ---------------------------------------------------------------------------------------------
# average: frame ranges; whole groups per unit, or groups cut and carried in float64

@pytest.mark.parametrize("complex_", [False, True])
def test_average_whole_groups_per_unit(complex_: bool):
    # k = 4 on 256 frames of 33 bins x 2 ch: units of 64 frames (16 groups each), bit-identical
    assert check_split_stream([stages.Average(frames=4)], frames_spec(2, 256, 33, complex_),
                              exact=True) == 4


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("k,frames", [(256, 256), (96, 192), (100, 300)])
def test_average_groups_cut_by_unit_boundaries(complex_: bool, k: int, frames: int):
    # units of 63-64 frames: every group spans several units (and not at their boundaries)
    check_split_stream([stages.Average(frames=k)], frames_spec(2, frames, 33, complex_), rtol=1e-6,
                       cpu_rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# fir: channels, both strategies, state per channel

@pytest.mark.parametrize("x_complex,h_complex", [(False, False), (True, False), (False, True), (True, True)])
def test_fir_direct_splits_over_channels(x_complex: bool, h_complex: bool):
    rng = np.random.default_rng(3)
    taps = rng.standard_normal(200) + (1j * rng.standard_normal(200) if h_complex else 0)
    fir = stages.Fir(taps=taps, method="direct")
    assert check_split_stream([fir], time_spec(8, 4096, x_complex), exact=True, kinds=["fir"]) == 8


def test_fir_direct_per_channel_taps_and_blocks_shorter_than_the_filter():
    fir = stages.Fir(taps=np.random.default_rng(4).standard_normal((24, 700)), method="direct")
    check_split_stream([fir], time_spec(24, 512), exact=True, kinds=["fir"])  # 3 units of 8 ch


@pytest.mark.parametrize("x_complex,h_complex", [(False, False), (True, False), (False, True)])
def test_fir_overlap_save_splits_over_channels(x_complex: bool, h_complex: bool):
    rng = np.random.default_rng(5)
    taps = rng.standard_normal((7, 700)) + (1j * rng.standard_normal((7, 700)) if h_complex else 0)
    fir = stages.Fir(taps=taps, method="overlap_save")  # per-channel spectra
    # units of 2 channels (>= 4096 samples), the last of 1: a second cuFFT plan
    assert check_split_stream([fir], time_spec(7, 3000, x_complex), kinds=["fir"]) == 4


def test_fir_overlap_save_block_shorter_than_the_history():
    fir = stages.Fir(taps=np.random.default_rng(6).standard_normal(2000), method="overlap_save")
    check_split_stream([fir], time_spec(12, 1024), kinds=["fir"])


# ---------------------------------------------------------------------------------------------
# mix: columns (samples or frames); kernel (exact) and cuBLAS paths

@pytest.mark.parametrize("m_complex,x_complex", [(False, False), (True, True), (True, False), (False, True)])
def test_mix_kernel_splits_over_columns(m_complex: bool, x_complex: bool):
    m = signal((4, 16), m_complex, 7).astype(np.complex128 if m_complex else np.float64)
    assert check_split_stream([stages.Mix(matrix=m)], time_spec(16, 8192, x_complex), exact=True,
                              kinds=["mix"]) > 16


def test_mix_kernel_per_bin_matrices_split_over_frames():
    m = signal((33, 3, 5), True, 8).astype(np.complex128)
    check_split_stream([stages.Mix(matrix=m)], frames_spec(5, 128, 33, True), exact=True)


@pytest.mark.parametrize("m_complex,x_complex", [(False, False), (True, True), (True, False), (False, True)])
def test_mix_cublas_splits_over_columns(m_complex: bool, x_complex: bool):
    # 72 x 64 > 4096 entries: cuBLAS (the kernel when cuBLAS cannot be loaded: still on the GPU)
    m = signal((72, 64), m_complex, 9).astype(np.complex128 if m_complex else np.float64)
    check_split_stream([stages.Mix(matrix=m)], time_spec(64, 2048, x_complex), kinds=["mix"])


@pytest.mark.parametrize("m_complex,x_complex", [(False, False), (True, True), (True, False), (False, True)])
def test_mix_cublas_per_bin_splits_over_frames(m_complex: bool, x_complex: bool):
    m = signal((9, 70, 60), m_complex, 10).astype(np.complex128 if m_complex else np.float64)
    check_split_stream([stages.Mix(matrix=m)], frames_spec(60, 64, 9, x_complex), kinds=["mix"])


# ---------------------------------------------------------------------------------------------
# chains: chunks that cross op boundaries

def test_stft_power_average_unfused_chain_split_across_ops():
    # real input: no fusion, three chunkable ops: 16 + 9 + 8 units (average: 16-frame units,
    # each 32-frame group cut in two)
    st = [stages.Stft(nfft=256, hop=128), stages.Power(), stages.Average(frames=32)]
    units = check_split_stream(st, time_spec(2, 128 * 128), kinds=["stft", "power", "average"],
                               cpu_rtol=1e-4)
    assert units == 33


def test_fir_then_mix_unfused_split_across_ops():
    # a long filter takes overlap-save, so fir and mix stay two ops (no fir_mix fusion)
    rng = np.random.default_rng(11)
    st = [stages.Fir(taps=rng.standard_normal(3000), method="overlap_save"),
          stages.Mix(matrix=rng.standard_normal((3, 6)))]
    check_split_stream(st, time_spec(6, 4096), kinds=["fir", "mix"])


# ---------------------------------------------------------------------------------------------
# the ops that ran as one chunk

@pytest.mark.parametrize("complex_", [False, True])
def test_gain_splits_over_floats(complex_: bool):
    # 3 ch x 10000 samples: 30000 floats (60000 complex): units of >= 4096 floats, 64-aligned
    assert check_split_stream([stages.Gain(linear=-0.75)], time_spec(3, 10000, complex_), exact=True,
                              kinds=["gain"]) > 4


@pytest.mark.parametrize("samples", [[0, 3, 17, 1, 0, 250, 9, 64], 0])
def test_delay_splits_over_channels(samples):
    # one unit per channel (each >= 4096 samples); zero delays are row copies
    units = check_split_stream([stages.Delay(samples=samples)], time_spec(8, 4096), exact=True, kinds=["delay"])
    assert units == 8


@pytest.mark.parametrize("complex_", [False, True])
def test_sos_one_thread_per_lane_splits_over_samples(complex_: bool):
    # 20 sections (> 8: the one-thread-per-lane kernel) on 5 channels x 8192: sample ranges of
    # 832 (>= 4096 samples over the lanes, multiples of 32), state carried through zi
    import scipy.signal as ss

    a = ss.iirfilter(10, [0.1, 0.3], btype="bandpass", ftype="ellip", rp=0.5, rs=60, output="sos")
    b = ss.iirfilter(10, 0.4, btype="lowpass", ftype="cheby1", rp=1.0, output="sos")
    st = stages.Sos(sos=np.vstack([a, b]))
    assert check_split_stream([st], time_spec(5, 8192, complex_), exact=True, kinds=["sos"],
                              cpu_rtol=1e-4) > 4


@pytest.mark.parametrize("complex_", [False, True])
def test_sos_scan_form_splits_its_steps_over_chunk_groups(complex_: bool):
    # <= 8 sections, 2 channels x 70000: the scan form; units = 2 x groups of its chunks
    st = stages.Sos(design={"kind": "cheby1", "order": 8, "cutoff_hz": 3000, "rp": 0.5})
    units = check_split_stream([st], time_spec(2, 70000, complex_), exact=True, kinds=["sos"])
    assert units % 2 == 0 and units >= 4


@pytest.mark.parametrize("complex_", [False, True])
def test_resample_splits_over_output_samples(complex_: bool):
    # 3/2 on 4 ch x 6000: 9000 outputs per channel in units of >= 1024 (4096 over the channels)
    st = stages.Resample(up=3, down=2)
    assert check_split_stream([st], time_spec(4, 6000, complex_), exact=True, kinds=["resample"]) > 4


@pytest.mark.parametrize("complex_", [False, True])
def test_channelizer_splits_over_output_frames(complex_: bool):
    # M = 16 on 4 ch x 16384: 1024 output frames, units of 64 frames (64 subchannels x 4 ch each)
    st = stages.Channelizer(channels=16, taps_per_channel=8)
    assert check_split_stream([st], time_spec(4, 16384, complex_), kinds=["channelizer"]) == 16


def test_channelizer_with_a_shorter_last_unit():
    # 100 frames of M = 8 on 6 channels: units of 86 rows (>= 4096 outputs), the last of 14
    st = stages.Channelizer(channels=8, taps_per_channel=4)
    assert check_split_stream([st], time_spec(6, 800), kinds=["channelizer"]) == 2


def test_custom_kernel_with_split_channels_splits_over_channels():
    src = """extern "C" __global__ void twice(const float* in, float* out, long long channels, long long items,
                                       long long row_in, long long row_out) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        long long c = i / row_out, t = i % row_out;
        if (c < channels && t < items) out[c * row_out + t] = 2.0f * in[c * row_in + t] + (float)c * 0.0f;
    }"""
    k = stages.Kernel(source=src, entry="twice", split="channels")
    spec = time_spec(16, 4096)
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    assert check_split_stream([k], spec, exact=True, kinds=["kernel"], cpu=False) == 16
    eng = CudaEngine(Pipeline([k]), chain_of([k], spec), BackendChoice("cuda", "test"))
    try:
        x = signal((16, 4096), False, 3)
        np.testing.assert_array_equal(eng.process_split(x, [3, 9]), 2 * x)
    finally:
        eng.close()
    whole = stages.Kernel(source=src, entry="twice")  # split: none (the default): one unit
    eng = CudaEngine(Pipeline([whole]), chain_of([whole], spec), BackendChoice("cuda", "test"))
    try:
        assert eng.units_per_block == 1
    finally:
        eng.close()


@pytest.mark.parametrize("block", [256, 4096])
def test_fir_mix_splits_over_time_tiles(block: int):
    # W1's shape (64 ch, 256 taps, 16 x 64 mix): 16 tiles of 16 samples, units of 4 tiles; and a
    # longer block. Either kernel (cluster on SM 9.0+, split below) counts CTAs against the whole
    # block, so the history phase flips once per block whatever the cuts.
    rng = np.random.default_rng(12)
    st = [stages.Fir(taps=rng.standard_normal(256) / 16), stages.Mix(matrix=rng.standard_normal((16, 64)))]
    units = check_split_stream(st, time_spec(64, block), exact=True, kinds=["fir_mix"])
    assert units == (4 if block == 256 else 64)


@pytest.mark.parametrize("kernel", ["split", "cluster"])
def test_both_fir_mix_kernels_split_over_time_tiles(kernel: str):
    # each kernel forced through the op's parameter (cluster needs SM 9.0+: skipped below it)
    from pygpukit_dsp import _native
    from pygpukit_dsp.backends import cuda_lowering
    from pygpukit_dsp.backends.cuda_engine import op_dict

    dev = _native.Device(0)
    if kernel == "cluster" and dev.sm[0] < 9:
        pytest.skip("the cluster kernel needs SM 9.0+")
    rng = np.random.default_rng(13)
    st = [stages.Fir(taps=rng.standard_normal(40) / 8), stages.Mix(matrix=rng.standard_normal((5, 12)))]
    spec = time_spec(12, 2048)
    (op,) = cuda_lowering.lower_pipeline(Pipeline(list(st)), chain_of(st, spec))
    d = op_dict(op)
    d["params"]["kernel"] = kernel
    split, whole = (_native.StreamEngine(dev, [d], use_graph=False) for _ in range(2))
    try:
        units = split.units_per_block
        assert units > 4
        x = signal((12, 2048 * 5), False, 14)
        for i, cuts in enumerate(cut_lists(units, 15)):
            blk = np.ascontiguousarray(x[:, i * 2048:(i + 1) * 2048])
            a = np.array(split.process_split(0, blk, False, cuts), copy=True)
            b = np.array(whole.process(0, blk, False), copy=True)
            np.testing.assert_array_equal(a, b, err_msg=f"block {i}, cuts {cuts}")
    finally:
        split.close()
        whole.close()
