"""The viewer's side of a ``view`` sink: snapshots in, small frames out (pure NumPy, no server).

Each snapshot a sink hands over (io/view_sink.py) is analysed here, on the viewer's thread: a
time-domain snapshot becomes a spectrum per channel (Hann window, dB re full scale: a full-scale
sine reads 0 dB), a time scope, a constellation (complex input) and level meters; a frames-domain
one is drawn as it is (the newest frames, max-held). Spectra are cut to at most ``points`` values by
max-hold over groups of bins (a narrow tone never vanishes between two points), every spectrum that
arrives between two sent frames is max-held into the next, and frames leave at most ``fps`` a
second (FrameLimiter). Arrays travel as base64 bytes: dB in 0.5 dB steps above the axis floor,
scope and constellation as int8 with a scale, so a frame's size depends on ``points`` and
``scope_samples``, not on the stream's rate.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

DB_STEP = 0.5  # dB per step of a quantised spectrum (255 steps: 127.5 dB above floor_db)


class FrameLimiter:
    """At most ``fps`` frames a second: ``ready(now)`` is true when the next frame may leave."""

    def __init__(self, fps: float):
        self.interval = 1.0 / fps
        self._next = -math.inf

    def ready(self, now: float) -> bool:
        if now < self._next:
            return False
        # the next slot counts from this one, not from now: a late tick does not push the rate down
        self._next = max(self._next + self.interval, now) if math.isfinite(self._next) else now + self.interval
        return True


def max_hold_bins(values: np.ndarray, points: int) -> np.ndarray:
    """``values`` (..., bins) cut to at most ``points`` along the last axis: each point is the max of
    its group of neighbouring bins (groups differ by at most one bin)."""
    bins = values.shape[-1]
    if bins <= points:
        return values
    edges = np.linspace(0, bins, points + 1).astype(np.int64)[:-1]
    return np.maximum.reduceat(values, edges, axis=-1)


def quantise_db(db: np.ndarray, floor_db: float) -> str:
    """dB values as base64 bytes: steps of DB_STEP above ``floor_db``, clipped to 0..255."""
    q = np.clip(np.rint((np.asarray(db, dtype=np.float64) - floor_db) / DB_STEP), 0, 255).astype(np.uint8)
    return base64.b64encode(q.tobytes()).decode("ascii")


def quantise_signed(x: np.ndarray) -> tuple[str, float]:
    """Real values as base64 int8 with the scale that maps 127 back to the largest magnitude."""
    x = np.asarray(x, dtype=np.float64)
    scale = float(np.max(np.abs(x))) if x.size else 0.0
    q = np.zeros(x.shape, np.int8) if scale == 0 else np.rint(x / scale * 127).astype(np.int8)
    return base64.b64encode(q.tobytes()).decode("ascii"), scale


def to_db(x: np.ndarray, kind: str) -> np.ndarray:
    """Levels in dB from power, magnitude or dB values."""
    x = np.asarray(x, dtype=np.float64)
    if kind == "db":
        return x
    tiny = 1e-30
    return (10.0 if kind == "power" else 20.0) * np.log10(np.maximum(x, tiny))


class SinkAnalysis:
    """What one view sink shows, built from its snapshots: ``add`` each, ``frame`` when one may leave.

    ``params`` are the sink's (ViewSinkParams); ``spec`` the SignalSpec it was opened with.
    """

    def __init__(self, name: str, spec: Any, params: Any):
        self.name, self.spec, self.params = name, spec, params
        self.frames_sent = 0
        self.latest: dict[str, Any] | None = None  # the last frame, decoded figures for /api/state
        self._held: np.ndarray | None = None       # (traces, points) dB max-held since the last frame
        self._held_all: np.ndarray | None = None   # (points,) the max over every channel
        self._peak: tuple[float, float] | None = None  # (dB, Hz or bin) of the loudest bin, full resolution
        self._last_snap: Any = None
        self._axis = self._make_axis()

    # --------------------------------------------------------------- axes
    def _make_axis(self) -> dict[str, Any]:
        """The spectrum's x axis: ``x0`` + i * ``dx`` for point i (full-resolution bins), unit Hz or bin."""
        spec, p = self.spec, self.params
        if spec.domain == "time":
            nfft = p.nfft
            fs = spec.sample_rate
            if spec.is_complex:  # shifted: -fs/2 .. +fs/2
                bins, x0, dx = nfft, -fs / 2, fs / nfft
            else:
                bins, x0, dx = nfft // 2 + 1, 0.0, fs / nfft
            unit = "Hz"
        else:
            bins = spec.bins
            dx, unit = (p.bin_hz, "Hz") if p.bin_hz else (1.0, "bin")
            x0 = -(bins // 2) * dx if p.shift else 0.0
        points = min(bins, p.points)
        return {"bins": bins, "points": points, "x0": x0, "dx": dx, "unit": unit,
                "point_bins": bins / points}

    def meta(self) -> dict[str, Any]:
        """What the page needs once to draw this sink's axes."""
        spec, p, ax = self.spec, self.params, self._axis
        return {"name": self.name, "title": p.title or self.name, "domain": spec.domain,
                "complex": spec.is_complex, "channels": spec.channels, "rate": spec.sample_rate,
                "spec": spec.describe(), "fps": p.fps, "floor_db": p.floor_db, "ceil_db": p.ceil_db,
                "db_step": DB_STEP, "traces": min(spec.channels, p.traces),
                "axis": {"unit": ax["unit"], "points": ax["points"],
                         # x of point i's first and last bin: the page labels the axis with these
                         "first": ax["x0"], "last": ax["x0"] + (ax["bins"] - 1) * ax["dx"]},
                "scope_samples": p.scope_samples}

    # --------------------------------------------------------------- analysis
    def spectra_db(self, data: np.ndarray) -> np.ndarray:
        """(channels, bins) dB of one snapshot at full resolution."""
        spec, p = self.spec, self.params
        if spec.domain == "frames":
            frames = np.abs(data) if spec.is_complex else data
            kind = "magnitude" if spec.is_complex else p.levels
            db = to_db(frames, kind).max(axis=1)  # max-hold over the snapshot's frames
            return np.fft.fftshift(db, axes=-1) if p.shift else db
        nfft = p.nfft
        x = np.asarray(data, dtype=np.complex128 if spec.is_complex else np.float64)
        m = min(x.shape[1], nfft)  # fewer samples than nfft (the stream's first blocks): windowed, zero-padded
        window = np.hanning(m)
        gain = window.sum()  # so that a full-scale tone reads 0 dB in its bin
        xw = x[:, x.shape[1] - m:] * window
        if spec.is_complex:
            mag = np.abs(np.fft.fftshift(np.fft.fft(xw, n=nfft, axis=1), axes=1)) / gain
        else:
            mag = np.abs(np.fft.rfft(xw, n=nfft, axis=1)) * (2.0 / gain)
        return 20.0 * np.log10(np.maximum(mag, 1e-12))

    def add(self, snap: Any) -> None:
        """Take one snapshot (io.view_sink.Snapshot): its spectra are max-held into the next frame."""
        db = self.spectra_db(snap.data)
        traces = min(db.shape[0], self.params.traces)
        every = db.max(axis=0)
        k = int(np.argmax(every))
        if self._peak is None or every[k] > self._peak[0]:
            self._peak = (float(every[k]), self._axis["x0"] + k * self._axis["dx"])
        held = max_hold_bins(db[:traces], self.params.points)
        held_all = max_hold_bins(every, self.params.points)
        self._held = held if self._held is None else np.maximum(self._held, held)
        self._held_all = held_all if self._held_all is None else np.maximum(self._held_all, held_all)
        self._last_snap = snap

    @property
    def pending(self) -> bool:
        return self._held is not None

    def frame(self) -> dict[str, Any]:
        """The frame of everything added since the last one (call only when ``pending``)."""
        p, spec, snap = self.params, self.spec, self._last_snap
        assert self._held is not None and self._held_all is not None and self._peak is not None
        peak_db, peak_x = self._peak
        out: dict[str, Any] = {
            "sink": self.name, "t": round(float(snap.end_s), 6), "n": self.frames_sent,
            "spectrum": [quantise_db(row, p.floor_db) for row in self._held],
            "waterfall": quantise_db(self._held_all, p.floor_db),
            "peak": {"db": round(peak_db, 2), "x": round(peak_x, 3)},
        }
        if spec.domain == "time":
            out.update(self._time_figures(snap))
        self.latest = {"t": out["t"], "n": self.frames_sent, "peak_db": out["peak"]["db"], "peak_x": out["peak"]["x"],
                       "unit": self._axis["unit"], "levels": out.get("levels"),
                       "spectrum_max_db": [round(float(v), 1) for v in self._held.max(axis=1)]}
        self.frames_sent += 1
        self._held = self._held_all = self._peak = None
        return out

    def _time_figures(self, snap: Any) -> dict[str, Any]:
        """Scope, constellation and level meters of a time-domain snapshot."""
        p, spec = self.params, self.spec
        x = snap.data
        traces = min(x.shape[0], p.traces)
        tail = x[:traces, -p.scope_samples:]
        fs = spec.sample_rate
        scope: dict[str, Any] = {"dt": 1.0 / fs, "t0": round(snap.end_s - tail.shape[1] / fs, 6), "re": [], "im": []}
        for row in tail:
            data, scale = quantise_signed(row.real)
            scope["re"].append({"q": data, "scale": scale})
            if spec.is_complex:
                data, scale = quantise_signed(row.imag)
                scope["im"].append({"q": data, "scale": scale})
        out: dict[str, Any] = {"scope": scope}
        if spec.is_complex:
            iq = x[0, -256:]
            both, scale = quantise_signed(np.stack([iq.real, iq.imag], axis=1).ravel())
            out["constellation"] = {"q": both, "scale": scale}
        rms = np.sqrt(np.mean(np.abs(x.astype(np.complex128 if spec.is_complex else np.float64)) ** 2, axis=1))
        peak = snap.block_peak if snap.block_peak is not None else np.abs(x).max(axis=1)
        out["levels"] = {"rms_db": [round(float(v), 1) for v in 20 * np.log10(np.maximum(rms, 1e-10))],
                         "peak_db": [round(float(v), 1) for v in 20 * np.log10(np.maximum(peak, 1e-10))]}
        return out
