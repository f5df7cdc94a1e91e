// The streaming engine: one pipeline's ops on one GPU, fed block by block through K slots.
//
// Per slot s: pinned host input/output, device input/output. One device buffer per edge between
// ops. Three streams: h2d, compute (at the stream's priority), d2h. Block n in slot s:
//   h2d:     cuMemcpyHtoDAsync(d_in[s] <- h_in[s]); record ev_h2d[s]
//   compute: wait ev_h2d[s]; launch slot s's CUDA graph (every op's enqueue, captured once); record ev_comp[s]
//   d2h:     wait ev_comp[s]; cuMemcpyDtoHAsync(h_out[s] <- d_out[s]); record ev_done[s]
//   host:    one completion wait on ev_done[s].
// A final block (n valid items, the pinned tail zero-filled by the caller) runs eagerly with
// each op's enqueue(..., n_i, true), n propagated by output_items().
//
// One native worker thread owns the per-block submission. The caller hands a filled slot over
// with submit() (non-blocking) and takes it back with wait() (blocking): both directions spin
// for spin_us, then block on a condition variable. With inline_submit, process() on an idle
// engine issues and waits for its block on the calling thread instead (no hand-off). Errors on the worker are kept and re-raised
// (as DeviceError) by the next submit()/wait()/reset(); close() never hangs on them.
//
// The parts: stream_engine.cpp (construction, teardown, the ops and their graphs, state), worker.cpp
// (the hand-off and the worker thread, the synchronous path), mapped_io.cpp (the block's transfers:
// copies or the io kernels, the input check), chunks.cpp (a block queued chunk by chunk: the
// dispatcher's side). Benchmark-only entry points are EngineInstrument's (instrument.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gk/cuda_api.h"
#include "gk/errors.h"
#include "gk/op.h"
#include "spin.h"

