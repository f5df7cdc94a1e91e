"""``sigmf``: SigMF recordings (a ``NAME.sigmf-meta`` JSON file next to ``NAME.sigmf-data``), through
the ``sigmf`` package (an optional dependency: ``pip install 'pygpukit-dsp[sigmf]'``).

The source reads a recording's datatype (any SigMF datatype: complex ones become complex64, real
ones float32; fixed-point values are scaled to [-1, 1) as the sigmf package does), sample rate,
channels and captures, validated by the sigmf package's schema first. The sink writes a recording
that the sigmf validator accepts: the data as it streams (``NAME.sigmf-data.partial``), then at
the end the metadata with the SHA-512 of the data, one capture, and annotations of the run (the
backend and why, the stages, how it ended, and one annotation where the source lost samples),
and both files renamed to their own names, the metadata last. A run that wrote no sample leaves
no recording; after a failed write (a full disk) the data is cut back to the last whole block and
the recording finalised with exactly those blocks, where the cut and the metadata succeed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo

from ..errors import ConfigError, StreamFault
from ..signal import SignalSpec
from ._common import (Counters, Pacer, PartialFile, Rate, _base_dir, _path_to_str, _resolve, check_block, cut_to,
                      mismatch, need_time_domain, not_open, write_all, write_failure)
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source

INSTALL_HINT = "install it with: pip install 'pygpukit-dsp[sigmf]'"
META_EXT, DATA_EXT = ".sigmf-meta", ".sigmf-data"
EXTENSION = {"name": "gk", "version": "1.0.0", "optional": True}  # our annotation fields: gk:*
_READ_CHUNK = 1 << 20  # samples per channel converted at once (bounds the float temporaries)


def sigmf_module(where: str | None = None) -> ModuleType:
    """The sigmf package, or a ConfigError saying which extra to install."""
    try:
        module = importlib.import_module("sigmf")
        importlib.import_module("sigmf.validate")
        importlib.import_module("sigmf.sigmffile")
        return module
    except ImportError as exc:
        raise ConfigError(f"type 'sigmf' needs the sigmf package, which is not installed ({exc})", where=where,
                          hint=INSTALL_HINT) from None


def sigmf_report() -> dict[str, Any]:
    """The sigmf package's version, or why it is missing (gk-stream devices)."""
    try:
        module = importlib.import_module("sigmf")
    except ImportError as exc:
        return {"found": False, "reason": f"sigmf is not installed ({exc}); {INSTALL_HINT}"}
    return {"found": True, "sigmf": getattr(module, "__version__", "?"),
            "specification": getattr(module, "__specification__", "?")}


def base_path(p: str | Path) -> Path:
    """``NAME`` from ``NAME``, ``NAME.sigmf-meta`` or ``NAME.sigmf-data``."""
    p = Path(p)
    return p.with_suffix("") if p.suffix in (META_EXT, DATA_EXT) else p


def _recording(v: str, info: ValidationInfo) -> str:
    base = base_path(_resolve(v, _base_dir(info)))
    if v.endswith((".sigmf", ".sigmf-collection")) or str(v).endswith(".sigmf.gz"):
        raise ValueError(f"{v} is a SigMF archive or collection: give a recording's .sigmf-meta (extract an "
                         "archive with 'tar xf NAME.sigmf')")
    meta = Path(str(base) + META_EXT)
    if not meta.is_file():
        rel = "" if Path(v).expanduser().is_absolute() else \
            f"; relative paths are resolved against {_base_dir(info)}"
        raise ValueError(f"SigMF metadata file {meta} does not exist{rel}")
    return v


Recording = Annotated[str, BeforeValidator(_path_to_str), AfterValidator(_recording)]


def _no_suffix_clash(v: str) -> str:
    if v.endswith((".sigmf", ".sigmf-collection")):
        raise ValueError("give the recording's name (NAME, NAME.sigmf-meta or NAME.sigmf-data): the sink writes "
                         "NAME.sigmf-meta and NAME.sigmf-data, not an archive")
    return v


