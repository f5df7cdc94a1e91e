"""GNU Radio's PMT serialization (io/pmt.py): round trips, malformed input, and byte for byte
against GNU Radio's own pmt.serialize_str (run by the system python3 where GNU Radio is installed)."""

import json
import subprocess

import numpy as np
import pytest

from pygpukit_dsp.io import pmt
from pygpukit_dsp.io.pmt import Pair, PmtError, Uint64

VALUES = [True, False, None, "rx_freq", "", -5, 2**31 - 1, -2**31, 2**40, -2**40, Uint64(0), Uint64(2**64 - 1),
          1.5e6, -0.0, complex(1, -2), (Uint64(1700000000), 0.25), Pair("a", 1), {"a": 1, "b": 2.0},
          [1, "x", (2.0,)], np.array([1, 2, 3], np.float32), np.array([1 + 1j], np.complex64),
          np.array([7, 8], np.uint8), np.array([-1], np.int64)]

# the same values built by GNU Radio's Python PMT API
GR_BUILD = """
import json, sys, pmt
vals = [pmt.PMT_T, pmt.PMT_F, pmt.PMT_NIL, pmt.intern("rx_freq"), pmt.intern(""), pmt.from_long(-5),
        pmt.from_long(2**31 - 1), pmt.from_long(-2**31), pmt.from_long(2**40), pmt.from_long(-2**40),
        pmt.from_uint64(0), pmt.from_uint64(2**64 - 1), pmt.from_double(1.5e6), pmt.from_double(-0.0),
        pmt.from_complex(complex(1, -2)), pmt.make_tuple(pmt.from_uint64(1700000000), pmt.from_double(0.25)),
        pmt.cons(pmt.intern("a"), pmt.from_long(1)),
        pmt.dict_add(pmt.dict_add(pmt.make_dict(), pmt.intern("b"), pmt.from_double(2.0)), pmt.intern("a"),
                     pmt.from_long(1)),
        pmt.to_pmt([1, "x", (2.0,)]), pmt.init_f32vector(3, [1, 2, 3]), pmt.init_c32vector(1, [1 + 1j]),
        pmt.init_u8vector(2, [7, 8]), pmt.init_s64vector(1, [-1])]
print(json.dumps([pmt.serialize_str(v).hex() for v in vals]))
if len(sys.argv) > 1:  # GNU Radio reads ours back: the same PMTs as its own (their printed forms)
    ours = [pmt.deserialize_str(bytes.fromhex(h)) for h in json.loads(sys.argv[1])]
    print(json.dumps([pmt.write_string(a) == pmt.write_string(b) for a, b in zip(ours, vals)]))
"""


def _same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_every_value_round_trips(value):
    data = pmt.serialize(value)
    back, end = pmt.deserialize(data)
    assert end == len(data) and _same(back, value)


def test_rx_time_is_a_tuple_of_uint64_seconds_and_a_double_fraction():
    data = pmt.serialize((Uint64(1700000000), 0.25))
    assert data.hex() == "0c00000002" + "0b" + "000000006553f100" + "04" + "3fd0000000000000"


def test_malformed_bytes_are_pmt_errors():
    good = pmt.serialize((Uint64(5), "rx_time"))
    for cut in range(1, len(good)):
        with pytest.raises(PmtError):
            pmt.deserialize(good[:cut])
    with pytest.raises(PmtError, match="type code 0x3b"):
        pmt.deserialize(b"\x3b")
    with pytest.raises(PmtError, match="no PMT"):
        pmt.serialize(object())


def test_json_form_of_values():
    assert pmt.to_json((Uint64(3), 0.5)) == [3, 0.5]
    assert pmt.to_json({"a": Pair("x", 1j)}) == {"a": ["x", [0.0, 1.0]]}
    json.dumps(pmt.to_json(np.arange(3, dtype=np.int16)))


def test_bytes_match_gnu_radio_both_ways(gnuradio_python):
    ours = [pmt.serialize(v).hex() for v in VALUES]
    r = subprocess.run([gnuradio_python, "-c", GR_BUILD, json.dumps(ours)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    theirs_hex, read_back = (json.loads(line) for line in r.stdout.splitlines())
    assert ours == theirs_hex  # what GNU Radio writes for the same values, byte for byte
    for h, value in zip(theirs_hex, VALUES):  # and we read what it writes
        assert _same(pmt.deserialize(bytes.fromhex(h))[0], value)
    assert read_back == [True] * len(VALUES)