namespace gk {

class Device;
class DeviceBuffer;
struct DriverApi;
class Dispatcher;
class EngineInstrument;
class Module;
class PinnedBuffer;

struct OpSpec {
    std::string kind;
    std::string name;
    TensorDesc in;
    TensorDesc out;
    OpParams params;
};

// A flowgraph's memory plan (docs/cuda.md, "The engine's DAG"), made by the Python lowering
// (pygpukit_dsp/backends/cuda_graph_plan.py). Without it the ops are a chain: op i reads op i-1's
// output. With it every op reads and writes the buffer slices the plan names, in topological order.
struct BufferRef {
    int buffer = 0;        // kSlotInput, kSlotOutput, or an index into GraphPlan::buffers
    uint64_t offset = 0;   // bytes (a multiple of 256 where an op reads or writes)
};
constexpr int kSlotInput = -1;   // the slot's device input (the sources, packed)
constexpr int kSlotOutput = -2;  // the slot's device output (the sinks, packed)

struct DeviceCopy {
    BufferRef src, dst;
    uint64_t bytes = 0;
};

struct GraphNode {
    BufferRef in, out;
    std::vector<DeviceCopy> copies;  // queued before the op: the inputs it reads stacked in `in`
    std::vector<int> valid_from;     // the ops whose valid items it reads (final blocks: the least); -1: a source
    int lane = 0;                    // its capture stream (0: the compute stream)
    std::vector<int> waits;          // earlier ops on other lanes it must follow (capture)
    bool signals = false;            // an op on another lane waits for this one
};

struct Transfer {
    uint64_t offset = 0, bytes = 0;  // a source's slice of the packed input, a sink's of the output
    int op = -1;                     // sinks: the op whose valid items it holds
};

// A caller's host array of a graph's full block: its bytes (StreamEngine::process_graph).
struct HostBytes {
    void* data = nullptr;
    size_t bytes = 0;
};

// A caller's GPU array of a device block: `rows` rows of items of `item_bytes`, row r at
// ptr + r * row_bytes (StreamEngine::process_device_graph).
struct DeviceRows {
    CUdeviceptr ptr = 0;
    int64_t row_bytes = 0, rows = 0, item_bytes = 0;
};

struct GraphPlan {
    bool enabled = false;
    int64_t items = 0;                  // the sources' block items
    std::vector<uint64_t> buffers;      // device buffers between ops (bytes)
    std::vector<GraphNode> nodes;       // one per op, in the order of the ops
    std::vector<Transfer> sources, sinks;
    std::vector<DeviceCopy> final_copies;  // after every op: a sink that repeats another's slice
    int lanes = 1;
    uint64_t in_bytes = 0, out_bytes = 0;  // the packed slots
};

struct EngineOptions {
    int slots = 2;
    int priority = 0;      // CUDA stream priority of all three streams (lower runs first)
    bool use_graph = true;
    int spin_us = 200;     // how long a waiting thread spins before it blocks
    // Latency mode: the block's H2D copy, compute and D2H copy all go on the compute stream (with
    // use_graph, captured into one graph per slot: one launch per block). No cross-stream event
    // waits on the GPU; block n+1's upload no longer overlaps block n's compute, which a stream
    // fed one block at a time (realtime) does not need. Measured on an H100: W1 round trip
    // 33.6 us -> see docs/cuda.md.
    bool single_stream = false;
    // process() (the synchronous one-call path) issues the block and waits for its ev_done on
    // the calling thread when the engine is idle (every block handed to the worker collected
    // with wait()), instead of handing the slot to the worker and waiting for the worker's
    // hand-back: two thread hand-offs fewer on the block's round trip. submit()/wait() always
    // use the worker, and so does process() while a submitted block is uncollected. Same
    // counters either way.
    bool inline_submit = false;
    // Mapped I/O (single_stream only; docs/cuda.md, "Mapped I/O"): the slots' pinned input and
    // output are mapped into the device's address space, and a block's two DMA copies become two
    // kernels on the compute stream: gk_io_pull (mapped input -> device input) before the ops,
    // gk_io_push (device output -> mapped output) after them (with use_graph, in the slot's block
    // graph). Needs a GPU that can map host memory with unified addressing (DeviceError if not).
    bool mapped_io = false;
    // mapped_io with use_graph and a last op that writes_output_once(): the block graph hands that
    // op the slot's mapped pinned output, so it writes the block's output to the host itself and
    // the push kernel is left out (one kernel less per block). Eager and final blocks still go
    // through the device output and the push.
    bool direct_output = true;
    // Non-finite input samples (NaN, +-Inf; docs/cuda.md, "Non-finite input"): every block's input
    // is scanned on the GPU where it arrives (in gk_io_pull with mapped I/O, else by
    // gk_check_finite right after the H2D copy) and each slot records what it found
    // (take_nonfinite). true: they are also replaced by 0 in the device input, before the first
    // op reads the block, so that no stage's state takes them in.
    bool zero_nonfinite = false;
};

struct EngineCounters {
    uint64_t blocks = 0;            // blocks completed
    // Host -> device / device -> host copies issued by the per-block path; with mapped_io each is
    // a kernel (gk_io_pull / gk_io_push) instead of a cuMemcpy*Async, still one each per block.
    uint64_t h2d_copies = 0;
    uint64_t d2h_copies = 0;
    uint64_t completion_waits = 0;  // one per block: the wait for its ev_done
    uint64_t graph_launches = 0;    // blocks run through a captured graph
    uint64_t eager_blocks = 0;      // blocks run eagerly (final blocks, use_graph=false, chunked)
    uint64_t chunks = 0;            // partial chunks launched (a block split by the scheduler)
    // Device blocks (process_device: the caller's GPU arrays, device_io.cpp): blocks, and their
    // device-to-device copies into the slot's device input and out of its device output. They
    // count in blocks / graph_launches / eager_blocks too, never in h2d_copies / d2h_copies.
    uint64_t device_blocks = 0;
    uint64_t d2d_in = 0;
    uint64_t d2d_out = 0;
};

// Where one process() call's time went (steady clock ns, CLOCK_MONOTONIC: Python's
// perf_counter_ns). Recorded only while a trace is on (StreamEngine::set_trace).
struct BlockTrace {
    uint64_t call = 0;          // process() entered (GIL released)
    uint64_t filled = 0;        // the block is in the pinned input slot
    uint64_t launch_begin = 0;  // its first chunk starts being queued (caller or dispatcher)
    uint64_t launched = 0;      // its last chunk is queued
    uint64_t done_seen = 0;     // its completion was observed (caller or dispatcher)
    uint64_t woke = 0;          // the caller has it back
    uint64_t gpu_ns = 0;        // scheduled blocks: device time of the last chunk (events); else 0
    uint64_t scheduled = 0;     // 1: through a dispatcher, 0: on the calling thread / worker
    uint64_t copied = 0;        // the output is copied out of the pinned slot (process(..., out))
};

class StreamEngine {
public:
    StreamEngine(std::shared_ptr<Device> device, std::vector<OpSpec> ops, EngineOptions options,
                 GraphPlan plan = GraphPlan{});
    ~StreamEngine();
    StreamEngine(const StreamEngine&) = delete;
    StreamEngine& operator=(const StreamEngine&) = delete;

