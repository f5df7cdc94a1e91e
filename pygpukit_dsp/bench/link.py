"""The link bench: a W2-shaped stream across two processes over zmq, against a bare pyzmq loop.

A bench file of this kind (benchmarks/w2_zmq.yaml) holds two pipelines and a ``bench:`` mapping::

    bench:
      kind: link
      sender: w2_send        # its sink is zmq (default: the pipeline whose sink is zmq)
      receiver: w2_recv      # its source is zmq (default: the pipeline whose source is zmq)
      blocks: 20             # timed blocks per round
      warmup: 3              # untimed blocks before them
      rounds: 2              # each implementation this many times, alternating
      transport: tcp         # tcp (127.0.0.1, a free port) | ipc (a socket under /tmp)

:func:`run_link` measures, alternating round by round:

* pygpukit-dsp: the sender pipeline runs in a second process (``python -m pygpukit_dsp.bench.link
  send``: the file's pipeline, its zmq sink's endpoint set to the bench's, run as ``gk-stream run``
  runs it) and the receiver pipeline in this one (its zmq source's endpoint set likewise, its sink
  replaced by one that stamps the time each block arrives and keeps nothing).
* bare pyzmq: a second process sends messages of the same size (one block's bytes) from one filled
  buffer with ``copy=False`` through a PUSH socket with the same high-water mark; this process
  receives them with ``recv(copy=False)`` and ``np.frombuffer``, stamping each.

Both are timed the same way: from the arrival of the last warm-up block to the arrival of the last
block, so process start-up and connection set-up are outside the figure. Throughput is samples
(per channel) per second; the ratio is pygpukit-dsp's over bare pyzmq's, each summed over its rounds.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

import numpy as np
from pydantic import Field

from ..errors import ConfigError, StreamFault
from ..stages.base import StageParams
from .bench_file import BenchFile, load_bench_file, pick_pipeline, validate_bench

if TYPE_CHECKING:
    from ..pipeline import Pipeline
    from ..spec.loader import Marks

RATIO_TARGET = 0.9          # issue: scale-out, item 5
PROCESS_TIMEOUT_S = 600.0   # a round's sender process is killed (by its PID) after this
Progress = Callable[[str], None]


class LinkSettings(StageParams):
    """The ``bench:`` mapping of a link bench file (see the module doc)."""

    kind: Literal["link"] = Field(description="the bench kind: link (a stream across two processes over zmq)")
    sender: str | None = Field(None, description="the sending pipeline (default: the one whose sink is zmq)")
    receiver: str | None = Field(None, description="the receiving pipeline (default: the one whose source is zmq)")
    blocks: int = Field(20, ge=2, le=1_000_000, description="timed blocks per round")
    warmup: int = Field(3, ge=1, le=1_000_000, description="untimed blocks before them")
    rounds: int = Field(2, ge=1, le=100, description="rounds per implementation, alternating")
    transport: Literal["tcp", "ipc"] = Field("tcp", description="tcp (127.0.0.1) | ipc (a socket under /tmp)")


@dataclass
class LinkBench:
    settings: LinkSettings
    sender: "Pipeline"
    receiver: "Pipeline"
    path: str = "<python>"


def load_link(source: str | Path | BenchFile) -> LinkBench | None:
    """The link bench of a bench file (a path, or one :func:`~.bench_file.load_bench_file` loaded);
    None when the file has no ``bench:`` of kind link."""
    bf = source if isinstance(source, BenchFile) else load_bench_file(source)
    if bf.marks is None or bf.kind != "link":
        return None
    return link_from_document(bf.section, bf.marks, bf.pipelines, bf.path)


def link_from_document(section: Any, bm: "Marks", pipelines: list["Pipeline"], path: str = "<string>") -> LinkBench:
    """Validate a ``bench: {kind: link, ...}`` mapping (marks ``bm``) against the file's pipelines."""
    settings = validate_bench(LinkSettings, section, bm)
    assert isinstance(settings, LinkSettings)
    sender = _pick(pipelines, settings.sender, "sender", "sink", bm)
    receiver = _pick(pipelines, settings.receiver, "receiver", "source", bm)
    if sender is receiver:
        raise ConfigError("bench: sender and receiver name the same pipeline", where=bm.where,
                          hint="the link bench needs a pipeline with a zmq sink and another with a zmq source")
    return LinkBench(settings, sender, receiver, path)


