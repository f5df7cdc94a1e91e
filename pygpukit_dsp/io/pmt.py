"""GNU Radio's PMT serialization (polymorphic types), the subset that stream tags use.

Tags cross gr-zeromq's ``pass_tags`` links as PMTs serialized the way GNU Radio's
``pmt::serialize`` writes them (gnuradio-runtime/lib/pmt/pmt_serialize.cc): a one-byte type code,
then the value, big-endian. Python values map to PMTs like this:

=============================  ==========================================
PMT                            Python
=============================  ==========================================
PMT_T / PMT_F                  True / False
PMT_NIL                        None
symbol (GNU Radio's strings)   str
long (int32 or int64 wire)     int
uint64                         :class:`Uint64` (an int)
double                         float
complex                        complex
tuple                          tuple (rx_time is (Uint64 seconds, float fraction))
pair                           :class:`Pair`
vector                         list
dict                           dict
uniform vector (u8 ... c64)    numpy.ndarray of that dtype (1-D)
=============================  ==========================================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

PST_TRUE, PST_FALSE, PST_SYMBOL, PST_INT32, PST_DOUBLE, PST_COMPLEX, PST_NULL = range(7)
PST_PAIR, PST_VECTOR, PST_DICT, PST_UNIFORM_VECTOR, PST_UINT64, PST_TUPLE, PST_INT64 = range(7, 14)

# uniform vector subtypes (pmt_serial_tags.h UVI_*) and their element dtype on the wire (big-endian)
_UNIFORM = {0x00: ">u1", 0x01: ">i1", 0x02: ">u2", 0x03: ">i2", 0x04: ">u4", 0x05: ">i4", 0x06: ">u8",
            0x07: ">i8", 0x08: ">f4", 0x09: ">f8", 0x0a: ">c8", 0x0b: ">c16"}
_UNIFORM_CODES = {np.dtype(v).newbyteorder("=").str[1:]: k for k, v in _UNIFORM.items()}
_MAX_DEPTH = 64  # nesting refused beyond this (a malformed or hostile message)


class PmtError(ValueError):
    """Bytes that are not a PMT this module reads, or a value it cannot write."""


class Uint64(int):
    """An int that is written as a PMT uint64 (a plain int is written as a PMT long)."""

    def __repr__(self) -> str:
        return f"Uint64({int(self)})"


@dataclass(frozen=True)
class Pair:
    """A PMT pair (car . cdr)."""

    car: Any
    cdr: Any


def serialize(value: Any) -> bytes:
    """``value`` as GNU Radio's ``pmt::serialize`` writes the PMT it maps to (PmtError if none)."""
    out = bytearray()
    _write(value, out, 0)
    return bytes(out)


def deserialize(buf: Any, pos: int = 0) -> tuple[Any, int]:
    """The PMT starting at byte ``pos`` of ``buf`` and the position after it (PmtError if malformed)."""
    view = memoryview(buf).cast("B")
    try:
        return _read(view, pos, 0)
    except (struct.error, IndexError):
        raise PmtError(f"a PMT at byte {pos} runs past the end of its {view.nbytes}-byte message") from None