    int slots() const noexcept { return options_.slots; }
    // A chain's: the first op's input, the last op's output. A graph's: the packed slots as
    // (1, bytes / 4) float32 (each source's and sink's slice at the plan's offsets).
    const TensorDesc& input_desc() const noexcept { return plan_.enabled ? packed_in_ : specs_.front().in; }
    const TensorDesc& output_desc() const noexcept { return plan_.enabled ? packed_out_ : specs_.back().out; }
    // Items of a full block of the (every) source.
    int64_t block_items() const noexcept { return plan_.enabled ? plan_.items : specs_.front().in.items; }
    bool is_graph() const noexcept { return plan_.enabled; }
    const GraphPlan& plan() const noexcept { return plan_; }
    // A graph's valid output items of each sink of the block last completed in `slot`.
    std::vector<int64_t> sink_items(int slot) const;
    const EngineOptions& options() const noexcept { return options_; }
    const std::vector<OpSpec>& op_specs() const noexcept { return specs_; }
    const std::shared_ptr<Device>& device() const noexcept { return device_; }
    bool closed() const noexcept { return closed_.load(); }

    // Pinned host memory of a slot (full-block layouts); shared so that views outlive close().
    std::shared_ptr<PinnedBuffer> input_buffer(int slot) const;
    std::shared_ptr<PinnedBuffer> output_buffer(int slot) const;

    // Hands slot `slot` (its pinned input filled, n_valid items, the tail zeroed) to the worker.
    // n_valid < items requires final. Non-blocking.
    void submit(int slot, int64_t n_valid, bool final);
    // Blocks until the slot's block is done; returns its valid output items. The slot is then
    // the caller's again (its pinned output valid until the slot is submitted again).
    int64_t wait(int slot);
    // The synchronous path in one call: copies `block` (channels x n_valid items, C order, the
    // input dtype) into the free slot's pinned input, zero-fills the tail, submits and waits
    // (with inline_submit and an idle engine: issues and waits on the calling thread).
    // Returns the valid output items, which stay in the slot's pinned output until the slot is
    // submitted again. Needs no Python (the binding releases the GIL around it).
    // out (optional): the valid output is also copied there (copy_output(), out_row_items items
    // per channel row; 0: compact, n_out per row).
    int64_t process(int slot, const void* block, int64_t n_valid, bool final, void* out = nullptr,
                    int64_t out_row_items = 0);
    // process() of a slot whose pinned input the caller filled already (a graph engine's sources,
    // each in its slice of input_slot()): submits and waits, on the calling thread with
    // inline_submit and an idle engine (no hand-over to the worker and back), and returns the
    // first sink's valid items (sink_items(slot) has every sink's); the output stays in the slot.
    int64_t process_filled(int slot, int64_t n_valid, bool final);
    // A graph engine's full, non-final block in one call (the GIL released around it): each
    // source's bytes (`ins`, the plan's order, each its slice's size) into its slice of the free
    // slot's pinned input, process_filled(), and each sink's slice of the pinned output into
    // `outs` (the plan's order, each its slice's size). Returns the first sink's valid items
    // (every sink's is its full block). One native call where the per-source and per-sink steps
    // would be several, each with the interpreter's cost between them.
    int64_t process_graph(int slot, const std::vector<HostBytes>& ins, const std::vector<HostBytes>& outs);
    // Non-blocking wait(): true (and the slot free again, *n_out its valid output items) once the
    // slot's block is done; false while it runs. A realtime stream under a dispatcher runs one
    // polling turn of the dispatcher first (help). Errors as wait().
    bool try_wait(int slot, int64_t* n_out);
    // Copies the slot's n_out valid output items into `dst`, channel rows of `row_items` items
    // (row_items >= n_out; n_out for a compact (channels, n_out) array).
    void copy_output(int slot, int64_t n_out, void* dst, int64_t row_items) const;

