// StreamEngine: a flowgraph's ops (docs/cuda.md, "The engine's DAG"). The Python lowering gives
// a GraphPlan: which buffer slice each op reads and writes, the device copies that stack an op's
// several inputs, each source's slice of the packed input and each sink's of the packed output,
// and a lane per op. Captured into the slot's graph, ops on different lanes are queued on their
// own capture streams, forked from and joined back into the compute stream with events: the
// branches become parallel nodes of the one graph. Eager passes (final blocks, use_graph=false,
// warm-up) and chunks queue every op on the compute stream in the plan's (topological) order.
#include "stream_engine.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "gk/device.h"
#include "gk/loader.h"
#include "gk/memory.h"
#include "engine_parts.h"

namespace gk {

namespace {
constexpr uint64_t kSliceAlign = 256;  // every op's slice: the kernels' vector loads stay aligned
}  // namespace

void StreamEngine::check_plan() {
    const GraphPlan& p = plan_;
    auto bad = [](const std::string& what) { throw std::invalid_argument("graph plan: " + what); };
    if (p.nodes.size() != specs_.size())
        bad(std::to_string(p.nodes.size()) + " nodes for " + std::to_string(specs_.size()) + " ops");
    if (p.items < 1) bad("the sources' block items must be >= 1");
    if (p.sources.empty() || p.sinks.empty()) bad("a graph needs a source and a sink");
    if (p.lanes < 1 || p.lanes > 16) bad("lanes must be 1..16");
    if (p.in_bytes == 0 || p.out_bytes == 0 || p.in_bytes % 4 || p.out_bytes % 4)
        bad("the packed input and output must be whole float32 words");
    auto size_of = [&](int buffer) -> uint64_t {
        if (buffer == kSlotInput) return p.in_bytes;
        if (buffer == kSlotOutput) return p.out_bytes;
        if (buffer < 0 || static_cast<size_t>(buffer) >= p.buffers.size())
            bad("no buffer " + std::to_string(buffer));
        return p.buffers[static_cast<size_t>(buffer)];
    };
    auto inside = [&](const BufferRef& r, uint64_t bytes, const std::string& what, bool aligned) {
        if (r.offset + bytes > size_of(r.buffer)) bad(what + " runs past its buffer");
        if (aligned && r.offset % kSliceAlign) bad(what + " is not 256-byte aligned");
    };
    for (size_t i = 0; i < p.nodes.size(); ++i) {
        const GraphNode& n = p.nodes[i];
        const std::string op = "op " + std::to_string(i) + " ('" + specs_[i].name + "')";
        inside(n.in, specs_[i].in.nbytes(), op + "'s input", true);
        inside(n.out, specs_[i].out.nbytes(), op + "'s output", true);
        if (n.out.buffer == kSlotInput) bad(op + " writes the slot's input");
        for (int v : n.valid_from)
            if (v < -1 || v >= static_cast<int>(i)) bad(op + " reads the items of no earlier op");
        if (n.lane < 0 || n.lane >= p.lanes) bad(op + " has no lane " + std::to_string(n.lane));
        for (int w : n.waits)
            if (w < 0 || w >= static_cast<int>(i) || !p.nodes[static_cast<size_t>(w)].signals)
                bad(op + " waits for op " + std::to_string(w) + ", which is not an earlier signalling op");
        for (const DeviceCopy& c : n.copies) {
            inside(c.src, c.bytes, op + "'s input copy (source)", false);
            inside(c.dst, c.bytes, op + "'s input copy (destination)", false);
        }
    }
    for (const DeviceCopy& c : p.final_copies) {
        inside(c.src, c.bytes, "a sink's copy (source)", false);
        inside(c.dst, c.bytes, "a sink's copy (destination)", false);
        if (c.dst.buffer != kSlotOutput) bad("a sink's copy writes outside the output");
    }
    for (const Transfer& t : p.sources)
        if (t.offset + t.bytes > p.in_bytes || t.bytes == 0) bad("a source's slice runs past the input");
    for (const Transfer& t : p.sinks)
        if (t.offset + t.bytes > p.out_bytes || t.bytes == 0 || t.op < 0 ||
            t.op >= static_cast<int>(specs_.size()))
            bad("a sink's slice runs past the output, or names no op");
    packed_in_ = TensorDesc{1, static_cast<int64_t>(p.in_bytes / 4), 0, DType::F32};
    packed_out_ = TensorDesc{1, static_cast<int64_t>(p.out_bytes / 4), 0, DType::F32};
}

void StreamEngine::build_graph_resources() {
    const DriverApi& api = driver();
    for (uint64_t b : plan_.buffers) {
        plan_buffers_.push_back(std::make_unique<DeviceBuffer>(device_, static_cast<size_t>(std::max<uint64_t>(b, 4))));
        plan_buffers_.back()->memset(0, plan_buffers_.back()->nbytes(), 0, compute_);
    }
    lanes_.assign(1, compute_);
    if (!options_.use_graph) return;  // the lanes are capture streams only
    for (int l = 1; l < plan_.lanes; ++l) {
        CUstream s = nullptr;
        cu_check(api.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, options_.priority),
                 "cuStreamCreateWithPriority", "creating a capture stream of the graph's branches");
        lanes_.push_back(s);
    }
    op_events_.assign(plan_.nodes.size(), nullptr);
    for (size_t i = 0; i < plan_.nodes.size(); ++i)
        if (plan_.nodes[i].signals)
            cu_check(api.cuEventCreate(&op_events_[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                     "creating the graph's branch events");
    lane_events_.assign(static_cast<size_t>(plan_.lanes), nullptr);
    for (CUevent& e : lane_events_)
        cu_check(api.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                 "creating the graph's fork and join events");
}

void StreamEngine::destroy_graph_resources(const DriverApi& api) noexcept {
    for (CUevent& e : op_events_)
        if (e) api.cuEventDestroy(e);
    for (CUevent& e : lane_events_)
        if (e) api.cuEventDestroy(e);
    op_events_.clear();
    lane_events_.clear();
    for (size_t l = 1; l < lanes_.size(); ++l)
        if (lanes_[l]) api.cuStreamDestroy(lanes_[l]);
    lanes_.clear();
}

CUdeviceptr StreamEngine::plan_ptr(const BufferRef& ref, int slot) const {
    const Slot& s = *slots_[static_cast<size_t>(slot)];
    CUdeviceptr base = 0;
    if (ref.buffer == kSlotInput)
        base = s.d_in->ptr();
    else if (ref.buffer == kSlotOutput)
        base = s.d_out->ptr();
    else
        base = plan_buffers_[static_cast<size_t>(ref.buffer)]->ptr();
    return base + static_cast<CUdeviceptr>(ref.offset);
}

void StreamEngine::enqueue_copy(const DeviceCopy& c, int slot, CUstream stream) {
    cu_check(driver().cuMemcpyDtoDAsync(plan_ptr(c.dst, slot), plan_ptr(c.src, slot), static_cast<size_t>(c.bytes),
                                        stream),
             "cuMemcpyDtoDAsync_v2", "stacking the inputs of a stage that reads several");
}

void StreamEngine::queue_graph_op(size_t i, int slot, CUstream stream, int64_t items, bool final) {
    const OpSpec& spec = specs_[i];
    const GraphNode& node = plan_.nodes[i];
    for (const DeviceCopy& c : node.copies) enqueue_copy(c, slot, stream);
    try {
        ops_[i]->enqueue(stream, plan_ptr(node.in, slot), plan_ptr(node.out, slot), items, final);
    } catch (const DeviceError& e) {
        throw DeviceError(std::string(e.what()) + " [stage '" + spec.name + "' (" + spec.kind + ")]", e.call(),
                          e.code(), e.code_name());
    } catch (const CompileError&) {
        throw;
    } catch (const UnsupportedError&) {
        throw;
    } catch (const std::exception& e) {
        throw DeviceError("stage '" + spec.name + "' (" + spec.kind + ") failed to queue its work: " + e.what());
    }
}

int64_t StreamEngine::enqueue_graph_ops(int slot, int64_t n, bool final, bool capture, bool downloads) {
    const DriverApi& api = driver();
    const size_t N = ops_.size();
    std::vector<int64_t> valid(N, 0);
    const bool lanes = capture && lanes_.size() > 1;
    const char* what = "ordering the graph's branches";
    if (lanes) {
        // fork: every lane starts after what the compute stream holds (the upload)
        cu_check(api.cuEventRecord(lane_events_[0], compute_), "cuEventRecord", what);
        for (size_t l = 1; l < lanes_.size(); ++l)
            cu_check(api.cuStreamWaitEvent(lanes_[l], lane_events_[0], 0), "cuStreamWaitEvent", what);
    }
    for (size_t i = 0; i < N; ++i) {
        const OpSpec& spec = specs_[i];
        const GraphNode& node = plan_.nodes[i];
        // a stage that reads several takes what every input holds: the least (as the cpu backend)
        int64_t items = node.valid_from.empty() ? n : spec.in.items;
        for (int v : node.valid_from) items = std::min(items, v < 0 ? n : valid[static_cast<size_t>(v)]);
        CUstream stream = compute_;
        if (lanes) {
            stream = lanes_[static_cast<size_t>(node.lane)];
            for (int w : node.waits)
                cu_check(api.cuStreamWaitEvent(stream, op_events_[static_cast<size_t>(w)], 0), "cuStreamWaitEvent",
                         what);
        }
        queue_graph_op(i, slot, stream, items, final);
        if (downloads)
            for (size_t k = 0; k < plan_.sinks.size(); ++k)
                if (writes_sink(i, k)) enqueue_sink_download(slot, k, stream);
        if (lanes && node.signals) cu_check(api.cuEventRecord(op_events_[i], stream), "cuEventRecord", what);
        int64_t next = spec.out.items;
        if (final) {
            next = ops_[i]->output_items(items);
            if (next < 0 || next > spec.out.items)
                throw DeviceError("stage '" + spec.name + "' (" + spec.kind + ") reports " + std::to_string(next) +
                                  " output items for " + std::to_string(items) + " input items; a block holds " +
                                  std::to_string(spec.out.items));
            // what reads it sees a zero-filled tail, as the first op does (eager: compute stream)
            zero_tail(plan_ptr(node.out, slot), spec.out, next);
        }
        valid[i] = next;
    }
    if (lanes) {
        // join: the compute stream continues (the download) after every lane's last op
        for (size_t l = 1; l < lanes_.size(); ++l) {
            cu_check(api.cuEventRecord(lane_events_[l], lanes_[l]), "cuEventRecord", what);
            cu_check(api.cuStreamWaitEvent(compute_, lane_events_[l], 0), "cuStreamWaitEvent", what);
        }
    }
    for (const DeviceCopy& c : plan_.final_copies) enqueue_copy(c, slot, compute_);
    if (downloads)
        for (size_t k = 0; k < plan_.sinks.size(); ++k)
            if (!writes_sink(static_cast<size_t>(plan_.sinks[k].op), k)) enqueue_sink_download(slot, k, compute_);
    note_sink_items(*slots_[static_cast<size_t>(slot)], final ? &valid : nullptr);
    return slots_[static_cast<size_t>(slot)]->sink_n_out.front();
}

bool StreamEngine::writes_sink(size_t op, size_t k) const {
    // the op's output is the sink's slice itself (else a final copy fills the slice after the join)
    const Transfer& t = plan_.sinks[k];
    const BufferRef& out = plan_.nodes[op].out;
    return static_cast<size_t>(t.op) == op && out.buffer == kSlotOutput && out.offset == t.offset;
}

void StreamEngine::note_sink_items(Slot& slot, const std::vector<int64_t>* valid) {
    slot.sink_n_out.resize(plan_.sinks.size());
    for (size_t k = 0; k < plan_.sinks.size(); ++k) {
        const size_t op = static_cast<size_t>(plan_.sinks[k].op);
        slot.sink_n_out[k] = valid ? (*valid)[op] : specs_[op].out.items;
    }
}

void StreamEngine::enqueue_graph_units(int s, int64_t begin, int64_t end) {
    // every op in the plan's order on the compute stream, each op's units in order: the same work
    // as the graph's, split where the scheduler cuts; an op's input copies go before its first unit
    for (size_t i = 0; i < ops_.size(); ++i) {
        const int64_t first = unit_begin_[i];
        const int64_t last = i + 1 < ops_.size() ? unit_begin_[i + 1] : units_total_;
        const int64_t b = std::max(begin, first), e = std::min(end, last);
        if (b >= e) continue;
        const OpSpec& spec = specs_[i];
        const GraphNode& node = plan_.nodes[i];
        if (b == first)
            for (const DeviceCopy& c : node.copies) enqueue_copy(c, s, compute_);
        try {
            ops_[i]->enqueue_units(compute_, plan_ptr(node.in, s), plan_ptr(node.out, s), b - first, e - first);
        } catch (const DeviceError& err) {
            throw DeviceError(std::string(err.what()) + " [stage '" + spec.name + "' (" + spec.kind + "), units " +
                                  std::to_string(b - first) + ".." + std::to_string(e - first) + "]",
                              err.call(), err.code(), err.code_name());
        } catch (const CompileError&) {
            throw;
        } catch (const std::exception& err) {
            throw DeviceError("stage '" + spec.name + "' (" + spec.kind + ") failed to queue units " +
                              std::to_string(b - first) + ".." + std::to_string(e - first) + ": " + err.what());
        }
    }
    if (end == units_total_)
        for (const DeviceCopy& c : plan_.final_copies) enqueue_copy(c, s, compute_);
}

std::vector<int64_t> StreamEngine::sink_items(int s) const {
    if (s < 0 || s >= slots()) throw std::invalid_argument("no slot " + std::to_string(s));
    if (!plan_.enabled) throw std::invalid_argument("sink_items() is a graph engine's (a chain has one output)");
    return slots_[static_cast<size_t>(s)]->sink_n_out;
}

int64_t StreamEngine::process_graph(int s, const std::vector<HostBytes>& ins, const std::vector<HostBytes>& outs) {
    if (closed_.load()) throw Error("StreamEngine.process_graph(): the engine is closed");
    if (!plan_.enabled) throw std::invalid_argument("process_graph() is a graph engine's (a chain has process())");
    engine_detail::check_slot(s, slots());
    auto sizes = [](const std::vector<HostBytes>& got, const std::vector<Transfer>& want, const char* what) {
        if (got.size() != want.size())
            throw std::invalid_argument("process_graph(): " + std::to_string(got.size()) + " " + what + " arrays for " +
                                        std::to_string(want.size()) + " " + what + "s");
        for (size_t k = 0; k < got.size(); ++k)
            if (got[k].bytes != want[k].bytes)
                throw std::invalid_argument("process_graph(): " + std::string(what) + " " + std::to_string(k) +
                                            "'s array holds " + std::to_string(got[k].bytes) + " bytes; its full block is " +
                                            std::to_string(want[k].bytes));
    };
    sizes(ins, plan_.sources, "source");
    sizes(outs, plan_.sinks, "sink");
    for (size_t k = 0; k < ins.size(); ++k)
        fill_bytes(s, static_cast<size_t>(plan_.sources[k].offset), ins[k].data, ins[k].bytes);
    const int64_t n_out = process_filled(s, plan_.items, false);
    const Slot& slot = *slots_[static_cast<size_t>(s)];
    const auto* from = static_cast<const unsigned char*>(slot.h_out->data());
    for (size_t k = 0; k < outs.size(); ++k) {
        const Transfer& t = plan_.sinks[k];
        if (slot.sink_n_out[k] != specs_[static_cast<size_t>(t.op)].out.items)
            throw Error("StreamEngine.process_graph(): sink " + std::to_string(k) + " holds " +
                        std::to_string(slot.sink_n_out[k]) + " items of a full block's " +
                        std::to_string(specs_[static_cast<size_t>(t.op)].out.items));
        std::memcpy(outs[k].data, from + t.offset, static_cast<size_t>(t.bytes));
    }
    return n_out;
}

}  // namespace gk
