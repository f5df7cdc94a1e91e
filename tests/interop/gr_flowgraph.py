"""A GNU Radio flowgraph without a GUI, run by the system's python3 (GNU Radio's Python bindings):
it sends a .npy file's samples to gk-stream, or receives gk-stream's samples into a .npy file, over
gr-zeromq's push/pull or pub/sub blocks, with pass_tags on or off and a key (topic) for pub/sub.

    python3 gr_flowgraph.py send --pattern push --address tcp://127.0.0.1:5555 --input x.npy [--tags]
    python3 gr_flowgraph.py recv --pattern pull --address tcp://127.0.0.1:5555 --count N --output y.npy
                                 [--tags] [--key K] [--timeout-s 60]

x.npy holds (channels, n) float32 or complex64 samples; a GNU Radio stream of vector length
channels carries them. send with --tags puts rx_time, rx_freq and rx_rate on sample 0 and another
rx_freq on --retune-at. recv stops after --count samples per channel (GNU Radio's ZMQ sources never
end by themselves) or at --timeout-s, and writes what it got and its tags (OUTPUT.tags.json).
"""

import argparse
import json
import sys
import time

import numpy as np
import pmt
from gnuradio import blocks, gr, zeromq


def tag(offset, key, value):
    t = gr.tag_t()
    t.offset, t.key, t.value, t.srcid = offset, pmt.intern(key), value, pmt.intern("gr_flowgraph")
    return t


def send(a):
    x = np.load(a.input)
    ch, n = x.shape
    cplx = np.iscomplexobj(x)
    tags = []
    if a.tags:
        tags = [tag(0, "rx_time", pmt.make_tuple(pmt.from_uint64(1700000000), pmt.from_double(0.25))),
                tag(0, "rx_freq", pmt.from_double(100e6)), tag(0, "rx_rate", pmt.from_double(a.rate)),
                tag(a.retune_at, "rx_freq", pmt.from_double(101e6))]
    flat = np.ascontiguousarray(x.T).ravel().tolist()  # interleaved sample by sample
    src = (blocks.vector_source_c if cplx else blocks.vector_source_f)(flat, False, ch, tags)
    size = gr.sizeof_gr_complex if cplx else gr.sizeof_float
    if a.pattern == "push":
        sink = zeromq.push_sink(size, ch, a.address, 100, a.tags, -1)
    else:
        sink = zeromq.pub_sink(size, ch, a.address, 100, a.tags, -1, a.key, False)
    tb = gr.top_block()
    tb.connect(src, sink)
    time.sleep(a.delay_s)  # pub/sub: the subscriber joins meanwhile (ZeroMQ's slow joiner)
    tb.run()
    time.sleep(0.5)  # the last messages leave before the socket closes
    print(f"sent {n} samples of {ch} channel(s)", flush=True)


def recv(a):
    size = gr.sizeof_gr_complex if a.dtype == "complex64" else gr.sizeof_float
    if a.pattern == "pull":
        src = zeromq.pull_source(size, a.channels, a.address, 100, a.tags, -1)
    else:
        src = zeromq.sub_source(size, a.channels, a.address, 100, a.tags, -1, a.key)
    sink = (blocks.vector_sink_c if a.dtype == "complex64" else blocks.vector_sink_f)(a.channels)
    tb = gr.top_block()
    tb.connect(src, sink)
    tb.start()
    deadline = time.monotonic() + a.timeout_s
    while len(sink.data()) < a.count * a.channels and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    tb.stop()
    tb.wait()
    y = np.asarray(sink.data(), dtype=np.complex64 if a.dtype == "complex64" else np.float32)
    y = y.reshape(-1, a.channels).T
    np.save(a.output, y)
    tags = [{"offset": t.offset, "key": pmt.symbol_to_string(t.key), "value": repr(pmt.to_python(t.value)),
             "pmt": pmt.serialize_str(t.value).hex()} for t in sink.tags()]
    with open(a.output + ".tags.json", "w") as f:
        json.dump(tags, f)
    print(f"received {y.shape[1]} samples of {a.channels} channel(s), {len(tags)} tags", flush=True)
    return 0 if y.shape[1] >= a.count else 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["send", "recv"])
    ap.add_argument("--pattern", required=True, choices=["push", "pub", "pull", "sub"])
    ap.add_argument("--address", required=True)
    ap.add_argument("--tags", action="store_true")
    ap.add_argument("--key", default="")
    ap.add_argument("--input")
    ap.add_argument("--rate", type=float, default=48000.0)
    ap.add_argument("--retune-at", type=int, default=1000)
    ap.add_argument("--delay-s", type=float, default=0.0)
    ap.add_argument("--output")
    ap.add_argument("--count", type=int)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "complex64"])
    ap.add_argument("--timeout-s", type=float, default=60.0)
    a = ap.parse_args()
    return send(a) if a.role == "send" else recv(a)


if __name__ == "__main__":
    sys.exit(main() or 0)