    // Copies `block` (channels x n_valid items, C order) into the free slot's pinned input and
    // zero-fills the tail (non-temporal stores where available). process() = fill + submit + wait.
    void fill(int slot, const void* block, int64_t n_valid);
    // `bytes` bytes from `src` into the free slot's pinned input at byte `offset`, the rest of it as
    // it was (a graph's source into its slice of the packed input; non-temporal stores as fill()).
    void fill_bytes(int slot, size_t offset, const void* src, size_t bytes);
    // fill()'s argument checks alone (the slot exists and is free, 1 <= n_valid <= items).
    void check_fill(int slot, int64_t n_valid) const;
    // Non-finite input in the block last completed in `slot`: {count, index of the first} (the
    // index counts float32 words of the block's C-order input layout: a complex64 sample is two);
    // {0, 0} when there was none. Clears the slot's record. The caller has the slot back (its
    // block done) and tests nonfinite_flags() first: this reads the record with a device copy.
    std::pair<uint64_t, uint64_t> take_nonfinite(int slot);
    // One mapped host word per slot, 64 bytes apart: non-zero once a block in that slot held a
    // non-finite sample, until take_nonfinite() clears it (the cheap per-block test).
    std::shared_ptr<PinnedBuffer> nonfinite_flags() const { return nf_flags_; }
    // Waits for in-flight work, then resets every op's state on the compute stream.
    void reset();
    // Drains in-flight blocks, stops the worker, frees every GPU resource. Idempotent.
    void close();
    EngineCounters counters() const;
    // Wall time (ms) of each step of the constructor, in order: io kernels, streams, each op
    // ("op <name> (<kind>)": its modules, plans, handles, buffers), device buffers, slots (with
    // "slots: pinned allocation" / "slots: pinned zero fill" inside it), buffer zeroing, warm-up
    // block, graph capture.
    const std::vector<std::pair<std::string, double>>& build_timings() const noexcept { return build_timings_; }
    // Blocks process() ran on the calling thread (inline_submit); also in counters()' blocks.
    uint64_t inline_blocks() const noexcept { return inline_blocks_.load(); }
    // EngineOptions::direct_output in effect (mapped I/O block graphs without a push kernel).
    bool direct_output() const noexcept { return direct_output_; }
    // Per-block timing of process() calls into a ring of `capacity` records (0: off, the
    // default; turning it on or off clears it). trace() returns the ring oldest first.
    void set_trace(size_t capacity);
    std::vector<BlockTrace> trace() const;
    // GPU time of the blocks process() runs itself (inline or through the worker), measured with
    // a timing event pair around the block's work on the compute stream: admission's calibration
    // (the device time a block occupies, beside its wall-clock latency). Off by default (two event
    // records and a query per block otherwise wasted). Waits for in-flight work; creates the
    // events on first use.
    void set_gpu_timing(bool on);
    // The GPU time of the last block completed while gpu timing was on (ns); 0 when none, or when
    // the driver could not time it. Also in the trace's gpu_ns column.
    uint64_t last_gpu_ns() const noexcept { return last_gpu_ns_.load(std::memory_order_acquire); }
    // The host time (ns) queueing the last block took while gpu timing was on (its launch calls).
    uint64_t last_launch_ns() const noexcept { return last_launch_ns_.load(std::memory_order_acquire); }

