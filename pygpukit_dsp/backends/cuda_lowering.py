"""Lowering of stages to native CUDA op descriptions.

``LOWERINGS`` maps a stage type to a function ``(stage, spec_in, spec_out) -> dict`` that
describes the op for the native engine (its kind, shapes and resolved coefficients). A stage
type missing here has no CUDA implementation: the cuda backend refuses it before the first
block with UnsupportedError, and ``auto`` picks cpu and says why.
"""

from __future__ import annotations

from typing import Any, Callable

from ..signal import SignalSpec
from ..stages.base import Stage

Lowering = Callable[[Stage, SignalSpec, SignalSpec], dict[str, Any]]
LOWERINGS: dict[str, Lowering] = {}


def unsupported_reason(stage: Stage, spec_in: SignalSpec) -> str | None:
    """Why ``stage`` cannot run on CUDA for input ``spec_in``, or None when it can."""
    if stage.type not in LOWERINGS:
        return f"there is no CUDA implementation of '{stage.type}' in this build"
    return None
