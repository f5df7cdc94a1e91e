"""``spectrum``: a live spectrum in the terminal, from frames-domain levels (e.g. stft -> db).

Each redraw (at most ``fps`` a second) shows the newest frame of the block as vertical bars,
bins grouped into exactly ``bands`` log-spaced bands (the loudest bin of a band sets its bar),
averaged over the channels, with the peak's level and frequency. On a terminal it redraws in
place; when the output is not a terminal (a log, a pipe) it prints one plain line a second
instead. The levels are drawn as they arrive: for dBFS (a full-scale sine at 0 dB) give the
``db`` stage before it the window's gain as ``ref`` (pipelines/live_spectrum.yaml does).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import IO, Literal

import numpy as np
from pydantic import Field, model_validator

from ..errors import ConfigError
from ..signal import SignalSpec
from .base import IoParams, Sink, register_sink
from ._common import Counters, check_block, not_open

_LEVELS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class SpectrumFrame:
    """What one drawing shows: the level of each band (its loudest bin), and the peak bin."""

    band_db: np.ndarray   # (bands,) float64, one per bar
    edges: np.ndarray     # (bands + 1,) bin edges: band i holds bins edges[i] .. edges[i+1] - 1
    peak_db: float
    peak_bin: int
    peak_hz: float | None  # with nyquist_hz


class SpectrumViewParams(IoParams):
    bands: int = Field(48, ge=4, le=512, description="bars across the screen (bins grouped log-spaced)")
    height: int = Field(10, ge=2, le=100, description="rows of the bars")
    floor_db: float = Field(-100.0, description="level at the bottom of a bar")
    ceil_db: float = Field(0.0, description="level at the top of a bar")
    fps: float = Field(15.0, gt=0, le=240, description="redraws per second at most")
    nyquist_hz: float | None = Field(None, gt=0, description="frequency of the last bin, for the labels "
                                                             "(the audio sample rate / 2; default: bin numbers)")
    stream: Literal["stdout", "stderr"] = Field("stdout", description="where to draw")

    @model_validator(mode="after")
    def _range(self) -> "SpectrumViewParams":
        if not (math.isfinite(self.floor_db) and math.isfinite(self.ceil_db) and self.ceil_db > self.floor_db):
            raise ValueError(f"needs finite floor_db < ceil_db, got {self.floor_db} and {self.ceil_db}")
        return self


@register_sink
class SpectrumView(Counters, Sink):
    """Draws the newest frame of each block as a bar spectrum in the terminal."""

    type = "spectrum"
    Params = SpectrumViewParams
    summary = "live spectrum bars in the terminal (frames-domain levels in dB, e.g. after stft -> db)"
    owns_terminal = True  # gk-stream turns its own progress line off while this draws

    def __init__(self, params=None, *, out: IO[str] | None = None, **kwargs):
        super().__init__(params, **kwargs)
        self._out = out
        self._spec: SignalSpec | None = None
        self._edges: np.ndarray | None = None
        self._last = -math.inf
        self._drawn_rows = 0
        self.frames_drawn = 0
        self.last_frame: SpectrumFrame | None = None  # the newest drawing's figures
        self._init_counters()

    def open(self, spec: SignalSpec) -> None:
        if spec.domain != "frames" or spec.dtype != "float32":
            raise ConfigError(f"sink 'spectrum' draws real levels per bin (frames domain, float32), got "
                              f"{spec.describe()}", where=self.where,
                              hint="end the pipeline with 'stft' then 'db' (or 'power'/'magnitude')")
        if spec.bins < self.params.bands:
            raise ConfigError(f"sink 'spectrum' asks for {self.params.bands} bands but the spectrum has "
                              f"{spec.bins} bins", where=self.where, path=("bands",),
                              hint=f"set bands to {spec.bins} or fewer, or use a larger nfft")
        self._spec = spec
        self._edges = band_edges(spec.bins, self.params.bands)
        self._stream = self._out or (sys.stdout if self.params.stream == "stdout" else sys.stderr)
        self._tty = self._out is None and self._stream.isatty()

    def write(self, block: np.ndarray) -> None:
        if self._spec is None:
            raise not_open("spectrum sink", "write")
        block = check_block(block, self._spec, "spectrum sink")
        self._counts["samples"] += block.shape[1]
        now = time.monotonic()
        interval = 1.0 / self.params.fps if self._tty or self._out is not None else 1.0
        if block.shape[1] == 0 or now - self._last < interval:
            return
        self._last = now
        levels = np.asarray(block[:, -1, :], dtype=np.float64).mean(axis=0)  # newest frame, channel mean
        self.last_frame = self.frame(levels)
        text = self.render(levels) if (self._tty or self._out is not None) else self.line(levels)
        if self._tty and self._drawn_rows:
            self._stream.write(f"\x1b[{self._drawn_rows}F")  # back to the first row of the last drawing
        self._stream.write(text)
        self._stream.flush()
        self._drawn_rows = text.count("\n")
        self.frames_drawn += 1

    def frame(self, levels: np.ndarray) -> SpectrumFrame:
        """The figures drawn for one frame of per-bin ``levels`` (dB)."""
        levels = np.asarray(levels, dtype=np.float64)
        k = int(np.argmax(levels))
        return SpectrumFrame(band_db=np.maximum.reduceat(levels, self._edges[:-1]), edges=self._edges.copy(),
                             peak_db=float(levels[k]), peak_bin=k, peak_hz=self._hz(k))

    def _hz(self, bin_index: float) -> float | None:
        if self.params.nyquist_hz is None:
            return None
        return bin_index / max(1, self._spec.bins - 1) * self.params.nyquist_hz

    def _freq(self, bin_index: float) -> str:
        hz = self._hz(bin_index)
        if hz is None:
            return f"bin {bin_index:.0f}"
        return f"{hz / 1e3:.1f} kHz" if hz >= 1000 else f"{hz:.0f} Hz"

    def _peak(self, levels: np.ndarray) -> str:
        k = int(np.argmax(levels))
        return f"peak {levels[k]:6.1f} dB at {self._freq(k)}"

    def render(self, levels: np.ndarray) -> str:
        """The bars, an axis line and the peak, as text of ``height + 2`` lines."""
        p = self.params
        frac = np.clip((self.frame(levels).band_db - p.floor_db) / (p.ceil_db - p.floor_db), 0.0, 1.0)
        eighths = np.rint(frac * p.height * 8).astype(int)
        rows = []
        for r in range(p.height - 1, -1, -1):
            cells = np.clip(eighths - r * 8, 0, 8)
            rows.append("".join(_LEVELS[c] for c in cells))
        lo, hi = self._freq(self._edges[0]), self._freq(self._spec.bins - 1)
        axis = f"{lo}{' ' * max(1, len(rows[0]) - len(lo) - len(hi))}{hi}"
        return "\n".join(rows + [axis, f"{self._peak(levels)}  [{p.floor_db:g} .. {p.ceil_db:g} dB]"]) + "\n"

    def line(self, levels: np.ndarray) -> str:
        return f"spectrum: {self._peak(levels)}, mean {float(np.mean(levels)):.1f} dB\n"


def band_edges(bins: int, bands: int) -> np.ndarray:
    """Bin edges of exactly ``bands`` log-spaced bands over bins 1.. (bin 0, DC, joins the first
    band), each band at least one bin wide: the low bands, narrower than a bin on a log scale, take
    one bin each until the log spacing is wider. ``bins`` must be >= ``bands``."""
    if bands > bins:
        raise ValueError(f"{bands} bands need at least as many bins, got {bins}")
    if bins == bands:
        return np.arange(bins + 1)
    edges = np.rint(np.geomspace(1, bins, bands + 1)).astype(int)
    edges[0] = 0
    edges[1] = max(edges[1], 2)  # the first band: DC and bin 1
    for i in range(2, bands + 1):  # at least one bin per band...
        edges[i] = max(edges[i], edges[i - 1] + 1)
    edges[bands] = bins
    for i in range(bands - 1, 0, -1):  # ...and room left for the bands above
        edges[i] = min(edges[i], edges[i + 1] - 1)
    return edges
