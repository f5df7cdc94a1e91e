"""CUDA lowerings of the flowgraph stages (native ops in native/ops/routing.cpp, kernels in
kernels/routing.cu): ``select`` (pick and reorder channels) and the stages that read several
inputs, ``combine`` (stack their channels), ``add`` and ``multiply`` (element-wise, in input order;
complex64 when any input is complex, as the CPU stages).

A stage that reads several inputs is lowered with the list of its inputs' specs; the graph's
memory plan (cuda_graph_plan.py) stacks them in one buffer and adds each one's byte offset
(``offsets``) to the op's parameters. ``spec_in`` of its OpDesc is the first input's."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering

MAX_INPUTS = 16  # GK_MAX_INPUTS of the kernels


@lowering("select")
def lower_select(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("select", stage.name, spec_in, spec_out,
                  {"channels": np.asarray(stage.params.channels, dtype=np.int64)})


def _inputs(stage: Stage, specs: Sequence[SignalSpec], spec_out: SignalSpec) -> OpDesc:
    specs = list(specs) if not isinstance(specs, SignalSpec) else [specs]
    if not 2 <= len(specs) <= MAX_INPUTS:
        raise UnsupportedError(stage.name, "cuda", f"the CUDA op of '{stage.type}' reads 2 to {MAX_INPUTS} "
                               f"inputs, this stage {len(specs)}")
    return OpDesc(stage.type, stage.name, specs[0], spec_out, {
        "channels": np.asarray([s.channels for s in specs], dtype=np.int64),
        "complex": np.asarray([1 if s.is_complex else 0 for s in specs], dtype=np.int64),
    })


@lowering("combine")
def lower_combine(stage: Stage, specs: Sequence[SignalSpec], spec_out: SignalSpec) -> OpDesc:
    return _inputs(stage, specs, spec_out)


@lowering("add")
def lower_add(stage: Stage, specs: Sequence[SignalSpec], spec_out: SignalSpec) -> OpDesc:
    return _inputs(stage, specs, spec_out)


@lowering("multiply")
def lower_multiply(stage: Stage, specs: Sequence[SignalSpec], spec_out: SignalSpec) -> OpDesc:
    return _inputs(stage, specs, spec_out)
