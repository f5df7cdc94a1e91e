"""A pipeline's stages resolved to plain numbers for a hand-written baseline (:class:`Op`,
:func:`resolve_ops`), and :class:`BaselineSkipped`, raised by a baseline that cannot run here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ...pipeline import Pipeline, SpecChain
    from ...signal import SignalSpec


class BaselineSkipped(Exception):
    """This baseline cannot run here (library missing, no GPU, or an unsupported stage)."""


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
            raise BaselineSkipped(f"{who} baseline has no '{st.type}' stage")
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
