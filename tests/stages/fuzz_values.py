"""Hypothesis strategies for bad input: adversarial values and parameter mappings built from a
pydantic Params model (so a new stage, source or sink is fuzzed without touching the tests).

Shared by tests/stages/test_params_fuzz.py and tests/spec/test_fuzz.py (loaded by path there).
"""

from __future__ import annotations

import copy
import math
import os
import types
import typing
from typing import Annotated, Any, Literal, Union

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from pygpukit_dsp.stages import STAGES


def fuzz_settings(default_examples: int) -> settings:
    """Reproducible settings; GK_FUZZ_EXAMPLES scales every fuzz test (docs/yaml.md, "Limits and bad
    input"), e.g. GK_FUZZ_EXAMPLES=20000 for a long run."""
    n = int(os.environ.get("GK_FUZZ_EXAMPLES", default_examples))
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


HUGE_INTS = [10**12, 2**31, 2**40, 2**62, 2**63, 2**64, 10**30, 10**400, -2**63, -10**12]
NASTY_SCALARS: list[Any] = [
    None, True, False, 0, -1, 1, 2, 3, -0.0, 0.5, -2.5, 1e-300, 5e-324, 1e300, 1.7976931348623157e308,
    math.nan, math.inf, -math.inf, *HUGE_INTS, "", " ", "abc", "1e3", "nan", ".inf", "hann", "1-2j",
    "null", "\x00", "é", "../../etc/passwd",
]
NASTY_CONTAINERS: list[Any] = [
    [], [math.nan], [1, math.nan], [math.inf, 1], [[1, 2], [3]], [[]], {}, {"x": 1}, ["a", 1],
    [[[1.0]]], [10**12], [10**400], [-1, 2], [True], [None], [["kaiser"]], ["kaiser", math.nan],
    ["kaiser", 10**400], [2**63, 1], {"type": "fir"},
]


def nasty() -> st.SearchStrategy:
    """A value of any type a YAML document can hold, chosen to break things."""
    return st.one_of(st.sampled_from(NASTY_SCALARS), st.sampled_from(NASTY_CONTAINERS),
                     st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                     st.text(max_size=8))


def small_int() -> st.SearchStrategy:
    return st.one_of(st.integers(1, 8), st.sampled_from([1, 2, 3, 4, 16, 31, 64, 127, 128, 256]))


def small_float() -> st.SearchStrategy:
    return st.one_of(st.sampled_from([0.5, 1.0, 2.0, 100.0, 440.0, 1000.0, 4000.0, 12000.0, 23999.0]),
                     st.floats(0.01, 1e4), st.floats(-1e4, 1e4))


def number_array() -> st.SearchStrategy:
    """Plausible array parameters: 1-D, 2-D and 3-D nested lists of small size, sometimes complex."""
    elem = st.one_of(st.floats(-2, 2, allow_nan=False), st.integers(-3, 3),
                     st.sampled_from(["0.5-1j", "1j", "2"]))
    row = st.lists(elem, min_size=1, max_size=8)

    def rect(rows: int, cols: int) -> st.SearchStrategy:
        return st.lists(st.lists(elem, min_size=cols, max_size=cols), min_size=rows, max_size=rows)

    mat = st.tuples(st.integers(1, 4), st.integers(1, 4)).flatmap(lambda rc: rect(*rc))
    stack = st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3)).flatmap(
        lambda b: st.lists(rect(b[1], b[2]), min_size=b[0], max_size=b[0]))
    # sos rows: [b0, b1, b2, 1, a1, a2] with stable-ish poles
    sos = st.lists(st.tuples(*[st.floats(-1, 1)] * 3, st.just(1.0), st.floats(-0.5, 0.5),
                             st.floats(-0.5, 0.5)).map(list), min_size=1, max_size=3)
    return st.one_of(row, mat, stack, sos)


STRINGS = ["hann", "hamming", "blackman", "kaiser", "auto", "float32", "complex64", "power", "amplitude",
           "scale", "x", "", "missing.npy", "taps.txt", "in.wav", "lowpass", "bandpass"]
KERNEL_SOURCE = ('extern "C" __global__ void scale(const float* in, float* out, long long c, '
                 'long long n, long long ri, long long ro, float g) {}')


