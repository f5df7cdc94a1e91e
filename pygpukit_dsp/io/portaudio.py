"""PortAudio through sounddevice, with the per-callback work in C++.

sounddevice (an optional dependency: ``pip install 'pygpukit-dsp[audio]'``) finds the devices
and opens the stream; the stream's callback is the native ``AudioBridge`` callback, handed to
``sounddevice._StreamBase`` as a C function pointer (the hook sounddevice documents for library
authors, as python-rtmixer uses it). So the audio thread never enters Python: it copies between
the device buffers and two lock-free rings, and the pipeline thread reads and writes the rings.

:class:`LiveAudio` is one such stream (input, output or both) and everything counted on it:
PortAudio's overflow/underflow flags, frames lost to a full input ring, silence played from an
empty output ring, blocks late for the device clock, and the ADC-to-DAC latency of every block
of a duplex stream. docs/live-audio.md describes the whole path.
"""

from __future__ import annotations

import atexit
import importlib
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import ConfigError, StreamFault

INSTALL_HINT = "pip install 'pygpukit-dsp[audio]'"
STANDARD_RATES = (8000, 11025, 16000, 22050, 32000, 44100, 48000, 88200, 96000, 176400, 192000)
DEFAULT_PREROLL_BLOCKS = 2   # silence queued before the first block: what the first block may take
DEFAULT_RING_BLOCKS = 16     # blocks each ring holds: how far the pipeline may fall behind
DEFAULT_DEVICE_TIMEOUT_S = 2.0
_WAIT_SLICE_S = 0.05         # a waiting read/write returns to Python this often (stop, stall checks)
CLOSE_TIMEOUT_S = 2.0        # stopping a stream whose device went away can hang in PortAudio
_ABANDONED: list[Any] = []   # such streams, kept (with their bridges) so a late callback finds memory
# What to do instead of a second stream on a device side that is open: the one place this is worded.
ONE_STREAM_PER_DEVICE = ("one stream per device and direction is supported: use one pipeline on the device, "
                         "with a 'duplex' source and sink for its input and output together")


def sounddevice(where: str | None = None) -> ModuleType:
    """The sounddevice module, or a ConfigError saying what to install."""
    try:
        return importlib.import_module("sounddevice")
    except ImportError as exc:
        raise ConfigError(f"audio input/output needs the sounddevice package, which is not installed "
                          f"({exc})", where=where, hint=INSTALL_HINT) from None
    except OSError as exc:  # sounddevice raises OSError when the PortAudio library is missing
        raise ConfigError(f"sounddevice could not load the PortAudio library: {exc}", where=where,
                          hint="install PortAudio (e.g. 'apt install libportaudio2') and "
                               + INSTALL_HINT) from None


def audio_devices() -> tuple[list[dict[str, Any]], str | None]:
    """Every audio device (index, name, host API, channels, default rate), or ``([], reason)``."""
    try:
        sd = importlib.import_module("sounddevice")
    except ImportError:
        return [], f"sounddevice is not installed: {INSTALL_HINT}"
    except OSError as exc:
        return [], f"PortAudio library not found ({exc})"
    try:
        apis = list(sd.query_hostapis())
        devices = list(sd.query_devices())
    except Exception as exc:  # PortAudioError and friends: report, do not crash `gk-stream devices`
        return [], f"querying audio devices failed: {exc}"
    defaults = {(api.get("default_input_device", -1), "in") for api in apis} | \
        {(api.get("default_output_device", -1), "out") for api in apis}
    out = []
    for index, d in enumerate(devices):
        api = apis[d["hostapi"]]["name"] if 0 <= d.get("hostapi", -1) < len(apis) else "?"
        out.append({
            "index": index, "name": d.get("name", ""), "host_api": api,
            "max_input_channels": int(d.get("max_input_channels", 0)),
            "max_output_channels": int(d.get("max_output_channels", 0)),
            "default_samplerate": float(d.get("default_samplerate", 0.0)),
            "default_input": (index, "in") in defaults, "default_output": (index, "out") in defaults,
        })
    return out, None


