"""Live audio against a real JACK server (dummy backend, no sound card): the `jack` fixture.

gk-stream runs as a subprocess, the way a user meets it; a second JACK client (the JACK-Client
package) plays into the pipeline's input ports and records its output ports.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from pygpukit_dsp import Pipeline

ROOT = Path(__file__).resolve().parents[2]
LIVE_EQ = ROOT / "pipelines" / "live_eq.yaml"
# run from "/": `-m` puts the working directory first on sys.path, and the checkout's package has
# no built native module when the project is installed (not editable), as in CI
GK = [sys.executable, "-m", "pygpukit_dsp.cli"]


def gk(*args, env=None, timeout=120):
    return subprocess.run(GK + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=ROOT.anchor)


def start_gk(*args, env=None):
    return subprocess.Popen(GK + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})}, cwd=ROOT.anchor)


def test_devices_lists_the_jack_server(jack):
    r = gk("devices")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "JACK Audio Connection Kit" in ln)
    assert re.search(r"audio\s+\d+\s+system\s+JACK Audio Connection Kit\s+2\s+2\s+48000 Hz", line), line
    assert "default input" in line and "default output" in line


BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
SUMMARY_XRUNS = re.compile(r"xruns: input overflows (\d+), output underflows (\d+); ring overruns (\d+) "
                           r"\((\d+) frames\), underruns (\d+) \((\d+) frames\); late blocks (\d+)")
SUMMARY_KEYS = ("input_overflows", "output_underflows", "ring_overruns", "ring_overrun_frames", "ring_underruns",
                "ring_underrun_frames", "late_blocks")
# live_eq sized for a loaded machine, on the `jack_1024` server: one block a period, a pre-roll of
# 85 ms, which the pipeline's thread (not realtime) may wait without an underrun, a ring of 0.68 s.
LOADED_PREROLL_BLOCKS = 4
LOADED_RING_BLOCKS = 32


@pytest.mark.parametrize("backend", BACKENDS)
def test_live_duplex_runs_ten_seconds_and_counts_the_servers_xruns(jack, tmp_path, jack_helpers, backend):
    # The documented set-up (live_eq.yaml on a 256-frame server). A loaded machine makes xruns, so
    # the figures are checked against what the server itself counted, not against zero.
    monitor = jack_helpers.XrunMonitor()  # counts the server's xruns
    try:
        r = gk("run", LIVE_EQ, "--backend", backend, "--duration", 10.5, "--stats-json", tmp_path / "s.json",
               "--quiet")
        monitor.wait_until_gone("PortAudio")  # the xruns the stream could have been told of reached it
    finally:
        monitor.close()
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["backend"] == backend
    assert s["blocks"] == -(-int(10.5 * 48000) // 256) == 1969 and s["ended_by"] == "duration limit"
    a = s["audio"]
    assert a["kind"] == "duplex" and a["device"] == "'system' (JACK Audio Connection Kit)"
    # PortAudio's JACK host API flags input and output of the callback after each xrun the server
    # reports: no flag without one of the server's xruns
    assert a["input_overflows"] == a["output_underflows"] <= monitor.xruns, ({k: a[k] for k in SUMMARY_KEYS},
                                                                             monitor.xruns)
    assert a["ring_overruns"] <= a["ring_overrun_frames"] and a["ring_underruns"] <= a["ring_underrun_frames"]
    assert bool(a["ring_overruns"]) == bool(a["ring_overrun_frames"])
    assert bool(a["ring_underruns"]) == bool(a["ring_underrun_frames"])
    m = SUMMARY_XRUNS.search(r.stdout)
    assert m and [int(v) for v in m.groups()] == [a[k] for k in SUMMARY_KEYS], r.stdout  # the summary says it
    # every block's first played sample is measured (an underrun only delays it)
    assert a["adc_to_dac_ms"]["count"] >= 1900
    assert a["adc_to_dac_ms"]["p50"] >= a["preroll_ms"]  # the ring's delay plus the server's own
    assert "ADC-to-DAC p50" in r.stdout and "ended by duration limit" in r.stdout


def _live_eq_for_load(tmp_path: Path, period: int) -> Path:
    doc = yaml.safe_load(LIVE_EQ.read_text())
    doc["block_size"] = period
    doc["source"].update(preroll_blocks=LOADED_PREROLL_BLOCKS, ring_blocks=LOADED_RING_BLOCKS)
    path = tmp_path / "live_eq_loaded.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_recording_equals_process_of_the_played_signal(jack_1024, tmp_path, jack_helpers, loop_check, backend):
    # Loop-through on a server and pipeline sized for a loaded machine (a 1024-frame period): the
    # recording is process() of the played signal, exactly, except where the stream counted an
    # xrun, and only as far as those counts reach (loop_check.py).
    eq = _live_eq_for_load(tmp_path, jack_1024.period)
    rng = np.random.default_rng(2024)
    x = (0.1 * rng.standard_normal((2, 3 * 48000))).astype(np.float32)
    loop = jack_helpers.LoopProcess(x, tmp_path, jack_1024.env)
    proc = None
    try:
        proc = start_gk("run", eq, "--backend", backend, "--duration", 10, "--stats-json", tmp_path / "s.json",
                        "--quiet", env=jack_1024.env)
        loop.start()  # it waits for the stream's ports, then plays
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        got = loop.finish()
    finally:
        loop.kill()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
    a = json.loads((tmp_path / "s.json").read_text())["audio"]
    assert got.played_all and got.period == jack_1024.period
    ref = Pipeline.from_yaml(eq)
    ref.sample_rate = 48000.0
    y = ref.process(x, backend="cpu")  # the reference is always the CPU backend (SciPy-checked)
    atol = 1e-6 if backend == "cpu" else 2e-5
    # The reported latency: the pre-roll; JACK adds one period on the connection that closes the
    # loop (our client feeds the pipeline and hears it back: a feedback connection).
    lag = a["preroll_frames"] + got.period
    n = x.shape[1]
    counted = loop_check.Counted.from_audio(a, server_xruns=got.xruns)
    xrun_frames = loop_check.XRUN_PERIODS * got.period * counted.xruns
    stretches = loop_check.align(got.rec, got.recorded, y, got.start, atol, back=xrun_frames)
    spans = loop_check.spans(stretches, got.rec, got.recorded, n, got.start, lag)
    assert loop_check.unaccounted(spans, counted, got.period, _settle(loop_check, eq, x, atol)) == []
    if counted.nothing:  # then all of it, at the nominal lag
        assert stretches == [loop_check.Stretch(got.start + lag, got.start + lag + n, lag)]
    # nothing of it arrives earlier (a server xrun may drop a period of output before it)
    early = slice(got.start, got.start + max(0, lag - xrun_frames))
    assert not np.any(got.rec[:, early][:, got.recorded[early]])


def _settle(loop_check, eq: Path, x: np.ndarray, atol: float) -> int:
    """How long the pipeline remembers a disturbed input, in frames (loop_check.settle_frames)."""
    p = Pipeline.from_yaml(eq)
    p.sample_rate = 48000.0
    impulse = np.zeros((x.shape[0], 48000), np.float32)
    impulse[:, 0] = 1.0
    h = p.process(impulse, backend="cpu")
    return max(loop_check.settle_frames(h[c], float(np.abs(x).max()), atol) for c in range(x.shape[0]))


def test_a_jack_server_that_goes_away_is_a_stream_fault(jack, tmp_path, jack_helpers):
    # A fixed name: JACK keeps a registry slot per server name, which a killed server never frees
    server = jack_helpers.JackServer.start("gk-test-gone")
    try:
        (tmp_path / "rec.yaml").write_text(
            "version: 1\nname: rec\nblock_size: 512\nchannels: 2\nbackend: cpu\n"
            "source: {type: audio, device: system, device_timeout_s: 2}\n"
            "stages: [{type: gain, db: 0}]\nsink: {type: file, path: rec.wav}\n")
        proc = start_gk("run", tmp_path / "rec.yaml", "--quiet", env=server.env)
        jack_helpers.wait_for_ports(server.name)  # the stream runs (gk-stream may take a while to start)
        time.sleep(1.0)
        server.kill(signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        server.stop()
    assert proc.returncode == 1, err
    m = re.search(r"source 'audio' failed at block (\d+): .*stopped delivering", err)
    assert m, err
    assert "Traceback" not in err and "FAULT" in out
    blocks = int(m.group(1))
    data, rate = sf.read(tmp_path / "rec.wav", dtype="float32")  # finalised and renamed
    assert rate == 48000 and data.shape == (blocks * 512, 2) and blocks > 10


@pytest.mark.parametrize("backend", BACKENDS)
def test_live_spectrum_runs_for_a_bounded_time(jack, backend):
    r = gk("run", ROOT / "pipelines" / "live_spectrum.yaml", "--backend", backend, "--duration", 1.5)
    assert r.returncode == 0, r.stderr
    assert "spectrum: peak" in r.stdout  # not a terminal: one plain line a second
    assert "ended by duration limit" in r.stdout and f"backend={backend}" in r.stdout


def test_python_api_runs_a_live_duplex_stream(jack, portaudio):
    p = Pipeline.from_yaml(LIVE_EQ)
    with p.start(backend="cpu") as run:
        deadline = time.monotonic() + 30  # a loaded machine may start it late: wait for 1.1 s of blocks
        while (st := run.stats()).get("blocks", 0) < 200:  # {} while the stream opens
            assert time.monotonic() < deadline, st
            time.sleep(0.05)
    assert st["audio"]["kind"] == "duplex" and st["audio"]["callbacks"] >= st["blocks"]
    s = run.summary
    assert s.ended_by == "stop" and s.blocks >= st["blocks"]
    assert s.audio["adc_to_dac_ms"]["count"] > 100
    # Every xrun is counted once and reported alike: the summary has the stream's final counts (none
    # below what stats() showed while it ran), the source's and sink's figures are the stream's, and
    # JACK's xrun flags come in pairs (input and output of one callback).
    a = s.audio
    assert all(a[k] >= st["audio"][k] for k in SUMMARY_KEYS), (st["audio"], a)
    assert a["input_overflows"] == a["output_underflows"]
    assert (s.source_stats["overflows"], s.source_stats["dropped"]) == (a["input_overflows"], a["ring_overrun_frames"])
    assert (s.sink_stats["underflows"], s.sink_stats["ring_underruns"]) == (a["output_underflows"],
                                                                            a["ring_underrun_frames"])
    assert s.source_stats["late_blocks"] + s.sink_stats["late_blocks"] == a["late_blocks"]


def test_a_second_ctrl_c_aborts_the_drain_and_files_stay_valid(jack, tmp_path, jack_helpers):
    # 'play' fills a 128-block output ring as fast as it can (2.7 s of queued audio): the first
    # Ctrl-C makes it wait for that to play out; the second aborts. 'rec' writes a WAV meanwhile.
    (tmp_path / "two.yaml").write_text("""