def for_annotation(ann: Any, depth: int = 0) -> st.SearchStrategy:
    """Plausible values of a pydantic field annotation (nested models: plausible mappings)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if ann is type(None):
        return st.none()
    if origin in (Union, types.UnionType):
        return st.one_of(*(for_annotation(a, depth) for a in args if a is not type(None)))
    if origin is Annotated:
        return number_array() if args[0] is np.ndarray else for_annotation(args[0], depth)
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(for_annotation(args[0], depth + 1), min_size=1, max_size=6)
    if ann is bool:
        return st.booleans()
    if ann is int:
        return small_int()
    if ann is float:
        return small_float()
    if ann is str:
        return st.one_of(st.sampled_from(STRINGS), st.just(KERNEL_SOURCE))
    if ann is np.ndarray:
        return number_array()
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return params_dict(ann, depth + 1, plausible=True) if depth < 3 else st.just({})
    return nasty()


@st.composite
def params_dict(draw, model: type[BaseModel], depth: int = 0, plausible: bool | None = None) -> dict[str, Any]:
    """A parameter mapping for ``model``. Half of them are plausible (required fields given, optional
    ones now and then, values of the right type), so that the fuzz gets past validation and streams;
    the others leave fields out, put adversarial values in (NaN, inf, huge, negative, wrong types)
    and now and then add an unknown key."""
    if plausible is None:
        plausible = draw(st.booleans())
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        if plausible:
            if field.is_required() or draw(st.integers(0, 2)) == 0:
                out[key] = draw(for_annotation(field.annotation, depth))
            continue
        roll = draw(st.integers(0, 9))
        if roll == 0 or (roll <= 2 and not field.is_required()):
            continue  # left out
        if roll <= 4:
            out[key] = draw(nasty())
        elif roll == 5:
            out[key] = draw(st.sampled_from(HUGE_INTS + [0, -1, math.nan, math.inf, -math.inf]))
        else:
            out[key] = draw(for_annotation(field.annotation, depth))
    if not plausible and draw(st.integers(0, 7)) == 0:
        out[draw(st.sampled_from(["bogus", "gain_db", "cutof_hz", "Type", "samples_"]))] = draw(nasty())
    return out


# One valid parameter set per stage, mutated by the fuzz so that it gets past validation and
# streams (a generic generator rarely guesses e.g. a matrix with as many columns as channels).
# A new stage type needs an entry here: tests/stages/test_params_fuzz.py says so.
SEEDS = {
    "add": [{}],
    "average": [{"frames": 1}, {"frames": 2}],
    "cfar": [{"guard": 0, "train": 1}, {"guard": 1, "train": 2, "scale": 3.0, "output": "threshold"}],
    "channelizer": [{"channels": 2}, {"channels": 4, "taps_per_channel": 3}],
    "correlate": [{"reference": [1.0, -1.0, 0.5]}, {"reference": ["1+1j", 0.5], "method": "overlap_save"}],
    "combine": [{}],
    "ddc": [{"freq_hz": 1000.0, "taps": [0.5, 0.25, -0.1], "decimate": 2},
            {"freq_hz": -3000.0, "design": {"numtaps": 15, "cutoff_hz": 2000.0}}],
    "db": [{}, {"kind": "amplitude", "floor_db": -120, "ref": 2.0}],
    "delay": [{"samples": 3}, {"samples": [0, 5]}],
    "fft": [{}, {"n": 4}],
    "fir": [{"taps": [0.5, 0.25, -0.1]}, {"design": {"numtaps": 15, "cutoff_hz": 0.1}},
            {"taps": [[1.0, 0.5], ["0.5-1j", 0.0]], "method": "overlap_save"}, {"taps": [0.5, 0.5], "decimate": 2}],
    "fm_demod": [{}, {"gain": 2.0, "deemphasis_us": 75}],
    "gain": [{"db": -6.0}, {"linear": -2.0}],
    "hilbert": [{"numtaps": 15}, {}],
    "ifft": [{}],
    "irfft": [{}],
    "kernel": [{"source": KERNEL_SOURCE, "entry": "scale", "params": [0.5]}],
    "magnitude": [{}],
    "mix": [{"matrix": [[1.0, -1.0]]}, {"matrix": [[1.0, 0.5], ["1j", 2.0]]}],
    "multiply": [{}],
    "power": [{}],
    "python": [{"function": "numpy:negative"}, {"function": "numpy:conjugate", "state": None}],
    "rfft": [{}, {"n": 4}],
    "resample": [{"up": 2, "down": 1}, {"up": 3, "down": 2, "taps": 31}, {"up": 1, "down": 2}],
    "select": [{"channels": [1, 0]}, {"channels": [0, 0, 1]}],
    "shift": [{"freq_hz": 1000.0}, {"freq_hz": -0.25}],
    "sos": [{"design": {"order": 2, "cutoff_hz": 0.1}}, {"sos": [[0.2, 0.4, 0.2, 1.0, -0.3, 0.1]]}],
    "stft": [{"nfft": 4, "hop": 2}, {"nfft": 8, "hop": 4, "window": ["kaiser", 8.0]}],
    "synthesizer": [{"channels": 2}, {"channels": 2, "taps": [0.5, 0.5, 0.25]}],
    "xcorr": [{"integrate": 2}, {"integrate": 1, "bins": 2}],
}


@st.composite
def stage_params(draw, stage_type: str):
    """A seed as it is, a seed with one or two keys dropped or given adversarial values, or a generic
    mapping (plausible or adversarial: params_dict)."""
    cls = STAGES[stage_type]
    mode = draw(st.sampled_from(["seed", "mutated", "generic"]))
    if mode == "generic" or stage_type not in SEEDS:
        return draw(params_dict(cls.Params))
    params = copy.deepcopy(draw(st.sampled_from(SEEDS[stage_type])))  # seeds are shared
    fields = [f.alias or k for k, f in cls.Params.model_fields.items()]
    if mode == "mutated" and fields:
        for key in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=2)):
            if draw(st.integers(0, 3)) == 0:
                params.pop(key, None)
            else:
                params[key] = draw(nasty())
    return params
