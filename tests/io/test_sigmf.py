"""The sigmf source and sink (issue: scale-out, item 3): recordings the sigmf package's own validator
accepts, read back sample for sample."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import sigmf  # CI installs the test extra: a missing sigmf fails here instead of skipping
else:
    sigmf = pytest.importorskip("sigmf", reason="sigmf is in the test extra: pip install '.[test]'")
import sigmf.validate  # noqa: E402
from sigmf.sigmffile import fromfile  # noqa: E402

from pygpukit_dsp import Pipeline, stages  # noqa: E402
from pygpukit_dsp.errors import ConfigError, StreamFault  # noqa: E402
from pygpukit_dsp.io.base import StreamFormat  # noqa: E402
from pygpukit_dsp.io.sigmf_io import SigmfSink, SigmfSource  # noqa: E402
from pygpukit_dsp.io.synth import SynthSource  # noqa: E402
from pygpukit_dsp.spec import load_text  # noqa: E402

PIPE = """version: 1
name: rec
sample_rate: 2.0e6
block_size: 1000
channels: {ch}
dtype: complex64
backend: cpu
source: {{type: synth, signal: multitone, freqs_hz: [100000, -250000], noise_std: 0.01, seed: 3, duration_s: 0.0025}}
stages: [{{type: gain, db: -6}}]
sink: {{type: sigmf, path: out/rec, frequency_hz: 1.42e9, description: 'hydrogen line', author: test, datatype: {dt}}}
"""


def expected_input(ch, n=5000):
    src = SynthSource(signal="multitone", freqs_hz=[100000, -250000], noise_std=0.01, seed=3)
    src.open(StreamFormat(sample_rate=2e6, channels=ch, dtype="complex64"))
    return src.generate(0, n)


def validate_with_sigmf(base):
    """The sigmf package's own checks: schema, and the SHA-512 of the data against the metadata."""
    rec = fromfile(str(base) + ".sigmf-meta")  # skip_checksum=False: recomputes and compares the hash
    rec.validate()
    sigmf.validate.validate(json.loads(open(str(base) + ".sigmf-meta").read()))
    assert sigmf.validate.main([str(base) + ".sigmf-meta"]) in (0, None)  # the sigmf_validate command
    return rec


@pytest.mark.parametrize("ch,dt", [(1, "cf32_le"), (2, "cf32_le"), (2, "ci16_le")])
def test_round_trip_through_a_recording_the_validator_accepts(tmp_path, ch, dt):
    (tmp_path / "rec.yaml").write_text(PIPE.format(ch=ch, dt=dt))
    s = Pipeline.from_yaml(tmp_path / "rec.yaml").run()
    base = tmp_path / "out" / "rec"
    assert not (tmp_path / "out" / "rec.sigmf-data.partial").exists()
    rec = validate_with_sigmf(base)
    g = rec.get_global_info()
    assert g["core:datatype"] == dt and g["core:sample_rate"] == 2e6 and g["core:num_channels"] == ch
    assert g["core:description"] == "hydrogen line" and g["core:author"] == "test"
    assert g["core:extensions"] == [{"name": "gk", "version": "1.0.0", "optional": True}]
    cap = rec.get_captures()
    assert len(cap) == 1 and cap[0]["core:frequency"] == 1.42e9 and cap[0]["core:datetime"].endswith("Z")
    run = rec.get_annotations()[0]
    assert run["core:label"] == "gk-stream run" and run["core:sample_count"] == 5000
    assert run["gk:backend"] == "cpu" and run["gk:stages"] == ["gain"] and run["gk:ended_by"] == "source end"
    assert run["gk:dropped_samples"] == 0 and "backend=cpu" in run["core:comment"]
    want = Pipeline([stages.Gain(db=-6)], sample_rate=2e6, block_size=1000).process(expected_input(ch))
    tol = 0 if dt == "cf32_le" else 2 ** -15  # ci16: rounded to 16 bits
    # the sigmf package reads what we wrote...
    theirs = rec.read_samples()
    theirs = theirs[:, None] if ch == 1 else theirs  # (n,) for one channel, (n, ch) for more
    np.testing.assert_allclose(theirs.T, want, rtol=0, atol=tol)
    # ... and so does our source, through a pipeline
    (tmp_path / "back.yaml").write_text(
        f"version: 1\nblock_size: 777\nbackend: cpu\nsource: {{type: sigmf, path: out/rec.sigmf-meta}}\n"
        "sink: {type: numpy, path: back.npy}\n")
    back = Pipeline.from_yaml(tmp_path / "back.yaml")
    s2 = back.run()
    got = np.load(tmp_path / "back.npy")
    assert s2.input_spec == f"{ch} ch x 777 complex64 samples @ 2e+06 Hz" and got.shape == (ch, 5000)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    if dt == "cf32_le":
        np.testing.assert_array_equal(got, theirs.T)
    assert s.sink_stats["samples"] == 5000 and s.sink_stats["clipped"] == 0


