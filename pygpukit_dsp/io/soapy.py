"""``soapy``: a receiving SDR through SoapySDR (its C library, libSoapySDR.so.0.8, loaded at run time
with ctypes like the CUDA driver; Debian: ``apt-get install libsoapysdr0.8`` and the module of the
radio, e.g. ``soapysdr-module-rtlsdr``). docs/sdr-devices.md describes it.

The source opens the device its ``device`` arguments select (``driver=rtlsdr``, ``serial=...``),
tunes it, sets the rate, gain (or AGC), antenna and bandwidth of every channel it streams, and
reads CF32 (complex64 as is) or CS16 (int16 I/Q scaled by 1/32768) into ``(channels, n)``
complex64 blocks. Overflows (SOAPY_SDR_OVERFLOW) and read timeouts are counted like a sound card's
xruns; a device that delivers nothing for ``timeout_s`` (unplugged) is a StreamFault. The
hardware's time of the first sample, when the device gives one, is the stream's time origin.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ..errors import ConfigError, StreamFault
from ._common import Counters, not_open
from .base import IoParams, Source, StreamFormat, register_source

SOAPY_SDR_RX = 1
SOAPY_SDR_TIMEOUT, SOAPY_SDR_OVERFLOW = -1, -4
SOAPY_SDR_HAS_TIME = 1 << 2
_ERRORS = {-1: "TIMEOUT", -2: "STREAM_ERROR", -3: "CORRUPTION", -4: "OVERFLOW", -5: "NOT_SUPPORTED",
           -6: "TIME_ERROR", -7: "UNDERFLOW"}
LIBRARY = "libSoapySDR.so.0.8"
INSTALL_HINT = "install SoapySDR and the radio's module, e.g. apt-get install libsoapysdr0.8 soapysdr-module-rtlsdr"
_READ_US = 100_000  # one read waits at most this long (then the stop flag and timeout_s are checked)


class _Kwargs(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("keys", ctypes.POINTER(ctypes.c_char_p)),
                ("vals", ctypes.POINTER(ctypes.c_char_p))]


class _Range(ctypes.Structure):
    _fields_ = [("minimum", ctypes.c_double), ("maximum", ctypes.c_double), ("step", ctypes.c_double)]


_lib: Any = None
_lib_lock = threading.Lock()


def library(where: str | None = None) -> Any:
    """libSoapySDR through ctypes, its functions typed; ConfigError saying what to install."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("SoapySDR") or LIBRARY)
        except OSError as exc:
            raise ConfigError(f"type 'soapy' needs SoapySDR's library {LIBRARY}, which cannot be loaded ({exc})",
                              where=where, hint=INSTALL_HINT) from None
        P, D, S, I = ctypes.c_void_p, ctypes.c_double, ctypes.c_size_t, ctypes.c_int  # noqa: E741
        sig = {
            "SoapySDRDevice_enumerateStrArgs": (ctypes.POINTER(_Kwargs), [ctypes.c_char_p, ctypes.POINTER(S)]),
            "SoapySDRKwargsList_clear": (None, [ctypes.POINTER(_Kwargs), S]),
            "SoapySDRDevice_makeStrArgs": (P, [ctypes.c_char_p]),
            "SoapySDRDevice_unmake": (I, [P]),
            "SoapySDRDevice_lastError": (ctypes.c_char_p, []),
            "SoapySDRDevice_getNumChannels": (S, [P, I]),
            "SoapySDRDevice_getSampleRateRange": (ctypes.POINTER(_Range), [P, I, S, ctypes.POINTER(S)]),
            "SoapySDRDevice_getFrequencyRange": (ctypes.POINTER(_Range), [P, I, S, ctypes.POINTER(S)]),
            "SoapySDRDevice_getGainRange": (_Range, [P, I, S]),
            "SoapySDRDevice_setSampleRate": (I, [P, I, S, D]),
            "SoapySDRDevice_setFrequency": (I, [P, I, S, D, ctypes.POINTER(_Kwargs)]),
            "SoapySDRDevice_setGain": (I, [P, I, S, D]),
            "SoapySDRDevice_setGainMode": (I, [P, I, S, ctypes.c_bool]),
            "SoapySDRDevice_setAntenna": (I, [P, I, S, ctypes.c_char_p]),
            "SoapySDRDevice_listAntennas": (ctypes.POINTER(ctypes.c_char_p), [P, I, S, ctypes.POINTER(S)]),
            "SoapySDRDevice_setBandwidth": (I, [P, I, S, D]),
            "SoapySDRDevice_setupStream": (P, [P, I, ctypes.c_char_p, ctypes.POINTER(S), S, ctypes.POINTER(_Kwargs)]),
            "SoapySDRDevice_activateStream": (I, [P, P, I, ctypes.c_longlong, S]),
            "SoapySDRDevice_deactivateStream": (I, [P, P, I, ctypes.c_longlong]),
            "SoapySDRDevice_closeStream": (I, [P, P]),
            "SoapySDRDevice_readStream": (I, [P, P, ctypes.POINTER(P), S, ctypes.POINTER(I),
                                              ctypes.POINTER(ctypes.c_longlong), ctypes.c_long]),
            "SoapySDR_free": (None, [P]),
            "SoapySDRStrings_clear": (None, [ctypes.POINTER(ctypes.POINTER(ctypes.c_char_p)), S]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib = lib
        return lib


def _ranges(lib: Any, fn: Any, dev: Any, chan: int) -> list[tuple[float, float]]:
    n = ctypes.c_size_t(0)
    ptr = fn(dev, SOAPY_SDR_RX, chan, ctypes.byref(n))
    out = [(ptr[i].minimum, ptr[i].maximum) for i in range(n.value)]
    if ptr:
        lib.SoapySDR_free(ctypes.cast(ptr, ctypes.c_void_p))
    return out


def _describe(ranges: list[tuple[float, float]], scale: float, unit: str) -> str:
    return ", ".join(f"{a / scale:g}" if a == b else f"{a / scale:g}..{b / scale:g}" for a, b in ranges) + f" {unit}"


def enumerate_devices(args: str = "") -> list[dict[str, str]]:
    """What SoapySDR finds (its modules' devices) as dicts of their identifying arguments."""
    lib = library()
    n = ctypes.c_size_t(0)
    found = lib.SoapySDRDevice_enumerateStrArgs(args.encode(), ctypes.byref(n))
    out = [{found[i].keys[k].decode(): found[i].vals[k].decode() for k in range(found[i].size)}
           for i in range(n.value)]
    lib.SoapySDRKwargsList_clear(found, n.value)
    return out


def soapy_report() -> dict[str, Any]:
    """SoapySDR's devices with their receive ranges, or why there are none (gk-stream devices)."""
    try:
        lib = library()
        devices = enumerate_devices()
    except ConfigError as exc:
        return {"found": False, "reason": str(exc)}
    for d in devices:
        args = ",".join(f"{k}={v}" for k, v in d.items())
        dev = lib.SoapySDRDevice_makeStrArgs(args.encode())
        if not dev:
            d["error"] = (lib.SoapySDRDevice_lastError() or b"").decode()
            continue
        try:
            d["rx_channels"] = int(lib.SoapySDRDevice_getNumChannels(dev, SOAPY_SDR_RX))
            if d["rx_channels"]:
                d["rates_hz"] = _ranges(lib, lib.SoapySDRDevice_getSampleRateRange, dev, 0)
                d["freqs_hz"] = _ranges(lib, lib.SoapySDRDevice_getFrequencyRange, dev, 0)
                g = lib.SoapySDRDevice_getGainRange(dev, SOAPY_SDR_RX, 0)
                d["gain_db"] = (g.minimum, g.maximum)
        finally:
            lib.SoapySDRDevice_unmake(dev)
    return {"found": True, "devices": devices}


class SoapySourceParams(IoParams):
    device: str = Field("", description="SoapySDR device arguments, e.g. 'driver=rtlsdr' or 'driver=rtlsdr,serial=0001'")
    freq_hz: float = Field(gt=0, description="center frequency in Hz (every channel)")
    sample_rate: float | None = Field(None, gt=0, description="sample rate in Hz (default: the pipeline's)")
    gain_db: float | None = Field(None, description="overall gain in dB (default: the device's; agc: true for AGC)")
    agc: bool = Field(False, description="automatic gain control (instead of gain_db)")
    antenna: str | None = Field(None, description="the antenna (the device lists its names)")
    bandwidth_hz: float | None = Field(None, gt=0, description="the analog filter's bandwidth in Hz")
    channels: list[int] | None = Field(None, min_length=1, description="the device's channels to stream (default: [0])")
    format: Literal["CF32", "CS16"] = Field("CF32", description="the stream format: CF32, or CS16 scaled by 1/32768")
    timeout_s: float = Field(5.0, gt=0, le=3600, description="no samples for this long (unplugged?): StreamFault")


@register_source
class SoapySource(Counters, Source):
    """Complex64 ``(channels, n)`` blocks from a receiving SDR through SoapySDR."""

    type = "soapy"
    Params = SoapySourceParams
    summary = "a receiving SDR through SoapySDR (driver=rtlsdr, ...): tuned, CF32 or CS16"
    realtime = True
    nonfinite_default = "zero"
    _counter_names = Counters._counter_names + ("timeouts",)

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        p = self.params
        if p.agc and p.gain_db is not None:
            raise ConfigError("give gain_db or agc: true, not both", path=("gain_db",),
                              hint="remove gain_db for automatic gain control")
        self._dev = self._stream = None
        self._stop = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.time_origin_s: float | None = None
        self._init_counters()

    def describe(self) -> str:
        return f"source 'soapy' ({self.params.device or 'the first device'})"

    def interrupt(self, *, abort: bool = False) -> None:
        super().interrupt(abort=abort)
        self._stop.set()

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            err = (self._lib.SoapySDRDevice_lastError() or b"").decode()
            raise ConfigError(f"{self.describe()}: {what} failed ({_ERRORS.get(rc, rc)}{': ' + err if err else ''})",
                              where=self.where)

    def open(self, request: StreamFormat) -> StreamFormat:
        p = self.params
        self.close()
        self._lib = lib = library(self.where)
        rate = p.sample_rate or request.sample_rate
        if rate is None:
            raise ConfigError(f"{self.describe()} needs a sample rate", where=self.where,
                              hint="set 'sample_rate' here or at the pipeline level")
        if request.dtype not in (None, "complex64"):
            raise ConfigError(f"{self.describe()} delivers complex64; the pipeline declares {request.dtype}",
                              where=self.where, hint="set 'dtype: complex64'")
        chans = p.channels or [0]
        if request.channels not in (None, len(chans)):
            raise ConfigError(f"{self.describe()} streams {len(chans)} channel(s) {chans}; the pipeline declares "
                              f"{request.channels}", where=self.where, path=("channels",))
        found = enumerate_devices(p.device)
        if not found:
            raise ConfigError(f"no SoapySDR device matches '{p.device}' (SoapySDR finds: "
                              f"{', '.join(d.get('driver', '?') for d in enumerate_devices()) or 'none'})",
                              where=self.where, path=("device",),
                              hint="check the device arguments and that its module is installed (SoapySDRUtil --find)")
        dev = lib.SoapySDRDevice_makeStrArgs(p.device.encode())
        if not dev:
            raise ConfigError(f"{self.describe()} cannot be opened: {(lib.SoapySDRDevice_lastError() or b'').decode()}",
                              where=self.where, path=("device",))
        self._dev = dev
        try:
            self._configure(lib, dev, chans, float(rate))
            n = len(chans)
            arr = (ctypes.c_size_t * n)(*chans)
            stream = lib.SoapySDRDevice_setupStream(dev, SOAPY_SDR_RX, p.format.encode(), arr, n, None)
            if not stream:
                raise ConfigError(f"{self.describe()}: setting up a {p.format} stream failed: "
                                  f"{(lib.SoapySDRDevice_lastError() or b'').decode()}", where=self.where)
            self._stream = stream
            self._check(lib.SoapySDRDevice_activateStream(dev, stream, 0, 0, 0), "activating the stream")
        except BaseException:
            self.close()
            raise
        self._chans = n
        self._bufs = [self._buffer(1) for _ in range(n)]
        self._stop.clear()
        self._init_counters()
        self.events, self.time_origin_s = [], None
        self._last = time.monotonic()
        return StreamFormat(sample_rate=float(rate), channels=n, dtype="complex64", length=None)

    def _configure(self, lib: Any, dev: Any, chans: list[int], rate: float) -> None:
        p = self.params
        have = int(lib.SoapySDRDevice_getNumChannels(dev, SOAPY_SDR_RX))
        bad = [c for c in chans if not 0 <= c < have]
        if bad:
            raise ConfigError(f"{self.describe()} has {have} receive channel(s); channel(s) {bad} do not exist",
                              where=self.where, path=("channels",))
        for c in chans:
            rates = _ranges(lib, lib.SoapySDRDevice_getSampleRateRange, dev, c)
            if rates and not any(a - 1e-6 <= rate <= b + 1e-6 for a, b in rates):
                raise ConfigError(f"{self.describe()}: sample rate {rate:g} Hz is out of the device's range "
                                  f"({_describe(rates, 1e6, 'MHz')})", where=self.where, path=("sample_rate",))
            freqs = _ranges(lib, lib.SoapySDRDevice_getFrequencyRange, dev, c)
            if freqs and not any(a <= p.freq_hz <= b for a, b in freqs):
                raise ConfigError(f"{self.describe()}: freq_hz {p.freq_hz:g} is out of the device's range "
                                  f"({_describe(freqs, 1e6, 'MHz')})", where=self.where, path=("freq_hz",))
            self._check(lib.SoapySDRDevice_setSampleRate(dev, SOAPY_SDR_RX, c, rate), f"setting the rate {rate:g} Hz")
            self._check(lib.SoapySDRDevice_setFrequency(dev, SOAPY_SDR_RX, c, p.freq_hz, None),
                        f"tuning to {p.freq_hz:g} Hz")
            if p.agc:
                self._check(lib.SoapySDRDevice_setGainMode(dev, SOAPY_SDR_RX, c, True), "switching AGC on")
            elif p.gain_db is not None:
                g = lib.SoapySDRDevice_getGainRange(dev, SOAPY_SDR_RX, c)
                if not g.minimum - 1e-9 <= p.gain_db <= g.maximum + 1e-9:
                    raise ConfigError(f"{self.describe()}: gain_db {p.gain_db:g} is out of the device's range "
                                      f"({g.minimum:g}..{g.maximum:g} dB)", where=self.where, path=("gain_db",))
                self._check(lib.SoapySDRDevice_setGain(dev, SOAPY_SDR_RX, c, p.gain_db), "setting the gain")
            if p.antenna is not None:
                n = ctypes.c_size_t(0)
                names = lib.SoapySDRDevice_listAntennas(dev, SOAPY_SDR_RX, c, ctypes.byref(n))
                listed = [names[i].decode() for i in range(n.value)]
                lib.SoapySDRStrings_clear(ctypes.byref(names), n.value)
                if p.antenna not in listed:
                    raise ConfigError(f"{self.describe()} has no antenna '{p.antenna}' (channel {c}: "
                                      f"{', '.join(listed) or 'none listed'})", where=self.where, path=("antenna",))
                self._check(lib.SoapySDRDevice_setAntenna(dev, SOAPY_SDR_RX, c, p.antenna.encode()),
                            f"selecting antenna {p.antenna}")
            if p.bandwidth_hz is not None:
                self._check(lib.SoapySDRDevice_setBandwidth(dev, SOAPY_SDR_RX, c, p.bandwidth_hz),
                            f"setting the bandwidth {p.bandwidth_hz:g} Hz")

    def _buffer(self, n: int) -> np.ndarray:
        """One channel's read buffer: n complex64 (CF32), or n int16 I, Q pairs (CS16)."""
        return np.zeros(n, np.complex64) if self.params.format == "CF32" else np.zeros((n, 2), np.int16)

    def read(self, n: int) -> np.ndarray:
        if self._stream is None:
            raise not_open("soapy source", "read")
        n = int(n)
        if self._bufs[0].shape[0] < n:
            self._bufs = [self._buffer(n) for _ in self._bufs]
        lib, p = self._lib, self.params
        ptrs = (ctypes.c_void_p * self._chans)(*[b.ctypes.data for b in self._bufs])
        flags, t_ns = ctypes.c_int(0), ctypes.c_longlong(0)
        while True:
            if self._stop.is_set():
                return np.zeros((self._chans, 0), np.complex64)
            t0 = time.monotonic()
            rc = lib.SoapySDRDevice_readStream(self._dev, self._stream, ptrs, n, ctypes.byref(flags),
                                               ctypes.byref(t_ns), _READ_US)
            if rc > 0:
                break
            if rc == SOAPY_SDR_OVERFLOW:  # samples the host did not take in time: an xrun
                self._counts["overflows"] += 1
                continue
            if rc == SOAPY_SDR_TIMEOUT or rc == 0:
                self._counts["timeouts"] += 1
                if time.monotonic() - t0 < 0.001:  # a stream that died returns at once: do not spin on it
                    time.sleep(0.02)
            else:
                raise StreamFault(f"{self.describe()}: reading failed ({_ERRORS.get(rc, rc)}): was the device "
                                  "unplugged?")
            if time.monotonic() - self._last > p.timeout_s:
                raise StreamFault(f"{self.describe()}: no samples for {p.timeout_s:g} s (timeout_s): was the device "
                                  "unplugged?")
        self._last = time.monotonic()
        if self.time_origin_s is None and flags.value & SOAPY_SDR_HAS_TIME and self._counts["samples"] == 0:
            self.time_origin_s = t_ns.value / 1e9  # the hardware's time of sample 0
            self.events.append({"sample": 0, "event": "hardware time", "time_s": self.time_origin_s,
                                "origin_s": self.time_origin_s})
        if p.format == "CF32":
            out = np.stack([b[:rc] for b in self._bufs])
        else:
            out = np.stack([(b[:rc, 0].astype(np.float32) + 1j * b[:rc, 1].astype(np.float32)) / 32768.0
                            for b in self._bufs]).astype(np.complex64)
        self._counts["samples"] += rc
        return out

    def close(self) -> None:
        lib = getattr(self, "_lib", None)
        if self._stream is not None and lib is not None:
            lib.SoapySDRDevice_deactivateStream(self._dev, self._stream, 0, 0)
            lib.SoapySDRDevice_closeStream(self._dev, self._stream)
        self._stream = None
        if self._dev is not None and lib is not None:
            lib.SoapySDRDevice_unmake(self._dev)
        self._dev = None