def _describe(d: dict[str, Any]) -> str:
    return (f"{d['index']} '{d['name']}' ({d['host_api']}, {d['max_input_channels']} in, "
            f"{d['max_output_channels']} out, {d['default_samplerate']:g} Hz)")


@dataclass
class DeviceSide:
    """One direction of a stream: the device, the channels opened on it and the pipeline's map."""

    kind: str                 # "input" | "output"
    index: int
    name: str
    host_api: str
    max_channels: int
    default_rate: float
    map: list[int] = field(default_factory=list)  # pipeline channel c <-> device channel map[c]

    @property
    def open_channels(self) -> int:
        return max(self.map) + 1

    def describe(self) -> str:
        return f"'{self.name}' ({self.host_api})"


def resolve_device(sd: ModuleType, device: int | str | None, kind: str, *, where: str | None,
                   key: str = "device") -> DeviceSide:
    """A device by index, by (part of) its name, or the host's default, as a ConfigError if none fits."""
    cap = f"max_{kind}_channels"
    devices, _ = audio_devices()
    usable = [d for d in devices if d[cap] > 0]
    listing = "; ".join(_describe(d) for d in usable) or "none"
    try:
        info = dict(sd.query_devices(device, kind))
    except Exception as exc:
        what = "no default audio" if device is None else f"audio {kind} device {device!r}"
        raise ConfigError(f"{what} {kind} device: {exc}" if device is None else f"{what}: {exc}",
                          where=where, path=(key,),
                          hint=f"devices with {kind}s: {listing} ('gk-stream devices' lists them)") from None
    if int(info.get(cap, 0)) < 1:
        raise ConfigError(f"audio device {info.get('name')!r} has no {kind} channels", where=where, path=(key,),
                          hint=f"devices with {kind}s: {listing}")
    apis = sd.query_hostapis()
    api = apis[info["hostapi"]]["name"] if 0 <= info.get("hostapi", -1) < len(apis) else "?"
    return DeviceSide(kind=kind, index=int(info.get("index", -1)), name=str(info.get("name", "")), host_api=api,
                      max_channels=int(info.get(cap, 0)), default_rate=float(info.get("default_samplerate", 0.0)))


def channel_map(side: DeviceSide, channels: int | list[int] | None, wanted: int | None, *,
                where: str | None, key: str) -> list[int]:
    """The device channels a stream side uses: a map, a count (the first N), or ``wanted`` / 2."""
    if isinstance(channels, list):
        if not channels:
            raise ConfigError(f"'{key}' is empty", where=where, path=(key,), hint="e.g. [0, 1]")
        bad = [c for c in channels if not 0 <= c < side.max_channels]
        if bad:
            raise ConfigError(f"{side.kind} channel {bad[0]} does not exist on {side.describe()}, which has "
                              f"{side.max_channels} {side.kind} channels (0-{side.max_channels - 1})",
                              where=where, path=(key,))
        if len(set(channels)) != len(channels):
            raise ConfigError(f"'{key}' names a device channel twice: {channels}", where=where, path=(key,))
        if wanted is not None and wanted != len(channels):
            raise ConfigError(f"'{key}' maps {len(channels)} channels but the pipeline has {wanted}",
                              where=where, path=(key,), hint="make them agree or remove one of them")
        return list(channels)
    if channels is not None and wanted is not None and channels != wanted:
        raise ConfigError(f"'{key}: {channels}' but the pipeline has {wanted} channels", where=where, path=(key,),
                          hint="make them agree or remove one of them")
    n = channels or wanted or min(2, side.max_channels)
    if n > side.max_channels:
        raise ConfigError(f"{side.describe()} has {side.max_channels} {side.kind} channels but {n} are needed",
                          where=where, path=(key,),
                          hint="lower 'channels', map some with a list, add a 'mix' stage, or pick another device")
    return list(range(n))


