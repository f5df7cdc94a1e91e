"""Tests of the pygpukit_dsp_core extension (Rust, PyO3). Build it first:

    pip install ./rust/pygpukit-python
"""

try:
    import pygpukit_dsp_core  # noqa: F401
except ImportError as exc:  # pragma: no cover - environment problem, not a test outcome
    raise ImportError(
        "pygpukit_dsp_core is not installed in this interpreter: run `pip install ./rust/pygpukit-python`"
    ) from exc
