"""CUDA lowerings of ``power``, ``magnitude`` and ``db``, and the fusions power -> db and
magnitude -> db (one pass over the data, no intermediate written).

The db parameters are resolved exactly as the CPU stage resolves them (float32 ``scale``,
``1/ref``, the linear floor ``10**(floor_db/scale)`` and the float32 dB floor at or above
``floor_db``), so the GPU computes ``max(scale * log10(max(level * inv_ref, floor)), floor_db)``
with the same constants.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...signal import SignalSpec
from ...stages.elementwise import Db, DbParams, Magnitude, Power, floor_db_f32
from ..cuda_lowering import OpDesc, fusion, lowering


def db_constants(params: DbParams) -> dict[str, float]:
    """The float32 constants of pygpukit_dsp.stages.elementwise.DbProcessor."""
    return {
        "scale": float(np.float32(params.scale)),
        "inv_ref": float(np.float32(1.0 / params.ref)),
        "floor": float(np.float32(10.0 ** (params.floor_db / params.scale))),
        "floor_db": float(floor_db_f32(params.floor_db)),
    }


@lowering("power")
def lower_power(stage: Power, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("power", stage.name, spec_in, spec_out)


@lowering("magnitude")
def lower_magnitude(stage: Magnitude, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("magnitude", stage.name, spec_in, spec_out)


@lowering("db")
def lower_db(stage: Db, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    params = db_constants(stage.params)
    if spec_in.is_complex:
        # A spectrum is an amplitude: |x|^2 for kind power, |x| for kind amplitude (as the CPU stage).
        kind = "power_db" if stage.params.kind == "power" else "magnitude_db"
        return OpDesc(kind, stage.name, spec_in, spec_out, params)
    return OpDesc("db", stage.name, spec_in, spec_out, params)


@fusion("power", "db")
def fuse_power_db(stages: Sequence, specs: Sequence[SignalSpec]) -> OpDesc:
    power, db = stages
    return OpDesc("power_db", f"{power.name}+{db.name}", specs[0], specs[2], db_constants(db.params))


@fusion("magnitude", "db")
def fuse_magnitude_db(stages: Sequence, specs: Sequence[SignalSpec]) -> OpDesc:
    magnitude, db = stages
    return OpDesc("magnitude_db", f"{magnitude.name}+{db.name}", specs[0], specs[2],
                  db_constants(db.params))