    // ---- chunks and the scheduler (native/engine/dispatcher.h, docs/scheduler.md) ----
    // Units of one full block: the ops' units() in op order (the scheduler's units_per_block).
    int64_t units_per_block() const noexcept { return units_total_; }
    // Test entry point: `block` as process() takes it, run on the calling thread as the chunks
    // [0, cuts[0]), [cuts[0], cuts[1]), ..., [cuts.back(), units_per_block()). The engine must be
    // idle and not attached to a dispatcher. Returns the valid output items.
    int64_t process_split(int slot, const void* block, int64_t n_valid, bool final,
                          const std::vector<int64_t>& cuts);
    // Scheduled mode: submit() hands every block to `dispatcher` as a task of scheduler stream
    // `sched_stream`; the dispatcher's worker launches it chunk by chunk as the scheduler decides
    // and hands the slot back. process() goes through it too (no inline path). The engine must
    // be idle. detach() returns the engine to its own worker (waits for in-flight blocks first);
    // close() detaches.
    void attach(std::shared_ptr<Dispatcher> dispatcher, uint32_t sched_stream);
    void detach();
    bool attached() const;

    // ---- device blocks: the caller's GPU arrays in and out (device_io.cpp; docs/cuda.md, "GPU arrays") ----
    // Valid output items of a block of n_valid items (final: the ops' final-block rule), known
    // before it runs: the caller allocates the output from it.
    int64_t device_output_items(int64_t n_valid, bool final) const;
    // One block from device memory to device memory, with no host copy and no host wait: `in`
    // holds channels rows of n_valid items (row r at in + r * in_row_bytes), `out` receives
    // device_output_items(n_valid, final) items per row (row r at out + r * out_row_bytes).
    // The engine's work waits for what is queued on `caller_stream` so far (a CUstream handle;
    // 0 or 1: the legacy default stream, 2: the per-thread default stream), then copies the block
    // into the slot's device input (tail zeroed), checks it for non-finite samples (the policy of
    // zero_nonfinite, recorded in the slot as for host blocks), runs the slot's graph (eagerly for
    // a final or short block) and copies the output out; the caller's stream then waits for all
    // of it. Returns once queued: the output is ready in stream order on caller_stream. The
    // engine must be idle (no submitted block uncollected); attached to a dispatcher, the block
    // is still queued by the calling thread (outside the scheduler's chunks).
    int64_t process_device(int slot, CUdeviceptr in, int64_t in_row_bytes, int64_t n_valid, bool final,
                           CUdeviceptr out, int64_t out_row_bytes, uint64_t caller_stream);
    // A graph engine's process_device: `ins` holds each source's array (rows x n items of
    // item_bytes, row r at ptr + r * row_bytes), `outs` each sink's (room for the sink's full
    // block), in the plan's order; returns each sink's valid items. Ordered as process_device.
    std::vector<int64_t> process_device_graph(int slot, int64_t n_valid, bool final, const std::vector<DeviceRows>& ins,
                                              const std::vector<DeviceRows>& outs, uint64_t caller_stream);
    // Waits (host) until every device block queued so far is done; then the slots' non-finite
    // records of those blocks can be read (take_nonfinite). A no-op without device blocks.
    void synchronize_device();
    // One float32 word of device memory (the value of a non-finite sample in a caller's array,
    // read on the error path only; a synchronous device read, not counted as a block's copy).
    float read_device_word(CUdeviceptr address);

private:
    friend class Dispatcher;
    friend class EngineInstrument;  // resident mode, the timing loops, paced blocks (benchmarks)
    enum SlotState : int { kFree = 0, kSubmitted = 1, kDone = 2 };

