"""Helpers for the stage tests: stream a whole array through a stage in blocks."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.base import Stage


def stream(processor, x: np.ndarray, block_size: int) -> np.ndarray:
    """Feed ``x`` (streaming axis 1: (C, n) or (C, frames, bins)) in blocks; concatenate outputs.

    Every block is full except possibly the last, which is sent with ``final=True``.
    """
    n = x.shape[1]
    outs = []
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        outs.append(processor.process(x[:, start:stop], final=stop == n))
    return np.concatenate(outs, axis=1)


def run_stage(stage: Stage, spec: SignalSpec, x: np.ndarray) -> np.ndarray:
    """Check the spec contract on every block and return the concatenated output."""
    out_spec = stage.output_spec(spec)
    proc = stage.cpu(spec)
    n = x.shape[1]
    outs = []
    for start in range(0, n, spec.block_size):
        stop = min(start + spec.block_size, n)
        y = proc.process(x[:, start:stop], final=stop == n)
        assert y.dtype == out_spec.np_dtype, (y.dtype, out_spec.dtype)
        if stop - start == spec.block_size:
            assert y.shape == out_spec.block_shape, (y.shape, out_spec.block_shape)
        outs.append(y)
    return np.concatenate(outs, axis=1)


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    assert out.shape == ref.shape, (out.shape, ref.shape)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))


def signal(rng: np.random.Generator, shape: tuple[int, ...], complex_: bool = False) -> np.ndarray:
    x = rng.standard_normal(shape)
    if complex_:
        x = x + 1j * rng.standard_normal(shape)
        return x.astype(np.complex64)
    return x.astype(np.float32)


def assert_documented(cls: type[Stage]) -> None:
    """Catalog contract: a summary line and a description for every parameter (nested too)."""
    assert cls.type and cls.summary and "\n" not in cls.summary
    seen = set()

    def walk(model):
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            assert field.description, f"{cls.__name__}.{model.__name__}.{name} has no description"
            for cand in (field.annotation, *getattr(field.annotation, "__args__", ())):
                if isinstance(cand, type) and hasattr(cand, "model_fields"):
                    walk(cand)

    walk(cls.Params)


def config_error(fn, *args, **kwargs) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    return info.value


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
