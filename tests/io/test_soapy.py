"""The soapy source (io/soapy.py) against a real SoapySDR module: SoapyAudio (Debian's
soapysdr-module-audio) over the JACK server with the dummy backend, which streams without a radio.
Everything runs as `gk-stream` subprocesses (bounded in time): SoapyAudio opens a JACK client, which
stays out of the test process. Without SoapySDR and that module these tests skip, unless
GK_REQUIRE_SOAPY=1 (.ci/run installs them): then they fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

PIPE = """version: 1
name: radio
sample_rate: {rate}
block_size: 1024
dtype: complex64
backend: cpu
source: {{type: soapy, device: "driver=audio", freq_hz: {freq}, format: {fmt}{extra}}}
stages: [{{type: fir, design: {{numtaps: 31, cutoff_hz: 8000}}}}]
sink: {{type: numpy, path: out.npy}}
"""


@pytest.fixture(scope="module")
def soapy_audio(jack):
    """The environment in which SoapySDR finds SoapyAudio's device on the `jack` server."""
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", "from pygpukit_dsp.io.soapy import enumerate_devices; "
                        "print(len(enumerate_devices('driver=audio')))"], env=env, capture_output=True, text=True,
                       timeout=60)
    if r.returncode == 0 and r.stdout.strip().splitlines()[-1:] != ["0"]:
        return env
    reason = f"SoapySDR finds no SoapyAudio device ({(r.stdout + r.stderr).strip().splitlines()[-1:]})"
    if os.environ.get("GK_REQUIRE_SOAPY", "") == "1":
        pytest.fail(f"GK_REQUIRE_SOAPY=1 but {reason}: apt-get install libsoapysdr0.8 soapysdr-module-audio")
    pytest.skip(f"{reason}; apt-get install libsoapysdr0.8 soapysdr-module-audio")


def _run(tmp_path, gk_process, env, *args, rate=48000, freq=1e6, fmt="CF32", extra=""):
    (tmp_path / "radio.yaml").write_text(PIPE.format(rate=rate, freq=freq, fmt=fmt, extra=extra))
    gk_process.env.update(env)
    return gk_process.run("run", "radio.yaml", *args, timeout=120)


@pytest.mark.parametrize("fmt", ["CF32", "CS16"])
def test_a_pipeline_consumes_a_soapy_source(tmp_path, gk_process, soapy_audio, fmt):
    p = _run(tmp_path, gk_process, soapy_audio, "--duration", "0.5", "--stats-json", "s.json", fmt=fmt,
             extra=", agc: true, antenna: RX")
    assert p.returncode == 0, p.stderr_text
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["ended_by"] == "duration limit" and st["sources"][0]["type"] == "soapy"
    assert {"overflows", "timeouts"} <= set(st["source_stats"]) and st["samples_in"] == st["blocks"] * 1024 > 0
    y = np.load(tmp_path / "out.npy")
    assert y.dtype == np.complex64 and y.shape == (1, st["samples_out"]) and np.all(np.isfinite(y))


def test_a_rate_out_of_range_names_the_range(tmp_path, gk_process, soapy_audio):
    p = _run(tmp_path, gk_process, soapy_audio, "--duration", "0.2", rate=1e6)
    assert p.returncode == 2 and "out of the device's range (0.048 MHz)" in p.stderr_text
    assert "Traceback" not in p.stderr_text


def test_a_frequency_out_of_range_names_the_range(tmp_path, gk_process, soapy_audio):
    p = _run(tmp_path, gk_process, soapy_audio, "--duration", "0.2", freq=9e9)
    assert p.returncode == 2 and "freq_hz 9e+09 is out of the device's range (0..6000 MHz)" in p.stderr_text


def test_no_such_device_says_what_soapysdr_finds(tmp_path, gk_process, soapy_audio):
    (tmp_path / "radio.yaml").write_text(PIPE.format(rate=48000, freq=1e6, fmt="CF32", extra="").replace(
        "driver=audio", "driver=nosuch"))
    gk_process.env.update(soapy_audio)
    p = gk_process.run("run", "radio.yaml", "--duration", "0.2", timeout=120)
    assert p.returncode == 2 and "no SoapySDR device matches 'driver=nosuch'" in p.stderr_text
    assert "SoapySDR finds: audio" in p.stderr_text


def test_gain_and_agc_together_are_a_config_error():
    from pygpukit_dsp.errors import ConfigError
    from pygpukit_dsp.io.soapy import SoapySource

    with pytest.raises(ConfigError, match="gain_db or agc"):
        SoapySource(freq_hz=1e6, gain_db=10, agc=True)


def test_devices_lists_soapy_devices_with_their_ranges(tmp_path, gk_process, soapy_audio):
    gk_process.env.update(soapy_audio)
    p = gk_process.run("devices", timeout=120)
    assert p.returncode == 0, p.stderr_text
    line = next(ln for ln in p.stdout_text.splitlines() if ln.startswith("soapy   driver=audio"))
    assert "1 rx channel(s), rate 0.048 MS/s, freq 0..6000 MHz" in line
    j = gk_process.run("devices", "--json", timeout=120)
    found = json.loads(j.stdout_text)["io"]["soapy"]
    audio = next(d for d in found["devices"] if d["driver"] == "audio")
    assert found["found"] and audio["rates_hz"] == [[48000.0, 48000.0]] and audio["rx_channels"] == 1


def test_a_device_gone_mid_run_is_a_fault_and_the_file_keeps_every_block(tmp_path, gk_process, soapy_audio):
    import time

    jack_server = sys.modules["_gk_tests_jack_server"]  # tests/io/conftest.py loads it by path
    server = jack_server.JackServer.start("gk-unplug")  # a server of its own: killing it "unplugs" the device
    proc = None
    try:
        (tmp_path / "radio.yaml").write_text(PIPE.format(rate=48000, freq=1e6, fmt="CF32", extra=", timeout_s: 2")
                                             .replace("{type: numpy, path: out.npy}", "{type: rawiq, path: out.cf32}"))
        gk_process.env.update({**soapy_audio, **server.env})
        proc = gk_process.start("run", "radio.yaml", "--stats-json", "s.json")
        deadline = time.monotonic() + 60
        live = tmp_path / "out.cf32.partial"  # written block by block
        while not (live.exists() and live.stat().st_size >= 8 * 1024 * 8):
            assert time.monotonic() < deadline and proc.poll() is None, "gk-stream did not start streaming"
            time.sleep(0.05)
        server.kill()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        server.stop()
    assert proc.returncode == 1 and "was the device unplugged?" in err and "Traceback" not in err
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["ended_by"] == "fault" and st["blocks"] > 0
    assert (tmp_path / "out.cf32").stat().st_size == st["samples_out"] * 8  # finalised with every block
