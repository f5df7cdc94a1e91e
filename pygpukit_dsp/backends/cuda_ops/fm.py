"""CUDA lowering of ``fm_demod`` (native op ``fm_demod``: kernels/fm.cu).

The discriminator is elementwise (each sample and the one before it, the block's first against
the previous block's last, kept on the device). With de-emphasis, one CTA per channel runs the
one-pole recurrence as a chunked scan: each thread filters its chunk from zero, the CTA scans the
chunks' (a^len, end) pairs for each chunk's carry-in, and each thread adds the decaying carry.
"""

from __future__ import annotations

from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering


@lowering("fm_demod")
def lower_fm_demod(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    params: dict = {"gain": float(stage.params.gain)}
    pole = stage.pole(spec_in)
    if pole is not None:
        params["pole"] = float(pole)
    return OpDesc("fm_demod", stage.name, spec_in, spec_out, params)
