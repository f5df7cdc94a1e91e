"""gk-stream: run, validate and benchmark pipelines; list stages and devices.

Exit codes: 0 ok, 1 runtime error, 2 configuration error (no traceback for either;
set GK_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from .cli_format import err as _err
from .cli_format import qos_lines as _qos_lines
from .cli_format import write_json as _write_json


BENCH_BLOCKS = 2000   # gk-stream bench defaults for a single-pipeline file
BENCH_WARMUP = 200


class _LiveLine:
    """A one-line progress display on a terminal (stderr); silent otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._last_len = 0
        self._latest: dict[str, str] = {}

    def __call__(self, p) -> None:  # p: summary.Progress
        if not self.enabled:
            return
        total = f"/{p.total_blocks}" if p.total_blocks else ""
        self._latest[p.pipeline] = (
            f"[{p.pipeline}] blocks {p.blocks}{total}  {p.samples_per_s / 1e6:7.3f} Msamples/s  "
            f"p50 {p.p50_us:7.1f} us  p99 {p.p99_us:7.1f} us  max {p.max_us:7.1f} us  misses {p.misses}")
        line = "  |  ".join(self._latest.values())
        pad = max(0, self._last_len - len(line))
        sys.stderr.write("\r" + line + " " * pad)
        sys.stderr.flush()
        self._last_len = len(line)

    def clear(self) -> None:
        if self.enabled and self._last_len:
            sys.stderr.write("\r" + " " * self._last_len + "\r")
            sys.stderr.flush()
            self._last_len = 0


# ----------------------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    from .admission import DEFAULT_U_MAX

    if args.cluster:
        if args.view is not None:
            from .errors import ConfigError

            raise ConfigError("--view applies to a local run", hint="drop --view, or run without --cluster")
        if args.u_max != DEFAULT_U_MAX:
            from .errors import ConfigError

            raise ConfigError("--u-max applies to a local run: on a cluster each Ray actor admits its own stream "
                              "with the default bound (0.9)", hint="drop --u-max, or run without --cluster")
        from .cluster import cmd_run_cluster

        return cmd_run_cluster(args)
    if args.cluster_cpus is not None:
        from .errors import ConfigError

        raise ConfigError("--cluster-cpus applies to a run with --cluster", hint="add --cluster ray")
    from .graph import load_streams
    from .session import Session

    pipelines = _select(load_streams(args.file), args.pipeline)  # a chain as a Pipeline, a graph as a Graph
    draws = any(getattr(s, "owns_terminal", False) for p in pipelines  # a live view: no progress line
                for s in p.topology().sinks.values())
    live = _LiveLine(sys.stderr.isatty() and not args.quiet and not draws)
    session = Session(pipelines, backend=args.backend, device=args.device, u_max=args.u_max)
    viewer = None
    if args.view is not None or args.view_token is not None or any(
            s.type == "view" for p in pipelines for s in p.topology().sinks.values()):
        from .view.attach import start_view

        viewer = start_view(args, pipelines, session, _err)  # listening before the first block
    try:
        return _run_session(args, session, live, viewer)
    finally:
        if viewer is not None:  # after the summary: the page keeps the last figures until here
            viewer.stop()


def _run_session(args: argparse.Namespace, session: Any, live: "_LiveLine", viewer: Any) -> int:
    from .errors import GkError

    restore = _stop_on_signals(session, live)
    try:
        summaries = session.run(blocks=args.blocks, duration=args.duration, progress=live)
    except GkError as exc:  # a fault mid-run still writes its summary, the fault in it
        summary = getattr(exc, "summary", None)
        if args.stats_json and summary is not None:
            _write_json(args.stats_json, summary.to_dict())
        raise
    finally:
        restore()
        live.clear()
        if viewer is not None:
            viewer.set_ended()
    for s in summaries:
        print(s.format())
    print(_qos_lines(summaries))
    if args.stats_json:
        data: Any = [s.to_dict() for s in summaries]
        _write_json(args.stats_json, data[0] if len(data) == 1 else data)
    for s in summaries:  # a run ended by a signal exits as the shell expects of one
        for name, code in (("SIGINT", 130), ("SIGTERM", 143)):
            if s.ended_by.startswith(name):
                return code
    return 0


