"""Helpers shared by the SDR stage tests (shift, ddc, fir decimate, fm_demod, hilbert)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.pipeline import Pipeline

FS = 48000.0


def iq(rng: np.random.Generator, channels: int, n: int, complex_: bool = True) -> np.ndarray:
    x = rng.standard_normal((channels, n))
    if complex_:
        return (x + 1j * rng.standard_normal((channels, n))).astype(np.complex64)
    return x.astype(np.float32)


def yaml_error(tmp_path: Path, stage_lines: str, *, block_size: int = 1000) -> ConfigError:
    """The ConfigError of a one-stage pipeline file (the stage's YAML indented under stages:)."""
    body = textwrap.indent(textwrap.dedent(stage_lines).strip("\n"), "  ")
    (tmp_path / "p.yaml").write_text(
        f"version: 1\nname: sdr\nsample_rate: 48000\nblock_size: {block_size}\nchannels: 1\n"
        f"dtype: complex64\nstages:\n{body}\n")
    with pytest.raises(ConfigError) as info:
        Pipeline.from_yaml(tmp_path / "p.yaml").specs()
    return info.value
