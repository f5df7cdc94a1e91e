"""Runs one pipeline as a stream: source -> engine -> sink, with per-block accounting.

Latency of a block is the host wall clock from the moment the block is handed to the
engine until its output is available to the sink (DESIGN.md, W1). Blocks are never
queued in that figure: the runner hands the next block only after the last one is out.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .affinity import pinned, resolve_cpu
from .arrays_interop import is_device_array
from .errors import ConfigError, GkError, StreamFault
from .io.base import StreamFormat
from .nonfinite import NonFiniteInput
# the records moved to summary.py; imported from here as before
from .summary import (INFO_COUNTERS, Progress, ProgressFn, RunSummary, SchedulerAccounting,  # noqa: F401
                      SinkAccount, SourceAccount, StopRequest)

if TYPE_CHECKING:
    from .admission import AdmissionResult
    from .pipeline import Pipeline


def latency_histogram():
    """The Rust HDR histogram (pygpukit_dsp_core) behind every latency figure."""
    from pygpukit_dsp_core import LatencyHistogram

    return LatencyHistogram()


BlockTap = Callable[[np.ndarray], None]


def _hist_us(hist) -> dict[str, float]:
    s = hist.summary()
    out = {k: (v / 1e3 if k != "count" else v) for k, v in s.items() if k in
           ("count", "min", "mean", "p50", "p90", "p99", "p999", "max")}
    return out


def _samples(block: np.ndarray) -> int:
    """Samples per channel (time) or frames (frames domain) in a block."""
    return int(block.shape[1]) if block.ndim >= 2 else 0


class StreamRunner:
    """Opens a pipeline's source, engine and sink, and moves blocks through them.

    graph_runner.GraphRunner runs a graph that is not one path with the same loop: its hooks
    (``_read_inputs``, ``_write_outputs``, ``_samples_out``, ``_io_report``) read every source and
    write every sink."""

    def __init__(self, pipeline: "Pipeline", *, backend: str | None = None, device: int | str | None = None,
                 gpu: int | None = None):
        """``device`` overrides the pipeline's (None, an index or "auto"); ``gpu`` is where a
        ``device: auto`` stream's engine opens until admission places it (Session passes it)."""
        if pipeline.source is None:
            raise ConfigError(f"pipeline '{pipeline.name}' has no source", where=pipeline.where,
                              hint="add a source (e.g. {type: synth}) or use Pipeline.process(array)")
        self._setup(pipeline, backend, device)
        self.source = pipeline.source
        # NaN/Inf input samples: the pipeline's policy, else the source's default (error for files
        # and arrays, zero for live audio: pygpukit_dsp/nonfinite.py)
        self.nonfinite_policy = pipeline.nonfinite or getattr(self.source, "nonfinite_default", "error")
        self.sink = pipeline.sink
        try:
            self._open(gpu)
        except BaseException:
            self._close(quiet=True)
            raise

    def _setup(self, pipeline: Any, backend: str | None, device: int | str | None) -> None:
        """What every runner holds before anything is opened."""
        from .devices import check_device

        self.pipeline = pipeline
        self.requested_backend = backend or pipeline.backend
        self.device_request = check_device(device) if device is not None else pipeline.device
        # what admission decided for its stream (where, the cost and its source, the rehearsal, the
        # release phase): the Session keeps admit()'s result here
        self.admission: "AdmissionResult | None" = None
        self.cpu = resolve_cpu(pipeline.qos.cpu, pipeline.qos.where_of("cpu") or pipeline.where
                               or f"pipeline '{pipeline.name}'")
        self.source = self.sink = None
        self.engine = None
        self.closing = False
        self.stats_lock = threading.Lock()
        self.live: dict[str, Any] = {"blocks": 0, "samples_in": 0, "samples_out": 0, "misses": 0}
        self.hist = None

    def _open(self, gpu: int | None) -> None:
        """Open the source, the specs, the sink and the engine, in that order."""
        pipeline = self.pipeline
        pair = getattr(self.sink, "pair_with", None)
        if pair is not None:  # a sink that plays in its source's stream (duplex)
            pair(self.source)
        fmt = self.source.open(StreamFormat(pipeline.sample_rate, pipeline.channels, pipeline.dtype))
        self.source_format = fmt
        from .io._common import set_pacer_spin

        # a clock-paced source: spin the last qos.spin_us before each block instead of sleeping
        set_pacer_spin(self.source, pipeline.qos.spin_window_us())
        self.chain = pipeline.specs(fmt)
        if self.sink is not None:
            from .io._common import check_sink_not_source

            check_sink_not_source(self.sink, self.source)  # before the sink creates its file
            self.sink.open(self.chain.output)
        self._open_engine(gpu)

    def _engine_parts(self) -> tuple[Any, Any]:
        """What the engine runs: the pipeline and its specs."""
        return self.pipeline, self.chain

    def _open_engine(self, gpu: int | None) -> None:
        from .backends import open_backend

        where = gpu if self.device_request == "auto" and gpu is not None else self.device_request
        pipeline, chain = self._engine_parts()
        self.engine = open_backend(pipeline, chain, self.requested_backend, device=where,
                                   nonfinite=self.nonfinite_policy)

    def move_to_gpu(self, gpu: int) -> None:
        """Open the engine again on GPU ``gpu`` (admission placed a ``device: auto`` stream
        elsewhere than its engine was opened); before the first block, so no state is lost."""
        from .backends import open_backend

        old, self.engine = self.engine, None
        if old is not None:
            old.close()
        pipeline, chain = self._engine_parts()
        self.engine = open_backend(pipeline, chain, self.requested_backend, device=gpu,
                                   nonfinite=self.nonfinite_policy)

    def _read_block(self, bs: int, channels: int, dtype: np.dtype, index: int, source: Any = None) -> np.ndarray:
        """Read exactly ``bs`` samples of ``source`` (default: the pipeline's) unless it ends; check
        what it delivers."""
        source = self.source if source is None else source
        parts: list[np.ndarray] = []
        have = 0
        while have < bs:
            try:
                chunk = source.read(bs - have)
            except Exception as exc:  # a source failing mid-stream is a fault, never a silent end
                raise _fault(source, index, exc) from exc
            if not parts and not isinstance(chunk, np.ndarray) and is_device_array(chunk):
                return self._read_device_block(chunk, bs, channels, dtype, index, source)
            chunk = np.asarray(chunk)
            if chunk.ndim != 2 or chunk.shape[0] != channels or chunk.shape[1] > bs - have:
                raise _fault(source, index, f"delivered shape {chunk.shape}; expected "
                                             f"({channels}, <= {bs - have})")
            if chunk.shape[1] == 0:
                break
            parts.append(chunk)
            have += chunk.shape[1]
        if len(parts) == 1:
            block = parts[0]
        elif parts:
            block = np.concatenate(parts, axis=1)
        else:
            block = np.zeros((channels, 0), dtype)
        if block.dtype != dtype:
            block = block.astype(dtype)
        return np.ascontiguousarray(block)

    def _read_device_block(self, chunk: Any, bs: int, channels: int, dtype: np.dtype, index: int,
                           source: Any) -> Any:
        """_read_block for a source that delivers GPU arrays: checked as they are (no host copy,
        no conversion), joined on the GPU when a block comes in parts; only the cuda backend
        takes them (checked at the first, before it runs)."""
        from .arrays_interop import concatenate, inspect, is_device_array

        if self.engine.choice.name != "cuda":
            raise _fault(source, index, f"delivered a GPU array ({type(chunk).__name__}) but the stream runs on the "
                                        f"{self.engine.choice.name} backend, which takes host arrays (set backend: "
                                        "cuda to keep the blocks on the GPU)")
        parts: list[Any] = []
        have = 0
        while True:
            try:
                info = inspect(chunk, what="the GPU array")
            except ConfigError as exc:
                raise _fault(source, index, exc.message) from None
            if info.shape[0] != channels or info.shape[1] > bs - have or info.dtype != dtype:
                raise _fault(source, index, f"delivered a GPU array of shape {info.shape}, {info.dtype}; expected "
                                            f"({channels}, <= {bs - have}), {dtype} (GPU arrays are not converted)")
            if info.shape[1] == 0:
                break
            parts.append(chunk)
            have += info.shape[1]
            if have >= bs:
                break
            try:
                chunk = source.read(bs - have)
            except Exception as exc:
                raise _fault(source, index, exc) from exc
            if not is_device_array(chunk):
                if np.asarray(chunk).size == 0:
                    break
                raise _fault(source, index, "delivered a host array after GPU arrays in one block")
        if not parts:
            return np.zeros((channels, 0), dtype)
        if len(parts) == 1:
            return parts[0]
        try:
            return concatenate(parts, f"{source.describe()}")
        except ConfigError as exc:
            raise _fault(source, index, exc.message) from None

    # -- the loop's hooks: one source and one sink here; every source and sink in GraphRunner
    def _read_inputs(self, bs: int, index: int) -> tuple[Any, int]:
        """The engine's input for block ``index`` and its length (0: the stream ended)."""
        spec = self.chain.input
        block = self._read_block(bs, spec.channels, spec.np_dtype, index)
        return block, block.shape[1]

    def _write_outputs(self, out: Any, index: int) -> None:
        if self.sink is not None:
            try:
                self.sink.write(out)
            except Exception as exc:
                raise _fault(self.sink, index, exc) from exc

    def _source_end_reason(self) -> str | None:
        """Why the source ended its stream, when it says (a zmq source: "sender idle")."""
        sources = getattr(self, "sources", None)
        for src in (sources.values() if isinstance(sources, dict) else (self.source,)):
            reason = getattr(src, "end_reason", None)
            if isinstance(reason, str) and reason:
                return reason
        return None

    def _tapped(self, out: Any) -> Any:
        """What ``tap`` receives of an output (a graph with several sinks: a dict by sink name)."""
        return out

    def _samples_out(self, out: Any) -> int:
        """Samples (or frames) per channel of an output: the summary's ``samples_out``."""
        return _samples(out)

    def _nonfinite_error(self, exc: NonFiniteInput) -> NonFiniteInput:
        source = self.source.describe()
        return exc.count.error(source, part=source)

    def _io_report(self, blocks: int, samples_in: int, samples_out: int) -> dict[str, Any]:
        """RunSummary's figures of the sources and sinks."""
        p, sinks = self.pipeline, []
        if self.sink is not None:  # named as a graph names it: by what it reads, unless it has a name
            reads = p.stages[-1].name if p.stages else p.source_name
            sinks.append(_sink_account(p.sink_name or reads, self.sink, reads, self.chain.output, blocks,
                                       samples_out))
        return dict(source_stats=_stats(self.source), sink_stats=_stats(self.sink),
                    sources=[_source_account(self.pipeline.source_name, self.source, self.chain.input, samples_in)],
                    sinks=sinks, audio=_audio_report(self.source, self.sink), events=_events(self.source))

    def interrupt(self, *, abort: bool = False) -> None:
        """Make a source or sink waiting on a device return now (called when the run is stopping);
        ``abort``: their close() will not wait for queued output."""
        for part in (self.source, self.sink):
            if part is not None:
                part.interrupt(abort=abort)

    def live_stats(self) -> dict[str, Any]:
        """The stream's figures so far (any thread): blocks, samples, latency, misses, source/sink."""
        with self.stats_lock:
            out = dict(self.live)
        if self.hist is not None:
            out["latency_us"] = _hist_us(self.hist)
        out["source_stats"] = _stats(self.source)
        out["sink_stats"] = _stats(self.sink)
        audio = _audio_report(self.source, self.sink)
        if audio is not None:
            out["audio"] = audio
        return out

    def run(self, *, blocks: int | None = None, duration: float | None = None,
            progress: ProgressFn | None = None, progress_interval_s: float = 0.25,
            stop: Callable[[], bool] | None = None, tap: BlockTap | None = None) -> RunSummary:
        """Move blocks until the source ends, a limit is reached, ``stop()`` turns true or a part fails.

        ``stop`` may be a :class:`StopRequest` (its reason becomes ``ended_by``; its ``abort`` skips
        waiting for queued output). ``tap`` receives every output block after the sink took it.
        With ``qos.cpu`` the calling thread runs pinned to that CPU until the run returns.
        """
        with pinned(self.cpu):
            return self._run(blocks=blocks, duration=duration, progress=progress,
                             progress_interval_s=progress_interval_s, stop=stop, tap=tap)

    def _run(self, *, blocks: int | None, duration: float | None, progress: ProgressFn | None,
             progress_interval_s: float, stop: Callable[[], bool] | None, tap: BlockTap | None) -> RunSummary:
        if blocks is not None and duration is not None:
            raise ConfigError("give either blocks or duration, not both")
        spec = self.chain.input
        bs = spec.block_size
        limit = blocks
        ended_by = "source end"
        if duration is not None:
            if not (duration > 0 and math.isfinite(duration)):  # inf: no block count to stop at
                raise ConfigError(f"duration must be a finite number of seconds > 0, got {duration}")
            limit = max(1, math.ceil(duration * spec.sample_rate / bs))
        total = limit
        if self.source_format.length is not None:
            n_src = math.ceil(self.source_format.length / bs)
            total = n_src if total is None else min(total, n_src)

        deadline_s = self.pipeline.qos.deadline_s(spec.block_period)
        deadline_ns = int(deadline_s * 1e9)
        self.hist = hist = latency_histogram()
        live, lock = self.live, self.stats_lock
        misses = 0
        n_blocks = samples_in = samples_out = 0
        fault: StreamFault | None = None
        crash: Exception | None = None
        t_start = time.perf_counter()
        next_report = t_start + progress_interval_s
        engine = self.engine
        perf_ns = time.perf_counter_ns
        # Zero-copy hand-off where the engine offers it (cuda): the sink reads a view of the
        # engine's pinned output, consumed before that slot is submitted again.
        submit, collect = getattr(engine, "submit", None), getattr(engine, "collect", None)
        zero_copy = callable(submit) and callable(collect)

        def stop_reason() -> str:
            return getattr(stop, "reason", None) or "stop"

        def end_reason() -> str:
            """The stream ended: a stop that came meanwhile (a signal while a read waited) is the reason,
            whatever the source was doing; else the source's own (e.g. "sender idle") or "source end"."""
            if stop is not None and stop():
                return stop_reason()
            return self._source_end_reason() or "source end"

        try:
            while limit is None or n_blocks < limit:
                if stop is not None and stop():
                    ended_by = stop_reason()
                    break
                block, n = self._read_inputs(bs, n_blocks)
                if n == 0:  # a device read cut short by a stop, or the end of the stream
                    ended_by = end_reason()
                    break
                final = n < bs
                t0 = perf_ns()
                try:
                    out = collect(submit(block, final)) if zero_copy and isinstance(block, np.ndarray) \
                        else engine.process(block, final)
                except NonFiniteInput as exc:  # nonfinite: error
                    raise self._nonfinite_error(exc) from None
                except StreamFault as exc:
                    raise _fault(None, n_blocks, exc, part=f"engine ({self.engine.choice.name})") from exc
                dt = perf_ns() - t0
                hist.record(dt)
                if dt > deadline_ns:
                    misses += 1
                self._write_outputs(out, n_blocks)
                n_blocks += 1
                samples_in += n
                samples_out += self._samples_out(out)
                with lock:
                    live.update(blocks=n_blocks, samples_in=samples_in, samples_out=samples_out, misses=misses)
                if tap is not None:
                    tap(self._tapped(out))
                if progress is not None:
                    now = time.perf_counter()
                    if now >= next_report:
                        next_report = now + progress_interval_s
                        s = hist.summary()
                        progress(Progress(self.pipeline.name, n_blocks, samples_in, now - t_start,
                                          s["p50"] / 1e3, s["p99"] / 1e3, s["max"] / 1e3, misses, total))
                if final:  # a short last block: the tail of the stream (or of a read a stop cut short)
                    ended_by = end_reason()
                    break
            else:
                ended_by = "duration limit" if duration is not None else "block limit"
        except KeyboardInterrupt:  # Ctrl-C in a library run, or gk-stream's abort of a blocked block
            ended_by = stop_reason() if stop is not None and stop() else "interrupted"
        except StreamFault as exc:
            fault = exc
            ended_by = "fault"
        except Exception as exc:
            crash = exc
            raise
        finally:
            self.closing = True  # from here on nothing may interrupt: the sink finalises its file
            wall = time.perf_counter() - t_start
            if getattr(stop, "abort", False):
                self.interrupt(abort=True)
            if crash is not None:  # anything else raised in the loop (a bug) still ends the run as a fault
                self._report_to_sink("fault", f"{type(crash).__name__}: {crash}", n_blocks, samples_in, samples_out)
            else:
                self._report_to_sink(ended_by, fault, n_blocks, samples_in, samples_out)
            try:
                self._close()  # a second Ctrl-C during the drain in here cuts it short
            except StreamFault as exc:  # still a summary, with what closing said in its fault
                fault = exc if fault is None else StreamFault(f"{fault}; then {exc}", part=fault.part,
                                                              block=fault.block)
                ended_by = "fault"
            if getattr(stop, "abort", False):
                ended_by += " (aborted)"
        summary = RunSummary(
            pipeline=self.pipeline.name, backend=self.engine.choice.name,
            backend_reason=self.engine.choice.reason, qos_class=self.pipeline.qos.cls,
            blocks=n_blocks, samples_in=samples_in, samples_out=samples_out,
            input_spec=spec.describe(), output_spec=self.chain.output.describe(), wall_s=wall,
            deadline_us=deadline_s * 1e6, deadline_misses=misses, latency_us=_hist_us(hist),
            engine_counters=self.engine.counters(), ended_by=ended_by,
            fault=str(fault) if fault is not None else None,
            output_unit="frames" if self.chain.output.domain == "frames" else "samples",
            cpu=self.cpu, nonfinite=_nonfinite(self.engine), python_stages=_python_stages(self.engine),
            **self._io_report(n_blocks, samples_in, samples_out), **self._placement_and_cost())
        if fault is not None:
            fault.summary = summary  # type: ignore[attr-defined]
            raise fault
        return summary

    def _placement_and_cost(self) -> dict[str, Any]:
        """RunSummary's ``gpu``, ``placement`` and ``admission``: where the engine ran and why, and
        what admission measured (its AdmissionResult)."""
        text = self.admission.summary_text() if self.admission is not None else None
        where: dict[str, Any] = {} if text is None else {"admission": text}
        choice = self.engine.choice
        if choice.name != "cuda":
            return where
        gpu = getattr(choice, "device", None) or 0
        reason = self.admission.placement.reason if self.admission and self.admission.placement else None
        if reason is None:
            req = self.device_request
            reason = (f"GPU {gpu}: the default (the pipeline sets no device)" if req is None
                      else f"GPU {gpu}: requested (device: {req})")
        return {**where, "gpu": gpu, "placement": reason}

    def _report_to_sink(self, ended_by: str, fault: StreamFault | str | None, blocks: int, samples_in: int,
                        samples_out: int) -> None:
        """Tell a sink that records the run (sigmf annotations, a zmq sink's end of stream) how it went,
        before it is closed. A sink without ``run_report`` is not told."""
        fn = getattr(self.sink, "run_report", None)
        if not callable(fn):
            return
        report = {
            "pipeline": self.pipeline.name, "backend": self.engine.choice.name,
            "backend_reason": self.engine.choice.reason,
            "stages": [{"name": st.name, "type": st.type} for st in self.pipeline.stages],
            "source": self.source.describe(), "source_stats": _stats(self.source), "events": _events(self.source),
            "input_rate": self.chain.input.sample_rate, "output_rate": self.chain.output.sample_rate,
            "blocks": blocks, "samples_in": samples_in, "samples_out": samples_out,
            "ended_by": ended_by, "fault": str(fault) if fault is not None else None,
        }
        try:
            fn(report)
        except Exception:  # the report is a courtesy: closing the sink says what went wrong, if anything
            pass

    def _close(self, quiet: bool = False) -> None:
        """Drain and finalise: the engine first, then the sink (flush), then the source."""
        errors = []
        for thing in (self.engine, self.sink, self.source):
            if thing is None:
                continue
            try:
                thing.close()
            except Exception as exc:  # keep closing the rest, then report
                name = f"engine ({thing.choice.name})" if thing is self.engine else thing.describe()
                errors.append(f"{name}: {exc}")
        if errors and not quiet:
            raise StreamFault("while closing: " + "; ".join(errors))