    struct Slot {
        std::shared_ptr<PinnedBuffer> h_in, h_out;
        std::unique_ptr<DeviceBuffer> d_in, d_out;
        CUevent ev_h2d = nullptr, ev_comp = nullptr, ev_done = nullptr;
        CUevent ev_t0 = nullptr, ev_t1 = nullptr;  // set_gpu_timing: timing events around the block
        CUgraphExec graph = nullptr;        // the ops only (compute stream)
        CUgraphExec block_graph = nullptr;  // single_stream: H2D + ops + D2H in one graph
        // mapped_io with use_graph: gk_io_touch over the slot, made by EngineInstrument (its prewarm)
        // and destroyed with the engine's other graphs
        CUgraphExec prewarm_graph = nullptr;
        std::atomic<int> state{kFree};
        int64_t n_in = 0;   // written by submit() before publication
        bool final = false;
        int64_t n_out = 0;  // written by the worker before it marks the slot done
        std::vector<int64_t> sink_n_out;  // a graph's: each sink's valid items (as n_out)
        // trace stamps of the block in flight (written before the slot is marked done)
        uint64_t t_launch_begin = 0, t_launched = 0, t_done_seen = 0, gpu_ns = 0;
        bool timed = false;  // this block was queued between ev_t0 and ev_t1 (set_gpu_timing)
        // h_in holds defined bytes (zeroed, or a block written in): see init_input()
        std::atomic<bool> in_init{false};
    };
    // Zero-fills the slot's pinned input unless it was written already (caller's thread).
    void init_input(Slot& slot) const;
    // A completed block's GPU time (set_gpu_timing; 0 when it was not timed): into slot.gpu_ns
    // and last_gpu_ns_.
    void note_gpu_time(Slot& slot);

    struct Counters {
        std::atomic<uint64_t> blocks{0}, h2d_copies{0}, d2h_copies{0}, completion_waits{0},
            graph_launches{0}, eager_blocks{0}, chunks{0};
        std::atomic<uint64_t> device_blocks{0}, d2d_in{0}, d2d_out{0};  // process_device
    };
    // process_device's events (made on its first block, freed by teardown); device_io.cpp.
    struct DeviceIoEvents;
    std::shared_ptr<DeviceIoEvents> device_io_;
    // process_device's parts (device_io.cpp), under control_mutex_ and producer_mutex_
    void wait_idle_for_device_block(const char* method);
    CUstream device_block_begin(uint64_t caller_stream);  // caller_ready recorded on the caller's stream
    void check_device_input(int slot);                     // gk_check_finite on the slot's device input
    void device_block_end(CUstream caller);                // the caller's stream waits for the block
    // One device block queued under the locks: begin, ``queue`` (its copies and launch on compute_),
    // end; a failure marks the engine failed and is rethrown; the block counted.
    void queue_device_block(const char* method, uint64_t caller_stream, const std::function<void()>& queue);
    // The row copies of a device block (one copy when both sides are one contiguous block).
    void copy_rows_d2d(CUdeviceptr dst, int64_t dst_row_bytes, CUdeviceptr src, int64_t src_row_bytes,
                       int64_t rows, int64_t row_bytes, CUstream stream);

