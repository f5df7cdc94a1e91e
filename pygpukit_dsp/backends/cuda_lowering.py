"""Lowering of a pipeline's stages to native CUDA ops.

A lowering turns one stage (with its input and output specs) into an :class:`OpDesc`: the
native op kind, and the stage's resolved parameters (taps after design, matrices after
loading...) as plain numbers and NumPy arrays. Each stage family registers its lowering in
its own module of ``pygpukit_dsp/backends/cuda_ops/``::

    @lowering("fir")
    def lower_fir(stage, spec_in, spec_out) -> OpDesc: ...

A lowering raises UnsupportedError for inputs its op does not handle. A *fusion* replaces a
run of consecutive stages by one op (e.g. stft -> power -> average as one kernel that
reads each sample once); it returns None when the run's parameters don't fit the fused op.
A stage type with no lowering, or an op kind the native module does not implement, is
refused before the first block (the cuda backend raises, ``auto`` picks cpu and says why).

``GK_DISABLE_FUSIONS=1`` in the environment turns every fusion off (each stage is lowered on
its own): for comparing a fused op with the ops it replaces, and for bisecting a suspected
fused-kernel problem.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import UnsupportedError
from ..signal import SignalSpec
from ..stages.base import Stage

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain


@dataclass
class OpDesc:
    """One native op: ``kind`` as registered in C++ (GK_REGISTER_OP), its stage name(s), the
    full-block input/output specs and the parameters (bool, int, float, str or ndarray)."""

    kind: str
    name: str
    spec_in: SignalSpec
    spec_out: SignalSpec
    params: dict[str, Any] = field(default_factory=dict)


Lowering = Callable[[Stage, SignalSpec, SignalSpec], OpDesc]
Fusion = Callable[[Sequence[Stage], Sequence[SignalSpec]], "OpDesc | None"]

LOWERINGS: dict[str, Lowering] = {}
FUSIONS: list[tuple[tuple[str, ...], Fusion]] = []


def lowering(stage_type: str):
    def deco(fn: Lowering) -> Lowering:
        LOWERINGS[stage_type] = fn
        return fn
    return deco


def fusion(*stage_types: str):
    """Register a fusion of consecutive stages of these types (longest patterns are tried first)."""
    def deco(fn: Fusion) -> Fusion:
        FUSIONS.append((tuple(stage_types), fn))
        FUSIONS.sort(key=lambda f: -len(f[0]))
        return fn
    return deco


def fusions_disabled() -> bool:
    """True when ``GK_DISABLE_FUSIONS`` is set to anything but empty or "0"."""
    return os.environ.get("GK_DISABLE_FUSIONS", "").strip() not in ("", "0")


def _load_families() -> None:
    from . import cuda_ops  # noqa: F401  (importing registers every family's lowerings)


def native_op_kinds() -> set[str]:
    """Op kinds the native module implements ({} when it is not importable)."""
    try:
        from .. import _native
    except ImportError:
        return set()
    kinds = getattr(_native, "registered_ops", None)  # absent in a build without the engine
    return set(kinds()) if kinds is not None else set()


def _lower_one(st: Stage, s_in: "SignalSpec | Sequence[SignalSpec]", s_out: SignalSpec,
               native: set[str]) -> OpDesc:
    fn = LOWERINGS.get(st.type)
    if fn is None and st.type == "python":  # a python stage is never a native op: it runs between them
        raise UnsupportedError(st.name, "cuda", "a python stage runs between the native parts of its pipeline "
                               "(cuda_python_chain.py, cuda_python_graph.py), not as a native op")
    if fn is None:
        raise UnsupportedError(st.name, "cuda", f"there is no CUDA implementation of '{st.type}' "
                               "in this build")
    desc = fn(st, s_in, s_out)
    if desc.kind not in native:
        raise UnsupportedError(st.name, "cuda", f"the native module has no op '{desc.kind}' "
                               "(rebuild pygpukit-dsp)")
    return desc


def lower_pipeline(pipeline: "Pipeline", chain: "SpecChain") -> list[OpDesc]:
    """The native ops for a pipeline, fusions applied (unless GK_DISABLE_FUSIONS=1); UnsupportedError
    for the first stage that can't run."""
    _load_families()
    return [op for op, _ in lower_run(pipeline.stages, chain.specs, native_op_kinds())]


def lower_run(stages: Sequence[Stage], specs: Sequence[SignalSpec],
              native: set[str]) -> list[tuple[OpDesc, int]]:
    """A straight run of stages (each reads the one before; ``specs``: the run's input, then each
    stage's output) as native ops, fusions applied; each op with how many stages it covers. A
    pipeline is one run; a graph's straight runs are lowered one by one (cuda_graph_plan.py)."""
    fusions = [] if fusions_disabled() else FUSIONS
    ops: list[tuple[OpDesc, int]] = []
    i = 0
    while i < len(stages):
        for pattern, fn in fusions:
            k = len(pattern)
            if tuple(st.type for st in stages[i:i + k]) == pattern:
                desc = fn(stages[i:i + k], specs[i:i + k + 1])
                if desc is not None and desc.kind in native:
                    ops.append((desc, k))
                    i += k
                    break
        else:
            ops.append((_lower_one(stages[i], specs[i], specs[i + 1], native), 1))
            i += 1
    return ops


def lower_stage(stage: Stage, specs_in: "SignalSpec | Sequence[SignalSpec]", spec_out: SignalSpec) -> OpDesc:
    """One stage's native op (a stage that reads several gets the list of its inputs' specs)."""
    _load_families()
    return _lower_one(stage, specs_in, spec_out, native_op_kinds())


def unsupported_reason(stage: Stage, spec_in: SignalSpec) -> str | None:
    """Why ``stage`` cannot run on CUDA for input ``spec_in``, or None when it can."""
    _load_families()
    try:
        _lower_one(stage, spec_in, stage.output_spec(spec_in), native_op_kinds())
    except UnsupportedError as exc:
        return exc.reason
    return None
