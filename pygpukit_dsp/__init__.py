"""pygpukit-dsp: real-time DSP streaming on NVIDIA GPUs, driven from Python.

    >>> from pygpukit_dsp import Pipeline, stages
    >>> p = Pipeline([stages.Fir(taps=[0.25, 0.5, 0.25]), stages.Gain(db=-6)],
    ...              sample_rate=48000, channels=2, block_size=256)
    >>> y = p.process(x)                       # doctest: +SKIP

Importing this package never loads CUDA: the driver, NVRTC, cuFFT and cuBLAS are opened
only when a GPU is used (``capabilities()`` reports what is there). Nor does it load anything
else: each name below is imported from its module when first used (``pygpukit_dsp.Pipeline``,
``from pygpukit_dsp import Session``), so ``gk-stream --help`` loads no stage, SciPy or native module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it (a module itself where the name is the module's)
_EXPORTS = {
    "Pipeline": "pipeline", "SpecChain": "pipeline", "Graph": "graph", "SignalSpec": "signal", "QoS": "qos",
    "RunSummary": "summary", "Session": "session", "stages": None, "make_stage": "stages",
    "capabilities": "capabilities", "cuda_usable": "capabilities", "errors": None,
    "GkError": "errors", "ConfigError": "errors", "UnsupportedError": "errors", "DeviceError": "errors",
    "CompileError": "errors", "AdmissionError": "errors", "StreamFault": "errors",
}

if TYPE_CHECKING:
    from . import errors, stages
    from .capabilities import capabilities, cuda_usable
    from .errors import (AdmissionError, CompileError, ConfigError, DeviceError, GkError, StreamFault,
                         UnsupportedError)
    from .graph import Graph
    from .pipeline import Pipeline, SpecChain
    from .qos import QoS
    from .session import Session
    from .signal import SignalSpec
    from .stages import make_stage
    from .summary import RunSummary


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _EXPORTS[name]
    value = (importlib.import_module(f"{__name__}.{name}") if module is None
             else getattr(importlib.import_module(f"{__name__}.{module}"), name))
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Pipeline", "SpecChain", "Graph", "SignalSpec", "QoS", "RunSummary", "Session", "stages", "make_stage",
    "capabilities", "cuda_usable", "errors", "GkError", "ConfigError", "UnsupportedError", "DeviceError",
    "CompileError", "AdmissionError", "StreamFault", "__version__",
]
