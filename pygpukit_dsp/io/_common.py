"""Helpers shared by the sources and sinks: path parameters, pacing, format checks, counters."""

from __future__ import annotations

import errno
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
"""A sink writes ``NAME.partial`` and renames it to ``NAME`` only once the file is valid, so a file
under its own name is always complete: a crash (SIGKILL, power loss) leaves only the ``.partial``."""


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + PARTIAL_SUFFIX)


def commit_partial(partial: Path, path: Path) -> None:
    """Give a finalised file its own name (atomic on one file system)."""
    try:
        os.replace(partial, path)
    except OSError as exc:
        raise StreamFault(f"renaming {partial} to {path} failed: {exc}; the finished file stays at "
                          f"{partial}") from exc


def write_failure(path: Path, exc: BaseException | str, nbytes: int) -> str:
    """What a failed write means, with the free space when the disk is the likely cause."""
    text = str(exc).strip() or type(exc).__name__
    try:
        free = os.statvfs(path.parent).f_bavail * os.statvfs(path.parent).f_frsize
    except OSError:
        return text
    if free < nbytes:
        return f"{text} (no space left on the device: {free} bytes free in {path.parent})"
    return text


# ------------------------------------------------------------------ sink paths

_WRITABLE_HINT = "choose a writable folder"


def sink_path_error(what: str, target: Path, reason: str, hint: str, *, where: str | None) -> ConfigError:
    """The one phrasing of every sink path problem: ``WHAT: cannot write to TARGET: REASON (HINT)``."""
    return ConfigError(f"{what}: cannot write to {target}: {reason}", where=where, path=("path",), hint=hint)


def _nearest_existing(folder: Path) -> Path:
    """``folder`` or the closest folder above it that exists (a dangling link counts as existing)."""
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    return folder


def _unwritable_folder(folder: Path) -> str:
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return "the folder is read-only" if read_only else \
        "the folder is not writable (its permissions or attributes forbid it)"


def check_sink_path(path: Path, what: str, *, where: str | None) -> None:
    """Refuse, before anything is written, an output path that cannot become a file: a folder (also
    ``NAME.partial``), a folder on the way that is a file, a folder that is read-only or not
    writable, a file that exists and may not be replaced. A ConfigError at the sink (``where``)."""
    for p in (path, partial_path(path)):
        if p.is_dir():
            raise sink_path_error(what, p, "it is a folder", "give the path of a file, not of a folder",
                                  where=where)
    folder = _nearest_existing(path.parent)
    if not folder.is_dir():
        raise sink_path_error(what, path, f"{folder} is a file, not a folder",
                              "choose another folder, or move that file away", where=where)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise sink_path_error(what, folder, _unwritable_folder(folder), _WRITABLE_HINT, where=where)
    for p in (path, partial_path(path)):
        if p.exists() and not os.access(p, os.W_OK):
            raise sink_path_error(what, p, "the file exists and may not be replaced (read-only or immutable)",
                                  "remove it or choose another name", where=where)


def _os_error(exc: OSError, what: str, path: Path, *, where: str | None) -> ConfigError:
    """What creating ``path`` (or a folder above it) failed on, in :func:`sink_path_error`'s words."""
    folder = _nearest_existing(path.parent)
    code = exc.errno
    if code == errno.EROFS:
        return sink_path_error(what, folder, "the folder is read-only", _WRITABLE_HINT, where=where)
    if code in (errno.EACCES, errno.EPERM):
        return sink_path_error(what, folder, _unwritable_folder(folder), _WRITABLE_HINT, where=where)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return sink_path_error(what, folder, "the disk is full", "free some space or choose another disk",
                               where=where)
    if code == errno.ENOTDIR:
        return sink_path_error(what, path, "a folder on the way is a file", "choose another folder", where=where)
    if code == errno.EISDIR:
        return sink_path_error(what, path, "it is a folder", "give the path of a file, not of a folder",
                               where=where)
    if code == errno.ENAMETOOLONG:
        return sink_path_error(what, path, "the name is too long", "choose a shorter name", where=where)
    return sink_path_error(what, path, exc.strerror or str(exc), "choose another path", where=where)