    // The io kernels' module (gk_io_pull/push/touch, gk_check_finite), loaded once.
    void load_io_module();
    // The input check (build()): gk_check_finite, each slot's record and flag.
    void setup_input_check();
    CUfunction check_finite_ = nullptr;
    unsigned check_grid_ = 1;
    std::unique_ptr<DeviceBuffer> nf_records_;   // per slot {count, first word}, 16 bytes each
    std::shared_ptr<PinnedBuffer> nf_flags_;     // per slot one mapped word, 64 bytes apart
    void reset_nonfinite(int slot);
    // mapped I/O
    // Checks the options and the GPU, loads the io kernels (build()).
    void setup_mapped_io();
    // A block's H2D on `stream`: cuMemcpyHtoDAsync (then the input check), or with mapped_io the
    // gk_io_pull kernel (which checks the input on the way).
    void enqueue_upload(int slot, CUstream stream);
    // A block's D2H on `stream`: cuMemcpyDtoHAsync, or with mapped_io the gk_io_push kernel.
    void enqueue_download(int slot, CUstream stream);
    // One sink's slice of it (a graph's sink k; a chain's output for k = 0).
    void enqueue_sink_download(int slot, size_t sink, CUstream stream);
    std::shared_ptr<Module> io_module_;
    CUfunction io_pull_ = nullptr, io_push_ = nullptr;
    unsigned io_pull_grid_ = 1, io_push_grid_ = 1;
    bool direct_output_ = false;  // the block graphs' last op writes the mapped output (no push)
    // Made by EngineInstrument for its prewarm (mapped I/O), destroyed by teardown().
    CUfunction io_touch_ = nullptr;
    CUevent prewarm_event_ = nullptr;

    void build();
    void teardown() noexcept;
    std::vector<std::pair<std::string, double>> build_timings_;
    CUdeviceptr op_input(size_t op, int slot) const;
    CUdeviceptr op_output(size_t op, int slot) const;
    // Queue every op on the compute stream for slot s: full block (graph-capturable) or eager
    // with n valid items; returns the valid output items.
    // last_out: where the last op writes (0: the slot's device output).
    // capture: a graph's ops go on their lanes (fork/join), else all on the compute stream in order.
    // downloads (a graph's): the sinks' downloads too, each on its op's lane right after it where
    // the op writes the sink's slice (a branch's D2H overlaps the others' work), else after the join.
    int64_t enqueue_ops(int slot, int64_t n, bool final, CUdeviceptr last_out = 0, bool capture = false,
                        bool downloads = false);
    // ---- a graph (native/engine/graph_ops.cpp) ----
    void check_plan();
    void build_graph_resources();
    void destroy_graph_resources(const DriverApi& api) noexcept;
    CUdeviceptr plan_ptr(const BufferRef& ref, int slot) const;
    void enqueue_copy(const DeviceCopy& c, int slot, CUstream stream);
    void queue_graph_op(size_t i, int slot, CUstream stream, int64_t items, bool final);
    int64_t enqueue_graph_ops(int slot, int64_t n, bool final, bool capture, bool downloads);
    void enqueue_graph_units(int slot, int64_t begin, int64_t end);
    void note_sink_items(Slot& slot, const std::vector<int64_t>* valid);
    bool writes_sink(size_t op, size_t sink) const;  // op writes sink's slice of the output itself
    GraphPlan plan_;
    TensorDesc packed_in_, packed_out_;
    std::vector<std::unique_ptr<DeviceBuffer>> plan_buffers_;
    std::vector<CUstream> lanes_;        // lanes_[0] is compute_ (not owned)
    std::vector<CUevent> op_events_;     // per op: recorded after it when another lane waits
    std::vector<CUevent> lane_events_;   // [0]: the fork on compute, [L]: lane L's join
    void zero_tail(CUdeviceptr buffer, const TensorDesc& desc, int64_t n_valid);
    void capture_graphs();
    CUgraphExec capture_slot(int slot, bool with_copies);
    void warm_up();
    void enqueue_block(int slot);           // worker / inline process: the whole block as one chunk
    // Argument checks shared by submit() and the inline path.
    void check_submission(int slot, int64_t n_valid, bool final) const;
    // inline_submit: run slot `slot` on the calling thread if the engine is idle; false (nothing
    // done) when it is not, or when reset/close/timing holds the engine.
    bool process_inline(int slot, int64_t n_valid, bool final, int64_t* n_out);
    // The copy of fill() into a slot whatever its state (callers check).
    void copy_into_slot(Slot& slot, const void* block, int64_t n_valid);
    void worker_main();
    // Dispatcher side (its worker thread, the engine's context current): queue units [begin, end)
    // of slot s's submitted block on the engine's streams. The first chunk issues the H2D, the
    // last the D2H and ev_done; `start`/`stop` (nullable, timing events) bracket the chunk's
    // device work on the compute stream. A final (or partial) block runs whole in its last chunk.
    void enqueue_chunk(int s, int64_t begin, int64_t end, CUevent start, CUevent stop);
    // The ops' units [begin, end) of a full block, eagerly on the compute stream.
    void enqueue_op_units(int s, int64_t begin, int64_t end);
    // Dispatcher side: the block in slot s is done (its ev_done has completed); seen_ns: when
    // the dispatcher saw it, gpu_ns: its last chunk's device time (trace stamps).
    void finish_scheduled(int s, uint64_t seen_ns, uint64_t gpu_ns);
    void record_trace(const BlockTrace& t);
    CUevent done_event(int s) const { return slots_[static_cast<size_t>(s)]->ev_done; }
    void fail(const std::string& message, const std::string& call, int code,
              const std::string& code_name);
    [[noreturn]] void rethrow_failure() const;
    void check_usable(const char* what) const;
    void wait_idle();
    void reset_ops_locked();
    std::string stage_names() const;

