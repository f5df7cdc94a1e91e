"""What running a Pipeline means: an array through it, a run to the end, a run in the background.

Executor layer: the facade that :meth:`Pipeline.process`, :meth:`Pipeline.run` and
:meth:`Pipeline.start` call. A :class:`~pygpukit_dsp.pipeline.Pipeline` is a description (its
fields, stages, source and sink, the specs they propagate, its YAML); this module hands it to
the executors: an engine opened by ``backends.open_backend`` for an array, a
:class:`~pygpukit_dsp.session.Session` (admission, dispatch, one StreamRunner per stream) for a
run. It imports the description only for typing: the description never imports it at module level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .errors import ConfigError
from .io.base import StreamFormat
from .nonfinite import NonFiniteInput, check_policy

if TYPE_CHECKING:
    from .handle import RunHandle
    from .io.base import Sink, Source
    from .pipeline import Pipeline
    from .summary import ProgressFn, RunSummary


def process(pipeline: "Pipeline", x: np.ndarray, *, backend: str | None = None,
            device: int | str | None = None, nonfinite: str | None = None) -> np.ndarray:
    """Stream ``x`` (channels, n) through ``pipeline`` block by block and return the output
    (:meth:`Pipeline.process` says what that means)."""
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[np.newaxis, :]
    if x.ndim != 2:
        raise ConfigError(f"process() takes an array of shape (channels, n), got shape {x.shape}")
    dtype = "complex64" if np.iscomplexobj(x) else "float32"
    if pipeline.dtype == "float32" and dtype == "complex64":
        raise ConfigError(f"pipeline '{pipeline.name}' takes float32 input, got a complex array")
    dtype = pipeline.dtype or dtype
    chain = pipeline.specs(StreamFormat(channels=x.shape[0], dtype=dtype))
    x = np.ascontiguousarray(x, dtype=chain.input.np_dtype)
    from .backends import open_backend

    engine = open_backend(pipeline, chain, backend or pipeline.backend, device=device,
                          nonfinite=check_policy(nonfinite, "process(nonfinite=...)"))
    try:
        outs = []
        n = x.shape[1]
        bs = pipeline.block_size
        for start in range(0, max(n, 1), bs):
            block = x[:, start:start + bs]
            outs.append(engine.process(block, final=start + bs >= n))
        return np.concatenate(outs, axis=1) if outs else np.zeros(
            chain.output.block_shape[:1] + (0,) + chain.output.block_shape[2:], chain.output.np_dtype)
    except NonFiniteInput as exc:
        raise exc.count.error("process()'s input array") from None
    finally:
        engine.close()


def run(pipeline: "Pipeline", *, blocks: int | None = None, duration: float | None = None,
        backend: str | None = None, progress: "ProgressFn | None" = None,
        device: int | str | None = None) -> "RunSummary":
    """Run ``pipeline`` (source -> stages -> sink) in a Session of its own until it ends."""
    from .session import Session

    return Session([pipeline], backend=backend, device=device).run(blocks=blocks, duration=duration,
                                                                   progress=progress)[0]


def start(pipeline: "Pipeline", *, source: "Source | None" = None, sink: "Sink | None" = None,
          backend: str | None = None, blocks: int | None = None, duration: float | None = None,
          tap: bool | None = None, device: int | str | None = None) -> "RunHandle":
    """Run ``pipeline`` on a background thread (``source``/``sink`` replace its own for this run)
    and return the :class:`~pygpukit_dsp.handle.RunHandle`."""
    from .handle import RunHandle
    from .io.null import NullSink
    from .session import Session

    run_as = pipeline.with_io(source=source, sink=sink)
    if tap is None:
        tap = run_as.sink is None or isinstance(run_as.sink, NullSink)
    return RunHandle(Session([run_as], backend=backend, device=device), blocks=blocks, duration=duration,
                     tap=tap)
