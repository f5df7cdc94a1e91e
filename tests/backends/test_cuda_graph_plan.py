"""The CUDA lowering of a flowgraph without a GPU: which slice each op reads and writes, the copies
that stack a stage's inputs, each source's and sink's slice of the packed slots, the lanes
(parallel groups), and the refusals before the first block."""

from __future__ import annotations

import pytest

from pygpukit_dsp import Graph, stages
from pygpukit_dsp.backends import cuda_graph_plan
from pygpukit_dsp.backends.cuda_graph_plan import ALIGN, SLOT_INPUT, SLOT_OUTPUT, Slice, lower_graph
from pygpukit_dsp.backends.cuda_lowering import LOWERINGS, _load_families
from pygpukit_dsp.errors import UnsupportedError
from pygpukit_dsp.io import NullSink
from pygpukit_dsp.io.base import StreamFormat

ALL_KINDS = {"select", "combine", "add", "multiply", "gain", "power", "channelizer", "fir", "fft", "ifft", "mix",
             "magnitude", "delay"}


@pytest.fixture(autouse=True)
def every_kind(monkeypatch):
    # the plan is Python: the op kinds a native build registers are not what these tests check
    monkeypatch.setattr(cuda_graph_plan, "native_op_kinds", lambda: set(ALL_KINDS))


def test_sdr_receiver_plan_reads_writes_and_lanes():
    g = Graph.from_yaml("pipelines/sdr_receiver.yaml")
    low = lower_graph(g, g.specs())
    plan = low.plan
    assert [op.kind for op in low.ops] == ["channelizer", "power", "select", "fir"]
    assert [(n.name, n.reads) for n in plan.nodes] == [("ch", ("source",)), ("pw", ("ch",)), ("pick", ("ch",)),
                                                        ("narrow", ("pick",))]
    ch, pw, pick, narrow = plan.nodes
    assert ch.input == Slice(SLOT_INPUT, 0) and pw.input == pick.input == ch.output  # one buffer, two readers
    assert ch.output.buffer >= 0 and pick.output.buffer >= 0 and pick.output != ch.output
    # the packed slots: 1 x 4096 complex64 in; 16 x 256 float32 and 2 x 256 complex64 out
    assert plan.sources == {"source": (0, 4096 * 8)}
    assert plan.outputs == {"power": (0, 16 * 256 * 4, 1), "carriers": (16 * 256 * 4, 2 * 256 * 8, 3)}
    assert pw.output == Slice(SLOT_OUTPUT, 0) and narrow.output == Slice(SLOT_OUTPUT, 16384)
    # the two branches after the channelizer are parallel nodes: two lanes
    assert plan.parallel_groups() == [["ch", "pw"], ["pick", "narrow"]]
    assert (pick.waits, ch.signals, narrow.waits) == ([0], True, [])
    assert [n.valid_from for n in plan.nodes] == [[-1], [0], [0], [2]]
    assert plan.final_copies == [] and all(not n.copies for n in plan.nodes)


def two_sources() -> Graph:
    g = Graph(name="two", sample_rate=1000, channels=3, block_size=50)
    g.source(name="a")
    g.source(name="b")
    g.add(stages.Gain(name="ga", db=1), "a")
    g.add(stages.Add(name="s"), "ga", "b")               # ga is read by s alone: it writes into s's slice
    g.add(stages.Multiply(name="m"), "s", "s")           # one node twice: copies
    g.sink(NullSink(), "m", name="out")
    g.sink(NullSink(), "m", name="again")                # a second sink of one node: a copy of the first
    return g


def test_stacked_inputs_copies_and_packed_slots():
    g = two_sources()
    plan = lower_graph(g, g.specs()).plan
    block = 3 * 50 * 4  # 600 bytes: slices at 256-byte steps
    assert plan.sources == {"a": (0, block), "b": (768, block)} and plan.in_bytes == 1536
    ga, s, m = plan.nodes
    stacked_s = s.input.buffer
    assert ga.output == Slice(stacked_s, 0) and s.input == Slice(stacked_s, 0)  # written in place
    assert s.copies == [(Slice(SLOT_INPUT, 768), Slice(stacked_s, 768), block)]  # the source is copied
    assert m.copies == [(s.output, Slice(m.input.buffer, 0), block), (s.output, Slice(m.input.buffer, 768), block)]
    assert plan.outputs == {"out": (0, block, 2), "again": (768, block, 2)}
    assert m.output == Slice(SLOT_OUTPUT, 0)
    assert plan.final_copies == [(Slice(SLOT_OUTPUT, 0), Slice(SLOT_OUTPUT, 768), block)]
    assert [n.valid_from for n in plan.nodes] == [[-1], [0, -1], [1, 1]]
    # the op's parameters: its inputs' offsets in the stacked buffer, dtypes, channels
    ops = lower_graph(g, g.specs()).ops
    assert ops[1].params["offsets"] == [0, 768] and list(ops[1].params["channels"]) == [3, 3]


