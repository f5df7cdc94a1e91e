"""Sources and sinks. Importing this package registers every type in SOURCES and SINKS."""

from .base import SINKS, SOURCES, Sink, Source, StreamFormat, sink_class, source_class
from .synth import SynthSource
from .audiofile import AudioFileSink, AudioFileSource
from .rawiq import RawIqSink, RawIqSource
from .arrays import NumpySink, NumpySource
from .null import NullSink, NullSource
from .callback import CallbackSink, CallbackSource
from .audio_device import AudioDeviceSink, AudioDeviceSource, DuplexSink, DuplexSource
from .spectrum_view import SpectrumView
from .net import ZmqSink, ZmqSource
from .sigmf_io import SigmfSink, SigmfSource

__all__ = [
    "SINKS", "SOURCES", "Sink", "Source", "StreamFormat", "sink_class", "source_class",
    "SynthSource", "AudioFileSource", "AudioFileSink", "RawIqSource", "RawIqSink",
    "NumpySource", "NumpySink", "NullSource", "NullSink", "CallbackSource", "CallbackSink",
    "AudioDeviceSource", "AudioDeviceSink", "DuplexSource", "DuplexSink", "SpectrumView", "ZmqSource", "ZmqSink",
    "SigmfSource", "SigmfSink",
]