def _stop_on_signals(session: Any, live: _LiveLine) -> Callable[[], None]:
    """SIGINT / SIGTERM: the first stops every stream after its current block (drain, flush,
    finalise: the summary says "ended by SIGINT"); the second aborts without waiting for queued
    output (files are still finalised); the third exits at once (unfinished files keep their
    .partial names). Returns a function that puts the previous handlers back."""
    import signal

    seen: list[str] = []

    def handler(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        seen.append(name)
        live.clear()
        if len(seen) == 1:
            _err(f"{name}: stopping after the current block, draining and finalising (again to abort)")
            session.stop(name)
        elif len(seen) == 2:
            _err(f"{name} again: aborting; files are still finalised")
            session.stop(name, abort=True)
            if session.interruptible:  # a block stuck in a source or a stage: leave it now
                raise KeyboardInterrupt
        else:
            _err(f"{name} a third time: exiting now; unfinished files keep their .partial names")
            os._exit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def _print_soapy(soapy: dict[str, Any]) -> None:
    """gk-stream devices: SoapySDR's devices (source type 'soapy') with their receive ranges."""
    if not soapy["found"]:
        print(f"soapy   unavailable: {soapy['reason']}")
        return
    if not soapy["devices"]:
        print("soapy   SoapySDR finds no device (source type 'soapy'; SoapySDRUtil --find)")
    for d in soapy["devices"]:
        args = ",".join(f"{k}={v}" for k, v in d.items() if isinstance(v, str) and k in ("driver", "serial", "label"))
        if "error" in d:
            print(f"soapy   {args}: cannot be opened: {d['error']}")
            continue
        ranges = []
        for key, scale, unit in (("rates_hz", 1e6, "MS/s"), ("freqs_hz", 1e6, "MHz")):
            spans = d.get(key) or []
            ranges.append(", ".join(f"{a / scale:g}" if a == b else f"{a / scale:g}..{b / scale:g}" for a, b in spans)
                          + f" {unit}")
        gain = d.get("gain_db")
        print(f"soapy   {args}: {d.get('rx_channels', 0)} rx channel(s), rate {ranges[0]}, freq {ranges[1]}"
              + (f", gain {gain[0]:g}..{gain[1]:g} dB" if gain else ""))


def cmd_validate(args: argparse.Namespace) -> int:
    from .cli_validate import validate_file

    return validate_file(args.file, dot=args.dot)


def cmd_stages(args: argparse.Namespace) -> int:
    """The catalog: every stage, source and sink type with each parameter's type, default and meaning
    (nested mappings such as fir's ``design`` list their keys indented below); NAME shows one type
    (a name that is both a source and a sink type, such as ``file``, shows both)."""
    from .io import SINKS, SOURCES
    from .stages import STAGES
    from .stages.base import did_you_mean

    sections = [("stages", "an entry of 'stages:'", "pygpukit_dsp.stages", STAGES),
                ("sources", "'source:'", "pygpukit_dsp.io", SOURCES),
                ("sinks", "'sink:'", "pygpukit_dsp.io", SINKS)]
    if args.name:
        sections = [(title, yaml, module, {args.name: table[args.name]})
                    for title, yaml, module, table in sections if args.name in table]
        if not sections:
            from .errors import ConfigError

            names = sorted({*STAGES, *SOURCES, *SINKS})
            raise ConfigError(f"unknown stage, source or sink type '{args.name}'",
                              hint=did_you_mean(args.name, names) or f"known: {', '.join(names)}")
    first = True
    for title, yaml, module, table in sections:
        if not first:
            print()
        first = False
        print(f"{title} (YAML: the 'type' of {yaml}; Python: {module}.CLASS)")
        for name in sorted(table):
            cls = table[name]
            print(f"\n{name}: {cls.summary} (Python: {module.removeprefix('pygpukit_dsp.')}.{cls.__name__})")
            for line in _param_rows(cls.Params):
                print(line)
    return 0


def _param_rows(model: Any) -> list[str]:
    """One row per parameter: name, type, default ('required' / 'not set' / 'default X'), meaning,
    columns two spaces apart at least; a nested model's keys follow, indented."""
    from .stages.params_doc import field_docs

    rows: list[tuple[str, str, str, str]] = []

    def walk(docs: list, indent: str) -> None:
        for d in docs:
            rows.append((indent + d.name, d.type, d.default, d.description))
            walk(d.fields, indent + "    ")

    walk(field_docs(model), "")
    if not rows:
        return ["    (no parameters)"]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [f"    {n:<{widths[0]}}  {t:<{widths[1]}}  {d:<{widths[2]}}  {desc}".rstrip() for n, t, d, desc in rows]


def cmd_devices(args: argparse.Namespace) -> int:
    from .capabilities import capabilities, gpu_figures, kernel_sources, kernels_text, usable_from, usable_gpus
    from .io.net import net_report
    from .io.portaudio import audio_devices
    from .io.sigmf_io import sigmf_report
    from .io.soapy import soapy_report

    from .admission.calibrate import admission_report

    caps = capabilities()
    sources = kernel_sources(caps)
    audio, audio_reason = audio_devices()
    usable = usable_gpus(caps)
    net, sigmf, soapy = net_report(), sigmf_report(), soapy_report()
    if args.calibrate and not usable:
        from .errors import DeviceError

        raise DeviceError(f"no usable GPU to calibrate admission on: {usable_from(caps)[1]}")
    if args.calibrate and not args.json:
        print(f"calibrating admission on GPU(s) {', '.join(map(str, usable))}: reference streams through each "
              "GPU's dispatcher (a few seconds each)", file=sys.stderr)
    admission = admission_report(usable, remeasure=args.calibrate, caps=caps)
    if args.json:
        ok, why = usable_from(caps)
        print(json.dumps({"capabilities": caps, "kernel_sources": sources,
                          "auto": {"backend": "cuda" if ok else "cpu", "why": why},
                          "device_auto": {"gpus": usable, "why": _device_auto_line(caps, usable)},
                          "admission": admission,
                          "audio": {"devices": audio, "reason": audio_reason},
                          "io": {"zmq": net, "sigmf": sigmf, "soapy": soapy}}, indent=2, default=str))
        return 0
    for lib in ("driver", "nvrtc", "cufft", "cublas"):
        info = caps.get(lib, {})
        if info.get("found"):
            print(f"{lib:<7} found   {info.get('version', '')}  {info.get('path', '')}")
        else:
            print(f"{lib:<7} missing {info.get('reason', '')}")
    gpus = caps.get("gpus", [])
    if not gpus:
        print("gpus    none")
    for g in gpus:
        mem = g.get("memory_bytes", 0) / 2**30
        state = "usable" if g.get("usable") else f"not usable: {g.get('reason', '')}"
        print(f"gpu {g.get('index')}   {g.get('name')}  SM {'.'.join(map(str, g.get('sm', ())))}  {mem:.1f} GiB  "
              f"{g.get('multiprocessors', '?')} SMs{gpu_figures(g).replace(', ', '  ')}  {state}")
    kernels = caps.get("kernels")
    if kernels is not None:
        where = f"  {kernels['dir']}" if kernels.get("found") else ""
        print(f"kernels {kernels_text(kernels)}{where}")
    for index, rows in sources.items():
        # where each built-in kernel's image comes from on this GPU, in a fresh process
        width = max((len(r["kernel"]) for r in rows), default=8)
        for r in rows:
            image = f" {r['image']}" if r["image"] else ""
            note = f" ({r['note']})" if r["note"] else ""
            print(f"kernel  gpu {index}  {r['kernel']:<{width}}  {r['source']}{image}{note}")
    if audio_reason:
        print(f"audio   unavailable: {audio_reason}")
    elif not audio:
        print("audio   no devices (is the audio server running? e.g. 'jackd -d dummy', docs/live-audio.md)")
    else:
        width = max(4, *(len(d["name"]) for d in audio))
        api_width = max(8, *(len(d["host_api"]) for d in audio))
        print(f"audio   {'index':>5}  {'name':<{width}}  {'host API':<{api_width}}  {'in':>3} {'out':>3}  default rate")
        for d in audio:
            marks = [m for m, on in (("default input", d["default_input"]), ("default output", d["default_output"]))
                     if on]
            print(f"audio   {d['index']:>5}  {d['name']:<{width}}  {d['host_api']:<{api_width}}  "
                  f"{d['max_input_channels']:>3} {d['max_output_channels']:>3}  {d['default_samplerate']:g} Hz"
                  + (f"  ({', '.join(marks)})" if marks else ""))
    if net["found"]:
        print(f"zmq     pyzmq {net['pyzmq']}, libzmq {net['libzmq']} (source/sink type 'zmq')")
    else:
        print(f"zmq     unavailable: {net['reason']}")
    if sigmf["found"]:
        print(f"sigmf   sigmf {sigmf['sigmf']}, SigMF {sigmf['specification']} (source/sink type 'sigmf')")
    else:
        print(f"sigmf   unavailable: {sigmf['reason']}")
    _print_soapy(soapy)
    ok, why = usable_from(caps)
    print(f"auto    -> backend={'cuda' if ok else 'cpu'}: {why}")
    print(f"device  auto -> {_device_auto_line(caps, usable)}")
    for line in _admission_lines(admission):
        print(line)
    return 0


def _admission_lines(admission: dict) -> list[str]:
    """``gk-stream devices``' admission lines: the policy's main tunables, each GPU's calibration."""
    p = admission["policy"]
    lines = [f"admission policy: u_max {p['u_max']:g}, dispatcher's lock busy at most {p['dispatcher_busy_cap']:.0%}, "
             f"rehearsed past {p['rehearsal_share']:.0%} of a bound, latency tail over {p['tail_horizon_s']:g} s "
             "(--json lists every tunable)"]
    for gpu, cal in (admission["calibration"] or {}).items():
        if cal is None:
            lines.append(f"admission gpu {gpu}: not calibrated yet (measured on first need, or by "
                         "gk-stream devices --calibrate)")
            continue
        lines.append(f"admission gpu {gpu}: the dispatcher's work {cal['dispatch_ns'] / 1e3:.1f} us per block, its "
                     f"lock held up to {cal['hold_ns'] / 1e3:.0f} us, {cal['overlap']:.2f} blocks on the GPU at once "
                     f"({cal['streams']} reference streams, driver {cal['driver']}, {cal['measured_at']})  {cal['path']}")
    return lines


def _device_auto_line(caps: dict, usable: list[int]) -> str:
    """What ``device: auto`` does on this machine."""
    if not usable:
        return "no usable GPU: cuda streams cannot be placed"
    if len(usable) == 1:
        return f"GPU {usable[0]}, the only usable GPU"
    return (f"each stream of a session on the GPU with the most admission headroom among "
            f"{len(usable)} usable GPUs ({', '.join(map(str, usable))})")


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench
    from .bench.bench_file import load_bench_file
    from .bench.contention import load_contention
    from .errors import ConfigError

    bench_file = load_bench_file(args.file)  # its pipelines, and its 'bench:' mapping if it has one
    loaded = bench_file.pipelines
    if args.soak is not None:
        return _bench_soak(args, loaded)
    if args.interval is not None:
        raise ConfigError("--interval applies to a soak only", hint="add --soak MINUTES")
    from .bench.link import load_link

    link = load_link(bench_file)  # a file with 'bench: {kind: link}': two processes over zmq
    if link is not None:
        return _bench_link(args, link)
    contention = load_contention(bench_file)  # a file with 'bench: {kind: contention}' (W3)
    if contention is not None:
        return _bench_contention(args, contention)
    if args.period_ms is not None:
        raise ConfigError("--period-ms applies to contention bench files only (e.g. benchmarks/w3.yaml)",
                          hint="a latency bench hands each block over as soon as the previous one is done")
    if args.cadence is not None:
        return _bench_cadence(args, loaded)
    paced_only = _first_given(args, PACED_FLAGS[1:])
    if paced_only:
        raise ConfigError(f"{paced_only} applies to a paced bench only", hint="add --cadence realtime")
    if args.schedule and args.mode not in (None, "latency"):
        raise ConfigError(f"--schedule applies to the latency mode, not --mode {args.mode}",
                          hint="throughput modes time each implementation on its own")
    pipeline = _one_pipeline(args, loaded, "bench")
    compare = [c.strip() for c in args.compare.split(",") if c.strip()] if args.compare else []
    report = run_bench(pipeline, backend=args.backend, blocks=args.blocks or BENCH_BLOCKS,
                       warmup=BENCH_WARMUP if args.warmup is None else args.warmup,
                       compare=compare, plot=args.plot, progress=not args.quiet and sys.stderr.isatty(),
                       mode=args.mode or "latency", schedule=args.schedule or "paired")
    _bench_print_report(args, report)
    return 0


PACED_FLAGS = ("--cadence", "--block-size", "--spin-us", "--warm-us", "--no-prewarm", "--settings", "--cpu")


def _first_given(args: argparse.Namespace, flags: tuple[str, ...] | list[str]) -> str | None:
    """The first of ``flags`` set on the command line (a value, or a switch turned on)."""
    for flag in flags:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None and value is not False:
            return flag
    return None


def _refuse(args: argparse.Namespace, flags: tuple[str, ...] | list[str], what: str, hint: str) -> None:
    """A ConfigError naming the first of ``flags`` given, which does not apply to ``what``."""
    from .errors import ConfigError

    flag = _first_given(args, flags)
    if flag is not None:
        raise ConfigError(f"{flag} does not apply to {what}", hint=hint)


def _bench_print_report(args: argparse.Namespace, report: Any) -> None:
    """The report's Markdown on stdout, and to --json / --markdown when given."""
    print(report.markdown())
    if args.json:
        _write_json(args.json, report.to_dict())
    if args.markdown:
        Path(args.markdown).write_text(report.markdown() + "\n")
    if args.html:
        from .bench.html import write_html

        write_html(report, args.html)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _one_pipeline(args: argparse.Namespace, loaded: list, what: str):
    """The one pipeline of FILE (or --pipeline NAME) that ``what`` ('bench', 'a soak') runs."""
    from .errors import ConfigError

    pipelines = _select(loaded, args.pipeline)
    if len(pipelines) != 1:
        raise ConfigError(f"{args.file} holds {len(pipelines)} pipelines; {what} takes one",
                          hint="pick one with --pipeline NAME")
    return pipelines[0]


def _bench_cadence(args: argparse.Namespace, loaded: list) -> int:
    """--cadence realtime: blocks released on a clock at the stream's period (bench/cadence.py)."""
    from .bench.cadence import DEFAULT_SPIN_US, DEFAULT_WARM_US, run_cadence

    _refuse(args, ("--mode", "--schedule", "--plot"), "a paced bench (--cadence)",
            "a paced bench times every implementation at the stream's period, latency from each block's "
            "release; see docs/benchmarks.md, Paced W1")
    pipeline = _one_pipeline(args, loaded, "bench")
    compare = [c.strip() for c in args.compare.split(",") if c.strip()] if args.compare else []
    report = run_cadence(pipeline, backend=args.backend, blocks=args.blocks or BENCH_BLOCKS,
                         warmup=BENCH_WARMUP if args.warmup is None else args.warmup, compare=compare,
                         block_size=args.block_size, spin_us=DEFAULT_SPIN_US if args.spin_us is None else args.spin_us,
                         prewarm=not args.no_prewarm, warm_us=DEFAULT_WARM_US if args.warm_us is None else args.warm_us,
                         settings=args.settings, cpu=args.cpu, progress=None if args.quiet else _say)
    _bench_print_report(args, report)
    return 0


def _bench_soak(args: argparse.Namespace, loaded: list) -> int:
    """--soak: one pipeline at its sample clock for MINUTES, memory sampled (bench/soak.py)."""
    from .bench.soak import format_sample, run_soak

    _refuse(args, ("--compare", "--mode", "--schedule", "--blocks", "--warmup", "--plot", "--period-ms")
            + PACED_FLAGS, "a soak",
            "a soak runs the pipeline alone at its sample clock for --soak MINUTES; see docs/benchmarks.md, Soak")
    pipeline = _one_pipeline(args, loaded, "a soak")
    name = pipeline.name

    def say(sample: Any) -> None:
        print(format_sample(sample, name), file=sys.stderr, flush=True)

    report = run_soak(pipeline, backend=args.backend, minutes=args.soak,
                      interval_s=10.0 if args.interval is None else args.interval,
                      progress=None if args.quiet else say)
    _bench_print_report(args, report)
    return 0


def _bench_link(args: argparse.Namespace, bench: Any) -> int:
    """A stream across two processes over zmq against a bare pyzmq loop (bench/link.py)."""
    from .bench.link import run_link

    _refuse(args, ("--compare", "--mode", "--pipeline", "--plot", "--schedule", "--period-ms", "--backend")
            + PACED_FLAGS, f"a link bench file ({args.file})",
            "it runs its sender and receiver pipelines and a bare pyzmq loop; see docs/scale-out.md, Throughput")
    report = run_link(bench, blocks=args.blocks, warmup=args.warmup, progress=None if args.quiet else _say)
    _bench_print_report(args, report)
    failed = [r.label for r in report.rows if r.status != "ok"]
    if failed:
        _err(f"error: the link bench failed: {'; '.join(failed)}")
        return 1
    return 0


def _bench_contention(args: argparse.Namespace, bench: Any) -> int:
    """W3: the file's realtime pipeline under its throughput pipeline (bench/contention.py)."""
    from .bench.contention import run_w3

    _refuse(args, ("--compare", "--mode", "--pipeline", "--plot", "--schedule") + PACED_FLAGS,
            f"a contention bench file ({args.file})",
            "it runs both of its pipelines and its own PyTorch baseline (the realtime pipeline's qos.cpu "
            "pins its thread); see docs/benchmarks.md, W3")
    report = run_w3(bench, backend=args.backend, blocks=args.blocks, warmup=args.warmup,
                    period_ms=args.period_ms, progress=None if args.quiet else _say)
    _bench_print_report(args, report)
    failed = [c.name for c in report.checks if c.project and not c.ok]
    if failed:
        _err(f"error: output check failed: {'; '.join(failed)}")
        return 1
    return 0


# ----------------------------------------------------------------------------- plumbing


def _select(pipelines: list, name: str | None) -> list:
    if name is None:
        return pipelines
    chosen = [p for p in pipelines if p.name == name]
    if not chosen:
        from .errors import ConfigError
        from .stages.base import did_you_mean

        names = [p.name for p in pipelines]
        raise ConfigError(f"no pipeline named '{name}'",
                          hint=did_you_mean(name, names) or f"pipelines: {', '.join(names)}")
    return chosen


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
        return v
    return parse


_positive_int = _int_at_least(1)
_count = _int_at_least(0)


def _cpu_choice(text: str) -> int | str:
    """An argparse type: a CPU number, 'auto' or 'none' (--cpu)."""
    return text if text in ("auto", "none") else _count(text)


def _positive(what: str):
    """An argparse type: a finite number > 0; ``what`` names it in the error ('a number of seconds').
    inf, nan and 1e400 (which float() reads as inf) are refused: no limit or period is endless."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"expected a finite {what.removeprefix('a ')} > 0, got {text!r}")
        if not v > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
        return v
    return parse


_milliseconds = _positive("a number of milliseconds")
_positive_float = _positive("a number of seconds")
_positive_number = _positive("a number")


def _device_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a GPU index >= 0 or auto, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a GPU index >= 0 or auto, got {text!r}")
    return value


def _u_max_arg(text: str) -> float:
    from .admission import check_u_max

    try:
        return check_u_max(float(text), "expected a bound that")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a bound in (0, 1], got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    from .admission import DEFAULT_U_MAX

    parser = argparse.ArgumentParser(
        prog="gk-stream", description="Real-time DSP streaming pipelines on NVIDIA GPUs (and CPUs).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the pipeline(s) of a YAML file")
    run.add_argument("file")
    run.add_argument("--backend", choices=["auto", "cuda", "cpu"], help="override the YAML's backend")
    run.add_argument("--device", type=_device_arg, metavar="N|auto",
                     help="override every pipeline's GPU: an index (gk-stream devices) or auto (each stream on the "
                          "GPU with the most admission headroom)")
    run.add_argument("--u-max", dest="u_max", type=_u_max_arg, metavar="U", default=DEFAULT_U_MAX,
                     help="admission's utilisation bound on every device (default 0.9): the share of a device "
                          "realtime streams may reserve by their calibrated device time (docs/scheduler.md)")
    limit = run.add_mutually_exclusive_group()
    limit.add_argument("--blocks", type=_positive_int, help="stop after N blocks")
    limit.add_argument("--duration", type=_positive_float, metavar="S", help="stop after S seconds of signal")
    run.add_argument("--pipeline", metavar="NAME", help="run only this pipeline of the file")
    run.add_argument("--stats-json", "--json", dest="stats_json", metavar="PATH",
                     help="write the run summary as JSON (host figures, and the scheduler's under 'scheduler')")
    run.add_argument("--quiet", action="store_true", help="no live progress line")
    run.add_argument("--view", nargs="?", const="127.0.0.1:8750", metavar="[HOST:]PORT",
                     help="serve a live web page while the run lasts (default 127.0.0.1:8750): every 'view' "
                          "sink's spectrum, waterfall, scope and meters, and each stream's health (the 'view' "
                          "extra; docs/view.md)")
    run.add_argument("--view-token", metavar="TOKEN|auto",
                     help="every request to the view needs this token (?token=); auto: a random one, printed "
                          "with the address; required for an address beyond loopback")
    run.add_argument("--cluster", metavar="ray|auto|ray://HOST:PORT",
                     help="run each pipeline as a Ray actor (the 'cluster' extra): 'ray' starts a local Ray "
                          "instance (or joins RAY_ADDRESS / one started with 'ray start'), 'auto' joins the running "
                          "cluster, 'ray://HOST:PORT' connects through Ray Client; pipelines joined by "
                          "cluster://NAME endpoints meet on the actors' node addresses (docs/scale-out.md)")
    run.add_argument("--cluster-cpus", type=_positive_number, metavar="N",
                     help="CPUs each pipeline's actor asks Ray for (default 0.5)")
    run.set_defaults(fn=cmd_run)

    val = sub.add_parser("validate", help="check a YAML file and print each pipeline's specs (a graph: each node, "
                                          "what it reads and gives)")
    val.add_argument("file")
    val.add_argument("--dot", action="store_true",
                     help="print each pipeline as a Graphviz graph instead (dot -Tsvg), its edges labelled with specs")
    val.set_defaults(fn=cmd_validate)

    st = sub.add_parser("stages", help="the catalog: every stage, source and sink type, with each parameter's "
                                       "type, default and meaning")
    st.add_argument("name", nargs="?", help="show one type (a stage, a source or a sink)")
    st.set_defaults(fn=cmd_stages)

    dev = sub.add_parser("devices", help="GPUs, CUDA libraries, audio host APIs, what auto picks, and admission's "
                                         "policy and calibration")
    dev.add_argument("--json", action="store_true")
    dev.add_argument("--calibrate", action="store_true",
                     help="measure admission's figures of each usable GPU again (the dispatcher's work per block, "
                          "its lock's hold, the GPU's overlap) and cache them (docs/scheduler.md, \"The calibration\")")
    dev.set_defaults(fn=cmd_devices)

    b = sub.add_parser("bench", help="benchmark against NumPy/CuPy/PyTorch baselines (latency, throughput; "
                                     "a file with 'bench: {kind: contention}': W3; 'bench: {kind: link}': a "
                                     "stream across two processes over zmq)")
    b.add_argument("file")
    b.add_argument("--backend", choices=["auto", "cuda", "cpu"])
    b.add_argument("--blocks", type=_positive_int,
                   help=f"timed blocks (default {BENCH_BLOCKS}; contention files: their 'blocks')")
    b.add_argument("--warmup", type=_count, help=f"untimed warm-up blocks (default {BENCH_WARMUP}; "
                                                 "contention files: their 'warmup')")
    b.add_argument("--compare", metavar="LIST", help="baselines, e.g. numpy,cupy,torch,torch-graph")
    b.add_argument("--mode", choices=["latency", "resident", "streamed"],
                   help="latency: one block at a time through host memory (default); "
                        "resident: input already on the GPU, transfers excluded; "
                        "streamed: throughput from pinned host memory")
    b.add_argument("--schedule", choices=["paired", "rounds"],
                   help="latency mode: paired (default): the project and one baseline at a time, in "
                        "turns of 10 blocks; rounds: every implementation in rounds of 250 blocks")
    b.add_argument("--period-ms", type=_milliseconds, metavar="MS",
                   help="contention files (W3): the realtime pipeline's arrival period "
                        "(default: the file's period_ms, else its block period)")
    b.add_argument("--cadence", choices=["realtime"],
                   help="realtime: release each block on a clock at the stream's period and time it from its "
                        "release, every implementation paced the same way (and the project back to back)")
    b.add_argument("--block-size", type=_positive_int, metavar="N",
                   help="--cadence: run the pipeline with this block size (e.g. 64: W1 every 1.33 ms)")
    b.add_argument("--spin-us", type=_count, metavar="US",
                   help="--cadence: sleep until this long before each release, then spin (default 200)")
    b.add_argument("--warm-us", type=_count, metavar="US",
                   help="--cadence: come back to Python this long before each release (inside the spin "
                        "window; default 100; 0: one native call)")
    b.add_argument("--no-prewarm", action="store_true",
                   help="--cadence: no prewarm of the project's slot at the start of the spin")
    b.add_argument("--settings", action="store_true",
                   help="--cadence: also compare host settings (sleep, spin windows, prewarm, a pinned core, "
                        "SCHED_FIFO, mlockall, spinning the whole period) on the project alone")
    b.add_argument("--cpu", type=_cpu_choice, metavar="N|auto|none",
                   help="--cadence: pin the thread that drives every implementation to this CPU (default: the "
                        "pipeline's qos.cpu; none: not pinned)")
    b.add_argument("--pipeline", metavar="NAME")
    b.add_argument("--soak", type=float, metavar="MINUTES",
                   help="soak: run the pipeline at its sample clock for MINUTES and sample RSS (and GPU "
                        "memory) to report their growth; excludes --compare, --mode and --schedule")
    b.add_argument("--interval", type=_positive_float, metavar="S",
                   help="soak: seconds between samples (default 10)")
    b.add_argument("--json", metavar="PATH", help="write the report as JSON")
    b.add_argument("--markdown", metavar="PATH", help="write the Markdown table to a file")
    b.add_argument("--html", metavar="PATH", help="write the tables and plots as one self-contained HTML page")
    b.add_argument("--plot", metavar="PNG", help="latency histogram plot (needs matplotlib)")
    b.add_argument("--quiet", action="store_true")
    b.set_defaults(fn=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .errors import GkError

    try:
        return int(args.fn(args) or 0)
    except GkError as exc:
        _err(f"error: {exc}")
        if os.environ.get("GK_DEBUG"):
            traceback.print_exc()
        summary = getattr(exc, "summary", None)
        if summary is not None:
            print(summary.format())
        return exc.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except (OSError, MemoryError) as exc:
        _err(f"error: {exc}")
        if os.environ.get("GK_DEBUG"):
            traceback.print_exc()
        return 1
    except Exception as exc:  # a bug: say so plainly, traceback only on request
        _err(f"internal error: {type(exc).__name__}: {exc} (set GK_DEBUG=1 for a traceback, "
             "and please report it)")
        if os.environ.get("GK_DEBUG"):
            traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