def test_native_plan_is_aligned_and_inside_its_buffers():
    for g in (two_sources(), Graph.from_yaml("pipelines/mic_array.yaml")):
        specs = g.specs()
        low = lower_graph(g, specs)
        native = low.plan.native()
        assert set(native) == {"items", "buffers", "lanes", "nodes", "sources", "sinks", "final_copies", "in_bytes",
                               "out_bytes"}
        sizes = {SLOT_INPUT: native["in_bytes"], SLOT_OUTPUT: native["out_bytes"], **dict(enumerate(native["buffers"]))}
        for node, op in zip(native["nodes"], low.ops):
            for (buf, off), nbytes in ((node["in"], op.spec_in.block_nbytes), (node["out"], op.spec_out.block_nbytes)):
                assert off % ALIGN == 0 and off + nbytes <= sizes[buf]
        assert all(off % ALIGN == 0 for off, _ in native["sources"])
        assert all(off % ALIGN == 0 for off, _, _ in native["sinks"])


def test_mic_array_branches_meet_in_combine():
    g = Graph.from_yaml("pipelines/mic_array.yaml")
    plan = lower_graph(g, g.specs()).plan
    names = [n.name for n in plan.nodes]
    compare = plan.nodes[names.index("compare")]
    look, mic0 = plan.nodes[names.index("look")], plan.nodes[names.index("mic0")]
    assert compare.reads == ("mic0", "look") and not compare.copies  # both write into their slices
    assert mic0.output == compare.input and look.output.buffer == compare.input.buffer
    assert mic0.lane != plan.nodes[0].lane  # the raw microphone path runs beside the beamformer
    assert names.index("look") in compare.waits and plan.nodes[names.index("look")].signals


def test_a_stage_without_a_lowering_is_refused_naming_it(monkeypatch):
    _load_families()
    monkeypatch.delitem(LOWERINGS, "select")
    g = Graph.from_yaml("pipelines/sdr_receiver.yaml")
    with pytest.raises(UnsupportedError) as info:
        lower_graph(g, g.specs())
    assert (info.value.stage, info.value.backend) == ("pick", "cuda")


def test_too_many_inputs_and_a_sink_on_a_source_are_refused():
    g = Graph(name="wide", sample_rate=1000, channels=1, block_size=8)
    names = [g.source(name=f"s{i}") for i in range(17)]
    g.add(stages.Add(name="sum"), *names)
    with pytest.raises(UnsupportedError) as info:
        lower_graph(g, g.specs())
    assert info.value.stage == "sum" and "17" in info.value.reason
    g = Graph(name="tap", sample_rate=1000, channels=1, block_size=8)
    g.source(name="x")
    g.add(stages.Gain(name="lo", db=1), "x")
    g.sink(NullSink(), "lo", name="lo")
    g.sink(NullSink(), "x", name="raw")
    with pytest.raises(UnsupportedError) as info:
        lower_graph(g, g.specs())
    assert info.value.stage == "raw"