def _pick(pipelines: list["Pipeline"], name: str | None, role: str, part: str, bm: "Marks") -> "Pipeline":
    return pick_pipeline(
        pipelines, name, role, bm, fits=lambda p: getattr(getattr(p, part), "type", None) == "zmq",
        count_error=lambda n, names: (f"bench: {n} pipelines have a zmq {part}; the link bench needs one {role}",
                                      f"name it with '{role}: NAME' (pipelines: {', '.join(names)})"),
        misfit=lambda p: (f"bench: the {role} '{p.name}' has no zmq {part}",
                          f"give it '{part}: {{type: zmq, endpoint: ...}}'"))


# ----------------------------------------------------------------------------- report


@dataclass
class LinkRow:
    key: str                       # "project" | "bare"
    label: str
    rounds: list[float] = field(default_factory=list)   # samples/s of each round
    samples: int = 0               # timed samples per channel, all rounds
    seconds: float = 0.0           # timed seconds, all rounds
    status: str = "ok"
    reason: str = ""

    @property
    def samples_per_s(self) -> float | None:
        return self.samples / self.seconds if self.status == "ok" and self.seconds > 0 else None


@dataclass
class LinkReport:
    sender: str
    receiver: str
    spec: str
    message_bytes: int
    samples_per_block: int
    endpoint: str
    settings: dict[str, Any]
    machine: str
    rows: list[LinkRow]
    notes: list[str] = field(default_factory=list)
    # the last pygpukit-dsp round's link figures: receiver_dropped (samples), receiver_dropped_blocks,
    # sender_stalls and sender_stall_ms (waiting at the high-water mark)
    last_round: dict[str, Any] = field(default_factory=dict)

    def row(self, key: str) -> LinkRow | None:
        return next((r for r in self.rows if r.key == key), None)

    @property
    def ratio(self) -> float | None:
        p, b = self.row("project"), self.row("bare")
        if p is None or b is None or p.samples_per_s is None or not b.samples_per_s:
            return None
        return p.samples_per_s / b.samples_per_s

    def markdown(self) -> str:
        s = self.settings
        mib = self.message_bytes / 2**20
        lines = [
            f"### Link: {self.sender} -> {self.receiver} over zmq ({s['transport']}, two processes)",
            "",
            f"{self.spec}; one block = one message of {mib:.1f} MiB; {s['blocks']} timed blocks after "
            f"{s['warmup']} warm-up, {s['rounds']} round(s) each, alternating; {self.endpoint}. {self.machine}",
            "",
            "| implementation | Gsamples/s | GB/s | rounds (Gsamples/s) |",
            "|---|---:|---:|---|",
        ]
        itemsize = self.message_bytes / max(1, self.samples_per_block)  # bytes per sample of all channels
        for r in self.rows:
            if r.samples_per_s is None:
                lines.append(f"| {r.label} | | | {r.status}: {r.reason} |")
                continue
            per = ", ".join(f"{v / 1e9:.3f}" for v in r.rounds)
            lines.append(f"| {r.label} | {r.samples_per_s / 1e9:.3f} | {r.samples_per_s * itemsize / 1e9:.2f} | "
                         f"{per} |")
        ratio = self.ratio
        verdict = "not measured" if ratio is None else (
            f"{ratio:.2f}x, target >= {RATIO_TARGET:g}x: " + ("**met**" if ratio >= RATIO_TARGET else "**not met**"))
        lines += ["", f"pygpukit-dsp / bare pyzmq: {verdict}"]
        if self.notes:
            lines.append("")
            lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        d["ratio_target"] = RATIO_TARGET
        d["ratio_met"] = None if self.ratio is None else self.ratio >= RATIO_TARGET
        for r, row in zip(d["rows"], self.rows):
            r["samples_per_s"] = row.samples_per_s
        return d


# ----------------------------------------------------------------------------- running


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _endpoint(transport: str, folder: Path, k: int) -> str:
    if transport == "ipc":
        return f"ipc://{folder}/link{k}.ipc"
    return f"tcp://127.0.0.1:{_free_port()}"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _with_endpoint(component: Any, endpoint: str) -> Any:
    """A copy of a zmq source or sink talking on ``endpoint`` (binding where the original binds)."""
    params = component.params.model_copy(update={"endpoint": endpoint})
    copy = type(component)(params, base_dir=component.base_dir)
    copy.where = component.where
    return copy


def _stamps(times: list[float], warmup: int, samples: list[int]) -> tuple[int, float]:
    """Samples and seconds from the arrival of block ``warmup - 1`` to the last one."""
    if len(times) <= warmup:
        raise StreamFault(f"only {len(times)} blocks arrived; the bench needs more than the {warmup} warm-up blocks")
    return int(sum(samples[warmup:])), times[-1] - times[warmup - 1]


