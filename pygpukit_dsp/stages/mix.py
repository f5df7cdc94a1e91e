"""mix: a channel-mixing matrix (C_out x C_in), optionally one per frequency bin."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..errors import ConfigError
from ..signal import SignalSpec
from ._common import check_file_exists, exactly_one, load_array_file, output_dtype
from .base import NumberArray, Stage, StageParams, register_stage


class MixParams(StageParams):
    matrix: NumberArray | None = Field(
        None, description="Mixing matrix, shape (C_out, C_in): out[o] = sum_i matrix[o][i] * in[i]. "
        "Real or complex (complex entries as strings like '0.5-1j'). In the frames domain a "
        "per-bin stack of shape (bins, C_out, C_in) is also accepted (frequency-domain beamforming).")
    matrix_file: str | None = Field(
        None, description="A .npy file holding the matrix (same shapes as 'matrix'); relative paths "
        "are resolved against the YAML file's folder.")

    @field_validator("matrix")
    @classmethod
    def _matrix_shape(cls, v: np.ndarray | None) -> np.ndarray | None:
        if v is not None:
            _check_matrix_shape(v)
        return v

    @field_validator("matrix_file")
    @classmethod
    def _file_exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not v.lower().endswith(".npy"):
            raise ValueError(f"matrix_file must be a .npy file (np.save), got '{v}'")
        return check_file_exists(v, info)

    @model_validator(mode="after")
    def _one_of(self) -> "MixParams":
        exactly_one(self, ("matrix", "matrix_file"))
        return self


def _check_matrix_shape(m: np.ndarray) -> None:
    if m.ndim not in (2, 3) or m.size == 0:
        raise ValueError(f"matrix must have shape (C_out, C_in) or (bins, C_out, C_in), "
                         f"got shape {m.shape}")


class MixProcessor:
    """out = M @ x over the channel axis; per-bin matrices in the frames domain."""

    def __init__(self, matrix: np.ndarray, spec: SignalSpec, out_dtype: str):
        self.spec = spec
        self.out_dtype = np.dtype(out_dtype)
        self.matrix = np.ascontiguousarray(matrix.astype(self.out_dtype))
        self.per_bin = matrix.ndim == 3
        self.c_out = matrix.shape[-2]

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        if x.dtype != self.out_dtype:  # real input, complex matrix
            x = x.astype(self.out_dtype)
        if x.ndim == 2:  # time domain
            return np.matmul(self.matrix, x)
        c_in, frames, bins = x.shape
        if not self.per_bin:
            return np.matmul(self.matrix, x.reshape(c_in, frames * bins)).reshape(self.c_out, frames, bins)
        # (bins, C_out, C_in) @ (bins, C_in, frames) -> (bins, C_out, frames)
        y = np.matmul(self.matrix, x.transpose(2, 0, 1))
        return np.ascontiguousarray(y.transpose(1, 2, 0))

    def reset(self) -> None:
        """Mix has no streaming state."""


@register_stage
class Mix(Stage):
    """Channel mixing: ``out[o] = sum_i M[o, i] * in[i]`` for every sample (or frame and bin).

    ``M`` has shape ``(C_out, C_in)``; in the frames domain it may also be ``(bins, C_out,
    C_in)``: one matrix per frequency bin (``out[o, f, b] = sum_i M[b, o, i] * in[i, f, b]``).
    The output is complex64 when the matrix or the input is complex.
    """

    type = "mix"
    summary = "Mix channels with a (C_out x C_in) matrix, or one matrix per bin"
    Params = MixParams

    def __init__(self, params: MixParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
        if self.params.matrix is not None:
            self.matrix: np.ndarray = self.params.matrix
        else:
            self.matrix = load_array_file(self.resolve_path(self.params.matrix_file), param="matrix_file",
                                          where=self.where)
            try:
                _check_matrix_shape(self.matrix)
            except ValueError as exc:
                raise ConfigError(f"matrix_file: {Path(self.params.matrix_file).name}: {exc}",
                                  path=("matrix_file",)) from None

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        m = self.matrix
        c_in = m.shape[-1]
        if c_in != spec.channels:
            raise ConfigError(
                f"matrix has {c_in} input columns (shape {m.shape}) but the input has "
                f"{spec.channels} channels", where=self.where,
                hint=f"give a matrix with {spec.channels} columns (C_in = input channels)")
        if m.ndim == 3:
            if spec.domain != "frames":
                raise ConfigError(
                    f"a per-bin matrix (shape {m.shape}) needs frames-domain input, got time-domain "
                    f"samples", where=self.where,
                    hint="add fft/rfft/stft before this mix, or give a 2-D (C_out, C_in) matrix")
            if m.shape[0] != spec.bins:
                raise ConfigError(
                    f"per-bin matrix has {m.shape[0]} bins (shape {m.shape}) but the input frames have "
                    f"{spec.bins} bins", where=self.where,
                    hint=f"give a matrix of shape ({spec.bins}, C_out, {spec.channels})")
        return spec.with_(channels=m.shape[-2], dtype=output_dtype(np.iscomplexobj(m), spec.is_complex))

    def cpu(self, spec: SignalSpec) -> MixProcessor:
        out = self.output_spec(spec)
        return MixProcessor(self.matrix, spec, out.dtype)