def _sink_account(name: str, sink: Any, reads: str, spec: Any, blocks: int, samples: int) -> SinkAccount:
    return SinkAccount(name=name, type=sink.type, input=reads, spec=spec.describe(),
                       unit="frames" if spec.domain == "frames" else "samples", blocks=blocks, samples=samples,
                       stats=_stats(sink))


def _source_account(name: str, source: Any, spec: Any, samples: int) -> SourceAccount:
    return SourceAccount(name=name, type=source.type, spec=spec.describe(), samples=samples, stats=_stats(source))


def _stats(obj: Any) -> dict[str, int]:
    fn = getattr(obj, "stats", None)
    return dict(fn()) if callable(fn) else {}


def _nonfinite(engine: Any) -> dict[str, Any] | None:
    count = getattr(engine, "nonfinite", None)
    return count.to_dict() if count is not None else None


def _python_stages(engine: Any) -> dict[str, dict[str, float]]:
    calls = getattr(engine, "python_calls", None)
    return calls() if calls is not None else {}


def _events(source: Any) -> list[dict[str, Any]]:
    return [dict(e) for e in getattr(source, "events", None) or ()]


def _audio_report(*parts: Any) -> dict[str, Any] | None:
    """The figures of the sound card stream among ``parts`` (a duplex pair reports once)."""
    for part in parts:
        fn = getattr(part, "audio_report", None)
        report = fn() if callable(fn) else None
        if report is not None:
            return report
    return None


def _fault(component: Any, block: int, cause: BaseException | str, *, part: str | None = None) -> StreamFault:
    """A StreamFault naming the part that failed and the block it failed on (blocks count from 0)."""
    if isinstance(cause, StreamFault) and cause.part is not None:
        return cause
    name = part or component.describe()
    if isinstance(cause, str):
        detail = cause
    elif isinstance(cause, (GkError, OSError)):
        detail = str(cause)
    else:
        detail = f"{type(cause).__name__}: {cause}"
    return StreamFault(f"{name} failed at block {block}: {detail}", part=name, block=block)
