"""Device keys and the ``device`` field: which GPU a stream asks for and how its dispatcher is named.

Core layer: imports only :mod:`pygpukit_dsp.errors` (and NumPy's integer type). The description
(pipeline.py, spec/) checks a ``device`` value here; the executor (session, runner, dispatch,
admission, backends) names each device's scheduler and dispatcher with :func:`device_key`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import ConfigError


def check_device(value: Any, where: str | None = None) -> int | str | None:
    """A pipeline's ``device``: None (not set: GPU 0), a GPU index >= 0, or ``"auto"`` (a Session
    places the stream on the GPU with the most admission headroom). ConfigError otherwise."""
    if value is None or value == "auto":
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().lower().removeprefix("cuda:").isdigit():
        hint = f"write the index alone: 'device: {int(value.strip().lower().removeprefix('cuda:'))}'"
    else:
        hint = "a GPU index (0, 1, ...: see gk-stream devices) or auto"
    raise ConfigError(f"device must be a GPU index >= 0 or 'auto', got {value!r}", where=where, hint=hint)


def device_key(gpu: int | None) -> str:
    """A GPU's device key: ``"cuda"`` for GPU 0 (as before multi-GPU sessions), ``"cuda:N"``."""
    return "cuda" if not gpu else f"cuda:{int(gpu)}"


def gpu_of(key: str) -> int | None:
    """The GPU index of a device key (None for "cpu")."""
    if key == "cuda":
        return 0
    if key.startswith("cuda:"):
        return int(key[5:])
    return None


def is_gpu(key: str) -> bool:
    """Whether a device key names a GPU ("cuda", "cuda:N") rather than the CPU."""
    return key == "cuda" or key.startswith("cuda:")


def device_of(runner: Any) -> str:
    """The device whose dispatcher runs a StreamRunner's blocks: "cpu", "cuda" (GPU 0) or "cuda:N"
    (from the backend its engine was opened on)."""
    choice = runner.engine.choice
    if choice.name != "cuda":
        return choice.name
    return device_key(getattr(choice, "device", None))