def check_rate(sd: ModuleType, side: DeviceSide, rate: float, *, where: str | None) -> None:
    """A ConfigError naming the device and the rates it takes when it cannot run at ``rate``."""
    check = sd.check_input_settings if side.kind == "input" else sd.check_output_settings
    try:
        check(device=side.index, channels=side.open_channels, dtype="float32", samplerate=rate)
        return
    except Exception as exc:
        reason = str(exc)
    supported = []
    for r in STANDARD_RATES:
        try:
            check(device=side.index, channels=side.open_channels, dtype="float32", samplerate=r)
            supported.append(r)
        except Exception:
            pass
    takes = ", ".join(f"{r} Hz" for r in supported) or "none of the standard rates"
    raise ConfigError(f"audio {side.kind} {side.describe()} cannot run {side.open_channels} channels at "
                      f"{rate:g} Hz ({reason}); it supports: {takes}", where=where, path=("device",),
                      hint="set the pipeline's sample_rate to one of those, or add a 'resample' stage")


def latency_histogram():
    from pygpukit_dsp_core import LatencyHistogram

    return LatencyHistogram()


# The device sides (host API, device index, "input" | "output") held by this process's streams, from
# the source or sink's open until its close. PortAudio cannot open a second stream on a side that is
# in use: JACK fails to register the ports (or aborts the process), ALSA reports the device busy.
_CLAIMS: "weakref.WeakValueDictionary[tuple[str, int, str], LiveAudio]" = weakref.WeakValueDictionary()
_CLAIMS_LOCK = threading.Lock()


def _side_key(side: DeviceSide) -> tuple[str, int, str]:
    return (side.host_api, side.index, side.kind)


