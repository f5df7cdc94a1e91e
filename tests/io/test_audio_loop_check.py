"""loop_check, the live loop-through test's judge, on made-up recordings: it passes a recording
whose differences from process() are all counted, and fails one with a loss nobody counted."""

import numpy as np
import pytest
from scipy import signal as sps

PERIOD = 1024
START, LAG = 3000, 5120  # the signal's first frame in the recording; pre-roll plus one period


def _process(x):
    # a pipeline with memory (a one-pole low-pass: about 1400 frames to forget to 1e-6)
    return sps.lfilter([0.01], [1.0, -0.99], x, axis=-1).astype(np.float32)


@pytest.fixture(scope="module")
def signal():
    x = (0.1 * np.random.default_rng(7).standard_normal((2, 48000))).astype(np.float32)
    return x, _process(x)


def _recording(y_played, lag=LAG, frames=70000):
    rec = np.zeros((2, frames), np.float32)
    rec[:, START + lag:START + lag + y_played.shape[1]] = y_played
    return rec, np.ones(frames, bool)


def _judge(loop_check, rec, recorded, y, counted, back=0):
    settle = loop_check.settle_frames(_process(np.eye(1, 8000, dtype=np.float32))[0], 0.5, 1e-6)
    stretches = loop_check.align(rec, recorded, y, START, 1e-6, back=back)
    spans = loop_check.spans(stretches, rec, recorded, y.shape[1], START, LAG)
    return stretches, spans, loop_check.unaccounted(spans, counted, PERIOD, settle)


def test_a_clean_recording_is_one_stretch_at_the_nominal_lag(loop_check, signal):
    x, y = signal
    rec, recorded = _recording(y)
    stretches, spans, problems = _judge(loop_check, rec, recorded, y, loop_check.Counted())
    assert stretches == [loop_check.Stretch(START + LAG, START + LAG + y.shape[1], LAG)]
    assert spans == [] and problems == []


def test_silence_of_a_counted_underrun_is_accounted_and_an_uncounted_one_is_not(loop_check, signal):
    x, y = signal
    played = np.concatenate([y[:, :20000], np.zeros((2, 300), np.float32), y[:, 20000:]], axis=1)
    rec, recorded = _recording(played)
    c = loop_check.Counted(ring_underruns=1, ring_underrun_frames=300)
    stretches, spans, problems = _judge(loop_check, rec, recorded, y, c)
    assert spans == [loop_check.Span(at=START + LAG + 20000, rec=300, sig=0, silence=True)] and problems == []
    assert [s.lag for s in stretches] == [LAG, LAG + 300]
    assert _judge(loop_check, rec, recorded, y, loop_check.Counted())[2]  # nothing counted
    assert _judge(loop_check, rec, recorded, y, loop_check.Counted(ring_underruns=1, ring_underrun_frames=100))[2]


def test_frames_dropped_on_the_way_in_are_accounted_by_a_counted_overrun_only(loop_check, signal):
    x, y = signal
    rec, recorded = _recording(_process(np.concatenate([x[:, :20000], x[:, 20700:]], axis=1)))
    c = loop_check.Counted(ring_overruns=1, ring_overrun_frames=700)
    stretches, spans, problems = _judge(loop_check, rec, recorded, y, c)
    assert problems == [] and len(spans) == 1 and not spans[0].silence
    assert [s.lag for s in stretches] == [LAG, LAG - 700]
    assert _judge(loop_check, rec, recorded, y, loop_check.Counted())[2]


def test_output_lost_without_a_count_fails(loop_check, signal):
    x, y = signal
    rec, recorded = _recording(np.concatenate([y[:, :20000], y[:, 20256:]], axis=1))
    assert _judge(loop_check, rec, recorded, y, loop_check.Counted())[2]
    # a server xrun may cost a period or a few, and is counted as such
    assert _judge(loop_check, rec, recorded, y, loop_check.Counted(stream_xruns=1), back=4 * PERIOD)[2] == []


def test_a_long_corrupted_span_fails_even_beside_a_counted_xrun(loop_check, signal):
    x, y = signal
    played = y.copy()
    played[:, 10000:22000] += 0.01  # a quarter second changed: far more than one xrun can do
    rec, recorded = _recording(played)
    problems = _judge(loop_check, rec, recorded, y, loop_check.Counted(stream_xruns=1), back=4 * PERIOD)[2]
    assert problems and "differ from process()" in problems[0]


def test_more_spans_than_counted_events_fail(loop_check, signal):
    x, y = signal
    played = y.copy()
    for at in (5000, 15000, 25000, 35000):
        played[:, at:at + 10] += 0.01
    rec, recorded = _recording(played)
    one = loop_check.Counted(stream_xruns=1)
    assert _judge(loop_check, rec, recorded, y, one, back=4 * PERIOD)[2]
    # one flag of the stream's, two xruns of the server's (PortAudio flags once for both)
    two = loop_check.Counted(stream_xruns=1, server_xruns=2)
    assert _judge(loop_check, rec, recorded, y, two, back=4 * PERIOD)[2] == []
    # the server's xruns excuse nothing that the stream did not count
    assert _judge(loop_check, rec, recorded, y, loop_check.Counted(server_xruns=2), back=4 * PERIOD)[2]


def test_frames_the_recorder_missed_are_a_span(loop_check, signal):
    x, y = signal
    rec, recorded = _recording(y)
    recorded[START + LAG + 9000:START + LAG + 9000 + PERIOD] = False
    assert _judge(loop_check, rec, recorded, y, loop_check.Counted())[2]  # its xrun was not counted
    stretches, spans, problems = _judge(loop_check, rec, recorded, y, loop_check.Counted(stream_xruns=1))
    assert problems == [] and spans == [loop_check.Span(at=START + LAG + 9000, rec=PERIOD, sig=PERIOD, silence=False,
                                                        unrecorded=PERIOD)]
    assert spans[0].length == 0  # all of it is the recorder's own xrun


def test_settle_frames_is_where_the_impulse_responses_tail_falls_below_atol(loop_check):
    h = 0.5 ** np.arange(64)  # tail from n: 2 * 0.5**n
    # 2 * peak * tail(n) = 4 * 0.5**n < 1e-3 from n = 12 on
    assert loop_check.settle_frames(h, 1.0, 1e-3) == 12
    assert loop_check.settle_frames(np.ones(10), 1.0, 1e-3) == 10  # never settles within h
