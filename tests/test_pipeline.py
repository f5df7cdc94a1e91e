"""Pipeline model: building, spec propagation, process(), YAML round trip."""

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp import ConfigError, Pipeline, stages
from pygpukit_dsp.signal import SignalSpec


def test_process_equals_scipy_chain_with_state_carried():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5000)).astype(np.float32)
    taps = ss.firwin(63, 0.2)
    sos = ss.butter(4, 0.3, output="sos")
    p = Pipeline([stages.Fir(taps=taps), stages.Sos(sos=sos), stages.Gain(db=6.0)],
                 sample_rate=48000, block_size=700, backend="cpu")
    y = p.process(x)
    ref = ss.sosfilt(sos, ss.lfilter(taps, 1, x.astype(np.float64), axis=1), axis=1) * 10 ** (6 / 20)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-5


def test_process_frames_output_concatenates_frames():
    x = np.random.default_rng(1).standard_normal((2, 4096)).astype(np.float32)
    p = Pipeline([stages.Stft(nfft=256, hop=128), stages.Power()], sample_rate=8000, block_size=1024,
                 backend="cpu")
    y = p.process(x)
    assert y.shape == (2, 4096 // 128, 129)
    assert y.dtype == np.float32


def test_spec_mismatch_names_both_stages():
    p = Pipeline([stages.Stft(nfft=256, hop=128), stages.Fir(taps=[1.0, 0.5])], sample_rate=8000,
                 channels=1, block_size=1024)
    with pytest.raises(ConfigError) as ei:
        p.specs()
    msg = str(ei.value)
    assert "'fir'" in msg and "'stft'" in msg


def test_spec_chain_shapes():
    p = Pipeline([stages.Fir(taps=[1.0]), stages.Mix(matrix=np.ones((2, 4)))], sample_rate=1000,
                 channels=4, block_size=64)
    chain = p.specs()
    assert chain.input == SignalSpec(1000.0, 4, 64, "float32")
    assert chain.output.channels == 2
    assert len(chain.specs) == 3


def test_missing_sample_rate_is_a_config_error():
    p = Pipeline([stages.Gain(db=1)], channels=1)
    with pytest.raises(ConfigError, match="sample_rate"):
        p.specs()


def test_duplicate_stage_names_rejected():
    with pytest.raises(ConfigError, match="two stages named"):
        Pipeline([stages.Gain(db=1, name="g"), stages.Gain(db=2, name="g")])


def test_bad_fields_rejected():
    with pytest.raises(ConfigError, match="backend"):
        Pipeline([], backend="gpu")
    with pytest.raises(ConfigError, match="dtype"):
        Pipeline([], dtype="float64")
    with pytest.raises(ConfigError, match="block_size"):
        Pipeline([], block_size=0)


def test_complex_input_to_float_pipeline_rejected():
    p = Pipeline([stages.Gain(db=0)], sample_rate=10, dtype="float32")
    with pytest.raises(ConfigError, match="complex"):
        p.process(np.ones((1, 8), np.complex64))


def test_add_builder_by_type_name():
    p = Pipeline(sample_rate=100, channels=1, block_size=8).add("gain", linear=2.0).add(stages.Delay(samples=1))
    y = p.process(np.arange(10, dtype=np.float32)[None])
    np.testing.assert_allclose(y[0], np.r_[0, np.arange(9) * 2.0])


def test_yaml_round_trip(tmp_path):
    np.save(tmp_path / "m.npy", np.eye(2, dtype=np.float32))
    text = """
version: 1
name: rt
sample_rate: 16000
block_size: 512
channels: 2
backend: cpu
qos: {class: realtime, deadline_ms: 20}
source: {type: synth, signal: sine, freq_hz: 440, duration_s: 0.5}
stages:
  - {type: fir, name: lp, design: {numtaps: 31, cutoff_hz: 2000}}
  - {type: mix, matrix_file: m.npy}
  - {type: gain, db: -3}
sink: {type: "null"}
"""
    f = tmp_path / "p.yaml"
    f.write_text(text)
    p = Pipeline.from_yaml(f)
    assert p.qos.cls == "realtime" and p.qos.deadline_ms == 20
    out = tmp_path / "p2.yaml"
    out.write_text(p.to_yaml())
    p2 = Pipeline.from_yaml(out)
    assert p2.to_config() == p.to_config()
    x = np.random.default_rng(3).standard_normal((2, 3000)).astype(np.float32)
    np.testing.assert_array_equal(p.process(x), p2.process(x))


def test_from_yaml_picks_named_pipeline(tmp_path):
    f = tmp_path / "multi.yaml"
    f.write_text("""
version: 1
sample_rate: 1000
channels: 1
pipelines:
  - name: a
    stages: [{type: gain, db: 1}]
  - name: b
    stages: [{type: gain, db: 2}]
""")
    assert Pipeline.from_yaml(f, name="b").name == "b"
    with pytest.raises(ConfigError, match="holds 2 pipelines"):
        Pipeline.from_yaml(f)
    with pytest.raises(ConfigError, match="did you mean 'a'"):
        Pipeline.from_yaml(f, name="aa")


def test_a_missing_channel_count_names_the_pipeline_once():
    p = Pipeline([stages.Gain(db=-6)], name="eq", sample_rate=48000, block_size=256)
    with pytest.raises(ConfigError) as exc:
        p.specs()
    assert exc.value.where is None and str(exc.value).count("'eq'") == 1
    assert exc.value.message == "pipeline 'eq' has no channel count"


def test_start_with_a_null_sink_replaces_the_pipelines_sink_and_iterates():
    from pygpukit_dsp.io import NullSink, NumpySink, SynthSource

    yaml_sink = NumpySink()
    p = Pipeline([stages.Gain(linear=2.0)], name="g", sample_rate=8000, channels=1, block_size=100,
                 backend="cpu", source=SynthSource(signal="sine", freq_hz=440, duration_s=0.5), sink=yaml_sink)
    with p.start(sink=NullSink()) as run:  # no sink: the blocks come to the loop
        blocks = list(run)
    assert len(blocks) == 40 and all(b.shape == (1, 100) for b in blocks)
    assert run.summary.sink_stats["samples"] == 4000
    assert yaml_sink.stats()["samples"] == 0  # the pipeline's own sink got nothing
    with p.start(sink=NullSink(), tap=False) as run:  # tap=False still wins
        with pytest.raises(RuntimeError, match="without tap=True"):
            next(iter(run))


def test_with_io_copies_the_description_with_another_source_or_sink():
    from pygpukit_dsp.io import NullSink, NumpySink, SynthSource
    from pygpukit_dsp.qos import QoS

    src, sink, other = SynthSource(duration_s=0.1), NumpySink(), NullSink()
    p = Pipeline([stages.Gain(db=-6)], name="g", sample_rate=8000, channels=2, block_size=64, dtype="float32",
                 backend="cpu", qos=QoS(class_="throughput"), source=src, sink=sink, device=1, nonfinite="zero")
    q = p.with_io(sink=other)
    assert q is not p and q.sink is other and q.source is src and p.sink is sink
    assert q.to_config() == {**p.to_config(), "sink": other.to_config()}
    assert p.with_io().to_config() == p.to_config()  # None keeps the pipeline's own
    assert p.with_io(source=SynthSource(duration_s=0.2)).source.params.duration_s == 0.2


def test_running_a_pipeline_is_the_executors_job():
    """Pipeline.process/run/start hand the pipeline to pygpukit_dsp.execute, which gives the same results."""
    from pygpukit_dsp import execute
    from pygpukit_dsp.io import NullSink, SynthSource

    p = Pipeline([stages.Gain(linear=0.5)], sample_rate=8000, channels=1, block_size=100, backend="cpu",
                 source=SynthSource(signal="sine", freq_hz=100, duration_s=0.1), sink=NullSink())
    x = np.ones((1, 250), np.float32)
    np.testing.assert_array_equal(p.process(x), execute.process(p, x))
    assert p.run().blocks == execute.run(p).blocks == 8
    with execute.start(p, sink=NullSink()) as run:
        assert len(list(run)) == 8
