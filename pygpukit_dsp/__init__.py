"""pygpukit-dsp: real-time DSP streaming on NVIDIA GPUs, driven from Python.

    >>> from pygpukit_dsp import Pipeline, stages
    >>> p = Pipeline([stages.Fir(taps=[0.25, 0.5, 0.25]), stages.Gain(db=-6)],
    ...              sample_rate=48000, channels=2, block_size=256)
    >>> y = p.process(x)                       # doctest: +SKIP

Importing this package never loads CUDA: the driver, NVRTC, cuFFT and cuBLAS are opened
only when a GPU is used (``capabilities()`` reports what is there).
"""

from __future__ import annotations

from . import errors, stages
from .capabilities import capabilities, cuda_usable  # the submodule imports only typing
from .errors import (AdmissionError, CompileError, ConfigError, DeviceError, GkError, StreamFault,
                     UnsupportedError)
from .pipeline import Pipeline, SpecChain
from .qos import QoS
from .runner import RunSummary
from .session import Session
from .signal import SignalSpec
from .stages import make_stage

__version__ = "0.1.0"


__all__ = [
    "Pipeline", "SpecChain", "SignalSpec", "QoS", "RunSummary", "Session", "stages", "make_stage",
    "capabilities", "cuda_usable", "errors", "GkError", "ConfigError", "UnsupportedError", "DeviceError",
    "CompileError", "AdmissionError", "StreamFault", "__version__",
]
