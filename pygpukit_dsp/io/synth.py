"""``synth``: test signals (sine, chirp, noise, multitone), seeded and reproducible.

Every sample is a pure function of its absolute index (and the seed), so the
signal does not depend on how reads are split: tones take their phase from the
sample index, and noise comes in fixed chunks: chunk k of a channel's noise is drawn
from that channel's generator (seeded by ``(seed, purpose, channel)``) advanced to a
position that depends only on k.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..errors import ConfigError
from .base import IoParams, Source, StreamFormat, register_source
from ._common import Counters, Pacer, Rate, not_open

_CHUNK = 4096  # noise samples per chunk
_CHUNK_STRIDE = 1 << 32  # generator draws reserved per chunk (a chunk uses about 2 * _CHUNK)
_CHUNK_INDEX_OFFSET = 1 << 40  # chunks before sample 0 (negative delays) get their own draws
_MAX_GENERATE = 1 << 18  # samples per channel generated at once
_FRAC_HALF = 16  # half length of the windowed-sinc fractional-delay filter (noise signal)

# stream ids inside the seed, so the generators of different purposes never overlap
_SIGNAL_NOISE, _COMMON_NOISE, _ADDITIVE_NOISE = 0, 1, 2


class SynthParams(IoParams):
    signal: Literal["sine", "chirp", "noise", "multitone"] = Field(
        "sine", description="waveform: sine | chirp | noise | multitone")
    freq_hz: float = Field(1000.0, description="sine: frequency in Hz")
    f0_hz: float = Field(100.0, description="chirp: start frequency in Hz")
    f1_hz: float = Field(10000.0, description="chirp: end frequency in Hz")
    sweep_s: float = Field(1.0, gt=0, description="chirp: seconds per linear sweep (then repeats)")
    freqs_hz: list[float] | None = Field(None, description="multitone: tone frequencies in Hz")
    amplitude: float = Field(0.5, ge=0, description="peak amplitude of each tone; std of the noise signal")
    noise_std: float = Field(0.0, ge=0, description="standard deviation of additive white noise")
    seed: int = Field(0, ge=0, description="seed of every random generator")
    duration_s: float | None = Field(None, gt=0, description="length in seconds (default: endless)")
    channel_delay_samples: list[float] | None = Field(
        None, description="per-channel delay in samples (may be fractional), to simulate an array")
    rate: Rate = Field("asap", description="asap | realtime (pace reads at the sample rate)")

    @field_validator("freqs_hz")
    @classmethod
    def _tones(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and not v:
            raise ValueError("needs at least one frequency")
        return v

    @field_validator("freq_hz", "f0_hz", "f1_hz", "amplitude", "noise_std", "sweep_s")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @field_validator("channel_delay_samples")
    @classmethod
    def _delays(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and not all(math.isfinite(d) for d in v):
            raise ValueError("delays must be finite numbers")
        return v

    @model_validator(mode="after")
    def _needs(self) -> "SynthParams":
        if self.signal == "multitone" and self.freqs_hz is None:
            raise ValueError("signal 'multitone' needs freqs_hz, e.g. freqs_hz: [440, 1000]")
        return self


@register_source
class SynthSource(Counters, Source):
    """Generated test signal; real tones are ``A*cos(phase)``, complex ones ``A*exp(j*phase)``."""

    type = "synth"
    Params = SynthParams
    summary = "sine, chirp, noise or multitone test signal (seeded, reproducible)"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self.realtime = self.params.rate == "realtime"
        self._fmt: StreamFormat | None = None
        self._pos = 0
        self._cache: dict[tuple, tuple[int, np.ndarray]] = {}
        self._generators: dict[tuple[int, int], tuple] = {}
        self._init_counters()

    # -- negotiation ------------------------------------------------------
    def open(self, request: StreamFormat) -> StreamFormat:
        p = self.params
        for key in ("sample_rate", "channels"):
            if getattr(request, key) is None:
                raise ConfigError(f"synth needs {key}: set it at the pipeline level", where=self.where,
                                  hint=f"e.g. '{key}: {48000 if key == 'sample_rate' else 1}'")
        sr, channels = float(request.sample_rate), int(request.channels)
        dtype = request.dtype or "float32"
        if p.channel_delay_samples is not None and len(p.channel_delay_samples) != channels:
            raise ConfigError(
                f"channel_delay_samples has {len(p.channel_delay_samples)} values but the pipeline "
                f"has {channels} channels", where=self.where, path=("channel_delay_samples",),
                hint="give one delay per channel")
        nyquist = sr / 2
        for key, f in self._frequencies():
            if abs(f) > nyquist:
                raise ConfigError(
                    f"synth {key} {f:g} Hz is above the Nyquist frequency {nyquist:g} Hz "
                    f"(sample_rate {sr:g})", where=self.where, path=(key,),
                    hint="lower the frequency or raise sample_rate")
        self._delays = np.asarray(p.channel_delay_samples or [0.0] * channels, dtype=np.float64)
        self._complex = dtype == "complex64"
        self._np_dtype = np.dtype(dtype)
        length = None if p.duration_s is None else int(round(p.duration_s * sr))
        self._fmt = StreamFormat(sample_rate=sr, channels=channels, dtype=dtype, length=length)
        self._pos = 0
        self._pacer = Pacer(sr) if self.realtime else None
        return self._fmt

    def _frequencies(self) -> list[tuple[str, float]]:
        p = self.params
        if p.signal == "sine":
            return [("freq_hz", p.freq_hz)]
        if p.signal == "chirp":
            return [("f0_hz", p.f0_hz), ("f1_hz", p.f1_hz)]
        if p.signal == "multitone":
            return [("freqs_hz", f) for f in p.freqs_hz or ()]
        return []

    # -- reading ----------------------------------------------------------
    def read(self, n: int) -> np.ndarray:
        if self._fmt is None:
            raise not_open("synth source", "read")
        m = int(n)
        if self._fmt.length is not None:
            m = max(0, min(m, self._fmt.length - self._pos))
        block = self.generate(self._pos, m)
        self._pos += m
        self._counts["samples"] += m
        if self._pacer is not None and m:
            self._pacer.wait_until(self._pos)
        return block

    def generate(self, start: int, m: int) -> np.ndarray:
        """Samples ``start .. start+m`` of every channel, ``(channels, m)``, without moving the read position."""
        if self._fmt is None:
            raise not_open("synth source", "generate")
        p, channels = self.params, self._fmt.channels
        if m > _MAX_GENERATE:  # bound the float64 temporaries of very large reads
            out = np.empty((channels, m), dtype=self._np_dtype)
            for a in range(0, m, _MAX_GENERATE):
                b = min(m, a + _MAX_GENERATE)
                out[:, a:b] = self.generate(start + a, b - a)
            return out
        if m == 0:
            return np.zeros((channels, 0), dtype=self._np_dtype)
        if p.signal == "noise":
            out = p.amplitude * self._noise_signal(start, m)
        else:
            # time of each output sample in samples, delayed per channel; one row when all
            # channels share the delay (the common case), broadcast afterwards
            same = bool(np.all(self._delays == self._delays[0]))
            delays = self._delays[:1] if same else self._delays
            t = (start + np.arange(m, dtype=np.float64))[None, :] - delays[:, None]
            out = np.zeros(t.shape, dtype=np.complex128 if self._complex else np.float64)
            for phase in self._phases(t):
                out += np.exp(1j * phase) if self._complex else np.cos(phase)
            out *= p.amplitude
            if same and channels > 1:
                out = np.repeat(out, channels, axis=0)
        if p.noise_std > 0:
            out += p.noise_std * self._white_rows(_ADDITIVE_NOISE, start, m)
        return out.astype(self._np_dtype, copy=False)

    def _phases(self, t: np.ndarray):
        p, sr = self.params, self._fmt.sample_rate
        if p.signal == "chirp":
            sweep = p.sweep_s * sr
            tl = np.mod(t, sweep) / sr
            cycles = p.f0_hz * tl + 0.5 * (p.f1_hz - p.f0_hz) / p.sweep_s * tl * tl
            yield 2 * np.pi * (cycles - np.floor(cycles))
            return
        freqs = [p.freq_hz] if p.signal == "sine" else list(p.freqs_hz or ())
        for f in freqs:
            cycles = f * t / sr
            yield 2 * np.pi * (cycles - np.floor(cycles))  # keep the argument small for precision

    def _noise_signal(self, start: int, m: int) -> np.ndarray:
        if self.params.channel_delay_samples is None:  # independent noise per channel
            return self._white_rows(_SIGNAL_NOISE, start, m)
        dt = np.complex128 if self._complex else np.float64
        out = np.empty((self._fmt.channels, m), dtype=dt)
        # one common noise signal, delayed per channel (windowed-sinc for fractional delays)
        for c, d in enumerate(self._delays):
            whole = math.floor(d)
            frac = d - whole
            if frac == 0.0:
                out[c] = self._white((_COMMON_NOISE, 0), start - whole, m)
                continue
            h = _frac_delay_taps(frac)
            L = _FRAC_HALF
            s = self._white((_COMMON_NOISE, 0), start - whole - L, m + 2 * L - 1)
            out[c] = np.convolve(s, h, mode="valid")
        return out

    def _white_rows(self, purpose: int, start: int, m: int) -> np.ndarray:
        """``(channels, m)`` unit-power white noise, one independent stream per channel."""
        first, last = start // _CHUNK, (start + m - 1) // _CHUNK
        parts = [self._chunk_rows(purpose, k) for k in range(first, last + 1)]
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        off = start - first * _CHUNK
        return joined[:, off:off + m]

    def _chunk_rows(self, purpose: int, k: int) -> np.ndarray:
        key = ("rows", purpose)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == k:
            return cached[1]
        rows = np.stack([self._chunk((purpose, c), k, keep=False) for c in range(self._fmt.channels)])
        self._cache[key] = (k, rows)
        return rows

    def _white(self, stream: tuple[int, int], start: int, m: int) -> np.ndarray:
        """Unit-power white noise at absolute indices ``start .. start+m`` (start may be negative)."""
        first, last = start // _CHUNK, (start + m - 1) // _CHUNK
        parts = [self._chunk(stream, k) for k in range(first, last + 1)]
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts)
        off = start - first * _CHUNK
        return joined[off:off + m]

    def _chunk(self, stream: tuple[int, int], k: int, keep: bool = True) -> np.ndarray:
        cached = self._cache.get(stream)
        if cached is not None and cached[0] == k:
            return cached[1]
        bitgen, gen, start_state = self._generator(stream)
        # chunk k starts at a fixed, far-apart offset of the stream's sequence: random access
        # without re-seeding (PCG64.advance is cheap; seeding is not)
        bitgen.state = start_state
        bitgen.advance((k + _CHUNK_INDEX_OFFSET) * _CHUNK_STRIDE)
        if self._complex:
            v = gen.standard_normal(2 * _CHUNK).view(np.complex128) * (1 / math.sqrt(2))
        else:
            v = gen.standard_normal(_CHUNK)
        if keep:
            self._cache[stream] = (k, v)
        return v

    def _generator(self, stream: tuple[int, int]):
        entry = self._generators.get(stream)
        if entry is None:
            bitgen = np.random.PCG64(np.random.SeedSequence([self.params.seed, stream[0], stream[1]]))
            entry = (bitgen, np.random.Generator(bitgen), bitgen.state)
            self._generators[stream] = entry
        return entry


def _frac_delay_taps(frac: float) -> np.ndarray:
    """Blackman-windowed sinc taps (length 2L) delaying by ``frac`` (0 < frac < 1) samples.

    With ``s`` starting L samples before the first output, ``np.convolve(s, h, "valid")[n]``
    is ``sum_j s(n - j) * sinc(j - frac)`` for j in -L+1 .. L.
    """
    L = _FRAC_HALF
    x = np.arange(-L + 1, L + 1, dtype=np.float64) - frac
    w = 0.42 + 0.5 * np.cos(np.pi * x / L) + 0.08 * np.cos(2 * np.pi * x / L)
    h = np.sinc(x) * w
    return h / h.sum()  # unit gain at DC
