"""A pipeline's stages resolved to plain numbers for a hand-written baseline (:class:`Op`,
:func:`resolve_ops`), and :class:`BaselineSkipped`, raised by a baseline that cannot run here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ...pipeline import Pipeline, SpecChain
    from ...signal import SignalSpec


# Why a baseline cannot run here (BaselineSkipped.code; a report row's reason_code).
NOT_INSTALLED = "not_installed"          # its library is not installed
NO_GPU = "no_gpu"                        # its library sees no usable GPU
UNSUPPORTED_STAGE = "unsupported_stage"  # it has no implementation of one of the pipeline's stages
UNSUPPORTED_MODE = "unsupported_mode"    # it has no implementation of the bench's throughput mode
SKIP_CODES = (NOT_INSTALLED, NO_GPU, UNSUPPORTED_STAGE, UNSUPPORTED_MODE)


class BaselineSkipped(Exception):
    """This baseline cannot run here (library missing, no GPU, or an unsupported stage): the
    message says it to a reader, ``code`` (one of SKIP_CODES) to a program."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


@dataclass
class Op:
    """One stage, resolved to plain numbers for a baseline to implement."""

    kind: str
    spec_in: "SignalSpec"
    spec_out: "SignalSpec"
    params: dict[str, Any] = field(default_factory=dict)


def resolve_ops(pipeline: "Pipeline", chain: "SpecChain", supported: set[str], who: str) -> list[Op]:
    ops: list[Op] = []
    for st, s_in, s_out in zip(pipeline.stages, chain.specs[:-1], chain.specs[1:]):
        if st.type not in supported:
            raise BaselineSkipped(f"{who} baseline has no '{st.type}' stage", UNSUPPORTED_STAGE)
        p: dict[str, Any] = {}
        if st.type == "fir":
            p["taps"] = np.asarray(st.taps_for(s_in))
        elif st.type == "mix":
            p["matrix"] = np.asarray(st.matrix)
        elif st.type == "gain":
            p["factor"] = st.params.factor
        elif st.type == "stft":
            p.update(window=np.asarray(st.window()), hop=st.hop, nfft=st.params.nfft)
        elif st.type in ("fft", "rfft"):
            p["n"] = st.frame_length(s_in)
        elif st.type == "db":
            p.update(scale=st.params.scale, ref=st.params.ref,
                     floor=10.0 ** (st.params.floor_db / st.params.scale))
        elif st.type == "average":
            p["frames"] = st.params.frames
        ops.append(Op(st.type, s_in, s_out, p))
    return ops
