"""Sources and sinks are discoverable like stages: keyword-only signatures and a Parameters section
from their Params models, and reprs that show the parameters that differ from the defaults."""

from __future__ import annotations

import inspect
import pydoc

import numpy as np
import pytest

from pygpukit_dsp.io import SINKS, SOURCES, CallbackSink, NumpySink, NumpySource, SpectrumView, SynthSource
from pygpukit_dsp.stages.params_doc import default_words, field_type_words

CLASSES = sorted({*SOURCES.values(), *SINKS.values()}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_signature_and_help_come_from_the_params_model(cls):
    sig = inspect.signature(cls)
    fields = cls.Params.model_fields
    assert list(sig.parameters)[:len(fields)] == list(fields)
    assert list(sig.parameters)[-1] == "base_dir"
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.parameters.values())
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert f"of a {cls.kind} of type '{cls.type}'" in " ".join(text.replace(" |  ", " ").split())
    for pname, field in fields.items():
        default = "optional" if default_words(field) == "not set" else default_words(field)
        assert f" |  {pname} : {field_type_words(field)}, {default}\n" in text, pname


def test_synth_signature_and_a_constructor_keyword_of_its_own():
    assert str(inspect.signature(SynthSource)).startswith(
        "(*, signal: Literal['sine', 'chirp', 'noise', 'multitone'] = 'sine', freq_hz: float = 1000.0, ")
    params = inspect.signature(SpectrumView).parameters
    assert list(params)[-2:] == ["out", "base_dir"]  # SpectrumView's own keyword, then the base's


def test_reprs_show_non_default_parameters():
    assert repr(SynthSource(signal="sine", freq_hz=440.0)) == "SynthSource(freq_hz=440.0)"
    assert repr(SynthSource(signal="multitone", freqs_hz=[440, 3000])) == \
        "SynthSource(signal='multitone', freqs_hz=[440.0, 3000.0])"
    assert repr(NumpySink()) == "NumpySink()"
    assert repr(NumpySource(array=np.zeros((2, 4800), np.float32), sample_rate=48000)) == \
        "NumpySource(array=array(shape=(2, 4800), dtype=float32), sample_rate=48000.0)"

    def on_block(block):
        return None

    assert repr(CallbackSink(fn=on_block)) == \
        "CallbackSink(fn=<function test_reprs_show_non_default_parameters.<locals>.on_block>)"
