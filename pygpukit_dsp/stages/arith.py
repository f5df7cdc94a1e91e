"""add and multiply: element-wise over two or more inputs of one spec (a multiply by a complex
oscillator is a mixer). The fan-in of GNU Radio's multi-port math blocks: one stage, any number of
inputs (docs/graphs.md)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..signal import SignalSpec
from ._common import output_dtype
from .base import Stage, register_stage
from .routing import NoParams, agreeing_inputs, common_length


class ElementwiseProcessor:
    """``ufunc`` reduced over the inputs, element by element, in the output's dtype."""

    def __init__(self, ufunc: np.ufunc, dtype: str):
        self.ufunc, self.dtype = ufunc, np.dtype(dtype)

    def process(self, blocks: Sequence[np.ndarray], final: bool = False) -> np.ndarray:
        n = common_length(blocks)
        out = np.array(blocks[0][:, :n], dtype=self.dtype)  # a copy: the inputs are not changed
        for b in blocks[1:]:
            self.ufunc(out, b[:, :n], out=out)
        return out

    def reset(self) -> None:
        """Element-wise: no streaming state."""


class _ElementwiseOfInputs(Stage):
    """Two or more inputs of one spec (rate, block size, domain, bins and channels); complex64 out
    when any input is complex, else float32."""

    Params = NoParams
    input_count = (2, None)
    ufunc: np.ufunc = np.add

    def output_spec(self, specs: Sequence[SignalSpec]) -> SignalSpec:  # type: ignore[override]
        first = agreeing_inputs(specs, f"{self.type} works element by element: its inputs need one rate, "
                                "block size, domain and channel count (select or mix can make them agree)",
                                channels=True)
        return first.with_(dtype=output_dtype(*(s.is_complex for s in specs)))

    def cpu(self, specs: Sequence[SignalSpec]) -> ElementwiseProcessor:  # type: ignore[override]
        return ElementwiseProcessor(type(self).ufunc, self.output_spec(specs).dtype)


@register_stage
class Add(_ElementwiseOfInputs):
    """The sum of its inputs, element by element: ``out = in_1 + in_2 + ...``.

    Two or more inputs of one spec (rate, block size, domain, channels); complex64 when any input
    is complex, else float32.
    """

    type = "add"
    summary = "Element-wise sum of two or more inputs of one spec"
    ufunc = np.add


@register_stage
class Multiply(_ElementwiseOfInputs):
    """The product of its inputs, element by element: ``out = in_1 * in_2 * ...``.

    Two or more inputs of one spec (rate, block size, domain, channels); complex64 when any input
    is complex, else float32. A signal times a complex oscillator (a ``synth`` source of
    ``dtype: complex64``) shifts its frequency: a mixer.
    """

    type = "multiply"
    summary = "Element-wise product of two or more inputs of one spec (a mixer)"
    ufunc = np.multiply