def _write(v: Any, out: bytearray, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise PmtError(f"a value nested deeper than {_MAX_DEPTH} levels")
    if v is True or v is False or isinstance(v, np.bool_):
        out.append(PST_TRUE if v else PST_FALSE)
    elif v is None:
        out.append(PST_NULL)
    elif isinstance(v, str):
        data = v.encode()
        if len(data) > 0xFFFF:
            raise PmtError(f"a symbol of {len(data)} bytes; PMT symbols hold at most 65535")
        out += struct.pack(">BH", PST_SYMBOL, len(data)) + data
    elif isinstance(v, Uint64):
        if not 0 <= v < 2**64:
            raise PmtError(f"{int(v)} does not fit a PMT uint64")
        out += struct.pack(">BQ", PST_UINT64, v)
    elif isinstance(v, (int, np.integer)):
        v = int(v)
        if -2**31 <= v < 2**31:
            out += struct.pack(">Bi", PST_INT32, v)
        elif -2**63 <= v < 2**63:
            out += struct.pack(">Bq", PST_INT64, v)
        else:
            raise PmtError(f"{v} does not fit a PMT long (64 bits)")
    elif isinstance(v, (float, np.floating)):
        out += struct.pack(">Bd", PST_DOUBLE, float(v))
    elif isinstance(v, (complex, np.complexfloating)):
        out += struct.pack(">Bdd", PST_COMPLEX, v.real, v.imag)
    elif isinstance(v, tuple):
        out += struct.pack(">BI", PST_TUPLE, len(v))
        for item in v:
            _write(item, out, depth + 1)
    elif isinstance(v, list):
        out += struct.pack(">BI", PST_VECTOR, len(v))
        for item in v:
            _write(item, out, depth + 1)
    elif isinstance(v, Pair):
        out.append(PST_PAIR)
        _write(v.car, out, depth + 1)
        _write(v.cdr, out, depth + 1)
    elif isinstance(v, dict):
        for key, item in v.items():  # a list of (key . value) pairs, each link a DICT cell
            out.append(PST_DICT)
            _write(Pair(key, item), out, depth + 1)
        out.append(PST_NULL)
    elif isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.str[1:] in _UNIFORM_CODES:
        code = _UNIFORM_CODES[v.dtype.str[1:]]
        out += struct.pack(">BBIBB", PST_UNIFORM_VECTOR, code, v.size, 1, 0)  # one pad byte, as GNU Radio
        out += np.ascontiguousarray(v, dtype=_UNIFORM[code]).tobytes()
    else:
        raise PmtError(f"no PMT for a value of type {type(v).__name__} ({v!r})")


def _read(b: memoryview, pos: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise PmtError(f"a PMT nested deeper than {_MAX_DEPTH} levels")
    code = b[pos]
    pos += 1
    if code == PST_TRUE:
        return True, pos
    if code == PST_FALSE:
        return False, pos
    if code == PST_NULL:
        return None, pos
    if code == PST_SYMBOL:
        (n,) = struct.unpack_from(">H", b, pos)
        pos += 2
        if pos + n > b.nbytes:
            raise IndexError
        return bytes(b[pos:pos + n]).decode("utf-8", "replace"), pos + n
    if code == PST_INT32:
        return struct.unpack_from(">i", b, pos)[0], pos + 4
    if code == PST_INT64:
        return struct.unpack_from(">q", b, pos)[0], pos + 8
    if code == PST_UINT64:
        return Uint64(struct.unpack_from(">Q", b, pos)[0]), pos + 8
    if code == PST_DOUBLE:
        return struct.unpack_from(">d", b, pos)[0], pos + 8
    if code == PST_COMPLEX:
        re, im = struct.unpack_from(">dd", b, pos)
        return complex(re, im), pos + 16
    if code in (PST_TUPLE, PST_VECTOR):
        (n,) = struct.unpack_from(">I", b, pos)
        pos += 4
        items = []
        for _ in range(n):
            item, pos = _read(b, pos, depth + 1)
            items.append(item)
        return (tuple(items) if code == PST_TUPLE else items), pos
    if code == PST_PAIR:
        car, pos = _read(b, pos, depth + 1)
        cdr, pos = _read(b, pos, depth + 1)
        return Pair(car, cdr), pos
    if code == PST_DICT:
        entries: dict[Any, Any] = {}
        while True:  # DICT cell: (key . value), then the rest (another DICT cell, or NIL)
            entry, pos = _read(b, pos, depth + 1)
            if not isinstance(entry, Pair):
                raise PmtError(f"a PMT dict entry at byte {pos} is not a (key . value) pair")
            entries[_hashable(entry.car)] = entry.cdr
            code = b[pos]
            if code == PST_NULL:
                return entries, pos + 1
            if code != PST_DICT:
                raise PmtError(f"a PMT dict ends in type code {code:#04x} at byte {pos}, not NIL")
            pos += 1
    if code == PST_UNIFORM_VECTOR:
        sub, n, npad = struct.unpack_from(">BIB", b, pos)
        pos += 6 + npad
        if sub not in _UNIFORM:
            raise PmtError(f"a PMT uniform vector of unknown element type {sub:#04x}")
        dt = np.dtype(_UNIFORM[sub])
        end = pos + n * dt.itemsize
        if end > b.nbytes:
            raise IndexError
        return np.frombuffer(b[pos:end], dtype=dt).astype(dt.newbyteorder("=")), end
    raise PmtError(f"PMT type code {code:#04x} at byte {pos - 1} is not one GNU Radio writes")


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(key)
    if isinstance(key, np.ndarray):
        return tuple(key.tolist())
    return key


def to_json(value: Any) -> Any:
    """A PMT value as JSON can hold it (summaries, SigMF): tuples and vectors as lists, pairs as
    [car, cdr], complex as [re, im], arrays as lists, dict keys as strings."""
    if isinstance(value, Uint64):
        return int(value)
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, Pair):
        return [to_json(value.car), to_json(value.cdr)]
    if isinstance(value, complex):
        return [value.real, value.imag]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return to_json(value.tolist())
    return value
