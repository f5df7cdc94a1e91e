"""Every example in pipelines/ runs (cpu here; the gpu-marked copy runs them on cuda), keeping every sample."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pygpukit_dsp import Graph, Pipeline, Session
from pygpukit_dsp.graph import load_streams

ROOT = Path(__file__).resolve().parents[1]
LIVE = ["live_eq.yaml", "live_spectrum.yaml"]  # need an audio server: tests/io/test_audio_live.py runs them
NET = ["zmq_recv.yaml", "zmq_send.yaml"]  # a pair: test_the_zmq_pair_runs_as_two_processes runs them together
EXAMPLES = sorted(p.name for p in (ROOT / "pipelines").glob("*.yaml") if p.name not in LIVE + NET)
GRAPHS = {"sdr_receiver.yaml", "mic_array.yaml"}  # graphs with branches (docs/graphs.md)


@pytest.fixture
def workdir(tmp_path):
    """A copy of pipelines/ so that outputs land in a temporary folder, with the IQ file that
    fm_receiver.yaml reads made there (pipelines/data/make_data.py --fm makes it in place)."""
    dst = tmp_path / "pipelines"
    shutil.copytree(ROOT / "pipelines", dst, ignore=shutil.ignore_patterns("out"))
    if not (dst / "data" / "fm_broadcast.cs16").exists():
        _make_data().fm_broadcast_cs16(dst / "data" / "fm_broadcast.cs16")
    return dst


def _make_data():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_data", ROOT / "pipelines" / "data" / "make_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tone_snr_db(y: np.ndarray, fs: float, f0: float) -> tuple[float, float]:
    """(SNR in dB, amplitude) of the tone at f0 in y: a least-squares fit of the tone and a DC
    offset; everything else (noise, distortion, other tones) counts as noise."""
    t = np.arange(y.size) / fs
    basis = np.stack([np.sin(2 * np.pi * f0 * t), np.cos(2 * np.pi * f0 * t), np.ones(y.size)], axis=1)
    coef, *_ = np.linalg.lstsq(basis, y.astype(np.float64), rcond=None)
    tone = basis[:, :2] @ coef[:2]
    noise = y - basis @ coef
    return float(10 * np.log10(np.sum(tone ** 2) / np.sum(noise ** 2))), float(np.hypot(coef[0], coef[1]))


def test_the_examples_exist():
    assert EXAMPLES == ["beamformer.yaml", "cluster.yaml", "correlator.yaml", "demo.yaml",
                        "file_filter.yaml", "fm_receiver.yaml", "mic_array.yaml", "multi.yaml",
                        "radar_pulse.yaml", "sdr_channelizer.yaml", "sdr_receiver.yaml", "sdr_to_sigmf.yaml"]
    assert GRAPHS < set(EXAMPLES)
    assert all((ROOT / "pipelines" / name).exists() for name in LIVE + NET)


def _run(workdir, name, backend):
    """Every pipeline of the file in one Session; the summaries in file order."""
    return Session(load_streams(workdir / name), backend=backend).run()


def _same(got, want, summary):
    """Exactly what the cpu backend gives, on cpu; within float32 rounding of it on cuda (its
    graph's ops are not the cpu's fused chain, so the last bits differ)."""
    if summary.backend == "cpu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5 * float(np.abs(want).max()))


def _check_outputs(workdir, name, summaries):
    summary = summaries[0]
    if name == "file_filter.yaml":
        x, fs_in = sf.read(workdir / "data" / "chirp_hum.wav", dtype="float32")
        y, fs_out = sf.read(workdir / "out" / "chirp_filtered.wav", dtype="float32")
        assert fs_out == fs_in and y.shape == x.shape  # every sample, last partial block included
        assert summary.samples_out == summary.samples_in == x.shape[0]
    elif name == "cluster.yaml":  # file_filter.yaml split in two pipelines joined by cluster://audio
        reader, filt = summaries
        y, fs = sf.read(workdir / "out" / "chirp_filtered_cluster.wav", dtype="float32")
        _run(workdir, "file_filter.yaml", filt.backend)  # the reader has no stages: it runs on the host
        ref, fs_ref = sf.read(workdir / "out" / "chirp_filtered.wav", dtype="float32")
        assert fs == fs_ref and reader.samples_in == filt.samples_out == ref.shape[0]
        np.testing.assert_array_equal(y, ref)
    elif name == "sdr_channelizer.yaml":
        y = np.load(workdir / "out" / "channel_power.npy")
        assert y.shape == (16, 32768 // 16) and y.dtype == np.float32
        # carriers at -200, +64, +300 kHz land in channels (k * 64 kHz, FFT order): 13, 1, 5 (nearest)
        strongest = set(np.argsort(y.mean(axis=1))[-3:])
        assert strongest == {13, 1, 5}
    elif name == "sdr_to_sigmf.yaml":
        from sigmf.sigmffile import fromfile

        rec = fromfile(str(workdir / "out" / "channels"))  # the sigmf package checks schema and SHA-512
        rec.validate()
        g = rec.get_global_info()
        assert g["core:num_channels"] == 16 and g["core:sample_rate"] == 64000 and g["core:datatype"] == "cf32_le"
        run = rec.get_annotations()[0]
        assert run["gk:stages"] == ["channelizer"] and run["gk:backend"] == summary.backend
        power = (np.abs(rec.read_samples()) ** 2).mean(axis=0)
        assert set(np.argsort(power)[-3:]) == {13, 1, 5}  # the same channels as sdr_channelizer.yaml
    elif name == "beamformer.yaml":
        y = np.load(workdir / "out" / "beams.npy")
        assert y.shape == (5, 2 * 48000) and y.dtype == np.complex64
        energy = (np.abs(y[:, 4096:]) ** 2).mean(axis=1)
        assert int(np.argmax(energy)) == 3  # beams at -60,-30,0,+30,+60 degrees; the source is at +30
    elif name == "sdr_receiver.yaml":  # each sink equals its path run as a chain
        from pygpukit_dsp.io import RawIqSource
        from pygpukit_dsp.io.base import StreamFormat

        power = np.load(workdir / "out" / "rx_power.npy")
        _run(workdir, "sdr_channelizer.yaml", "cpu")
        _same(power, np.load(workdir / "out" / "channel_power.npy"), summary)
        g = Graph.from_yaml(workdir / name)
        src = RawIqSource(path=str(workdir / "data" / "three_carriers.cs16"), format="cs16")
        src.open(StreamFormat(1024000, 1, "complex64"))
        x = src.read(1 << 20)
        path = [g.topology().stage(n) for n in ("ch", "pick", "narrow")]
        want = Pipeline(path, sample_rate=1024000, block_size=4096, channels=1, dtype="complex64",
                        backend="cpu").process(x)
        got = np.fromfile(workdir / "out" / "rx_carriers.cf32", np.complex64).reshape(-1, 2).T
        _same(got, want, summary)
        assert [(a.name, a.samples) for a in summary.sinks] == [("power", 2048), ("carriers", 2048)]
        assert set(np.argsort(power.mean(axis=1))[-3:]) == {13, 1, 5}  # the carriers (sdr_channelizer.yaml)
    elif name == "mic_array.yaml":
        beams = np.load(workdir / "out" / "array_beams.npy")
        _run(workdir, "beamformer.yaml", "cpu")
        _same(beams, np.load(workdir / "out" / "beams.npy"), summary)
        np.testing.assert_allclose(np.load(workdir / "out" / "array_level.npy"), np.abs(beams) ** 2, rtol=1e-5,
                                   atol=1e-7)
        compare = np.load(workdir / "out" / "array_compare.npy")
        g = Graph.from_yaml(workdir / name)
        src = g.sources["source"]
        from pygpukit_dsp.io.base import StreamFormat

        src.open(StreamFormat(48000, 8, "complex64"))
        mic0 = src.read(1 << 20)[0]
        np.testing.assert_array_equal(compare[0], mic0)
        np.testing.assert_array_equal(compare[1], beams[3])
        assert int(np.argmax((np.abs(beams[:, 4096:]) ** 2).mean(axis=1))) == 3
    elif name == "fm_receiver.yaml":  # the station's 1 kHz tone back in the WAV
        y, fs = sf.read(workdir / "out" / "fm_tone.wav", dtype="float32")
        assert fs == 48000 and y.shape == (summary.samples_in // 10,)  # 480 kHz IQ -> 48 kHz audio
        snr, amplitude = tone_snr_db(y[960:], fs, 1000.0)  # after the filters settle (20 ms)
        # measured 74.4 dB (cpu); 50/75 of full deviation, times the de-emphasis at 1 kHz (0.905)
        assert snr > 60.0, snr
        assert abs(amplitude - 50 / 75 * 0.905) < 0.02, amplitude
    elif name == "radar_pulse.yaml":
        mask = np.load(workdir / "out" / "radar_detections.npy")
        assert mask.shape == (1, 8 * 1024) and mask.dtype == np.float32
        # each echo (200, 450, 700 samples after a pulse) peaks 127 samples after it starts, and
        # cfar reports it guard + train = 20 samples later; nothing is detected away from them
        hits = np.nonzero(mask[0])[0]
        expected = np.array([k * 1024 + d + 127 + 20 for k in range(8) for d in (200, 450, 700)])
        assert mask[0, expected].all()
        assert np.abs(hits[:, None] - expected[None, :]).min(axis=1).max() <= 4
    elif name == "correlator.yaml":
        v = np.load(workdir / "out" / "visibilities.npy")
        assert v.shape == (136, 8, 32) and v.dtype == np.complex64  # 16*17/2 pairs, 64000/32/256 frames
        i, j = np.triu_indices(16)
        auto = v[i == j]
        assert np.all(auto.real > 0) and np.abs(auto.imag).max() <= 1e-6 * auto.real.max()
        # one common source: adjacent antennas are strongly correlated (coherence ~0.8)
        coh = np.abs(v[1]).mean() / np.sqrt(auto[0].real.mean() * auto[1].real.mean())
        assert coh > 0.6
    elif name == "demo.yaml":
        assert summary.samples_in == 5 * 48000 and summary.samples_out == -(-5 * 48000 // 256)
    elif name == "multi.yaml":
        monitor, spectrum = summaries
        assert (monitor.pipeline, monitor.qos_class) == ("monitor", "realtime")
        assert (spectrum.pipeline, spectrum.qos_class) == ("spectrum", "throughput")
        assert monitor.samples_in == 24000 and spectrum.samples_in == 1024000
        for s in summaries:  # the scheduler ran and accounted every block
            assert s.scheduler.submitted == s.scheduler.chunks == s.blocks
            assert s.scheduler.completed + s.scheduler.missed == s.blocks
        y = np.load(workdir / "out" / "spectrum.npy")
        assert y.shape == (1, 16, 4096) and y.dtype == np.float32
        # tones at +100 kHz and -250 kHz, 500 Hz bins (FFT order): 200 and 4096 - 500
        assert set(np.argsort(y[0].mean(axis=0))[-2:]) == {200, 3596}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_on_cpu(workdir, name):
    summaries = _run(workdir, name, "cpu")
    for s in summaries:
        assert s.backend == "cpu" and s.blocks > 0 and s.ended_by == "source end"
    _check_outputs(workdir, name, summaries)


@pytest.mark.gpu
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_on_cuda(workdir, name):
    pipelines = load_streams(workdir / name)
    summaries = Session(pipelines, backend="cuda").run()
    for p, s in zip(pipelines, summaries):
        if p.stages:
            assert s.backend == "cuda", (p.name, s.backend_reason)
        else:  # cluster.yaml's reader only sends its source on: no GPU engine, and it says why
            assert s.backend == "cpu" and "no stages" in s.backend_reason
    _check_outputs(workdir, name, summaries)


def test_file_to_file_resample_keeps_rate_change(tmp_path):
    x = np.random.default_rng(5).standard_normal((10001, 2)).astype(np.float32) * 0.1
    sf.write(tmp_path / "in.wav", x, 48000, subtype="FLOAT")
    (tmp_path / "r.yaml").write_text(
        "version: 1\nname: r\nblock_size: 960\nbackend: cpu\nsource: {type: file, path: in.wav}\n"
        "stages: [{type: resample, up: 2, down: 3}]\nsink: {type: file, path: out.wav}\n")
    s = Pipeline.from_yaml(tmp_path / "r.yaml").run()
    y, fs = sf.read(tmp_path / "out.wav", dtype="float32")
    assert fs == 32000 and y.shape == (-(-10001 * 2 // 3), 2)
    assert s.samples_out == y.shape[0]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_zmq_pair_runs_as_two_processes(workdir, gk_process):
    """zmq_send.yaml and zmq_recv.yaml in two gk-stream processes (on a free loopback port instead of
    5555): the receiver's output equals sdr_channelizer.yaml's, run in one process."""
    pytest.importorskip("zmq")
    port = _free_port()
    for name in NET:
        path = workdir / name
        path.write_text(path.read_text().replace('"tcp://*:5555"', f'"tcp://127.0.0.1:{port}"')
                        .replace(":5555", f":{port}").replace("backend: auto", "backend: cpu"))
    gk_process.cwd = str(workdir)
    recv = gk_process.start("run", "zmq_recv.yaml")
    send = gk_process.start("run", "zmq_send.yaml")
    try:
        out_s, err_s = send.communicate(timeout=120)
        out_r, err_r = recv.communicate(timeout=120)
    finally:
        for p in (send, recv):
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
    assert send.returncode == 0 and recv.returncode == 0, err_s + err_r
    assert "ended by source end" in out_r
    got = np.load(workdir / "out" / "channel_power.npy")
    _run(workdir, "sdr_channelizer.yaml", "cpu")
    np.testing.assert_array_equal(got, np.load(workdir / "out" / "channel_power.npy"))
