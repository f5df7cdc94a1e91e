"""CUDA lowering of ``cfar`` (native/ops/cfar.cpp, kernels/cfar.cu).

The threshold factors are computed here, from the stage's own formulas (one definition for both
backends): ``coef = alpha / (2*train)`` along time, ``coef[b] = alpha_b / N_b`` along bins; the
kernels multiply them by the sums of the training cells in float32.
"""

from __future__ import annotations

import numpy as np

from ...signal import SignalSpec
from ...stages.cfar import Cfar, bin_coefficients, time_coefficient
from ..cuda_lowering import OpDesc, lowering


@lowering("cfar")
def lower_cfar(stage: Cfar, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    p = stage.params
    params: dict = {"guard": p.guard, "train": p.train, "mask": p.output == "mask"}
    if spec_in.domain == "frames":
        params["coef"] = np.ascontiguousarray(bin_coefficients(p, spec_in.bins), dtype=np.float64)
    else:
        params["coef"] = float(time_coefficient(p))
    return OpDesc("cfar", stage.name, spec_in, spec_out, params)
