"""CUDA lowering of the custom ``kernel`` stage (native op ``kernel``: NVRTC-compiled at start)."""

from __future__ import annotations

import numpy as np

from ...signal import SignalSpec
from ...stages.kernel import Kernel
from ..cuda_lowering import OpDesc, lowering


@lowering("kernel")
def lower_kernel(stage: Kernel, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    p = stage.params
    return OpDesc("kernel", stage.name, spec_in, spec_out, {
        "source": stage.source_text(),
        "entry": p.entry,
        "threads": int(p.threads),
        "grid": 0 if p.grid == "auto" else int(p.grid),
        "params": np.asarray(p.params, dtype=np.float64),
        "split": p.split,
        # declared state: the op's own zeroed device buffer, passed to the kernel last (0: none)
        "state_elements": p.state.elements if p.state is not None else 0,
        "state_dtype": p.state.dtype if p.state is not None else "float32",
    })