version: 1
pipelines:
  - name: play
    sample_rate: 48000
    block_size: 1024
    channels: 2
    backend: cpu
    source: {type: synth, signal: sine, freq_hz: 440}
    stages: [{type: gain, db: -12}]
    sink: {type: audio, device: system, ring_blocks: 128}
  - name: rec
    sample_rate: 48000
    block_size: 1024
    channels: 1
    backend: cpu
    source: {type: synth, signal: noise, seed: 5, rate: realtime}
    stages: [{type: gain, db: 0}]
    sink: {type: file, path: rec.wav}
""")
    proc = start_gk("run", tmp_path / "two.yaml", "--stats-json", tmp_path / "s.json", "--quiet")
    jack_helpers.wait_for_ports(jack.name)  # 'play' is streaming
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "SIGINT: stopping after the current block" in err and "SIGINT again: aborting" in err
    play, rec = json.loads((tmp_path / "s.json").read_text())
    assert play["ended_by"] == "SIGINT (aborted)"  # it was still draining
    assert rec["ended_by"] == "SIGINT"  # it had finished by the second Ctrl-C
    queued = play["samples_out"] + play["audio"]["preroll_frames"]
    played = play["audio"]["callbacks"] * 256
    assert played < queued - 48000  # the abort cut the drain short by more than a second of audio
    data, _ = sf.read(tmp_path / "rec.wav", dtype="float32")
    assert data.shape[0] == rec["samples_out"] == rec["blocks"] * 1024


def test_live_spectrum_reads_a_played_tone_in_dbfs(jack, jack_helpers):
    # a 1500 Hz tone (bin 64 of the 2048-point STFT) at half scale, played into the pipeline's input
    t = np.arange(8 * 48000) / 48000
    loop = jack_helpers.LoopClient((0.5 * np.sin(2 * np.pi * 1500 * t))[np.newaxis])
    try:
        proc = start_gk("run", ROOT / "pipelines" / "live_spectrum.yaml", "--backend", "cpu", "--duration", 4)
        deadline = time.monotonic() + 30
        while not (ins := loop.client.get_ports("PortAudio[^:]*:in_", is_input=True)):
            assert time.monotonic() < deadline, "the pipeline's input port did not appear"
            time.sleep(0.05)
        loop.client.connect(loop.outs[0], ins[0])
        loop.play()
        out, err = proc.communicate(timeout=60)
    finally:
        loop.close()
    assert proc.returncode == 0, err
    peaks = [(float(db), float(khz)) for db, khz in re.findall(r"spectrum: peak\s+(-?[\d.]+) dB at ([\d.]+) kHz", out)]
    loudest = max(peaks)
    assert loudest[1] == 1.5 and loudest[0] == pytest.approx(20 * np.log10(0.5), abs=0.1), out  # -6.0 dBFS


def test_two_pipelines_on_one_device_are_a_config_error_before_the_first_block(jack, tmp_path):
    f = tmp_path / "two.yaml"
    f.write_text("""\
version: 1
sample_rate: 48000
block_size: 256
channels: 2
backend: cpu
pipelines:
  - name: eq
    source: {type: duplex, device: system}
    stages: [{type: gain, db: -6}]
    sink: {type: duplex}
  - name: meter
    source: {type: audio, device: system}
    stages: [{type: gain, db: 0}]
    sink: {type: "null"}
""")
    r = gk("run", f, "--duration", 2)
    assert r.returncode == 2, r.stderr
    assert f"{f}:12:13: audio input 'system' (JACK Audio Connection Kit) is already open" in r.stderr
    assert f"by the duplex source at {f}:8:13" in r.stderr
    assert "one stream per device" in r.stderr and "Traceback" not in r.stderr
    assert "blocks" not in r.stdout and "ADC-to-DAC" not in r.stdout  # no block ran, no summary
