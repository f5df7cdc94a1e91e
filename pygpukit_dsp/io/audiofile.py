"""``file``: audio files (WAV, FLAC, OGG... whatever libsndfile reads) through soundfile."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import numpy as np
import soundfile as sf
from pydantic import Field

from ..errors import ConfigError, StreamFault
from ..signal import SignalSpec
from ..stages.base import did_you_mean
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source
from ._common import (Counters, ExistingFile, Pacer, PartialFile, PathStr, Rate, check_block, mismatch,
                      need_time_domain, not_open, write_failure)

_DEFAULT_SUBTYPES = {"WAV": "FLOAT", "FLAC": "PCM_24"}


def _sf_error(exc: Exception) -> str:
    return str(exc).strip() or type(exc).__name__


# Containers whose frame count libsndfile knows exactly: reading fewer frames means a damaged file.
_EXACT_LENGTH = ("WAV", "WAVEX", "W64", "RF64", "AIFF", "CAF", "AU", "FLAC")
_SAMPLE_BYTES = {"PCM_S8": 1, "PCM_U8": 1, "ULAW": 1, "ALAW": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4,
                 "FLOAT": 4, "DOUBLE": 8}
# Containers whose header libsndfile rewrites in place at close: after a failed write, cut back to the
# last whole block, they are still finalised to exactly the blocks written (and read back to check).
_REWRITABLE = ("WAV", "WAVEX", "W64", "RF64", "AIFF", "CAF", "AU")
_DATA_SIZE = re.compile(r"^\s*data\s*:\s*(\d+)", re.M)  # WAV/W64: bytes of audio the header announces
_AIFF_FRAMES = re.compile(r"^\s*Frames\s*:\s*(\d+)", re.M)  # AIFF's COMM chunk


def _declared_frames(f: sf.SoundFile) -> int | None:
    """The frame count a PCM file's header announces, read from libsndfile's parse log: libsndfile
    itself quietly shortens the stream to what the file holds. None where it cannot be told."""
    log = f.extra_info
    if f.format == "AIFF":
        m = _AIFF_FRAMES.search(log)
        return int(m.group(1)) if m else None
    width = _SAMPLE_BYTES.get(f.subtype)
    m = _DATA_SIZE.search(log)
    if f.format not in ("WAV", "WAVEX", "W64") or m is None or width is None:
        return None
    size = int(m.group(1)) - (24 if f.format == "W64" else 0)  # W64 counts its chunk header
    if size <= 0 or size >= 0x7FFFF000:  # "unknown length": a streamed file, or one never finalised
        return None
    return size // (width * f.channels)


class AudioFileSourceParams(IoParams):
    path: ExistingFile = Field(description="audio file to read (relative to the YAML file's folder)")
    rate: Rate = Field("asap", description="asap | realtime (pace reads at the file's sample rate)")


@register_source
class AudioFileSource(Counters, Source):
    """Reads an audio file as float32 ``(channels, n)`` blocks; sample rate and channels come from the file."""

    type = "file"
    Params = AudioFileSourceParams
    summary = "audio file (WAV, FLAC, OGG...) via soundfile"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self.realtime = self.params.rate == "realtime"
        self._file: sf.SoundFile | None = None
        self._pacer: Pacer | None = None
        self._init_counters()

    @property
    def full_path(self) -> Path:
        return self.resolve_path(self.params.path)

    def input_files(self) -> list[Path]:
        return [self.full_path]

    def open(self, request: StreamFormat) -> StreamFormat:
        self.close()  # opening again starts from the beginning
        path = self.full_path
        what = f"file '{self.params.path}'"
        if request.dtype not in (None, "float32"):
            raise ConfigError(f"{what} holds real float32 samples but the pipeline requests dtype "
                              f"{request.dtype}", where=self.where,
                              hint="remove 'dtype' from the pipeline or set it to float32")
        try:
            size = path.stat().st_size
            if size == 0:
                raise ConfigError(f"audio file {path} is empty (0 bytes)", where=self.where, path=("path",),
                                  hint="was it written completely? check the path")
            f = sf.SoundFile(str(path))
        except ConfigError:
            raise
        except Exception as exc:  # soundfile raises LibsndfileError/RuntimeError/TypeError, stat OSError
            raise ConfigError(f"cannot read audio file {path}: {_sf_error(exc)}", where=self.where,
                              path=("path",), hint="check that it is an audio file libsndfile can read "
                                                   "(WAV, FLAC, OGG...) and that it is complete") from None
        try:
            declared = _declared_frames(f)
            if declared is not None and declared > f.frames:
                raise ConfigError(
                    f"audio file {path} is truncated: its header announces {declared} frames but the file "
                    f"holds {f.frames}", where=self.where, path=("path",),
                    hint="it was cut off (an interrupted copy, download or recording?): copy it again, or "
                         "rewrite it with a tool such as sox or ffmpeg to keep what is there")
            if f.frames == 0 and f.format in ("WAV", "WAVEX", "W64", "AIFF") and size > 4096:
                raise ConfigError(
                    f"audio file {path} holds no audio frames although it is {size} bytes long: its header "
                    "is damaged or was never finalised", where=self.where, path=("path",),
                    hint="a recording stopped before it wrote its header? rewrite the file with a tool "
                         "such as sox or ffmpeg")
            if request.sample_rate is not None and float(request.sample_rate) != float(f.samplerate):
                raise mismatch(what, "sample_rate", f.samplerate, f"{request.sample_rate:g}",
                               where=self.where,
                               hint="remove 'sample_rate' from the pipeline (the file sets it) or add a "
                                    "'resample' stage after the source")
            if request.channels is not None and request.channels != f.channels:
                raise mismatch(what, "channels", f.channels, request.channels, where=self.where)
        except ConfigError:
            f.close()
            raise
        self._file = f
        self._pos = 0  # frames read since open
        self._pacer = Pacer(f.samplerate) if self.realtime else None
        return StreamFormat(sample_rate=float(f.samplerate), channels=f.channels, dtype="float32",
                            length=int(f.frames))

    def read(self, n: int) -> np.ndarray:
        if self._file is None:
            raise not_open(f"file source '{self.params.path}'", "read")
        f = self._file
        try:
            data = f.read(int(n), dtype="float32", always_2d=True)
        except Exception as exc:  # a FLAC decoder that lost sync, an I/O error...
            raise StreamFault(f"reading {self.full_path} failed after {self._pos} of its {f.frames} frames: "
                              f"{_sf_error(exc)} (is the file corrupt or truncated?)") from exc
        if len(data) < n and self._pos + len(data) < f.frames and f.format in _EXACT_LENGTH:
            raise StreamFault(f"{self.full_path} ended after {self._pos + len(data)} of the {f.frames} frames "
                              "its header announces (is the file truncated?)")
        self._pos += len(data)
        block = np.ascontiguousarray(data.T)
        self._counts["samples"] += block.shape[1]
        if self._pacer is not None and block.shape[1]:
            self._pacer.wait_until(self._counts["samples"])
        return block

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class AudioFileSinkParams(IoParams):
    path: PathStr = Field(description="file to write; the extension picks the format (.wav, .flac, .ogg...)")
    subtype: str | None = Field(
        None, description="sample format, e.g. FLOAT, PCM_16, PCM_24 (default: FLOAT for .wav, "
                          "PCM_24 for .flac, libsndfile's default otherwise)")


@register_sink
class AudioFileSink(Counters, Sink):
    """Writes a real float32 time-domain signal to an audio file; ``close()`` finalises the header.

    The file is written as ``NAME.partial`` and renamed to ``NAME`` when it is finalised (also when
    the run was stopped or failed elsewhere: it then holds every block before that). A block whose
    write fails (a full disk) is cut off again where the header can be rewritten (WAV, AIFF...): the
    file is finalised with the whole blocks before it and read back to check; any other format
    (FLAC, OGG...) keeps ``NAME.partial``. A run that wrote nothing leaves no file.
    """

    type = "file"
    Params = AudioFileSinkParams
    summary = "audio file (WAV, FLAC, OGG...) via soundfile"
    _counter_names = Counters._counter_names + ("clipped",)

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self.format, self.subtype = self._choose_format()
        self._file: sf.SoundFile | None = None
        self._spec: SignalSpec | None = None
        self._out: PartialFile | None = None
        self._init_counters()

    def _choose_format(self) -> tuple[str, str]:
        path = Path(self.params.path)
        formats = sf.available_formats()
        fmt = path.suffix[1:].upper()
        if fmt not in formats:
            known = ", ".join("." + f.lower() for f in ("WAV", "FLAC", "OGG", "AIFF") if f in formats)
            raise ConfigError(f"file sink: cannot tell the audio format from '{path.name}'", path=("path",),
                              hint=f"use an extension such as {known}")
        if self.params.subtype is None:
            return fmt, _DEFAULT_SUBTYPES.get(fmt) or sf.default_subtype(fmt)
        subtype = self.params.subtype.upper()
        allowed = sorted(sf.available_subtypes(fmt))
        if not sf.check_format(fmt, subtype):
            close = did_you_mean(subtype, allowed)
            hint = (f"{close} " if close else "") + f"{fmt} takes: {', '.join(allowed)}"
            raise ConfigError(f"file sink: subtype '{self.params.subtype}' is not available for {fmt} files",
                              path=("subtype",), hint=hint)
        return fmt, subtype

    @property
    def full_path(self) -> Path:
        return self.resolve_path(self.params.path)

    def output_files(self) -> list[Path]:
        return [self.full_path]

    def open(self, spec: SignalSpec) -> None:
        self.close()
        what = f"file sink '{self.params.path}'"
        need_time_domain(spec, what, dtype="float32", where=self.where)
        if float(spec.sample_rate) != int(spec.sample_rate):
            raise ConfigError(f"{what}: audio files need an integer sample rate, got {spec.sample_rate:g}",
                              where=self.where, hint="resample to an integer rate before the sink")
        out = PartialFile(self.full_path, what, where=self.where)
        out.create().close()  # the path checked, NAME.partial there, before the first block
        try:
            self._file = sf.SoundFile(str(out.partial), "w", samplerate=int(spec.sample_rate),
                                      channels=spec.channels, subtype=self.subtype, format=self.format)
        except Exception as exc:
            out.discard()
            raise ConfigError(f"{what}: cannot write a {self.format}/{self.subtype} file with "
                              f"{spec.channels} channels at {spec.sample_rate:g} Hz: {_sf_error(exc)}",
                              where=self.where) from None
        self._out, self._spec = out, spec
        self._frames = self._blocks = 0  # written since open
        self._clip_check = self.subtype.startswith(("PCM", "ULAW", "ALAW", "DPCM", "DWVW"))

    def write(self, block: np.ndarray) -> None:
        if self._file is None:
            raise not_open(f"file sink '{self.params.path}'", "write")
        block = check_block(block, self._spec, f"file sink '{self.params.path}'")
        if self._clip_check:
            self._counts["clipped"] += int(np.count_nonzero(np.abs(block) > 1.0))
        try:
            self._file.write(np.ascontiguousarray(block.T, dtype=np.float32))
        except Exception as exc:
            detail = _sf_error(exc)
            detail = write_failure(self.full_path, "the write failed" if detail == "System error." else exc,
                                   block.size * 4)
            raise StreamFault(f"writing {self._out.partial} failed: {detail}; {self._finish_after_fault()}") from exc
        self._counts["samples"] += block.shape[1]
        self._frames += block.shape[1]
        self._blocks += 1

    def _finish_after_fault(self) -> str:
        """After a failed write: drop what part of the block got out and finalise the file with the
        whole blocks before it where the header can be rewritten (libsndfile cannot be trusted to
        finalise a FLAC or OGG stream whose write failed: that keeps its .partial name). Says what
        became of the file, for the fault's message."""
        f, self._file = self._file, None
        out = self._out
        keeps = f"the incomplete file keeps the name {out.partial.name}"
        cut = self.format in _REWRITABLE and self._frames > 0 and _truncated(f, self._frames)
        if not cut:
            _close_quietly(f)  # nothing to keep, or a file that keeps its .partial name anyway
            if self._frames == 0:
                out.discard()
                return "nothing had been written, so no file is left"
            return keeps
        try:
            f.close()  # writes the final header
            self._read_back(out.partial)
            out.commit()
        except Exception as exc:
            return f"finalising it failed too ({exc})" + ("" if out.partial.name in str(exc) else f"; {keeps}")
        return f"{out.path.name} holds the {self._blocks} whole blocks written before it ({self._frames} frames)"

    def close(self) -> None:
        if self._file is None:
            return
        f, self._file = self._file, None
        out = self._out
        if self._frames == 0:
            _close_quietly(f)  # nothing was written: nothing to keep
            out.discard()
            return
        try:
            f.close()  # writes the final header
        except Exception as exc:
            raise StreamFault(f"finalising {out.partial} failed: {_sf_error(exc)}; the incomplete file "
                              f"keeps the name {out.partial.name}") from exc
        self._read_back(out.partial)
        out.commit()

    def _read_back(self, partial: Path) -> None:
        """A container that knows its length must hold every frame written, to its last one."""
        if self.format not in _EXACT_LENGTH:
            return
        try:
            with sf.SoundFile(str(partial)) as f:
                frames = f.frames
                if frames == self._frames:  # and its last frames decode (a FLAC cut inside them does not)
                    start = max(0, frames - 1024)
                    f.seek(start)
                    frames = start + len(f.read(frames - start, dtype="float32"))
        except Exception as exc:
            raise StreamFault(f"finalising {partial}: it cannot be read back ({_sf_error(exc)}); the incomplete "
                              f"file keeps the name {partial.name}") from exc
        if frames != self._frames:
            raise StreamFault(f"finalising {partial}: it holds {frames} frames, not the {self._frames} written; "
                              f"the incomplete file keeps the name {partial.name}")


def _truncated(f: sf.SoundFile, frames: int) -> bool:
    try:
        f.truncate(frames)
    except Exception:  # LibsndfileError (a FLAC stream cannot seek), RuntimeError
        return False
    return True


def _close_quietly(f: sf.SoundFile) -> None:
    with contextlib.suppress(Exception):
        f.close()
