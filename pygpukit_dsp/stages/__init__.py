"""The stage catalog: one module per stage family.

Importing this package registers every stage type in :data:`STAGES`.
"""

from .base import STAGES, CpuProcessor, Stage, StageParams, register_stage, stage_class
from .average import Average
from .channelizer import Channelizer
from .delay import Delay
from .elementwise import Db, Magnitude, Power
from .fft import Fft, Ifft, Irfft, Rfft
from .fir import Fir
from .gain import Gain
from .kernel import Kernel
from .mix import Mix
from .resample import Resample
from .sos import Sos
from .stft import Stft


def make_stage(type_name: str, *, name: str | None = None, **params) -> Stage:
    """Build a stage from its YAML type name, e.g. ``make_stage("fir", taps=[...])``."""
    return stage_class(type_name)(name=name, **params)


__all__ = [
    "STAGES", "CpuProcessor", "Stage", "StageParams", "register_stage", "stage_class", "make_stage",
    "Average", "Channelizer", "Delay", "Db", "Magnitude", "Power", "Fft", "Ifft", "Irfft", "Rfft",
    "Fir", "Gain", "Kernel", "Mix", "Resample", "Sos", "Stft",
]
