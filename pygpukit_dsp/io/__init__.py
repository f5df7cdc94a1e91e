"""Sources and sinks.

Every built-in type is declared in SOURCES and SINKS with the module that defines it, and that
module (with what it needs: soundfile, sounddevice, pyzmq, sigmf, libSoapySDR) is imported when the type is
first looked up (``SOURCES["file"]``, ``source_class``, a YAML file naming it) or its class is
first used (``io.AudioFileSource``). Listing or checking type names imports no source or sink module.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import SINKS, SOURCES, Sink, Source, StreamFormat, sink_class, source_class

# (kind, YAML type, module, class): the built-in sources and sinks. tests/io/test_registry.py checks
# it against what the modules register.
CATALOG: tuple[tuple[str, str, str, str], ...] = (
    ("source", "synth", "synth", "SynthSource"),
    ("source", "file", "audiofile", "AudioFileSource"),
    ("sink", "file", "audiofile", "AudioFileSink"),
    ("source", "rawiq", "rawiq", "RawIqSource"),
    ("sink", "rawiq", "rawiq", "RawIqSink"),
    ("source", "numpy", "arrays", "NumpySource"),
    ("sink", "numpy", "arrays", "NumpySink"),
    ("source", "null", "null", "NullSource"),
    ("sink", "null", "null", "NullSink"),
    ("source", "callback", "callback", "CallbackSource"),
    ("sink", "callback", "callback", "CallbackSink"),
    ("source", "audio", "audio_device", "AudioDeviceSource"),
    ("sink", "audio", "audio_device", "AudioDeviceSink"),
    ("source", "duplex", "audio_device", "DuplexSource"),
    ("sink", "duplex", "audio_device", "DuplexSink"),
    ("sink", "spectrum", "spectrum_view", "SpectrumView"),
    ("sink", "view", "view_sink", "ViewSink"),
    ("source", "zmq", "net", "ZmqSource"),
    ("sink", "zmq", "net", "ZmqSink"),
    ("source", "sigmf", "sigmf_io", "SigmfSource"),
    ("sink", "sigmf", "sigmf_io", "SigmfSink"),
    ("source", "soapy", "soapy", "SoapySource"),
)
_CLASS_MODULES = {cls: f"{__name__}.{module}" for _, _, module, cls in CATALOG}
_SUBMODULES = {module for _, _, module, _ in CATALOG} | {"_common", "endpoints", "portaudio", "wire"}
for _kind, _type, _module, _ in CATALOG:
    (SOURCES if _kind == "source" else SINKS).declare(_type, f"{__name__}.{_module}")
del _kind, _type, _module


def __getattr__(name: str) -> Any:
    """``io.SynthSource`` and ``from pygpukit_dsp.io import SynthSource``: the class, its module
    imported now."""
    module = _CLASS_MODULES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in _SUBMODULES:  # io.portaudio, as when every module was imported with the package
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "SINKS", "SOURCES", "Sink", "Source", "StreamFormat", "sink_class", "source_class",
    "SynthSource", "AudioFileSource", "AudioFileSink", "RawIqSource", "RawIqSink",
    "NumpySource", "NumpySink", "NullSource", "NullSink", "CallbackSource", "CallbackSink",
    "AudioDeviceSource", "AudioDeviceSink", "DuplexSource", "DuplexSink", "SpectrumView", "ViewSink", "ZmqSource",
    "ZmqSink",
    "SigmfSource", "SigmfSink", "SoapySource",
]
