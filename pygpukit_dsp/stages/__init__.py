"""The stage catalog: one module per stage family.

Every built-in stage type is declared in :data:`STAGES` with the module that defines it, and
that module (with what it needs: SciPy for a filter design) is imported when the type is first
looked up (``STAGES["fir"]``, ``stage_class``, a YAML file naming it) or its class is first used
(``stages.Fir``). Listing or checking type names imports no stage module.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import STAGES, CpuProcessor, Stage, StageParams, register_stage, stage_class

# (YAML type, module, class): the built-in stages. tests/stages/test_registry.py checks it against
# what the modules register.
CATALOG: tuple[tuple[str, str, str], ...] = (
    ("add", "arith", "Add"),
    ("multiply", "arith", "Multiply"),
    ("average", "average", "Average"),
    ("cfar", "cfar", "Cfar"),
    ("channelizer", "channelizer", "Channelizer"),
    ("correlate", "correlate", "Correlate"),
    ("delay", "delay", "Delay"),
    ("db", "elementwise", "Db"),
    ("magnitude", "elementwise", "Magnitude"),
    ("power", "elementwise", "Power"),
    ("fft", "fft", "Fft"),
    ("ifft", "fft", "Ifft"),
    ("irfft", "fft", "Irfft"),
    ("rfft", "fft", "Rfft"),
    ("fir", "fir", "Fir"),
    ("fm_demod", "fm", "FmDemod"),
    ("gain", "gain", "Gain"),
    ("hilbert", "hilbert", "Hilbert"),
    ("kernel", "kernel", "Kernel"),
    ("mix", "mix", "Mix"),
    ("python", "python", "Python"),
    ("resample", "resample", "Resample"),
    ("combine", "routing", "Combine"),
    ("select", "routing", "Select"),
    ("ddc", "shift", "Ddc"),
    ("shift", "shift", "Shift"),
    ("sos", "sos", "Sos"),
    ("stft", "stft", "Stft"),
    ("synthesizer", "synthesizer", "Synthesizer"),
    ("xcorr", "xcorr", "Xcorr"),
)
_CLASS_MODULES = {cls: f"{__name__}.{module}" for _, module, cls in CATALOG}
_SUBMODULES = {module for _, module, _ in CATALOG} | {"_common", "params_doc"}
for _type, _module, _ in CATALOG:
    STAGES.declare(_type, f"{__name__}.{_module}")
del _type, _module


def make_stage(type_name: str, *, name: str | None = None, **params) -> Stage:
    """Build a stage from its YAML type name, e.g. ``make_stage("fir", taps=[...])``."""
    return stage_class(type_name)(name=name, **params)


def __getattr__(name: str) -> Any:
    """``stages.Fir`` and ``from pygpukit_dsp.stages import Fir``: the class, its module imported now."""
    module = _CLASS_MODULES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in _SUBMODULES:  # stages.fir, as when every module was imported with the package
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "STAGES", "CpuProcessor", "Stage", "StageParams", "register_stage", "stage_class", "make_stage",
    "Average", "Channelizer", "Delay", "Db", "Magnitude", "Power", "Fft", "Ifft", "Irfft", "Rfft",
    "Fir", "Gain", "Kernel", "Mix", "Python", "Resample", "Sos", "Stft", "Add", "Multiply", "Combine", "Select",
    "Shift", "Ddc", "FmDemod", "Hilbert",
    "Cfar", "Correlate", "Synthesizer", "Xcorr",
]