def _finish(proc: subprocess.Popen, what: str, timeout: float = 120.0) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=30)
        raise StreamFault(f"{what} did not end within {timeout:g} s after the receiver finished; killed") from None
    if proc.returncode != 0:
        raise StreamFault(f"{what} failed (exit {proc.returncode}): {(err or out).strip()[-2000:]}")
    return out


def _project_round(bench: LinkBench, endpoint: str, blocks: int, warmup: int, folder: Path) -> tuple[int, float, dict]:
    from ..io.callback import CallbackSink
    from ..pipeline import Pipeline
    from ..session import Session

    recv = bench.receiver
    times: list[float] = []
    samples: list[int] = []

    def stamp(block: np.ndarray) -> None:
        times.append(time.perf_counter())
        samples.append(int(block.shape[1]))

    pipeline = Pipeline(recv.stages, name=recv.name, sample_rate=recv.sample_rate, channels=recv.channels,
                        block_size=recv.block_size, dtype=recv.dtype, backend=recv.backend, qos=recv.qos,
                        source=_with_endpoint(recv.source, endpoint), sink=CallbackSink(fn=stamp),
                        where=recv.where, path=recv.path)
    stats_path = folder / "sender.json"
    cmd = [sys.executable, "-m", "pygpukit_dsp.bench.link", "send", bench.path, bench.sender.name, endpoint,
           str(warmup + blocks), str(stats_path)]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        summary = Session([pipeline]).run()[0]
        _finish(proc, "the sending process")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    sender = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    n, dt = _stamps(times, warmup, samples)
    return n, dt, {"receiver": summary.source_stats, "sender": sender.get("sink_stats", {})}


_BARE_SENDER = r"""
import sys, time, numpy as np, zmq
ep, nbytes, count, hwm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(2)
buf = rng.integers(0, 256, nbytes, dtype=np.uint8)  # one filled buffer, sent again and again
ctx = zmq.Context.instance()
s = ctx.socket(zmq.PUSH)
s.sndhwm = hwm
mon = s.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
s.bind(ep)
for _ in range(count):
    s.send(buf, copy=False)
s.send(b"")
# as the zmq sink does: stay until the receiver hung up (ZeroMQ drops unread data when the sender leaves)
from zmq.utils.monitor import recv_monitor_message
peers, deadline = 0, time.monotonic() + 120
while time.monotonic() < deadline:
    if mon.poll(100):
        e = recv_monitor_message(mon)["event"]
        peers += 1 if e == zmq.EVENT_ACCEPTED else -1
        if peers <= 0 and e == zmq.EVENT_DISCONNECTED:
            break
s.disable_monitor()
mon.close(linger=0)
s.close(linger=-1)
ctx.term()
"""


