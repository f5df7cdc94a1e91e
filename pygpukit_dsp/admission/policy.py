"""Admission's policy: every tunable of admission in one documented object.

Layer: executor (admission). Imports nothing of the package: the policy is plain data. The
machine's own figures (the dispatcher's work per block, its lock's hold, the GPU's overlap) are
not here: they are measured on the machine (calibration.py). What is here is chosen: bounds,
shares, how long and how often admission measures, how far the latency tail looks.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields, replace
from typing import Any


def check_u_max(u_max: float, where: str) -> float:
    """``u_max`` as a float in (0, 1]; ValueError naming ``where`` otherwise."""
    value = float(u_max)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{where} must be in (0, 1], got {u_max}")
    return value


@dataclass(frozen=True)
class AdmissionPolicy:
    """The tunables of admission (docs/scheduler.md, "Admission"); ``DEFAULT_POLICY`` holds the
    defaults. ``Session(pipelines, policy=...)`` and ``admit(..., policy=...)`` take one;
    ``Session(u_max=...)`` and ``gk-stream run --u-max`` replace its ``u_max``. Each field's
    docstring gives its meaning and unit."""

    u_max: float = 0.9
    """The utilisation bound: the most of a device realtime streams may reserve by their costs (fraction, (0, 1])."""
    safety_margin_ns: int = 50_000
    """Slack kept before every realtime deadline by the response bound and pacing (ns)."""

    cost_blocks: int = 8
    """Blocks of zeros timed per round when a stream's block cost is measured (blocks)."""
    cost_rounds: int = 3
    """Rounds of ``cost_blocks`` at most, while a round is not calm (rounds)."""
    cost_calm_factor: float = 3.0
    """A round is calm when its slowest block is within this many times its median (ratio)."""
    cost_gap_max_s: float = 0.01
    """A realtime stream's cost blocks come one block period apart, at most this far (s)."""

    rehearsal_share: float = 0.5
    """Rehearse a GPU's realtime streams when, costed alone, they fill more than this share of a bound (fraction)."""
    rehearsal_warmup_s: float = 0.2
    """The rehearsal's warm-up before its first timed window (s)."""
    rehearsal_s: float = 0.3
    """The rehearsal's first timed window, every block timed: device times and the GPU's overlap (s)."""
    rehearsal_tail_s: float = 1.0
    """Its second window, at the dispatcher's own sampling: its work per block and the latency tail (s)."""

    tail_quantile: float = 0.9
    """The latency tail is fitted to the excesses over this quantile of the rehearsed latencies (fraction)."""
    tail_horizon_s: float = 60.0
    """No block of a rehearsed kind may pass its deadline within this long of its blocks (s)."""
    tail_min_blocks: int = 200
    """Fewer rehearsed blocks of a kind than this: no tail estimate for it (blocks)."""

    dispatcher_busy_cap: float = 0.85
    """The most of its time the dispatcher's lock may be held by realtime blocks (fraction, (0, 1])."""

    machine_streams: int = 64
    """The machine calibration's reference set: this many light realtime streams on the GPU (streams)."""
    machine_block_size: int = 64
    """Their block size at 48 kHz: 64 is a 1.33 ms period, as many blocks a second as 256 W1 streams (samples)."""
    machine_channels: int = 16
    """Their channels, a gain on each: the dispatcher's work per block hardly depends on the pipeline (channels)."""
    machine_warmup_s: float = 0.2
    """The machine calibration's warm-up (s)."""
    machine_window_s: float = 0.4
    """Each of its timed windows (s)."""
    machine_windows: int = 5
    """Its timed windows: the dispatcher's work is their median, its lock's hold the least of
    their longest steps (windows)."""

    def __post_init__(self) -> None:
        check_u_max(self.u_max, "AdmissionPolicy.u_max")
        for name in ("rehearsal_share", "tail_quantile", "dispatcher_busy_cap"):
            value = getattr(self, name)
            if not 0.0 < float(value) <= 1.0:
                raise ValueError(f"AdmissionPolicy.{name} must be in (0, 1], got {value}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "safety_margin_ns" and not float(value) > 0.0:
                raise ValueError(f"AdmissionPolicy.{f.name} must be > 0, got {value}")
        if self.safety_margin_ns < 0:
            raise ValueError(f"AdmissionPolicy.safety_margin_ns must be >= 0, got {self.safety_margin_ns}")

    def with_u_max(self, u_max: float | None, where: str = "u_max") -> "AdmissionPolicy":
        """This policy with ``u_max`` replaced (None: as it is)."""
        return self if u_max is None else replace(self, u_max=check_u_max(u_max, where))

    def to_dict(self) -> dict[str, Any]:
        """Every tunable by name (``gk-stream devices --json``: ``admission.policy``)."""
        return asdict(self)

    @staticmethod
    def meanings() -> dict[str, str]:
        """Every tunable's meaning and unit, by name (its docstring)."""
        return dict(_field_docs())


@functools.lru_cache(maxsize=1)
def _field_docs() -> dict[str, str]:
    """The docstring under each field of AdmissionPolicy (read from its source)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(AdmissionPolicy)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    out: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr) \
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            out[node.target.id] = nxt.value.value
    return out


DEFAULT_POLICY = AdmissionPolicy()
DEFAULT_U_MAX = DEFAULT_POLICY.u_max  # Session(u_max=...), gk-stream run --u-max
