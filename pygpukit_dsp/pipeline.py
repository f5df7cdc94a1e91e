"""Pipeline: a source, a chain of stages and a sink, with specs checked before anything runs.

Description layer: a Pipeline is data (its fields, stages, source, sink, the specs they
propagate, its YAML in and out). Running it is the executor's job (execute.py, session.py,
runner.py, backends/): ``process``, ``run`` and ``start`` hand the pipeline there through a
function-level import, and this module imports no executor module at module level.

A Pipeline is the one-path case of a flowgraph (:class:`~pygpukit_dsp.graph.Graph`, any DAG of
stages between sources and sinks: docs/graphs.md); both share :class:`PipelineBase` (the stream's
settings, the input spec, running) and describe themselves as a
:class:`~pygpukit_dsp.graph_model.Topology`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from .devices import check_device  # noqa: F401  (pipeline.check_device: where it was defined before)
from .errors import ConfigError
from .graph_model import SOURCE_NAME, Topology
from .io.base import Sink, Source, StreamFormat
from .limits import MAX_BLOCK_SIZE, MAX_CHANNELS
from .nonfinite import check_policy
from .qos import QoS
from .signal import DTYPES, SignalSpec
from .stages.base import Stage, stage_class, validate_params

if TYPE_CHECKING:
    from .handle import RunHandle
    from .summary import ProgressFn, RunSummary

BACKENDS = ("auto", "cuda", "cpu")


@dataclass(frozen=True)
class SpecChain:
    """The spec of every edge: ``specs[0]`` is the input, ``specs[i+1]`` the output of stage i."""

    specs: tuple[SignalSpec, ...]

    @property
    def input(self) -> SignalSpec:
        return self.specs[0]

    @property
    def output(self) -> SignalSpec:
        return self.specs[-1]


class PipelineBase(ABC):
    """What a :class:`Pipeline` and a :class:`~pygpukit_dsp.graph.Graph` share: the stream's settings
    (name, rate, channels, block size, dtype, backend, QoS, device, nonfinite), the input spec they
    make with a source's format, their settings in YAML, and running (``process``, ``run``,
    ``start``: the executor's, execute.py)."""

    def __init__(self, *, name: str = "pipeline", sample_rate: float | None = None,
                 channels: int | None = None, block_size: int = 1024, dtype: str | None = None,
                 backend: str = "auto", qos: QoS | dict | None = None, where: str | None = None,
                 path: Path | None = None, device: int | str | None = None, device_where: str | None = None,
                 nonfinite: str | None = None):
        self.name = name
        self.sample_rate = float(sample_rate) if sample_rate is not None else None
        self.channels = int(channels) if channels is not None else None
        self.block_size = int(block_size)
        self.dtype = dtype
        self.backend = backend
        # The GPU of the cuda backend: None (GPU 0), an index, or "auto" (placed by the Session on
        # the GPU with the most admission headroom; docs/multi-gpu.md). The cpu backend ignores it.
        self.device = check_device(device, device_where or where or f"pipeline '{name}'")
        self.device_where = device_where  # FILE:LINE:COL of a YAML device value
        # NaN/Inf input samples: error | zero | pass, None: the source's default (error for files and
        # arrays and process(), zero for live audio; pygpukit_dsp/nonfinite.py)
        self.nonfinite = check_policy(nonfinite, where or f"pipeline '{name}'")
        if qos is None:
            qos = QoS()
        elif isinstance(qos, dict):
            qos = validate_params(QoS, qos, what=f"pipeline '{name}' qos")
        self.qos: QoS = qos
        self.where = where
        self.path = path

    def _settings(self) -> dict[str, Any]:
        """The keyword arguments that make another description with these settings."""
        return dict(name=self.name, sample_rate=self.sample_rate, channels=self.channels,
                    block_size=self.block_size, dtype=self.dtype, backend=self.backend, qos=self.qos,
                    where=self.where, path=self.path, device=self.device, device_where=self.device_where,
                    nonfinite=self.nonfinite)

    def _check_settings(self) -> None:
        where = self.where or f"pipeline '{self.name}'"
        if not 1 <= self.block_size <= MAX_BLOCK_SIZE:
            raise ConfigError(f"block_size must be a whole number from 1 to {MAX_BLOCK_SIZE} samples (the limit), "
                              f"got {self.block_size}", where=where)
        if self.channels is not None and not 1 <= self.channels <= MAX_CHANNELS:
            raise ConfigError(f"channels must be 1..{MAX_CHANNELS} (the limit), got {self.channels}",
                              where=where)
        if self.sample_rate is not None and not (math.isfinite(self.sample_rate) and self.sample_rate > 0):
            raise ConfigError(f"sample_rate must be a finite number > 0, got {self.sample_rate}", where=where)
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}", where=where)
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}",
                              where=where)

    def _settings_config(self) -> dict[str, Any]:
        """The YAML document's settings (version, name, rate, block size...; qos when not the default)."""
        doc: dict[str, Any] = {"version": 1, "name": self.name}
        if self.sample_rate is not None:
            doc["sample_rate"] = int(self.sample_rate) if self.sample_rate.is_integer() else self.sample_rate
        doc["block_size"] = self.block_size
        if self.channels is not None:
            doc["channels"] = self.channels
        if self.dtype is not None:
            doc["dtype"] = self.dtype
        doc["backend"] = self.backend
        if self.device is not None:
            doc["device"] = self.device
        if self.nonfinite is not None:
            doc["nonfinite"] = self.nonfinite
        qos = self.qos.to_config()
        if qos:
            doc["qos"] = qos
        return doc

    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """The YAML document of this description (a dict)."""

    def to_yaml(self) -> str:
        from .spec import dump_yaml

        return dump_yaml(self.to_config())

    # ------------------------------------------------------------------ the graph it describes
    @abstractmethod
    def topology(self) -> Topology:
        """The flowgraph this describes: sources, stages, sinks and what each reads."""

    @abstractmethod
    def as_chain(self) -> "Pipeline | None":
        """The same stream as a :class:`Pipeline` when it is one path (a Pipeline: itself), else None."""

    # ------------------------------------------------------------------ specs
    def input_spec(self, fmt: StreamFormat | None = None) -> SignalSpec:
        """The input spec from the pipeline's fields, with ``fmt`` (a source's format) filling blanks."""
        fmt = fmt or StreamFormat()
        where = self.where  # FILE:LINE:COL from YAML; every message below names the pipeline itself

        def pick(field: str, mine: Any, theirs: Any) -> Any:
            if mine is not None and theirs is not None and mine != theirs:
                raise ConfigError(f"pipeline '{self.name}' sets {field}={mine} but its source delivers "
                                  f"{field}={theirs}", where=where,
                                  hint=f"remove {field} from the pipeline or make them agree")
            return mine if mine is not None else theirs

        sample_rate = pick("sample_rate", self.sample_rate, fmt.sample_rate)
        channels = pick("channels", self.channels, fmt.channels)
        dtype = pick("dtype", self.dtype, fmt.dtype) or "float32"
        if sample_rate is None:
            raise ConfigError(f"pipeline '{self.name}' has no sample_rate", where=where,
                              hint="set sample_rate, or use a source that knows it (a file)")
        if channels is None:
            raise ConfigError(f"pipeline '{self.name}' has no channel count", where=where,
                              hint="set channels, or use a source that knows it")
        return SignalSpec(sample_rate=float(sample_rate), channels=int(channels),
                          block_size=self.block_size, dtype=dtype)

    # ------------------------------------------------------------------ running (execute.py)
    def run(self, *, blocks: int | None = None, duration: float | None = None,
            backend: str | None = None, progress: "ProgressFn | None" = None,
            device: int | str | None = None) -> "RunSummary":
        """Run source -> stages -> sink until the source ends or a limit is reached.

        Like every stream, it is first admitted by the scheduler under its QoS (a realtime
        stream whose per-block cost breaks the bound raises AdmissionError before any block).
        ``device`` overrides the pipeline's GPU.
        """
        from .execute import run

        return run(self, blocks=blocks, duration=duration, backend=backend, progress=progress, device=device)