RecordingOut = Annotated[str, BeforeValidator(_path_to_str), AfterValidator(_no_suffix_clash)]


class _Format:
    """One SigMF datatype: how its bytes become float32/complex64 samples and back."""

    def __init__(self, datatype: str, sigmf: ModuleType):
        info = sigmf.sigmffile.dtype_info(datatype)
        self.datatype = datatype
        self.is_complex = bool(info["is_complex"])
        self.fixed = bool(info["is_fixedpoint"])
        self.unsigned = bool(info["is_unsigned"])
        self.component = np.dtype(info["component_dtype"])
        self.sample_size = int(info["sample_size"])  # bytes per sample of one channel (I and Q together)
        self.bits = self.component.itemsize * 8
        self.dtype = "complex64" if self.is_complex else "float32"

    def decode(self, raw: bytes | memoryview, m: int, channels: int) -> np.ndarray:
        """``m`` samples of every channel, interleaved in ``raw``, as ``(channels, m)``."""
        comps = np.frombuffer(raw, dtype=self.component)
        if self.component == np.dtype("<f4") and self.is_complex:
            x = comps.view("<c8").reshape(m, channels)
        elif self.component == np.dtype("<f4"):
            x = comps.reshape(m, channels)
        else:
            v = comps.astype(np.float32)
            if self.fixed:
                if self.unsigned:
                    v -= np.float32(2 ** (self.bits - 1))
                v *= np.float32(2.0 ** -(self.bits - 1))
            x = (v.view(np.complex64) if self.is_complex else v).reshape(m, channels)
        return x.reshape(1, m) if channels == 1 else np.ascontiguousarray(x.T)

    def encode(self, block: np.ndarray) -> tuple[bytes, int]:
        """A ``(channels, m)`` block as interleaved bytes, and how many values were clipped."""
        x = np.ascontiguousarray(block.T)  # (m, channels)
        if not self.fixed:
            return x.astype(self.component if not self.is_complex else
                            np.dtype(f"{self.component.byteorder}c{2 * self.component.itemsize}"),
                            copy=False).tobytes(), 0
        comps = x.view(np.float32) if self.is_complex else x
        lo, hi = -(2 ** (self.bits - 1)), 2 ** (self.bits - 1) - 1
        v = np.rint(comps.astype(np.float64) * 2.0 ** (self.bits - 1))
        clipped = int(np.count_nonzero((v < lo) | (v > hi)))
        v = np.clip(v, lo, hi)
        if self.unsigned:
            v += 2 ** (self.bits - 1)
        return v.astype(self.component).tobytes(), clipped


# ------------------------------------------------------------------ source

class SigmfSourceParams(IoParams):
    path: Recording = Field(description="the recording: NAME, NAME.sigmf-meta or NAME.sigmf-data (relative to "
                                        "the YAML file's folder)")
    capture: int | None = Field(None, ge=0, description="stream only this capture segment (default: all of them)")
    verify_checksum: bool = Field(False, description="check the data's SHA-512 against the metadata when opened")
    rate: Rate = Field("asap", description="asap | realtime (pace reads at the sample rate)")


