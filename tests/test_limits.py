"""Size limits: absurd parameters name their limit; a block that cannot fit is refused before the first
block (limits.check_memory, through backends.open_backend)."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import limits
from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.spec import load_text
from pygpukit_dsp.stages import STAGES, make_stage


@pytest.mark.parametrize("type_name, params, limit", [
    ("fir", {"design": {"numtaps": 10**12, "cutoff_hz": 1000}}, limits.MAX_TAPS),
    ("fir", {"taps": np.ones(limits.MAX_TAPS + 1)}, limits.MAX_TAPS),
    ("delay", {"samples": 10**15}, limits.MAX_DELAY),
    ("delay", {"samples": [0, 2**40]}, limits.MAX_DELAY),
    ("stft", {"nfft": 2**40}, limits.MAX_FFT),
    ("fft", {"n": 2**40}, limits.MAX_FFT),
    ("irfft", {"n": 2**40}, limits.MAX_FFT),
    ("resample", {"up": 10**9, "down": 3}, limits.MAX_RESAMPLE_FACTOR),
    ("resample", {"up": 2, "down": 1, "taps": 10**12}, limits.MAX_TAPS),
    ("channelizer", {"channels": 10**9}, limits.MAX_CHANNELS),
    ("channelizer", {"channels": 1024, "taps_per_channel": 10**6}, limits.MAX_TAPS),
])
def test_absurd_parameters_name_the_limit(type_name, params, limit):
    with pytest.raises(ConfigError, match=f"above the limit of {limit}"):
        make_stage(type_name, **params)


def test_unreduced_ratio_within_the_limit_is_fine():
    assert make_stage("resample", up=480000, down=441000).ratio == (160, 147)


def test_pipeline_channels_limit_in_python_and_yaml():
    with pytest.raises(ConfigError, match="channels must be 1..65536"):
        Pipeline([], sample_rate=48000, channels=10**9)
    with pytest.raises(ConfigError, match=r"<string>:2:11: channels 1000000000 is above the limit of 65536"):
        load_text("version: 1\nchannels: 1000000000\n")


def test_non_finite_and_overflowing_values_are_config_errors():
    for text in ("version: 1\nsample_rate: .inf\n", "version: 1\nsample_rate: 1" + "0" * 400 + "\n"):
        with pytest.raises(ConfigError, match="<string>:2:14: sample_rate must be a positive number"):
            load_text(text)
    with pytest.raises(ConfigError, match="finite"):
        make_stage("gain", db=float("nan"))
    with pytest.raises(ConfigError, match="above the limit of 770"):
        make_stage("gain", db=6166)
    with pytest.raises(ConfigError, match="float32 range"):
        make_stage("db", floor_db=1e12)
    with pytest.raises(ConfigError, match="expected a list of real numbers"):
        make_stage("sos", sos=[[10**400, 0, 0, 1, 0, 0]])


def test_rate_out_of_range_after_a_stage_is_a_config_error():
    p = Pipeline([make_stage("resample", up=65536, down=1)], sample_rate=1e305, channels=1)
    with pytest.raises(ConfigError, match="stage 'resample'.*sample rate must be a finite number"):
        p.specs()


def test_block_that_cannot_fit_is_refused_before_the_first_block():
    p = Pipeline([make_stage("gain", db=-6)], name="big", sample_rate=48000, channels=limits.MAX_CHANNELS,
                 block_size=limits.MAX_BLOCK_SIZE)
    with pytest.raises(ConfigError) as info:
        p.process(np.zeros((limits.MAX_CHANNELS, 16), np.float32), backend="cpu")
    msg = str(info.value)
    assert "pipeline 'big' needs about 128.0 TiB per block" in msg
    assert "65536 ch x 268435456 float32 samples" in msg
    assert "of available memory" in msg and info.value.hint == "lower block_size (268435456) or channels"


def test_run_is_refused_the_same_way():
    (p,) = [Pipeline.from_config(c) for c in load_text(
        "version: 1\nname: big\nsample_rate: 48000\nchannels: 65536\nblock_size: 268435456\n"
        "backend: cpu\nsource: {type: synth}\nsink: {type: 'null'}\n", filename="big.yaml")]
    with pytest.raises(ConfigError, match=r"^big.yaml:1:1: pipeline 'big' needs about 64.0 TiB per block"):
        p.run(blocks=1)


def test_stage_state_counts_and_is_named():
    p = Pipeline([make_stage("delay", samples=limits.MAX_DELAY)], sample_rate=48000,
                 channels=limits.MAX_CHANNELS, block_size=1)
    with pytest.raises(ConfigError, match=r"stage 'delay' \(delay\) state, 16.0 TiB") as info:
        p.process(np.zeros((limits.MAX_CHANNELS, 0), np.float32), backend="cpu")
    assert "size parameters" in info.value.hint


def test_check_uses_available_memory(monkeypatch):
    p = Pipeline([make_stage("fir", taps=np.ones(1000))], sample_rate=48000, channels=2, block_size=1024)
    chain = p.specs()
    need = sum(n for n, _ in limits.block_memory(p, chain))
    assert need > 2 * chain.input.block_nbytes  # the filter's history counts too
    monkeypatch.setattr(limits, "available_host_memory", lambda: need - 1)
    with pytest.raises(ConfigError, match="more than this machine's"):
        limits.check_memory(p, chain, "cpu")
    monkeypatch.setattr(limits, "available_host_memory", lambda: need)
    limits.check_memory(p, chain, "cpu")
    monkeypatch.setattr(limits, "available_host_memory", lambda: None)  # unknown: no check
    limits.check_memory(p, chain, "cpu")


def test_cuda_checks_gpu_memory_and_cpu_never_asks(monkeypatch):
    p = Pipeline([], sample_rate=48000, channels=1, block_size=1024)
    chain = p.specs()

    def no_gpu_here():
        raise AssertionError("the GPU was asked on the cpu backend")

    monkeypatch.setattr(limits, "_gpu_free_memory", no_gpu_here)
    limits.check_memory(p, chain, "cpu")
    monkeypatch.setattr(limits, "_gpu_free_memory", lambda device=0: 1024)
    with pytest.raises(ConfigError, match="more than this machine's 1.0 KiB of free GPU memory"):
        limits.check_memory(p, chain, "cuda")


def test_every_stage_estimates_without_allocating():
    """state_bytes is plain arithmetic: a spec far beyond memory costs nothing to estimate."""
    from pygpukit_dsp.signal import SignalSpec

    spec = SignalSpec(48000, 64, 2**40)
    seeds = {"channelizer": {"channels": 4}, "delay": {"samples": 5}, "fir": {"taps": [1, 2]},
             "resample": {"up": 3, "down": 2}, "stft": {"nfft": 256}}
    for type_name, params in seeds.items():
        assert make_stage(type_name, **params).state_bytes(spec) > spec.block_nbytes
    assert STAGES["gain"](db=1).state_bytes(spec) == 0


def test_fmt_bytes():
    assert limits.fmt_bytes(512) == "512 B"
    assert limits.fmt_bytes(1536) == "1.5 KiB"
    assert limits.fmt_bytes(2**40 * 256) == "256.0 TiB"


def test_block_size_limit_in_python_and_yaml():
    with pytest.raises(ConfigError, match=f"block_size must be a whole number from 1 to {limits.MAX_BLOCK_SIZE}"):
        Pipeline([], sample_rate=48000, channels=1, block_size=limits.MAX_BLOCK_SIZE + 1)
    Pipeline([], sample_rate=48000, channels=1, block_size=limits.MAX_BLOCK_SIZE)
    with pytest.raises(ConfigError, match=r"^<string>:2:13: block_size 4000000000 is above the limit of 268435456"):
        load_text("version: 1\nblock_size: 4000000000\n")


def test_a_state_that_grows_with_the_block_blames_block_size_not_the_taps():
    """A 63-tap FIR's work arrays span the block: its state is the largest part, and block_size is
    what to lower."""
    p = Pipeline([make_stage("fir", taps=np.ones(63))], name="wide", sample_rate=48000,
                 channels=limits.MAX_CHANNELS, block_size=1 << 26)
    with pytest.raises(ConfigError, match=r"largest part: stage 'fir' \(fir\) state \(it grows with block_size, "
                                          r"67108864\)") as info:
        p.process(np.zeros((limits.MAX_CHANNELS, 0), np.float32), backend="cpu")
    assert info.value.hint == "lower block_size (67108864) or channels"
    assert [grows for _, label, grows in limits._memory_items(p, p.specs()) if label.endswith(" state")] == [True]