class Pipeline(PipelineBase):
    """A streaming DSP pipeline: one path from a source through a chain of stages to a sink.

    Build it from Python::

        from pygpukit_dsp import Pipeline, stages
        p = Pipeline([stages.Fir(design={"numtaps": 129, "cutoff_hz": 4000}), stages.Stft(nfft=512, hop=256)],
                     sample_rate=48000, channels=2, block_size=1024)
        y = p.process(x)          # x: (2, n) float32 -> (2, frames, 257) complex64

    or from YAML with :meth:`from_yaml`.
    """

    # the names a graph gives its source and sink (graph.Graph.as_chain sets them; a Pipeline of its
    # own calls its source 'source' and its sink by the name of what it reads)
    source_name: str = SOURCE_NAME
    sink_name: str | None = None

    def __init__(self, stages: Iterable[Stage] = (), *, name: str = "pipeline",
                 sample_rate: float | None = None, channels: int | None = None,
                 block_size: int = 1024, dtype: str | None = None, backend: str = "auto",
                 qos: QoS | dict | None = None, source: Source | None = None,
                 sink: Sink | None = None, where: str | None = None, path: Path | None = None,
                 device: int | str | None = None, device_where: str | None = None,
                 nonfinite: str | None = None):
        super().__init__(name=name, sample_rate=sample_rate, channels=channels, block_size=block_size,
                         dtype=dtype, backend=backend, qos=qos, where=where, path=path, device=device,
                         device_where=device_where, nonfinite=nonfinite)
        self.stages: list[Stage] = list(stages)
        self.source = source
        self.sink = sink
        self._check_fields()

    # ------------------------------------------------------------------ building
    def _check_fields(self) -> None:
        where = self.where or f"pipeline '{self.name}'"
        self._check_settings()
        seen: dict[str, Stage] = {}
        for st in self.stages:
            if not isinstance(st, Stage):
                raise ConfigError(f"pipeline '{self.name}': {st!r} is not a Stage", where=where)
            if st.name in seen:
                raise ConfigError(f"pipeline '{self.name}' has two stages named '{st.name}'",
                                  where=st.where or where, hint="give each stage a unique name")
            seen[st.name] = st

    def add(self, stage: Stage | str, **params: Any) -> "Pipeline":
        """Append a stage (an instance, or a type name with parameters) and return self."""
        if isinstance(stage, str):
            stage = stage_class(stage)(**params)
        elif params:
            raise TypeError("parameters are only accepted with a stage type name")
        self.stages.append(stage)
        self._check_fields()
        return self

    @classmethod
    def from_config(cls, cfg: Any) -> "Pipeline":
        """Build from a :class:`pygpukit_dsp.spec.PipelineConfig`. A graph's (``sources:``,
        ``sinks:``, ``input:``...) of one path is that path; one with branches or several inputs is
        a ConfigError at its first graph key (Graph.from_config builds it: docs/graphs.md)."""
        source, stages, sink = cfg.source, cfg.stages, cfg.sink
        names: tuple[str, str | None] = (SOURCE_NAME, None)
        if getattr(cfg, "graph_where", None):
            topo = Topology(sources=dict(cfg.sources), stages=list(cfg.stages), stage_inputs=dict(cfg.stage_inputs),
                            sinks=dict(cfg.sinks or {}), sink_inputs=dict(cfg.sink_inputs), where=cfg.where)
            order = topo.single_path()
            if order is None:
                _, why = topo.branch() or ("", "it is not one path")
                raise ConfigError(f"pipeline '{cfg.name}' is a graph, not one path: {why}", where=cfg.graph_where,
                                  hint="load it with pygpukit_dsp.Graph.from_yaml or Graph.load_all "
                                       "(docs/graphs.md)")
            (src_name, source), = topo.sources.items()
            stages = [topo.stage(n) for n in order]
            sink_name, sink = next(iter(topo.sinks.items()), (None, None))
            names = (src_name, sink_name)
        p = cls(stages, name=cfg.name, sample_rate=cfg.sample_rate, channels=cfg.channels,
                block_size=cfg.block_size, dtype=cfg.dtype, backend=cfg.backend, qos=cfg.qos,
                source=source, sink=sink, where=cfg.where, path=cfg.path,
                device=getattr(cfg, "device", None), device_where=getattr(cfg, "device_where", None),
                nonfinite=getattr(cfg, "nonfinite", None))
        p.source_name, p.sink_name = names
        return p

    @classmethod
    def load_all(cls, path: str | Path) -> list["Pipeline"]:
        """Every pipeline in a YAML file (one, or several under ``pipelines:``)."""
        from .spec import load_file

        return [cls.from_config(cfg) for cfg in load_file(path)]

    @classmethod
    def from_yaml(cls, path: str | Path, name: str | None = None) -> "Pipeline":
        """The pipeline in a YAML file; ``name`` picks one when the file holds several."""
        pipelines = cls.load_all(path)
        if name is None:
            if len(pipelines) > 1:
                names = ", ".join(p.name for p in pipelines)
                raise ConfigError(f"{path} holds {len(pipelines)} pipelines ({names})",
                                  hint="pass name= to pick one, or use Pipeline.load_all")
            return pipelines[0]
        for p in pipelines:
            if p.name == name:
                return p
        from .stages.base import did_you_mean

        names = [p.name for p in pipelines]
        raise ConfigError(f"{path} has no pipeline named '{name}'",
                          hint=did_you_mean(name, names) or f"pipelines: {', '.join(names)}")

    # ------------------------------------------------------------------ serialising
    def to_config(self) -> dict[str, Any]:
        """The YAML document (version 1) of this pipeline as plain data."""
        doc = self._settings_config()
        if self.source is not None:
            doc["source"] = self.source.to_config()
        doc["stages"] = [st.to_config() for st in self.stages]
        if self.sink is not None:
            doc["sink"] = self.sink.to_config()
        return doc

    # ------------------------------------------------------------------ the graph it describes
    def topology(self) -> Topology:
        """The one path: the source (``source_name``), each stage reading the one before, the sink."""
        topo = Topology(sources={self.source_name: self.source}, stages=list(self.stages), where=self.where)
        before = self.source_name
        for st in self.stages:
            topo.stage_inputs[st.name] = (before,)
            before = st.name
        if self.sink is not None:
            name = self.sink_name or before
            topo.sinks[name] = self.sink
            topo.sink_inputs[name] = before
        return topo

    def as_chain(self) -> "Pipeline":
        return self

    # ------------------------------------------------------------------ specs
    def propagate(self, spec_in: SignalSpec) -> SpecChain:
        """Propagate ``spec_in`` through every stage; a mismatch names both stages."""
        specs = [spec_in]
        prev = "the source"
        for st in self.stages:
            if st.takes_several():
                raise ConfigError(f"stage '{st.name}' ({st.type}) takes {st.inputs_text()} inputs, but in a "
                                  f"chain it reads one: the output of {prev}", where=st.where or self.where,
                                  hint="build a graph and name its inputs: inputs: [A, B] (docs/graphs.md)")
            try:
                out = st.output_spec(specs[-1])
            except ConfigError as exc:
                raise ConfigError(
                    f"stage '{st.name}' ({st.type}) cannot take the output of {prev} "
                    f"[{specs[-1].describe()}]: {exc.message}",
                    where=exc.where or st.where or self.where, hint=exc.hint, path=exc.path) from None
            specs.append(out)
            prev = f"stage '{st.name}' ({st.type})"
        return SpecChain(tuple(specs))

    def specs(self, fmt: StreamFormat | None = None) -> SpecChain:
        return self.propagate(self.input_spec(fmt))

    # ------------------------------------------------------------------ running (execute.py)
    def process(self, x: np.ndarray, *, backend: str | None = None,
                device: int | str | None = None, nonfinite: str | None = None) -> np.ndarray:
        """Stream ``x`` (channels, n) through the pipeline block by block and return the output.

        State is carried across blocks exactly as in a live stream; the last block may be
        partial. Time-domain outputs are concatenated along samples, frames along frames.
        The pipeline's source and sink are not used. ``device`` overrides the pipeline's GPU
        (``auto`` is GPU 0 here: with no Session there is nothing to place against).

        A NaN or Inf in ``x`` stops it with :class:`~pygpukit_dsp.nonfinite.NonFiniteInput` (a
        StreamFault naming the sample and channel) unless ``nonfinite`` (default: the pipeline's)
        is ``zero`` (replaced by 0 before the stages see them) or ``pass`` (pygpukit_dsp/nonfinite.py;
        ``run()``'s summary counts them).

        A GPU array (CuPy, torch, or any ``__cuda_array_interface__`` / CUDA ``__dlpack__`` array)
        stays on the GPU on the cuda backend: the output is an array of its framework, ordered on
        its current stream, with no host copy; other backends refuse it (docs/graphs.md, "GPU arrays").
        """
        from .execute import process

        return process(self, x, backend=backend, device=device, nonfinite=nonfinite)

    def start(self, *, source: Source | None = None, sink: Sink | None = None, backend: str | None = None,
              blocks: int | None = None, duration: float | None = None, tap: bool | None = None,
              device: int | str | None = None) -> "RunHandle":
        """Run on a background thread and return a :class:`~pygpukit_dsp.handle.RunHandle`.

        ``source``/``sink`` replace the pipeline's own for this run; ``sink=None`` keeps the
        pipeline's sink. ``sink=NullSink()`` (pygpukit_dsp.io) says "no sink": the output blocks
        are for iterating over the handle. ``tap`` defaults to True when the run's sink is a
        null sink or there is none::

            with p.start(source=DuplexSource(device="system"), sink=DuplexSink()) as run:
                time.sleep(5); print(run.stats())
            print(run.summary.format())

            with p.start(source=AudioDeviceSource(), sink=NullSink(), duration=5) as run:
                for block in run: ...
        """
        from .execute import start

        return start(self, source=source, sink=sink, backend=backend, blocks=blocks, duration=duration, tap=tap,
                     device=device)

    def with_io(self, *, source: Source | None = None, sink: Sink | None = None) -> "Pipeline":
        """A copy with ``source`` and ``sink`` in place of this pipeline's own (None keeps its own);
        the stages are shared (a stage holds its parameters, not a stream's state)."""
        copy = Pipeline(self.stages, source=source if source is not None else self.source,
                        sink=sink if sink is not None else self.sink, **self._settings())
        copy.source_name, copy.sink_name = self.source_name, self.sink_name
        return copy

    def __repr__(self) -> str:
        return f"Pipeline(name={self.name!r}, stages={[s.name for s in self.stages]})"


def as_pipeline_list(obj: PipelineBase | Sequence[PipelineBase]) -> list[PipelineBase]:
    return [obj] if isinstance(obj, PipelineBase) else list(obj)