def test_real_samples_and_clipping_are_counted(tmp_path):
    sink = SigmfSink(path="r", datatype="ri16_le", base_dir=tmp_path)
    from pygpukit_dsp.signal import SignalSpec

    sink.open(SignalSpec(sample_rate=48000, channels=1, block_size=4))
    sink.write(np.array([[0.5, -1.5, 2.0, -0.25]], np.float32))
    sink.close()
    rec = validate_with_sigmf(tmp_path / "r")
    np.testing.assert_allclose(rec.read_samples(), [0.5, -1.0, 32767 / 32768, -0.25])
    assert sink.stats()["clipped"] == 2
    assert rec.get_annotations()[0]["core:comment"].startswith("written by the sigmf sink outside")


def _write_recording(tmp_path, name, data: bytes, meta: dict):
    (tmp_path / f"{name}.sigmf-data").write_bytes(data)
    (tmp_path / f"{name}.sigmf-meta").write_text(json.dumps(meta))
    return tmp_path / name


def _meta(datatype, captures, **g):
    return {"global": {"core:datatype": datatype, "core:version": "1.2.0", **g}, "captures": captures,
            "annotations": []}


def test_the_source_reads_datatypes_and_captures_as_the_sigmf_package_does(tmp_path):
    rng = np.random.default_rng(0)
    iq = rng.integers(0, 256, size=2 * 300, dtype=np.uint8)
    base = _write_recording(tmp_path, "u8", iq.tobytes(), _meta(
        "cu8", [{"core:sample_start": 0, "core:frequency": 1e8}, {"core:sample_start": 100, "core:frequency": 2e8}],
        **{"core:sample_rate": 1e6}))
    ours = SigmfSource(path=str(base) + ".sigmf-data")
    fmt = ours.open(StreamFormat())
    assert (fmt.dtype, fmt.channels, fmt.sample_rate, fmt.length) == ("complex64", 1, 1e6, 300)
    assert ours.info()[1:] == ["capture 0: from sample 0 @ 1e+08 Hz", "capture 1: from sample 100 @ 2e+08 Hz"]
    got = np.concatenate([ours.read(128) for _ in range(3)], axis=1)
    assert ours.read(10).shape == (1, 0)
    np.testing.assert_allclose(got[0], fromfile(str(base)).read_samples(), rtol=0, atol=1e-7)
    one = SigmfSource(path=str(base), capture=1)
    assert one.open(StreamFormat()).length == 200
    np.testing.assert_array_equal(one.read(500), got[:, 100:])
    # a non-conforming dataset: header_bytes before a capture are skipped
    x = np.arange(8, dtype="<f4")
    base2 = _write_recording(tmp_path, "ncd", b"HEADER" + x.tobytes(), _meta(
        "rf32_le", [{"core:sample_start": 0, "core:header_bytes": 6}], **{"core:sample_rate": 8.0}))
    src = SigmfSource(path=str(base2))
    src.open(StreamFormat())
    np.testing.assert_array_equal(src.read(100), x[None])


