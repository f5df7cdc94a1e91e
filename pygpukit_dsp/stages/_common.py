"""Helpers shared by the stage modules: parameter checks, file loading, error texts."""

from __future__ import annotations

from pathlib import Path
import numpy as np
from pydantic import BaseModel, ValidationInfo

from ..errors import ConfigError
from ..signal import SignalSpec


def nearby_multiples(value: int, multiple: int) -> list[int]:
    """The multiples of ``multiple`` just below and just above ``value`` (positive ones only)."""
    below = (value // multiple) * multiple
    above = below + multiple
    return [m for m in (below, above) if m > 0]


def require_multiple(spec: SignalSpec, multiple: int, what: str, *, unit: str = "samples",
                     where: str | None = None, note: str = "") -> None:
    """Raise a ConfigError suggesting valid block sizes when ``spec.block_size % multiple != 0``."""
    if spec.block_size % multiple == 0:
        return
    near = " or ".join(str(m) for m in nearby_multiples(spec.block_size, multiple))
    raise ConfigError(
        f"block_size {spec.block_size} ({unit}) is not a multiple of {what} = {multiple}{note}",
        where=where, hint=f"use a block_size that is a multiple of {multiple}, e.g. {near}")


def require_domain(spec: SignalSpec, domain: str, *, where: str | None = None,
                   hint: str | None = None) -> None:
    if spec.domain == domain:
        return
    got = "frames (after fft/stft)" if spec.domain == "frames" else "time-domain samples"
    if hint is None:
        hint = ("add fft, rfft or stft before this stage" if domain == "frames"
                else "this stage works on samples; use it before fft/stft or after ifft/irfft")
    raise ConfigError(f"needs {domain}-domain input, got {got}", where=where, hint=hint)


def exactly_one(model: BaseModel, names: tuple[str, ...]) -> None:
    """Model-validator body: exactly one of ``names`` must be set (not None)."""
    given = [n for n in names if getattr(model, n) is not None]
    listed = ", ".join(f"'{n}'" for n in names)
    if not given:
        raise ValueError(f"give exactly one of {listed}; none was given")
    if len(given) > 1:
        both = " and ".join(f"'{n}'" for n in given)
        raise ValueError(f"give exactly one of {listed}, not {both}")


def base_dir_of(info: ValidationInfo) -> Path:
    ctx = info.context or {}
    base = ctx.get("base_dir")
    return Path(base) if base is not None else Path.cwd()


def resolve_against(base_dir: Path, p: str | Path) -> Path:
    p = Path(p).expanduser()
    return p if p.is_absolute() else base_dir / p


def check_file_exists(value: str | None, info: ValidationInfo) -> str | None:
    """Field-validator body for a file parameter: the file must exist (relative to base_dir)."""
    if value is None:
        return value
    path = resolve_against(base_dir_of(info), value)
    if not path.is_file():
        raise ValueError(f"file not found: {path} (relative paths are resolved against the folder "
                         f"of the YAML file, or the current directory from Python)")
    return value


def load_array_file(path: Path, *, param: str, where: str | None = None) -> np.ndarray:
    """Load a real or complex array from ``.npy`` (or a text file for np.loadtxt)."""
    if not path.is_file():
        raise ConfigError(f"{param}: file not found: {path}", where=where, path=(param,))
    try:
        if path.suffix.lower() == ".npy":
            a = np.load(path, allow_pickle=False)
        else:
            try:
                a = np.loadtxt(path, dtype=np.float64, ndmin=1)
            except ValueError:
                a = np.loadtxt(path, dtype=np.complex128, ndmin=1,
                               converters=lambda s: complex(s.strip().replace("i", "j")))
    except Exception as exc:  # numpy raises many kinds (ValueError, OSError, EOFError...)
        raise ConfigError(f"{param}: cannot read {path}: {exc}", where=where, path=(param,),
                          hint="use a .npy file (np.save) or a text file of numbers") from None
    if a.dtype.kind not in "fciu":
        raise ConfigError(f"{param}: {path} holds {a.dtype} data, expected numbers",
                          where=where, path=(param,))
    a = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    if not np.all(np.isfinite(a)):
        raise ConfigError(f"{param}: {path} contains NaN or inf", where=where, path=(param,))
    return a


def output_dtype(*complex_flags: bool) -> str:
    return "complex64" if any(complex_flags) else "float32"
