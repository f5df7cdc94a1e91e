"""W3, the contention benchmark: W1 as a realtime stream while W2 runs as a throughput stream.

A bench file of this kind is a pipeline file with two pipelines and a top-level ``bench:``
mapping (benchmarks/w3.yaml)::

    bench:
      kind: contention
      realtime: w1            # measured for latency (qos class realtime)
      throughput: w2          # the load (qos class throughput)
      blocks: 3000            # timed W1 blocks; warmup: 300 untimed before them
      period_ms: 1.0          # W1 arrival period (default: its block period)
      quantum_ns: 250000      # the scheduler's chunk quantum
      throughput_mode: resident
      throughput_seconds: 3.0 # W2 solo window
      segments: 10            # alternating W1-alone / W1-loaded segments sharing the timed blocks

:func:`run_w3` measures, in one process and in this order:

a. pygpukit-dsp W2 alone: GPU-resident blocks (normal blocks from reset upload the data first),
   two in flight, on its own CudaDispatch, for ``throughput_seconds``.
b. pygpukit-dsp W1 alone and W1 under W2 load, interleaved: both CudaEngines attached to ONE
   CudaDispatch whose scheduler holds W1 as a realtime stream (cost declared from the p99 of a
   short calibration) and W2 as a throughput stream. The timed W1 blocks are split into
   ``segments`` alternating segments of each kind (alone, loaded | loaded, alone | ...): in a
   loaded segment W2's resident loop runs in a background thread, in an alone segment W2 is
   idle. Host noise comes in bursts of seconds; alternating puts it on both kinds alike (as the
   W1 harness interleaves its implementations). One W1 block arrives every period (the host
   sleeps, then spins, to the arrival time); a block's latency is the host wall clock from
   hand-over (``engine.process``) until its output is back. W2's throughput under load is
   counted over the loaded segments' timed windows. The engine traces every timed block, and the
   report breaks both kinds' latency into phases (:mod:`pygpukit_dsp.bench.trace`).
c. PyTorch (pygpukit_dsp/bench/baselines/torch_w3.py): W1 as a CUDA graph on its own stream,
   W2 resident (a CUDA graph) on another stream in a background thread, paced the same way;
   W1 solo, W2 solo, both at the same stream priority, and W1 at the device's highest priority
   (one run each, not interleaved).

Outputs are checked: W1's outputs at the end of the interleaved run equal a fresh engine's
run back to back over the same input sequence, W2's under load equal its solo ones (same
inputs, state reset), and PyTorch's equal ours.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from pydantic import Field, field_validator

from ..affinity import resolve_cpu
from ..errors import ConfigError, DeviceError
from ..stages.base import StageParams
from .bench_file import BenchFile, load_bench_file, pick_pipeline, validate_bench
from .latency import LatencyFigures
from .stall_probe import HOST_STALL_US
from .w3_pacing import W1_CHECK_BLOCKS, split_blocks
from .w3_project import CALIBRATION_BLOCKS, SETTLE_BLOCKS, ProjectRun, miss_causes
from .w3_pumps import W2_IN_FLIGHT
from .w3_report import SELF_RTOL, W2_CHECK_BLOCKS, ContentionReport, ContentionRow, output_check, w1_line
from .w3_torch import torch_rows

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain
    from ..spec.loader import Marks

W1_POOL = 32                # distinct W1 input blocks, cycled

Progress = Callable[[str], None]


# ----------------------------------------------------------------------------- the bench file


class ContentionSettings(StageParams):
    """The ``bench:`` mapping of a contention bench file (see the module doc)."""

    kind: Literal["contention"] = Field(description="the bench kind: contention (W3)")
    realtime: str | None = Field(None, description="the realtime pipeline (default: the one with qos class realtime)")
    throughput: str | None = Field(None, description="the load (default: the one with qos class throughput)")
    blocks: int = Field(3000, ge=W1_CHECK_BLOCKS, description="timed W1 blocks per W1 run")
    warmup: int = Field(300, ge=0, description="untimed W1 blocks before them")
    period_ms: float | None = Field(None, gt=0, description="W1 arrival period (default: its block period)")
    quantum_ns: int = Field(250_000, ge=1_000, description="the scheduler's chunk quantum")
    throughput_mode: str = Field("resident", description="W2: resident (input already on the GPU)")
    throughput_seconds: float = Field(3.0, gt=0, description="W2 solo timing window")
    spin_us: int | None = Field(None, ge=0, description="dispatcher spin before sleeping (default: the W1 period)")
    segments: int = Field(10, ge=1, description="alternating segments of W1 alone / loaded that share the timed blocks")

    @field_validator("throughput_mode")
    @classmethod
    def _resident_only(cls, v: str) -> str:
        if v != "resident":
            raise ValueError(f"throughput_mode '{v}' is not measured by the contention bench: only 'resident' "
                             "(W2's input already in device memory, transfers excluded: DESIGN.md's W3)")
        return v


@dataclass
class ContentionBench:
    """A loaded contention bench file: its settings and its two pipelines."""

    settings: ContentionSettings
    realtime: "Pipeline"
    throughput: "Pipeline"
    path: str = "<python>"


def load_contention(source: str | Path | BenchFile) -> ContentionBench | None:
    """The contention bench of a bench file (a path, or one :func:`~.bench_file.load_bench_file`
    loaded); None when the file has no top-level ``bench:`` (a plain pipeline file). ConfigError
    (with FILE:LINE:COL) for the file's pipelines, a bad ``bench:`` mapping or pipelines that do not
    fit it."""
    bf = source if isinstance(source, BenchFile) else load_bench_file(source)
    if bf.marks is None:
        return None
    return contention_from_document(bf.section, bf.marks, bf.pipelines, bf.path)


def contention_from_document(section: Any, bm: "Marks", pipelines: list["Pipeline"],
                             path: str = "<string>") -> ContentionBench:
    """Validate a ``bench:`` mapping (marks ``bm``) against the file's pipelines."""
    if not isinstance(section, dict):
        raise ConfigError(f"bench must be a mapping, got {type(section).__name__}", where=bm.where,
                          hint="e.g. 'bench: {kind: contention, realtime: w1, throughput: w2}'")
    if "kind" in section and section["kind"] != "contention":
        raise ConfigError(f"unknown bench kind {section['kind']!r}", where=bm.value_where("kind"),
                          hint="the kinds are: contention (W3: a realtime pipeline under a throughput one), "
                               "link (a stream across two processes over zmq)")
    settings = validate_bench(ContentionSettings, section, bm)
    assert isinstance(settings, ContentionSettings)
    realtime = _pick(pipelines, settings.realtime, "realtime", bm)
    throughput = _pick(pipelines, settings.throughput, "throughput", bm)
    if realtime is throughput:
        raise ConfigError("bench: realtime and throughput name the same pipeline", where=bm.where,
                          hint="name two different pipelines")
    return ContentionBench(settings, realtime, throughput, path)