def _bare_round(endpoint: str, nbytes: int, samples_per_block: int, blocks: int, warmup: int, hwm_send: int,
                hwm_recv: int, timeout_s: float) -> tuple[int, float, dict]:
    import zmq

    proc = subprocess.Popen([sys.executable, "-c", _BARE_SENDER, endpoint, str(nbytes), str(warmup + blocks),
                             str(hwm_send)], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.rcvhwm = hwm_recv
    sock.linger = 0
    times: list[float] = []
    try:
        sock.connect(endpoint)
        first = True
        while True:
            if not sock.poll(int((60.0 if first else timeout_s) * 1000)):
                raise StreamFault(f"bare pyzmq: no message for {60.0 if first else timeout_s:g} s")
            first = False
            frame = sock.recv(copy=False)
            x = np.frombuffer(frame.buffer, dtype=np.uint8)  # a view, as the zmq source hands its blocks on
            if x.size == 0:
                break
            times.append(time.perf_counter())
        sock.close(linger=0)
        _finish(proc, "the bare pyzmq sender")
    finally:
        sock.close(linger=0)
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    n, dt = _stamps(times, warmup, [samples_per_block] * len(times))
    return n, dt, {}


def run_link(bench: LinkBench, *, blocks: int | None = None, warmup: int | None = None,
             progress: Progress | None = None) -> LinkReport:
    from ..io.base import StreamFormat
    from .inputs import machine_description

    s = bench.settings
    blocks = s.blocks if blocks is None else max(2, blocks)
    warmup = s.warmup if warmup is None else max(1, warmup)
    s = s.model_copy(update={"blocks": blocks, "warmup": warmup})  # what the report says ran
    say = progress or (lambda line: None)
    send, recv = bench.sender, bench.receiver
    fmt = send.source.open(StreamFormat(send.sample_rate, send.channels, send.dtype))
    send.source.close()
    out = send.specs(fmt).output
    nbytes = out.block_nbytes
    samples_per_block = out.block_size
    rows = {"project": LinkRow("project", "pygpukit-dsp: gk-stream pipelines, zmq sink -> zmq source (framed)"),
            "bare": LinkRow("bare", "bare pyzmq: PUSH send(copy=False) -> PULL recv(copy=False)")}
    folder = Path(tempfile.mkdtemp(prefix="gklink", dir="/tmp"))
    extra: dict[str, Any] = {}
    endpoint = ""
    try:
        for r in range(s.rounds):
            for key in ("bare", "project"):
                row = rows[key]
                if row.status != "ok":
                    continue
                endpoint = _endpoint(s.transport, folder, 2 * r + (key == "project"))
                say(f"link bench: round {r + 1}/{s.rounds}, {key}: {warmup} + {blocks} blocks of "
                    f"{nbytes / 2**20:.1f} MiB over {endpoint}")
                try:
                    if key == "bare":
                        n, dt, info = _bare_round(endpoint, nbytes, samples_per_block, blocks, warmup,
                                                  send.sink.params.hwm, recv.source.params.hwm,
                                                  recv.source.params.timeout_s)
                    else:
                        n, dt, info = _project_round(bench, endpoint, blocks, warmup, folder)
                        extra = info
                except (StreamFault, ConfigError, OSError, ImportError) as exc:
                    row.status, row.reason = "failed", str(exc)
                    say(f"link bench: {key} failed: {exc}")
                    continue
                row.rounds.append(n / dt)
                row.samples += n
                row.seconds += dt
                say(f"link bench: {key}: {n / dt / 1e9:.3f} Gsamples/s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    machine = machine_description()
    model = cpu_model()
    if model:
        machine = machine.replace(", ", f" ({model}), ", 1)
    notes = [f"Sender: {send.source.describe()} -> {len(send.stages)} stage(s) on {send.backend} -> zmq sink "
             f"(push, hwm {send.sink.params.hwm}); receiver: zmq source (hwm {recv.source.params.hwm}) -> "
             f"{len(recv.stages)} stage(s) on {recv.backend} -> a timing sink in place of its "
             f"'{getattr(recv.sink, 'type', None)}' sink. The bare loop uses the same high-water marks."]
    last: dict[str, Any] = {}
    if extra:
        r_stats, s_stats = extra.get("receiver", {}), extra.get("sender", {})
        last = {"receiver_dropped": r_stats.get("dropped", 0),
                "receiver_dropped_blocks": r_stats.get("dropped_blocks", 0),
                "sender_stalls": s_stats.get("stalls", 0), "sender_stall_ms": s_stats.get("stall_ms", 0)}
        notes.append(f"Last pygpukit-dsp round: receiver dropped {last['receiver_dropped']} samples "
                     f"({last['receiver_dropped_blocks']} blocks); sender stalls {last['sender_stalls']} "
                     f"({last['sender_stall_ms']} ms waiting at the high-water mark).")
    return LinkReport(sender=send.name, receiver=recv.name, spec=out.describe(), message_bytes=nbytes,
                      samples_per_block=samples_per_block,
                      endpoint=s.transport + (" 127.0.0.1" if s.transport == "tcp" else " under /tmp"),
                      settings=s.model_dump(), machine=machine, rows=[rows["project"], rows["bare"]], notes=notes,
                      last_round=last)


# ----------------------------------------------------------------------------- the sending process


def _send_main(argv: list[str]) -> int:
    """``python -m pygpukit_dsp.bench.link send FILE PIPELINE ENDPOINT BLOCKS STATS_JSON``: run the file's
    sending pipeline with its zmq sink on ENDPOINT for BLOCKS blocks (as gk-stream run does)."""
    path, name, endpoint, blocks, stats = argv[0], argv[1], argv[2], int(argv[3]), argv[4]
    p = next(p for p in load_bench_file(path).pipelines if p.name == name)  # the bench checked the name
    p.sink = _with_endpoint(p.sink, endpoint)
    summary = p.run(blocks=blocks)
    Path(stats).write_text(json.dumps(summary.to_dict(), default=str))
    print(summary.format())
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "send":
        sys.exit(_send_main(sys.argv[2:]))
    print("usage: python -m pygpukit_dsp.bench.link send FILE PIPELINE ENDPOINT BLOCKS STATS_JSON", file=sys.stderr)
    sys.exit(2)