class HostStandIn:
    """The native engine's slot interface on the host, for the graph engine's packing: each block
    reads every source from its slice of the packed input (as the H2D copies do), runs the graph on
    the cpu backend, and writes each output into its slice of the packed output (as the D2H do)."""

    def __init__(self, device, ops, slots=2, graph=None, **options):
        import numpy as np

        self.plan, self.slots, self.build_timings = graph, slots, []
        self._in = [np.zeros((1, graph["in_bytes"] // 4), np.float32) for _ in range(slots)]
        self._out = [np.zeros((1, graph["out_bytes"] // 4), np.float32) for _ in range(slots)]
        self.nonfinite_flags = np.zeros(slots, np.uint32)
        self.input_layout = (1, graph["in_bytes"] // 4, 0, "float32")
        self.run = None  # set by the test: (slot bytes in, n, final) -> packed outputs written
        self._items = [0] * slots
        self.graph_calls = 0  # process_graph(): a full block's fills, run and outputs in one call

    def input_slot(self, s):
        return self._in[s]

    def fill_bytes(self, s, offset, block):
        flat = self._in[s].reshape(-1).view("uint8")
        flat[offset:offset + block.nbytes] = block.reshape(-1).view("uint8")

    def output_slot(self, s):
        return self._out[s]

    def submit(self, s, n, final=False):
        self._items[s] = self.run(self._in[s].reshape(-1).view("uint8"), self._out[s].reshape(-1).view("uint8"),
                                  n, final)

    def wait(self, s):
        return self._items[s][0]

    def process_filled(self, s, n, final=False):
        self.submit(s, n, final)
        return self.wait(s)

    def process_graph(self, s, ins, outs):
        self.graph_calls += 1
        for (offset, _), block in zip(self.plan["sources"], ins):
            self.fill_bytes(s, offset, block)
        n = self.process_filled(s, self.plan["items"])
        flat = self._out[s].reshape(-1).view("uint8")
        for (offset, size, _), out in zip(self.plan["sinks"], outs):
            out.reshape(-1).view("uint8")[:] = flat[offset:offset + size]
        return n

    def sink_items(self, s):
        return self._items[s]

    def counters(self):
        return {}

    def close(self):
        pass


def test_graph_engine_packs_sources_and_unpacks_sinks_by_the_plan(monkeypatch):
    import numpy as np

    from pygpukit_dsp import _native
    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.backends.cpu import CpuGraphEngine
    from pygpukit_dsp.backends.cuda_graph_engine import CudaGraphEngine

    class Device:
        highest_stream_priority = 0

        def __init__(self, index):
            self.index = index

    monkeypatch.setattr(_native, "Device", Device, raising=False)
    monkeypatch.setattr(_native, "StreamEngine", HostStandIn, raising=False)
    g = Graph(name="pack", sample_rate=1000, channels=2, block_size=24)
    g.source(name="a")
    g.source(name="b")
    g.add(stages.Multiply(name="m"), "a", "b")
    g.add(stages.Select(name="one", channels=[1]), "m")
    g.add(stages.Gain(name="lo", db=-6), "b")
    g.sink(NullSink(), "one", name="one")
    g.sink(NullSink(), "lo", name="lo")
    g.sink(NullSink(), "lo", name="lo2")
    specs = g.specs({"a": StreamFormat(dtype="float32"), "b": StreamFormat(dtype="complex64")})
    eng = CudaGraphEngine(g, specs, BackendChoice("cuda", "test"))
    ref = CpuGraphEngine(g, specs, BackendChoice("cpu", "test"))
    plan = eng.plan

    def run(packed_in, packed_out, n, final):
        blocks = [packed_in[o:o + b].view(specs.nodes[name].np_dtype).reshape(specs.nodes[name].block_shape)[:, :n]
                  for name, (o, b) in plan.sources.items()]
        outs = ref.process(tuple(blocks), final)
        for (name, (o, b, _)), y in zip(plan.outputs.items(), outs):
            spec = specs.output_spec(name)
            packed_out[o:o + b].view(spec.np_dtype).reshape(spec.block_shape)[:, :y.shape[1]] = y
        return [y.shape[1] for y in outs]

    eng._engine.run = run
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 24)).astype(np.float32)
    b = (rng.standard_normal((2, 24)) + 1j).astype(np.complex64)
    want = CpuGraphEngine(g, specs, BackendChoice("cpu", "test")).process((a, b))
    got = eng.process((a, b))
    assert len(got) == 3 and all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(got, want))
    assert eng._engine.graph_calls == 0  # a slot's first block takes the general path (its views made)
    again = CpuGraphEngine(g, specs, BackendChoice("cpu", "test"))
    again.process((a, b))
    for k in range(1, 5):  # full blocks on slots with views: one process_graph() call each
        blocks = (a * k, b * k)
        got, want = eng.process(blocks), again.process(blocks)
        assert all(np.array_equal(x, y) and x.dtype == y.dtype and x.flags.c_contiguous for x, y in zip(got, want))
    assert eng._engine.graph_calls == 3
    short = eng.process((a[:, :7], b[:, :7]), final=True)  # a short final block: the tails zeroed
    assert [x.shape for x in short] == [(1, 7), (2, 7), (2, 7)]
    assert not eng._engine.input_slot(1).reshape(-1).view(np.uint8)[plan.sources["a"][0] + 7 * 4:][:4].any()
    with pytest.raises(ValueError, match="reads 2 sources"):
        eng.process((a,))
    eng.close()
