"""Non-finite input samples (NaN, +-Inf): the ``nonfinite`` policy, the check, the count.

One NaN that reaches a filter's state ruins every output after it (an IIR's state never
recovers; a PCM sink turns it into full-scale DC). So every block is checked as it enters the
engine, before the first stage sees it: on the cpu backend with NumPy here, on cuda on the GPU
where the block arrives (native/ops/kernels/io.cu, gk_io_pull / gk_check_finite). The policy:

* ``error``: the run stops with :class:`NonFiniteInput` (a StreamFault) at the block that holds
  the first one, naming where it is. The default for files, arrays and ``process()``.
* ``zero``: each one is replaced by 0 before the stages see it, and counted. The default for
  live audio (a glitch must not stop the show, nor reach the speakers as DC).
* ``pass``: they go through as they are (a stage's state may take them in), and are counted.

Every non-finite sample is counted in :class:`NonFiniteCount`, with where the first one was; the
run summary and ``--stats-json`` carry it (``RunSummary.nonfinite``).

Layer: core. Imports numpy and ``errors`` only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from .errors import StreamFault

Policy = Literal["error", "zero", "pass"]
POLICIES: tuple[str, ...] = ("error", "zero", "pass")
DEFAULT_POLICY: Policy = "error"


class NonFiniteInput(StreamFault):
    """A non-finite input sample under ``nonfinite: error``; ``count`` carries what was found."""

    def __init__(self, message: str, count: "NonFiniteCount", *, part: str | None = None):
        super().__init__(message, part=part, block=count.first_block)
        self.count = count


def check_policy(value: Any, where: str | None = None) -> str | None:
    """``None`` (the source's default) or one of :data:`POLICIES`; ConfigError otherwise."""
    if value is None or value in POLICIES:
        return value
    from .errors import ConfigError
    from .stages.base import did_you_mean

    hint = did_you_mean(str(value), POLICIES) or "error (stop at the first), zero (replace by 0) or pass"
    raise ConfigError(f"nonfinite must be one of {', '.join(POLICIES)}, got {value!r}", where=where, hint=hint)


@dataclass
class NonFiniteCount:
    """The non-finite input samples of one stream: how many, and where the first one was.

    ``first_sample`` counts samples per channel from the stream's start (``first_time_s`` is the
    same at the input's sample rate); ``first_value`` is ``"nan"``, ``"inf"`` or ``"-inf"``.
    """

    policy: str
    count: int = 0
    first_block: int | None = None
    first_sample: int | None = None
    first_channel: int | None = None
    first_time_s: float | None = None
    first_value: str | None = None

    def add(self, count: int, *, block: int, sample: int, channel: int, value: float | complex | None,
            sample_rate: float) -> None:
        if count <= 0:
            return
        if self.first_sample is None:
            self.first_block, self.first_sample, self.first_channel = block, sample, channel
            self.first_time_s = sample / sample_rate if sample_rate > 0 else None
            self.first_value = describe_value(value)
        self.count += int(count)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def where(self) -> str:
        """'sample 1234 (0.0257 s), channel 0' for the first one."""
        t = f" ({self.first_time_s:.6g} s)" if self.first_time_s is not None else ""
        return f"sample {self.first_sample}{t}, channel {self.first_channel}"

    def describe(self) -> str:
        """The summary's line (without its indent); empty when none was found."""
        if not self.count:
            return ""
        what = {"zero": "replaced by 0", "pass": "passed through to the stages",
                "error": "stopped the run"}.get(self.policy, self.policy)
        value = f" ({self.first_value})" if self.first_value else ""
        return (f"non-finite input samples {self.count}, {what} (nonfinite: {self.policy}); "
                f"the first{value} at {self.where()}")

    def error(self, source: str, *, part: str | None = None) -> NonFiniteInput:
        """The error of ``nonfinite: error``; ``source`` names where the samples came from."""
        value = self.first_value or "NaN or Inf"
        return NonFiniteInput(
            f"{source} delivered a non-finite sample ({value}) at {self.where()}, block {self.first_block} "
            "(nonfinite: error; set 'nonfinite: zero' on the pipeline to replace such samples by 0, or "
            "'nonfinite: pass' to let them through)", self, part=part)


def describe_value(value: float | complex | None) -> str | None:
    if value is None:
        return None
    v = complex(value)
    part = v.real if not np.isfinite(v.real) else v.imag
    if np.isnan(part):
        return "nan"
    return "inf" if part > 0 else "-inf"


def find_nonfinite(block: np.ndarray) -> tuple[int, int, int, Any]:
    """Check one (channels, n) block: (count, channel, sample, value) of its non-finite samples
    (count 0: none; then the rest is meaningless).

    The common case costs one vectorised sum: a NaN or Inf anywhere makes the sum non-finite,
    and only then (or when finite values overflow it) is the block searched."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(block, axis=None)
    if np.isfinite(total):
        return 0, 0, 0, None
    bad = ~np.isfinite(block)
    count = int(np.count_nonzero(bad))
    if count == 0:  # finite values whose sum overflowed
        return 0, 0, 0, None
    flat = int(np.argmax(bad.reshape(-1)))
    channel, sample = divmod(flat, block.shape[1]) if block.ndim == 2 and block.shape[1] else (0, flat)
    value = block.reshape(-1)[flat].item()
    return count, int(channel), int(sample), value


def zeroed(block: np.ndarray) -> np.ndarray:
    """A copy of ``block`` with every non-finite sample replaced by 0 (the caller's array is kept)."""
    return np.where(np.isfinite(block), block, np.zeros((), block.dtype))