@register_source
class SigmfSource(Counters, Source):
    """Reads a SigMF recording as complex64 (complex datatypes) or float32 ``(channels, n)`` blocks."""

    type = "sigmf"
    Params = SigmfSourceParams
    summary = "SigMF recording (.sigmf-meta + .sigmf-data) via the sigmf package"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._sigmf = sigmf_module(self.where)
        self.realtime = self.params.rate == "realtime"
        self._file = None
        self.captures: list[dict[str, Any]] = []
        self._init_counters()

    @property
    def base(self) -> Path:
        return base_path(self.resolve_path(self.params.path))

    def describe(self) -> str:
        return f"source 'sigmf' ({self.params.path})"

    def input_files(self) -> list[Path]:
        data = getattr(self, "_data", None) or Path(str(self.base) + DATA_EXT)
        return [Path(str(self.base) + META_EXT), data]

    def _meta(self) -> tuple[dict[str, Any], Path]:
        meta_path = Path(str(self.base) + META_EXT)
        what = f"SigMF metadata {meta_path}"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"cannot read {what}: {exc}", where=self.where, path=("path",)) from None
        try:
            self._sigmf.validate.validate(meta)
        except Exception as exc:  # jsonschema.ValidationError and what validate() raises itself
            detail = getattr(exc, "message", None) or str(exc).splitlines()[0]
            raise ConfigError(f"{what} is not valid SigMF (the sigmf package's validator: {detail})",
                              where=self.where, path=("path",)) from None
        return meta, meta_path

    def _data_path(self, meta: dict[str, Any], meta_path: Path) -> Path:
        dataset = meta["global"].get("core:dataset")  # a non-conforming dataset names its own file
        data = meta_path.parent / dataset if dataset else Path(str(self.base) + DATA_EXT)
        if meta["global"].get("core:metadata_only"):
            raise ConfigError(f"SigMF recording {self.params.path} is metadata only (core:metadata_only): there "
                              "are no samples to stream", where=self.where, path=("path",))
        if not data.is_file():
            raise ConfigError(f"SigMF dataset {data} does not exist (the metadata {meta_path.name} is there)",
                              where=self.where, path=("path",), hint="copy the .sigmf-data file next to it")
        return data

    def open(self, request: StreamFormat) -> StreamFormat:
        self.close()
        meta, meta_path = self._meta()
        g = meta["global"]
        what = f"SigMF recording '{self.params.path}'"
        try:
            fmt = _Format(g["core:datatype"], self._sigmf)
        except Exception as exc:
            raise ConfigError(f"{what}: datatype {g['core:datatype']!r} cannot be read: {exc}", where=self.where,
                              path=("path",)) from None
        channels = int(g.get("core:num_channels", 1))
        if request.dtype is not None and request.dtype != fmt.dtype:
            raise mismatch(f"{what} ({fmt.datatype})", "dtype", fmt.dtype, request.dtype, where=self.where)
        if request.channels is not None and request.channels != channels:
            raise mismatch(what, "channels", channels, request.channels, where=self.where)
        sr = g.get("core:sample_rate")
        if sr is not None and request.sample_rate is not None and float(sr) != float(request.sample_rate):
            raise mismatch(what, "sample_rate", f"{float(sr):g}", f"{request.sample_rate:g}", where=self.where,
                           hint="remove 'sample_rate' from the pipeline (the recording sets it) or add a "
                                "'resample' stage after the source")
        sr = sr if sr is not None else request.sample_rate
        if sr is None:
            raise ConfigError(f"{what} has no core:sample_rate: set sample_rate at the pipeline level",
                              where=self.where, hint="e.g. 'sample_rate: 2.4e6'")
        data = self._data_path(meta, meta_path)
        if self.params.verify_checksum and g.get("core:sha512"):
            digest = hashlib.sha512()
            with open(data, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    digest.update(chunk)
            if digest.hexdigest() != g["core:sha512"]:
                raise ConfigError(f"{what}: the SHA-512 of {data.name} does not match core:sha512 in the metadata",
                                  where=self.where, path=("path",), hint="the data file was changed or damaged")
        frame = fmt.sample_size * channels
        size = data.stat().st_size
        ranges = self._ranges(meta, size, frame, what)
        self.captures = [{"index": i, "sample_start": int(c.get("core:sample_start", 0)),
                          "frequency": c.get("core:frequency"), "datetime": c.get("core:datetime")}
                         for i, c in enumerate(meta.get("captures") or [])]
        if self.params.capture is not None:
            if self.params.capture >= len(ranges):
                raise ConfigError(f"{what} has {len(ranges)} capture(s); capture {self.params.capture} does not "
                                  "exist", where=self.where, path=("capture",),
                                  hint=f"captures count from 0: 0..{len(ranges) - 1}")
            ranges = [ranges[self.params.capture]]
        for a, b in ranges:
            if (b - a) % frame:
                raise ConfigError(f"{what}: a capture of {b - a} bytes is not a whole number of {channels}-channel "
                                  f"{fmt.datatype} samples ({frame} bytes each)", where=self.where, path=("path",),
                                  hint="check core:datatype and core:num_channels, or the captures' header_bytes")
        self._file = open(data, "rb", buffering=0)  # unbuffered: every read sees the file as it is now
        self._fmt, self._channels, self._frame, self._data = fmt, channels, frame, data
        self._ranges, self._range, self._pos_in_range = ranges, 0, 0
        self._length = sum(b - a for a, b in ranges) // frame
        self._samples_read = 0
        self._pacer = Pacer(float(sr)) if self.realtime else None
        self.datatype = fmt.datatype
        return StreamFormat(sample_rate=float(sr), channels=channels, dtype=fmt.dtype, length=self._length)

    def _ranges(self, meta: dict[str, Any], size: int, frame: int, what: str) -> list[tuple[int, int]]:
        """[start, end) bytes of each capture's samples in the dataset (skipping header_bytes)."""
        captures = meta.get("captures") or [{"core:sample_start": 0}]
        trailing = int(meta["global"].get("core:trailing_bytes", 0))
        offsets, byte, prev = [], 0, int(captures[0].get("core:sample_start", 0))
        for c in captures:
            start = int(c.get("core:sample_start", 0))
            byte += int(c.get("core:header_bytes", 0)) + (start - prev) * frame
            offsets.append(byte)
            prev = start
        end = size - trailing
        ranges = []
        for i, a in enumerate(offsets):
            b = offsets[i + 1] - int(captures[i + 1].get("core:header_bytes", 0)) if i + 1 < len(offsets) else end
            if not 0 <= a <= b <= size:
                raise ConfigError(f"{what}: capture {i} spans bytes {a}..{b} but the dataset holds {size} bytes",
                                  where=self.where, path=("path",), hint="is the .sigmf-data file truncated?")
            ranges.append((a, b))
        return ranges

    def read(self, n: int) -> np.ndarray:
        if self._file is None:
            raise not_open(f"sigmf source '{self.params.path}'", "read")
        want = int(n)
        parts = []
        while want > 0 and self._range < len(self._ranges):
            a, b = self._ranges[self._range]
            left = (b - a - self._pos_in_range) // self._frame
            if left == 0:
                self._range, self._pos_in_range = self._range + 1, 0
                continue
            m = min(want, left, _READ_CHUNK)
            try:
                raw = _read_at(self._file, a + self._pos_in_range, m * self._frame)
            except OSError as exc:
                raise StreamFault(f"reading {self._data} failed after {self._samples_read} samples: {exc}") from exc
            if len(raw) != m * self._frame:
                raise StreamFault(f"{self._data} ended after {self._samples_read + len(raw) // self._frame} of the "
                                  f"{self._length} samples its metadata describes (was it truncated while reading?)")
            parts.append(self._fmt.decode(raw, m, self._channels))
            self._pos_in_range += m * self._frame
            self._samples_read += m
            want -= m
        if not parts:
            return np.zeros((self._channels, 0), dtype=self._fmt.dtype)
        block = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        self._counts["samples"] += block.shape[1]
        if self._pacer is not None:
            self._pacer.wait_until(self._counts["samples"])
        return block

    def info(self) -> list[str]:
        """What the recording holds, for `gk-stream validate`."""
        if self._file is None and not self.captures:
            return []
        lines = [f"sigmf {self.datatype}, {self._length} samples in {len(self._ranges)} segment(s) streamed"]
        for c in self.captures:
            freq = f" @ {c['frequency']:g} Hz" if isinstance(c.get("frequency"), (int, float)) else ""
            when = f" {c['datetime']}" if c.get("datetime") else ""
            lines.append(f"capture {c['index']}: from sample {c['sample_start']}{freq}{when}")
        return lines

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# ------------------------------------------------------------------ sink

SinkDatatype = Literal["cf32_le", "ci16_le", "ci8", "rf32_le", "ri16_le", "ri8"]


class SigmfSinkParams(IoParams):
    path: RecordingOut = Field(description="the recording to write: NAME (NAME.sigmf-meta and NAME.sigmf-data)")
    datatype: SinkDatatype | None = Field(
        None, description="sample format (default: cf32_le for complex64, rf32_le for float32); integer types "
                          "hold [-1, 1) scaled to their range, clipped and counted")
    frequency_hz: float | None = Field(None, description="the capture's center frequency (core:frequency)")
    description: str | None = Field(None, description="core:description")
    author: str | None = Field(None, description="core:author")
    license: str | None = Field(None, description="core:license (a URL)")
    hw: str | None = Field(None, description="core:hw: the hardware that recorded the signal")


@register_sink
class SigmfSink(Counters, Sink):
    """Writes a time-domain stream as a SigMF recording, annotated with how the run went."""

    type = "sigmf"
    Params = SigmfSinkParams
    summary = "SigMF recording (.sigmf-meta + .sigmf-data) with annotations of the run"
    _counter_names = Counters._counter_names + ("clipped",)

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._sigmf = sigmf_module(self.where)
        self._file = None
        self._spec: SignalSpec | None = None
        self._report: dict[str, Any] | None = None
        self._init_counters()

    @property
    def base(self) -> Path:
        return base_path(self.resolve_path(self.params.path))

    @property
    def data_path(self) -> Path:
        return Path(str(self.base) + DATA_EXT)

    @property
    def meta_path(self) -> Path:
        return Path(str(self.base) + META_EXT)

    def describe(self) -> str:
        return f"sink 'sigmf' ({self.params.path})"

    def output_files(self) -> list[Path]:
        return [self.data_path, self.meta_path]

    def open(self, spec: SignalSpec) -> None:
        what = f"sigmf sink '{self.params.path}'"
        need_time_domain(spec, what, dtype=None, where=self.where)
        datatype = self.params.datatype or ("cf32_le" if spec.is_complex else "rf32_le")
        if datatype.startswith("c") != spec.is_complex:
            raise ConfigError(f"{what}: datatype {datatype} holds {'complex' if datatype[0] == 'c' else 'real'} "
                              f"samples but the pipeline's output is {spec.dtype}", where=self.where,
                              path=("datatype",), hint="pick a datatype starting with 'c' for complex64 output, "
                                                       "'r' for float32")
        self.close()
        self._fmt = _Format(datatype, self._sigmf)
        self._meta_out = PartialFile(self.meta_path, what, where=self.where)
        self._meta_out.check()
        self._data_out = PartialFile(self.data_path, what, where=self.where)
        self._file = self._data_out.create()
        self._cut_failed = False
        self._spec, self._bytes, self._hash = spec, 0, hashlib.sha512()
        self._started: str | None = None
        self._report = None
        self._init_counters()

    def write(self, block: np.ndarray) -> None:
        if self._file is None:
            raise not_open(f"sigmf sink '{self.params.path}'", "write")
        block = check_block(block, self._spec, f"sigmf sink '{self.params.path}'")
        if self._started is None:
            self._started = _utc_now()
        raw, clipped = self._fmt.encode(block)
        try:
            write_all(self._file, raw)
        except OSError as exc:
            self._cut_failed = not cut_to(self._file, self._bytes)  # back to the last whole block
            if self._bytes == 0:
                fate = "nothing had been written, so no recording is left"
            elif self._cut_failed:
                fate = f"the incomplete data keeps the name {self._data_out.partial.name}"
            else:
                fate = (f"the data is cut back to the {self._counts['samples']} samples written before it, "
                        "which the recording holds when it is finalised at the end of the run")
            raise StreamFault(f"writing {self._data_out.partial} failed: "
                              f"{write_failure(self.data_path, exc, len(raw))}; {fate}") from exc
        self._hash.update(raw)
        self._bytes += len(raw)
        self._counts["clipped"] += clipped
        self._counts["samples"] += block.shape[1]

    def run_report(self, report: dict[str, Any]) -> None:
        self._report = dict(report)

    def metadata(self) -> dict[str, Any]:
        """The recording's metadata as written at close (global, one capture, the run's annotations)."""
        p, spec, sigmf = self.params, self._spec, self._sigmf
        from .. import __version__

        g: dict[str, Any] = {
            "core:datatype": self._fmt.datatype,
            "core:sample_rate": float(spec.sample_rate),
            "core:version": getattr(sigmf, "__specification__", "1.2.0"),
            "core:num_channels": spec.channels,
            "core:sha512": self._hash.hexdigest(),
            "core:recorder": f"pygpukit-dsp {__version__} (gk-stream)",
            "core:extensions": [dict(EXTENSION)],
        }
        for key, value in (("core:description", p.description), ("core:author", p.author),
                           ("core:license", p.license), ("core:hw", p.hw)):
            if value is not None:
                g[key] = value
        capture: dict[str, Any] = {"core:sample_start": 0, "core:datetime": self._started or _utc_now()}
        if p.frequency_hz is not None:
            capture["core:frequency"] = float(p.frequency_hz)
        return {"global": g, "captures": self._captures(capture), "annotations": self._annotations()}

    def _captures(self, first: dict[str, Any]) -> list[dict[str, Any]]:
        """The first capture, and one more where a tag of the source (GNU Radio's rx_time, rx_freq) says
        the time or the tuning changed. An rx_time gives the recording's time: the first one dates
        sample 0 (its origin), later ones their own sample."""
        r = self._report or {}
        ratio = (float(r["output_rate"]) / float(r["input_rate"])) if r.get("input_rate") else 1.0
        n = self._counts["samples"]
        by_start: dict[int, dict[str, Any]] = {0: first}
        dated = False
        for e in r.get("events", []):
            if e.get("event") != "tag" or e.get("key") not in ("rx_time", "rx_freq"):
                continue
            at = min(n, max(0, int(round(e.get("sample", 0) * ratio))))
            if e["key"] == "rx_time" and isinstance(e.get("time_s"), (int, float)):
                if not dated:
                    first["core:datetime"] = _utc(e["origin_s"])
                    dated = True
                    if at == 0:
                        continue
                by_start.setdefault(at, {"core:sample_start": at})["core:datetime"] = _utc(e["time_s"])
            elif e["key"] == "rx_freq" and isinstance(e.get("value"), (int, float)):
                by_start.setdefault(at, {"core:sample_start": at})["core:frequency"] = float(e["value"])
        return [by_start[k] for k in sorted(by_start)]

    def _annotations(self) -> list[dict[str, Any]]:
        n = self._counts["samples"]
        r = self._report or {}
        stages = [f"{s['name']} ({s['type']})" if s["name"] != s["type"] else s["type"] for s in r.get("stages", [])]
        src = r.get("source_stats", {})
        dropped = int(src.get("dropped", 0))
        run: dict[str, Any] = {
            "core:sample_start": 0, "core:sample_count": n, "core:label": "gk-stream run",
            "core:generator": "pygpukit-dsp",
        }
        if r:
            text = (f"pipeline {r.get('pipeline')}: {r.get('source')} -> {' -> '.join(stages) or 'no stages'} -> "
                    f"sigmf; backend={r.get('backend')} ({r.get('backend_reason')}); ended by {r.get('ended_by')}; "
                    f"source dropped {dropped} samples in {int(src.get('gaps', 0) or len(r.get('events', [])))} "
                    f"gap(s)")
            if r.get("fault"):
                text += f"; fault: {r['fault']}"
            run.update({"core:comment": text, "gk:pipeline": r.get("pipeline"), "gk:backend": r.get("backend"),
                        "gk:backend_reason": r.get("backend_reason"), "gk:stages": stages,
                        "gk:source": r.get("source"), "gk:ended_by": r.get("ended_by"),
                        "gk:dropped_samples": dropped, "gk:dropped_blocks": int(src.get("dropped_blocks", 0))})
            if r.get("fault"):
                run["gk:fault"] = r["fault"]
        else:
            run["core:comment"] = "written by the sigmf sink outside a gk-stream run (no run report)"
        out = [run]
        ratio = (float(r["output_rate"]) / float(r["input_rate"])) if r.get("input_rate") else 1.0
        for e in r.get("events", []):
            at = min(n, max(0, int(round(e.get("sample", 0) * ratio))))
            if e.get("event") == "tag":  # a GNU Radio stream tag, as it came
                out.append({"core:sample_start": at, "core:sample_count": 0, "core:label": str(e.get("key")),
                            "core:generator": "pygpukit-dsp",
                            "core:comment": f"stream tag {e.get('key')} = {e.get('value')} (from {e.get('srcid')})",
                            "gk:tag": str(e.get("key")), "gk:value": e.get("value")})
                continue
            if "dropped_samples" not in e:  # not a loss (e.g. when a subscriber joined)
                continue
            lost = int(e.get("dropped_samples", 0))
            seq = e.get("sequence")
            span = f" (blocks {seq[0]}..{seq[1]})" if isinstance(seq, list) and len(seq) == 2 else ""
            out.append({"core:sample_start": at, "core:sample_count": 0, "core:label": "dropped",
                        "core:generator": "pygpukit-dsp",
                        "core:comment": f"{lost} input samples in {e.get('dropped_blocks', 0)} block(s){span} "
                                        f"are missing before this sample: {e.get('why', 'lost')}",
                        "gk:dropped_samples": lost, "gk:dropped_blocks": int(e.get("dropped_blocks", 0))})
        out.sort(key=lambda a: a["core:sample_start"])
        return out

    def close(self) -> None:
        if self._file is None:
            return
        f, self._file = self._file, None
        data_partial, meta_partial = self._data_out.partial, self._meta_out.partial
        keeps = f"the incomplete data keeps the name {data_partial.name}"
        try:
            f.close()
        except OSError as exc:
            raise StreamFault(f"finalising {data_partial} failed: {exc}; {keeps}") from exc
        if self._bytes == 0:
            self._data_out.discard()
            return
        if self._cut_failed:  # the write's fault said that the data keeps its .partial name
            return
        meta = self.metadata()
        try:
            self._sigmf.validate.validate(meta)
        except Exception as exc:  # our own metadata: a bug if this happens, but say what
            raise StreamFault(f"the SigMF metadata of {self.meta_path} does not validate: {exc}; the data stays at "
                              f"{data_partial}") from exc
        try:
            with open(meta_partial, "w", encoding="utf-8") as m:
                json.dump(meta, m, indent=4)
                m.write("\n")
        except OSError as exc:
            meta_partial.unlink(missing_ok=True)  # half a JSON document is of no use
            raise StreamFault(f"writing {meta_partial} failed: {write_failure(self.meta_path, exc, 65536)}; "
                              f"{keeps}") from exc
        self._data_out.commit()
        self._meta_out.commit()  # last: a .sigmf-meta under its name is a whole recording


def _read_at(f: Any, offset: int, nbytes: int) -> bytearray:
    """Up to ``nbytes`` from ``offset`` (fewer only at the end of the file)."""
    buf = bytearray(nbytes)
    view, got = memoryview(buf), 0
    f.seek(offset)
    while got < nbytes:
        k = f.readinto(view[got:])
        if not k:
            break
        got += k
    return buf if got == nbytes else buf[:got]


def _utc(unix_s: float) -> str:
    return _dt.datetime.fromtimestamp(unix_s, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