class LiveAudio:
    """One PortAudio stream (input, output or duplex) whose callback is a native AudioBridge.

    The stream opens and starts at the first :meth:`read` (input and duplex) or :meth:`write`
    (output only), so a slow pipeline start (CUDA compiles) does not count as xruns. The output
    ring is primed with ``preroll_blocks`` of silence first.
    """

    def __init__(self, *, what: str, sample_rate: float, latency: float | str,
                 input: DeviceSide | None = None, output: DeviceSide | None = None,
                 preroll_blocks: int = DEFAULT_PREROLL_BLOCKS, ring_blocks: int = DEFAULT_RING_BLOCKS,
                 device_timeout_s: float = DEFAULT_DEVICE_TIMEOUT_S, where: str | None = None):
        self.what, self.where = what, where
        self.sample_rate = float(sample_rate)
        self.latency = latency
        self.input: DeviceSide | None = None
        self.output: DeviceSide | None = None
        self._claim([s for s in (input, output) if s is not None])
        self.input, self.output = input, output
        self.preroll_blocks, self.ring_blocks = int(preroll_blocks), int(ring_blocks)
        self.device_timeout_s = float(device_timeout_s)
        self.block_size: int | None = None
        self.bridge = None
        self._stream = None
        self._finished = threading.Event()
        self._stop = threading.Event()   # the run is stopping: waiting reads/writes return
        self._abort = threading.Event()  # ... and does not wait for queued output either
        self._hist = None
        self._lock = threading.Lock()     # open/close against a stats() reader
        self.late_in = self.late_out = 0  # blocks late for the device clock
        self.discarded_at_stop = 0         # captured frames after the last block, not processed
        self.primed_frames = 0
        self.device_gone: str | None = None  # why the device stopped, once the watchdog saw it
        self.left_open = False               # the stream could not be stopped (its device is gone)
        self.started_at: float | None = None

    # ---------------------------------------------------------------- device sides
    def _claim(self, sides: list[DeviceSide]) -> None:
        """Hold ``sides`` for this stream, or a ConfigError at this stream's ``where`` naming the
        stream that holds one already (before any stream opens: the second open would fail)."""
        with _CLAIMS_LOCK:
            for side in sides:
                holder = _CLAIMS.get(_side_key(side))
                if holder is not None and holder is not self:
                    at = f" at {holder.where}" if holder.where else ""
                    raise ConfigError(f"audio {side.kind} {side.describe()} is already open in this process, "
                                      f"by the {holder.what}{at}", where=self.where, hint=ONE_STREAM_PER_DEVICE)
            for side in sides:
                _CLAIMS[_side_key(side)] = self

    def attach_output(self, side: DeviceSide) -> None:
        """The output half of a duplex stream (its sink), before the stream starts."""
        self._claim([side])
        self.output = side

    def _release(self) -> None:
        with _CLAIMS_LOCK:
            for side in (self.input, self.output):
                if side is not None and _CLAIMS.get(_side_key(side)) is self:
                    del _CLAIMS[_side_key(side)]

    # ---------------------------------------------------------------- life cycle
    @property
    def started(self) -> bool:
        return self._stream is not None

    def start(self, block_size: int) -> None:
        """Open and start the stream for blocks of ``block_size`` frames (once)."""
        if self._stream is not None:
            return
        from .. import _native

        sd = sounddevice(self.where)
        self.block_size = bs = int(block_size)
        cap = max(self.ring_blocks, self.preroll_blocks + 2) * bs
        bridge = _native.AudioBridge(
            self.sample_rate,
            self.input.open_channels if self.input else 0, self.input.map if self.input else [],
            self.output.open_channels if self.output else 0, self.output.map if self.output else [],
            cap if self.input else 0, cap if self.output else 0)
        if self.output is not None:
            self.primed_frames = bridge.prime(self.preroll_blocks * bs)
        kind = "duplex" if self.input and self.output else ("input" if self.input else "output")

        def pair(i: Any, o: Any) -> Any:
            return (i, o) if kind == "duplex" else (i if kind == "input" else o)

        try:
            stream = sd._StreamBase(
                kind, samplerate=self.sample_rate, blocksize=0,  # the host's own period: no re-buffering
                device=pair(self.input and self.input.index, self.output and self.output.index),
                channels=pair(self.input and self.input.open_channels, self.output and self.output.open_channels),
                dtype=pair("float32", "float32"), latency=self.latency,
                callback=sd._ffi.cast("PaStreamCallback *", _native.AudioBridge.callback_address),
                userdata=sd._ffi.cast("void *", bridge.address), wrap_callback=None,
                finished_callback=self._finished.set)
        except Exception as exc:
            raise StreamFault(f"{self.what}: cannot open the {kind} stream on {self._devices()} at "
                              f"{self.sample_rate:g} Hz: {exc}") from exc
        with self._lock:
            self.bridge, self._stream = bridge, stream  # the bridge outlives the stream (close order)
            self._hist = latency_histogram()
        try:
            stream.start()
        except Exception as exc:
            raise StreamFault(f"{self.what}: cannot start the {kind} stream on {self._devices()}: {exc}") from exc
        self.started_at = time.monotonic()

    def interrupt(self, *, abort: bool = False) -> None:
        """A waiting read()/write() returns at once (the run is stopping); ``abort``: a drain too."""
        self._stop.set()
        if abort:
            self._abort.set()

    def drain(self) -> None:
        """Wait until the queued output has played (the end of the stream is no underrun)."""
        bridge = self.bridge
        if bridge is None or self.output is None:
            return
        bridge.set_output_ending(True)
        if self._finished.is_set() or self.device_gone is not None:
            return
        deadline = time.monotonic() + bridge.out_queued / self.sample_rate + max(0.5, self.device_timeout_s)
        while not bridge.wait_drained(_WAIT_SLICE_S):
            if self._abort.is_set() or time.monotonic() > deadline:
                return

    def close(self, *, drain: bool = True) -> None:
        """Play out what is queued (``drain``), then stop and close the stream."""
        self._release()
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is None:
            return
        bridge = self.bridge
        try:
            if drain:
                self.drain()
            if self.output is not None:
                bridge.set_output_ending(True)
            if self.input is not None:
                self.discarded_at_stop += int(bridge.in_available)
            self._collect_latencies()
        finally:
            self._stop_stream(stream, abort=not drain or self._abort.is_set() or self._finished.is_set()
                              or self.device_gone is not None)

    def _stop_stream(self, stream: Any, *, abort: bool) -> None:
        """Stop and close ``stream``; after CLOSE_TIMEOUT_S give up on it (PortAudio can wait for a
        server that is gone for minutes) and keep it, with its bridge, alive until the process ends."""
        done = threading.Event()

        def stop() -> None:
            try:
                (stream.abort if abort else stream.stop)(ignore_errors=True)
                stream.close(ignore_errors=True)
            finally:
                done.set()

        threading.Thread(target=stop, daemon=True, name="gk-audio-close").start()
        if done.wait(CLOSE_TIMEOUT_S):
            return
        _ABANDONED.append((stream, self.bridge))
        self.left_open = True
        # sounddevice terminates PortAudio at exit, which closes this stream and would wait on the
        # dead server again: the process leaves PortAudio as it is instead.
        sd = sys.modules.get("sounddevice")
        if sd is not None and hasattr(sd, "_exit_handler"):
            atexit.unregister(sd._exit_handler)

    # ---------------------------------------------------------------- blocks
    def read(self, out: np.ndarray) -> int:
        """Fill ``out`` (channels, n) with the next n captured frames; 0 when the run stops."""
        n = out.shape[1]
        if self._stream is None:
            self.start(n)
        bridge = self.bridge
        # late: this block was complete a whole device period (or block, the longer) ago; a device
        # whose callbacks bring several blocks at once leaves that many waiting on time
        if bridge.in_available >= n + max(n, self._device_period()):
            self.late_in += 1
        while True:
            got = bridge.read(out, _WAIT_SLICE_S)
            if got:
                self._collect_latencies()
                return got
            if self._stop.is_set():
                return 0
            self._check_alive("input")

    def _device_period(self) -> int:
        """Frames per device callback (0 until a callback came): the host's own period."""
        if not getattr(self, "_period", 0):
            st = self.bridge.stats()
            self._period = int(st["device_frames"] // st["callbacks"]) if st["callbacks"] else 0
        return self._period

    def write(self, block: np.ndarray) -> None:
        """Queue ``block`` (channels, n) for the device, waiting for room (the device clock paces)."""
        if self._stream is None:
            self.start(self.block_size or block.shape[1])
        bridge = self.bridge
        underruns = bridge.stats()["out_underrun_events"]
        if underruns > getattr(self, "_underruns_seen", 0):  # the device ran dry before this block
            self.late_out += 1
        self._underruns_seen = underruns
        while not bridge.write(block, _WAIT_SLICE_S):
            if self._stop.is_set():
                raise StreamFault(f"{self.what}: stopped while a block waited for room in the output ring")
            self._check_alive("output")

    def _check_alive(self, side: str) -> None:
        """StreamFault when the device stopped calling back (unplugged, server gone)."""
        st = self.bridge.stats()
        last = st["last_callback_ns"] / 1e9 if st["last_callback_ns"] else (self.started_at or time.monotonic())
        silent = time.monotonic() - last
        if self._finished.is_set() or silent > self.device_timeout_s:
            why = "the stream finished (the device or its server went away)" if self._finished.is_set() \
                else f"no callback for {silent:.1f} s"
            self.device_gone = why
            raise StreamFault(f"{self.what}: {side} device {self._devices()} stopped delivering: {why}")

    def _collect_latencies(self) -> None:
        if self.bridge is None or self._hist is None or not (self.input and self.output):
            return
        for v in self.bridge.take_latencies():
            if v > 0:
                self._hist.record(int(v * 1e9))

    def _devices(self) -> str:
        sides = [s.describe() for s in (self.input, self.output) if s is not None]
        return sides[0] if len(sides) == 1 or sides[0] == sides[-1] else " -> ".join(sides)

    # ---------------------------------------------------------------- figures
    def report(self) -> dict[str, Any]:
        """Everything counted on this stream, for the run summary and --stats-json."""
        st = self.bridge.stats() if self.bridge is not None else {}
        bs = self.block_size or 0
        out: dict[str, Any] = {
            "kind": "duplex" if self.input and self.output else ("input" if self.input else "output"),
            "device": self._devices(), "sample_rate": self.sample_rate, "block_size": bs,
            "input_channels": list(self.input.map) if self.input else None,
            "output_channels": list(self.output.map) if self.output else None,
            "callbacks": st.get("callbacks", 0),
            "input_overflows": st.get("input_overflow", 0),
            "output_underflows": st.get("output_underflow", 0),
            "ring_overrun_frames": st.get("in_overrun_frames", 0),
            "ring_overruns": st.get("in_overrun_events", 0),
            "ring_underrun_frames": st.get("out_underrun_frames", 0),
            "ring_underruns": st.get("out_underrun_events", 0),
            "late_blocks": self.late_in + self.late_out,
            "discarded_at_stop": self.discarded_at_stop,
            "device_gone": self.device_gone,
            "left_open": self.left_open,
        }
        if self.output is not None:
            out["preroll_blocks"] = self.preroll_blocks
            out["preroll_frames"] = self.primed_frames
            out["preroll_ms"] = self.primed_frames / self.sample_rate * 1e3
        if self.input and self.output:
            self._collect_latencies()
            s = self._hist.summary() if self._hist is not None else {"count": 0}
            out["adc_to_dac_ms"] = ({k: s[k] / 1e6 for k in ("min", "p50", "p99", "max")} | {"count": s["count"]}
                                    if s["count"] else None)
            out["adc_to_dac_unmeasured"] = None if s["count"] else self._why_unmeasured(st)
            out["latency_lost"] = st.get("latency_lost", 0)
        return out

    def _why_unmeasured(self, st: dict[str, Any]) -> str:
        """Why a duplex stream has no ADC-to-DAC figure: only a stream that played blocks can say
        that its host API gave no stream times."""
        if self.started_at is None:
            return "the stream never started"
        if st.get("out_frames", 0) <= self.primed_frames:
            return "no block reached the output"
        return "the host API gives no stream times"

    @staticmethod
    def format_report(r: dict[str, Any]) -> str:
        parts = [f"audio {r['kind']} {r['device']} {r['sample_rate']:g} Hz"]
        if "preroll_blocks" in r:
            parts.append(f"pre-roll {r['preroll_blocks']} blocks ({r['preroll_frames']} frames, "
                         f"{r['preroll_ms']:.1f} ms)")
        lat = r.get("adc_to_dac_ms")
        if "adc_to_dac_ms" in r:
            parts.append(f"ADC-to-DAC p50 {lat['p50']:.2f} ms p99 {lat['p99']:.2f} ms ({lat['count']} blocks)"
                         if lat else f"ADC-to-DAC not measured ({r.get('adc_to_dac_unmeasured') or 'no figures'})")
        parts.append(f"xruns: input overflows {r['input_overflows']}, output underflows {r['output_underflows']}")
        parts.append(f"ring overruns {r['ring_overruns']} ({r['ring_overrun_frames']} frames), underruns "
                     f"{r['ring_underruns']} ({r['ring_underrun_frames']} frames); late blocks {r['late_blocks']}")
        if r.get("discarded_at_stop"):
            parts.append(f"{r['discarded_at_stop']} frames captured after the last block, not processed")
        return "; ".join(parts)