def test_bad_recordings_are_config_errors(tmp_path):
    base = _write_recording(tmp_path, "bad", b"\0" * 12, _meta("cf32_le", [{"core:sample_start": 0}]))
    src = SigmfSource(path=str(base))
    with pytest.raises(ConfigError, match="no core:sample_rate: set sample_rate"):
        src.open(StreamFormat())
    with pytest.raises(ConfigError, match="not a whole number of 1-channel cf32_le samples"):
        src.open(StreamFormat(sample_rate=1e6))
    with pytest.raises(ConfigError, match="has dtype: complex64, but the pipeline requests dtype: float32"):
        src.open(StreamFormat(sample_rate=1e6, dtype="float32"))
    _write_recording(tmp_path, "inv", b"", {"global": {"core:datatype": "cf99"}, "captures": [], "annotations": []})
    with pytest.raises(ConfigError, match="is not valid SigMF \\(the sigmf package's validator"):
        SigmfSource(path=str(tmp_path / "inv")).open(StreamFormat(sample_rate=1.0))
    text = "version: 1\nsource: {type: sigmf, path: nothing.sigmf-meta}\n"
    with pytest.raises(ConfigError, match=r"p.yaml:2:29: source 'sigmf': .*nothing.sigmf-meta does not exist"):
        load_text(text, "p.yaml", base_dir=tmp_path)
    base = _write_recording(tmp_path, "sum", np.zeros(4, "<c8").tobytes(),
                            _meta("cf32_le", [{"core:sample_start": 0}], **{"core:sample_rate": 1.0,
                                                                             "core:sha512": "0" * 128}))
    with pytest.raises(ConfigError, match="SHA-512 .* does not match"):
        SigmfSource(path=str(base), verify_checksum=True).open(StreamFormat())
    SigmfSource(path=str(base)).open(StreamFormat())  # not checked unless asked


def test_a_recording_that_shrinks_while_streaming_is_a_fault(tmp_path):
    base = _write_recording(tmp_path, "t", np.zeros(1000, "<c8").tobytes(),
                            _meta("cf32_le", [{"core:sample_start": 0}], **{"core:sample_rate": 1.0}))
    src = SigmfSource(path=str(base))
    src.open(StreamFormat())
    src.read(100)
    with open(str(base) + ".sigmf-data", "r+b") as f:
        f.truncate(8 * 500)
    with pytest.raises(StreamFault, match="ended after 500 of the 1000 samples"):
        src.read(900)


def test_sink_checks(tmp_path):
    from pygpukit_dsp.signal import SignalSpec

    with pytest.raises(ConfigError, match="datatype cf32_le holds complex samples but the pipeline's output is "
                                          "float32"):
        SigmfSink(path="x", datatype="cf32_le", base_dir=tmp_path).open(SignalSpec(48000, 1, 4))
    with pytest.raises(ConfigError, match="needs time-domain samples"):
        SigmfSink(path="x", base_dir=tmp_path).open(SignalSpec(48000, 1, 4, domain="frames", bins=3))
    with pytest.raises(ConfigError, match="not an archive"):
        SigmfSink(path="x.sigmf")


def test_missing_sigmf_is_a_config_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sigmf", None)
    with pytest.raises(ConfigError) as info:
        load_text("version: 1\nsample_rate: 1\nsink: {type: sigmf, path: x}\n", "p.yaml")
    assert "p.yaml:3:7: sink 'sigmf': type 'sigmf' needs the sigmf package" in str(info.value)
    assert "pip install 'pygpukit-dsp[sigmf]'" in str(info.value)


def test_a_sink_that_wrote_nothing_leaves_no_recording(tmp_path):
    from pygpukit_dsp.signal import SignalSpec

    sink = SigmfSink(path="d/none", base_dir=tmp_path)
    sink.open(SignalSpec(48000, 1, 4))
    assert (tmp_path / "d" / "none.sigmf-data.partial").exists()
    sink.close()
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_a_recording_of_exactly_the_blocks_before_it(tmp_path):
    from pygpukit_dsp.signal import SignalSpec

    class DiskFillsUp:
        def __init__(self, f):
            self._f, self._calls = f, 0

        def write(self, data):
            self._calls += 1
            if self._calls == 4:
                return self._f.write(bytes(data[:12]))
            if self._calls > 4:
                raise OSError(28, "No space left on device")
            return self._f.write(data)

        def __getattr__(self, name):
            return getattr(self._f, name)

    x = (np.arange(6 * 50, dtype=np.float32) / 400).reshape(1, -1).astype(np.complex64)
    sink = SigmfSink(path="r", base_dir=tmp_path)
    sink.open(SignalSpec(48000, 1, 50, dtype="complex64"))
    sink._file = DiskFillsUp(sink._file)
    with pytest.raises(StreamFault, match="cut back to the 150 samples written before it"):
        for i in range(0, x.shape[1], 50):
            sink.write(x[:, i:i + 50])
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sigmf-data", "r.sigmf-meta"]
    rec = validate_with_sigmf(tmp_path / "r")  # the SHA-512 covers exactly the data kept
    np.testing.assert_array_equal(rec.read_samples(), x[0, :150])