    std::shared_ptr<Device> device_;
    std::vector<OpSpec> specs_;
    EngineOptions options_;
    std::vector<std::unique_ptr<Op>> ops_;
    std::vector<std::unique_ptr<DeviceBuffer>> edges_;  // edges_[i]: output of op i (i < n-1)
    std::vector<std::unique_ptr<Slot>> slots_;
    CUstream h2d_ = nullptr, compute_ = nullptr, d2h_ = nullptr;

    // Hand-off caller -> worker: ring of submitted slots in order.
    std::vector<int> ring_;
    mutable std::mutex producer_mutex_;            // one submit() at a time moves the ring and the count
    std::atomic<uint64_t> submitted_{0};   // blocks handed over
    std::atomic<uint64_t> completed_{0};   // blocks done (or abandoned after a failure)
    SpinWaiter to_worker_;                 // the worker waits here for submissions / stop
    SpinWaiter to_caller_;                 // callers wait here for completions / failure
    std::thread worker_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> closed_{false};
    std::atomic<bool> exclusive_{false};   // reset/timing in progress: submit() refused

    mutable std::mutex error_mutex_;
    std::atomic<bool> failed_{false};
    std::string error_message_, error_call_, error_code_name_;
    int error_code_ = 0;

    std::vector<int64_t> unit_begin_;  // unit_begin_[i]: op i's first unit in the block
    int64_t units_total_ = 1;
    std::atomic<bool> resident_{false};      // EngineInstrument::set_resident: blocks skip their copies
    std::atomic<bool> gpu_timing_{false};    // set_gpu_timing
    std::atomic<uint64_t> last_gpu_ns_{0};
    std::atomic<uint64_t> last_launch_ns_{0};
    std::shared_ptr<Dispatcher> dispatcher_;  // set while attached (guarded by producer_mutex_)
    uint32_t sched_stream_ = 0;
    bool help_dispatcher_ = false;  // attached as a realtime stream: callers help (guarded by producer_mutex_)
    std::atomic<uint64_t> sched_posted_{0};  // blocks handed to the dispatcher
    std::atomic<uint64_t> sched_done_{0};    // ... and handed back

    Counters counters_;
    std::atomic<uint64_t> inline_blocks_{0};
    std::mutex control_mutex_;  // serialises reset/close/timing

    mutable std::mutex trace_mutex_;
    std::atomic<bool> tracing_{false};
    std::vector<BlockTrace> trace_;  // ring, trace_count_ records written so far
    uint64_t trace_count_ = 0;
};

}  // namespace gk