class PartialFile:
    """The file a sink writes: created as ``NAME.partial`` by :meth:`create` (which checks the path,
    so every sink refuses a bad one in the same words, before the first block), renamed to ``NAME``
    by :meth:`commit` once it is valid, removed with the folders it created by :meth:`discard`
    when nothing was written."""

    def __init__(self, path: Path, what: str, *, where: str | None):
        self.path, self.partial = Path(path), partial_path(Path(path))
        self.what, self.where = what, where
        self._made: list[Path] = []  # folders create() made, deepest last

    def check(self) -> None:
        check_sink_path(self.path, self.what, where=self.where)

    def create(self) -> Any:
        """Check the path, make the folders, open ``NAME.partial`` unbuffered (a ``FileIO``; write
        it with :func:`write_all`, so that a failed write leaves no bytes behind in a buffer)."""
        self.check()
        missing = []
        folder = self.path.parent
        while not os.path.lexists(folder):
            missing.append(folder)
            folder = folder.parent
        try:
            for f in reversed(missing):
                f.mkdir()
                self._made.append(f)
            return open(self.partial, "wb", buffering=0)
        except OSError as exc:
            self.discard()
            raise _os_error(exc, self.what, self.path, where=self.where) from None

    def commit(self) -> None:
        commit_partial(self.partial, self.path)
        self._made = []

    def discard(self) -> None:
        """Remove ``NAME.partial`` and the (still empty) folders :meth:`create` made."""
        try:
            self.partial.unlink(missing_ok=True)
        except OSError as exc:
            raise StreamFault(f"removing {self.partial} failed: {exc}") from exc
        for folder in reversed(self._made):
            try:
                folder.rmdir()
            except OSError:  # something else was put there meanwhile: keep it
                break
        self._made = []


def write_all(f: Any, data: bytes) -> None:
    """All of ``data`` to the unbuffered file ``f`` (a write may take fewer bytes than given)."""
    view = memoryview(data)
    while view.nbytes:
        n = f.write(view)
        if not n:
            raise OSError(errno.EIO, "the file took no bytes")
        view = view[n:]


def cut_to(f: Any, nbytes: int) -> bool:
    """Cut the unbuffered file ``f`` back to ``nbytes`` (the last whole block after a failed write);
    True when it then holds exactly that."""
    try:
        f.truncate(nbytes)
        f.seek(nbytes)
        return os.fstat(f.fileno()).st_size == nbytes
    except OSError:
        return False


def component_files(component: Any, method: str) -> list[Path]:
    """The files a source reads (``method="input_files"``) or a sink writes (``"output_files"``),
    following a source that wraps another (``.inner``)."""
    out: list[Path] = []
    seen: set[int] = set()
    while component is not None and id(component) not in seen:
        seen.add(id(component))
        fn = getattr(component, method, None)
        if callable(fn):
            out.extend(Path(p) for p in fn())
        component = getattr(component, "inner", None)
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)  # hard links and links to it too
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_sink_not_source(sink: Any, source: Any) -> None:
    """Refuse a sink that would write the file its source reads (its own name or ``NAME.partial``):
    the run would replace its input. A ConfigError at the sink, before it is opened."""
    inputs = component_files(source, "input_files")
    if not inputs:
        return
    what = f"{sink.type} sink '{getattr(sink.params, 'path', '')}'"
    for out in component_files(sink, "output_files"):
        for target in (out, partial_path(out)):
            for src in inputs:
                if _same_file(target, src):
                    also = "" if os.path.abspath(src) == os.path.abspath(target) else f" ({src})"
                    raise sink_path_error(what, target, f"it is the file the source reads{also}",
                                          "write to another path: the run would replace its input",
                                          where=sink.where)