def _pick(pipelines: list["Pipeline"], name: str | None, cls: str, bm: "Marks") -> "Pipeline":
    return pick_pipeline(
        pipelines, name, cls, bm, fits=lambda p: p.qos.cls == cls,
        count_error=lambda n, names: (f"bench: {n} pipelines have qos class {cls}; the contention bench needs one",
                                      f"name it with '{cls}: NAME' (pipelines: {', '.join(names)})"),
        misfit=lambda p: (f"bench: pipeline '{p.name}' has qos class {p.qos.cls}, but '{cls}:' needs class {cls}",
                          f"give '{p.name}' 'qos: {{class: {cls}}}' or name another pipeline"))


@dataclass
class ReleaseWaitSettings:
    """The paced waits: W1's call waits natively for each block's release (sleep until
    ``spin_us`` before it, then spin; ``prewarm`` the project's slot when the spin starts), and its
    latency runs from the release. PyTorch's W1 waits the same way (``_native.wait_until``) before
    its call."""

    spin_us: int | None = None  # None: the realtime pipeline's qos.spin_us (its default: 200)
    prewarm: bool = True
    warm_us: int = 100      # back in Python this long before the release (PacedEngine.process)


# ----------------------------------------------------------------------------- the run


def _require_cuda(pipeline: "Pipeline", chain: "SpecChain", backend: str | None) -> None:
    from ..backends import choose_backend

    requested = backend or pipeline.backend
    if requested == "cpu":
        raise ConfigError(f"the contention bench times the GPU engine; backend 'cpu' cannot run it "
                          f"(pipeline '{pipeline.name}')", hint="use --backend cuda (or auto) on a GPU machine")
    try:
        choose_backend(pipeline, chain, "cuda")
    except DeviceError as exc:
        raise DeviceError(f"the contention bench (W3) needs a usable GPU: {exc}") from None


