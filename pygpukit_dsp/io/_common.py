"""Helpers shared by the sources and sinks: path parameters, pacing, format checks, counters."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BeforeValidator, ValidationInfo

from ..errors import ConfigError, StreamFault
from ..signal import SignalSpec

Rate = Literal["asap", "realtime"]
"""``asap``: read as fast as the pipeline consumes; ``realtime``: no faster than the sample clock."""


def _path_to_str(v: Any) -> Any:
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, str) and not v.strip():
        raise ValueError("path is empty")
    return v


def _base_dir(info: ValidationInfo) -> Path:
    ctx = info.context or {}
    return Path(ctx.get("base_dir") or Path.cwd())


def _resolve(p: str, base_dir: Path) -> Path:
    path = Path(p).expanduser()
    return path if path.is_absolute() else base_dir / path


def _must_exist(v: str, info: ValidationInfo) -> str:
    base = _base_dir(info)
    full = _resolve(v, base)
    if not full.is_file():
        where = "does not exist" if not full.exists() else "is not a file"
        rel = "" if Path(v).expanduser().is_absolute() else \
            f"; relative paths are resolved against {base}"
        raise ValueError(f"file {full} {where}{rel}")
    return v


PathStr = Annotated[str, BeforeValidator(_path_to_str)]
"""A file path parameter, kept as written (relative paths resolve against the YAML folder)."""

ExistingFile = Annotated[str, BeforeValidator(_path_to_str), AfterValidator(_must_exist)]
"""A path parameter that must name an existing file when the component is built."""


def resolve_path(p: str | os.PathLike, base_dir: Path) -> Path:
    return _resolve(os.fspath(p), base_dir)


def mismatch(what: str, key: str, have: Any, requested: Any, *, where: str | None,
             hint: str | None = None) -> ConfigError:
    """A ConfigError for a value the source fixes that differs from what the pipeline asks."""
    return ConfigError(f"{what} has {key}: {have!s}, but the pipeline requests {key}: {requested!s}",
                       where=where, hint=hint or f"remove '{key}' from the pipeline or set it to {have}")


def need_time_domain(spec: SignalSpec, what: str, *, dtype: str | None, where: str | None) -> None:
    """Raise a ConfigError with a fix-it hint unless ``spec`` is a time-domain signal of ``dtype``."""
    if spec.domain != "time":
        raise ConfigError(
            f"{what} needs time-domain samples, got frames ({spec.bins} bins per frame)", where=where,
            hint="add an 'ifft'/'irfft' stage to go back to samples, or use the 'numpy' (or 'zmq') sink "
                 "to keep frames")
    if dtype is not None and spec.dtype != dtype:
        if dtype == "float32":
            hint = "add a 'magnitude' stage before this sink, or use the 'rawiq', 'sigmf' or 'numpy' sink " \
                   "for complex samples"
        else:
            hint = "use the 'file', 'sigmf' or 'numpy' sink for real samples"
        raise ConfigError(f"{what} needs {dtype} samples, got {spec.dtype}", where=where, hint=hint)


class Pacer:
    """Holds reads back to the sample clock: ``n`` samples become available ``n / rate`` s after start.

    ``spin_us`` (set by the runner from the stream's ``qos.spin_us``): sleep until that long before
    the due time, then spin to it, natively and without the GIL (``_native.wait_until``); 0: a plain
    ``time.sleep`` to the due time."""

    def __init__(self, sample_rate: float, spin_us: int = 0):
        self.sample_rate = float(sample_rate)
        self.spin_us = int(spin_us)
        self._t0: float | None = None

    def start_at(self, t0: float) -> None:
        """Start the clock at ``t0`` (``time.perf_counter`` seconds) rather than at the first read:
        a Session starts the clocks it paces on one epoch, each at its stream's release phase."""
        self._t0 = float(t0)

    def wait_until(self, total_samples: int) -> None:
        now = time.perf_counter()
        if self._t0 is None:
            self._t0 = now
        due = self._t0 + total_samples / self.sample_rate
        if due <= now:
            return
        if self.spin_us > 0:
            from .. import _native

            _native.wait_until(int(due * 1e9), self.spin_us)  # perf_counter's clock is CLOCK_MONOTONIC
        else:
            time.sleep(due - now)


def pacers_of(source: object) -> list[Pacer]:
    """The pacers of ``source`` and of the sources it wraps (``.inner``): empty when no clock of
    ours paces it (``rate: asap``, or a device's clock)."""
    out: list[Pacer] = []
    seen: set[int] = set()
    while source is not None and id(source) not in seen:
        seen.add(id(source))
        pacer = getattr(source, "_pacer", None)
        if isinstance(pacer, Pacer):
            out.append(pacer)
        source = getattr(source, "inner", None)
    return out


def set_pacer_spin(source: object, spin_us: int) -> int:
    """Give the paced wait of ``source`` (and of a source it wraps, ``.inner``) a spin window;
    returns how many pacers got it (0: the source is not paced by a clock)."""
    pacers = pacers_of(source)
    for pacer in pacers:
        pacer.spin_us = int(spin_us)
    return len(pacers)


class Counters:
    """The counters every source and sink reports in the run summary."""

    _counter_names: tuple[str, ...] = ("samples", "overflows", "underflows", "dropped")

    def _init_counters(self, *extra: str) -> None:
        self._counts: dict[str, int] = dict.fromkeys(self._counter_names + extra, 0)

    def stats(self) -> dict[str, int]:
        """Counters for the run summary: ``samples`` per channel along the streaming axis
        (frames in the frames domain), ``overflows``/``underflows`` reported by a device,
        ``dropped`` samples; zeros where a counter does not apply."""
        counts = getattr(self, "_counts", None)
        if counts is None:
            self._init_counters()
            counts = self._counts
        return dict(counts)


def check_block(block: np.ndarray, spec: SignalSpec, what: str) -> np.ndarray:
    """Validate one block handed to a sink against the spec it was opened with."""
    block = np.asarray(block)
    expected = spec.block_shape
    if block.ndim != len(expected) or block.shape[0] != expected[0] or \
            (spec.domain == "frames" and block.shape[2] != expected[2]):
        raise StreamFault(f"{what}: got a block of shape {block.shape}, expected "
                          f"{expected} (or shorter along axis 1)")
    return block


def not_open(what: str, action: str) -> StreamFault:
    return StreamFault(f"{what}: {action}() called before open()")


PARTIAL_SUFFIX = ".partial"
"""A sink writes ``NAME.partial`` and renames it to ``NAME`` once finalised, so a file under its
own name is always complete: a crash (SIGKILL, power loss) leaves only the ``.partial``."""


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + PARTIAL_SUFFIX)


def commit_partial(partial: Path, path: Path) -> None:
    """Give a finalised file its own name (atomic on one file system)."""
    try:
        os.replace(partial, path)
    except OSError as exc:
        raise StreamFault(f"renaming {partial} to {path} failed: {exc}; the finished file stays at "
                          f"{partial}") from exc


def write_failure(path: Path, exc: BaseException, nbytes: int) -> str:
    """What a failed write means, with the free space when the disk is the likely cause."""
    text = str(exc).strip() or type(exc).__name__
    try:
        free = os.statvfs(path.parent).f_bavail * os.statvfs(path.parent).f_frsize
    except OSError:
        return text
    if free < nbytes:
        return f"{text} (no space left on the device: {free} bytes free in {path.parent})"
    return text