def run_w3(bench: ContentionBench | str | Path, *, backend: str | None = None, blocks: int | None = None,
           warmup: int | None = None, period_ms: float | None = None, throughput_seconds: float | None = None,
           quantum_ns: int | None = None, segments: int | None = None, baseline: bool = True,
           wait: ReleaseWaitSettings | None = ReleaseWaitSettings(),
           progress: Progress | None = None) -> ContentionReport:
    """Run the contention benchmark (module doc); arguments left None take the bench file's values.

    ``baseline=False`` leaves out the PyTorch runs. ``progress`` receives one line per step.
    ``wait``: how W1's blocks wait for their release (natively, spin window, prewarm, and the
    latency from the release; None: a Python sleep-then-spin and the latency from the hand-over).
    """
    from .inputs import input_blocks, machine_description, source_format

    if not isinstance(bench, ContentionBench):
        loaded = load_contention(bench)
        if loaded is None:
            raise ConfigError(f"{bench} has no 'bench:' mapping", hint="see benchmarks/w3.yaml")
        bench = loaded
    st = bench.settings
    blocks = st.blocks if blocks is None else blocks
    warmup = st.warmup if warmup is None else warmup
    seconds = st.throughput_seconds if throughput_seconds is None else throughput_seconds
    quantum = st.quantum_ns if quantum_ns is None else quantum_ns
    segments = st.segments if segments is None else segments
    if blocks < W1_CHECK_BLOCKS:
        raise ConfigError(f"the contention bench needs at least {W1_CHECK_BLOCKS} timed W1 blocks, got {blocks}",
                          hint="--blocks N with N >= 6")
    say = progress or (lambda _line: None)
    w1p, w2p = bench.realtime, bench.throughput
    c1, c2 = w1p.specs(source_format(w1p)), w2p.specs(source_format(w2p))
    _require_cuda(w1p, c1, backend)
    _require_cuda(w2p, c2, backend)
    period_ms = period_ms if period_ms is not None else st.period_ms
    period_ns = int(round(period_ms * 1e6)) if period_ms is not None else int(round(c1.input.block_period * 1e9))
    deadline_ns = max(1, int(round(w1p.qos.deadline_s(c1.input.block_period) * 1e9)))
    spin_us = st.spin_us if st.spin_us is not None else period_ns // 1000 + 100
    w1_total_s = (warmup + blocks) * period_ns / 1e9
    if wait is not None and wait.spin_us is None:
        wait = replace(wait, spin_us=w1p.qos.spin_window_us())

    settings = {"blocks": blocks, "warmup": warmup, "period_ns": period_ns, "deadline_ns": deadline_ns,
                "quantum_ns": quantum, "throughput_mode": st.throughput_mode, "throughput_seconds": seconds,
                "spin_us": spin_us, "w2_in_flight": W2_IN_FLIGHT, "segments": segments, "file": bench.path,
                "release_wait": None if wait is None else asdict(wait)}
    report = ContentionReport(
        realtime=w1p.name, throughput=w2p.name, w1_spec=c1.input.describe(), w2_spec=c2.input.describe(),
        period_us=period_ns / 1e3, deadline_us=deadline_ns / 1e3, settings=settings,
        machine=machine_description(), rows=[])
    say(f"w3: {w1p.name} every {period_ns / 1e3:.1f} us, {warmup}+{blocks} blocks per W1 run "
        f"(~{w1_total_s:.0f} s each); {w2p.name} solo window {seconds:g} s; preparing inputs")
    w1_inputs = input_blocks(w1p, c1, W1_POOL)
    w2_blocks = input_blocks(w2p, c2, W2_CHECK_BLOCKS)

    proj = ProjectRun(bench, c1, c2, period_ns=period_ns, deadline_ns=deadline_ns, quantum_ns=quantum,
                       spin_us=spin_us, wait=wait)
    solo = ContentionRow("project_solo", "pygpukit-dsp, alone")
    load = ContentionRow("project_load", "pygpukit-dsp, W1 + W2 on one scheduler", solo_key="project_solo")
    report.rows += [solo, load]
    say(f"w3: pygpukit-dsp {w2p.name} alone ({seconds:g} s)")
    solo.w2_samples_per_s, w2_solo_out, solo.extra = proj.w2_alone(w2_blocks, seconds)
    say(f"w3:   {solo.w2_samples_per_s / 1e9:.1f} Gsamples/s")
    parts = split_blocks(blocks, segments)
    say(f"w3: pygpukit-dsp {w1p.name} alone and {w1p.name} + {w2p.name} on one scheduler, in {len(parts)} "
        f"alternating segments of each (~{2 * (blocks + len(parts) * SETTLE_BLOCKS) * period_ns / 1e9:.0f} s)")
    run = proj.interleaved(w1_inputs, w2_blocks, warmup, blocks, segments)
    solo.w1 = LatencyFigures.from_ns(run.solo.lat_ns, deadline_ns, run.solo.overruns)
    load.w1 = LatencyFigures.from_ns(run.load.lat_ns, deadline_ns, run.load.overruns)
    solo.extra["w1_breakdown"] = run.solo.breakdown(deadline_ns)
    load.extra = {**run.extra, "w1_breakdown": run.load.breakdown(deadline_ns)}
    solo.extra["miss_causes"] = miss_causes(run.solo, solo.extra["w1_breakdown"], run.stalls, run.gc)
    load.extra["miss_causes"] = miss_causes(run.load, load.extra["w1_breakdown"], run.stalls, run.gc)
    if run.stalls is not None:
        solo.extra["probe_gaps_over_100us"] = int((run.stalls[1] >= HOST_STALL_US * 1000).sum())
        solo.extra["probe_max_gap_us"] = float(run.stalls[1].max()) / 1e3 if run.stalls[1].size else 0.0
    load.w2_samples_per_s = run.w2_samples_per_s
    say(f"w3:   alone: {w1_line(solo.w1)}")
    say(f"w3:   loaded: {w1_line(load.w1)}; {w2p.name} {load.w2_samples_per_s / 1e9:.1f} Gsamples/s")
    # references: W1 alone from reset, back to back (first warmup + blocks blocks: PyTorch's
    # check; the whole interleaved run: its check)
    w1_ref, w1_ref_run = proj.w1_reference(w1_inputs, [warmup + blocks, run.w1_blocks])
    report.checks += [
        output_check(f"pygpukit-dsp {w1p.name}, interleaved run = alone back to back (last {W1_CHECK_BLOCKS} of "
               f"{run.w1_blocks} blocks)", run.w1_last, w1_ref_run, SELF_RTOL),
        output_check(f"pygpukit-dsp {w2p.name} under load = alone ({W2_CHECK_BLOCKS} blocks from reset)",
               run.w2_outputs, w2_solo_out, SELF_RTOL),
    ]
    report.notes.append(f"pygpukit-dsp: {w1p.name} declared cost {proj.cost_ns / 1e3:.1f} us (p99 of "
                        f"{CALIBRATION_BLOCKS} blocks alone); dispatcher spin {spin_us} us; {w1p.name} alone and "
                        f"loaded measured in {len(parts)} alternating segments each, {SETTLE_BLOCKS} untimed "
                        "blocks after every switch"
                        + (f"; {w1p.name} driven from a thread pinned to CPU "
                           f"{resolve_cpu(w1p.qos.cpu)} (qos.cpu: {w1p.qos.cpu})" if w1p.qos.cpu is not None else ""))

    if baseline:
        torch_rows(report, bench, c1, c2, w1_inputs, w2_blocks, w1_ref, w2_solo_out,
                    warmup=warmup, blocks=blocks, period_ns=period_ns, deadline_ns=deadline_ns,
                    seconds=seconds, say=say, wait=wait)
    for t in report.targets():
        say(f"w3: {t.name}: {'not measured' if t.met is None else 'met' if t.met else 'NOT met'} ({t.detail})")
    return report
