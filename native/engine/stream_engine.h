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
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gk/cuda_api.h"
#include "gk/errors.h"
#include "gk/op.h"

namespace gk {

class Device;
class DeviceBuffer;
class Dispatcher;
class Module;
class PinnedBuffer;

struct OpSpec {
    std::string kind;
    std::string name;
    TensorDesc in;
    TensorDesc out;
    OpParams params;
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
    // mapped_io only: the push kernel's last CTA writes a running count into a mapped host word
    // after a system-scope fence, and the completion wait spins on that word (no driver call)
    // instead of cuEventQuery; after spin_us without it, cuEventSynchronize on ev_done (still
    // recorded every block) reports errors and ends the wait.
    bool flag_wait = false;
    // mapped_io with use_graph, no flag_wait, and a last op that writes_output_once(): the block
    // graph hands that op the slot's mapped pinned output, so it writes the block's output to
    // the host itself and the push kernel is left out (one kernel less per block). Eager and
    // final blocks still go through the device output and the push.
    bool direct_output = true;
    // mapped_io with inline_submit: process() of a full block on an idle engine queues the block
    // first and copies it into the pinned slot while the launch travels to the GPU; the pull
    // kernel waits for the slot's ready words (set after the copy) before it reads the input. The
    // host copy then overlaps the launch latency instead of preceding it. Off by default: on the
    // H100 it took ~1 us off W1's inline p50 (25.9 vs 27.0 us) but its poll adds ~1 us to every
    // block that is not overlapped (submit/wait, a dispatcher), and p99 did not move.
    bool overlap_fill = false;
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
    uint64_t completion_waits = 0;  // one per block: the wait for its ev_done (or its io flag)
    uint64_t graph_launches = 0;    // blocks run through a captured graph
    uint64_t eager_blocks = 0;      // blocks run eagerly (final blocks, use_graph=false, chunked)
    uint64_t chunks = 0;            // partial chunks launched (a block split by the scheduler)
};

// A paced block: process() waits natively for the block's release time before it starts (the GIL
// released, no Python between the wait and the block), so the block's latency can be measured
// from its release and the thread is warm when the block is due (docs/cuda.md, "Paced blocks").
struct ReleaseWait {
    uint64_t release_ns = 0;  // CLOCK_MONOTONIC ns (Python's perf_counter_ns); 0: no wait
    int spin_us = 0;          // sleep until this long before the release, then spin up to it
    // At the start of the spin window (release - spin_us): read one word of every page of the
    // slot's pinned input and output on the host and, with mapped I/O, once from the GPU (a
    // one-page-per-thread kernel on the compute stream, waited for until the release at most).
    bool prewarm = false;
    // The host also reads every line of the input, not one word per page (the prewarm of sessions
    // 10-12, kept for the host settings' comparison: the non-temporal fill runs slower after it).
    bool prewarm_lines = false;
};

// Sleeps until `t_ns` (CLOCK_MONOTONIC) less `spin_us`, then spins up to it. The calling thread's
// timer slack is set to 1 ns the first time (prctl PR_SET_TIMERSLACK: the default 50 us slack
// would make every sleep up to 50 us late). Returns at once when t_ns has passed.
void wait_until_ns(uint64_t t_ns, int spin_us);
uint64_t monotonic_ns();

// Spin-then-block waiting on a predicate over atomics; any thread may notify.
class SpinWaiter {
public:
    // Returns when ready() is true. ready() must read the state with seq_cst loads.
    template <class Ready>
    void wait(Ready ready, int spin_us);
    // As wait(), but gives up (returns false) after spin + timeout_us of blocking.
    template <class Ready>
    bool wait_for(Ready ready, int spin_us, int timeout_us);
    // Call after publishing the new state with a seq_cst store.
    void notify();

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    std::atomic<int> sleepers_{0};
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
    StreamEngine(std::shared_ptr<Device> device, std::vector<OpSpec> ops, EngineOptions options);
    ~StreamEngine();
    StreamEngine(const StreamEngine&) = delete;
    StreamEngine& operator=(const StreamEngine&) = delete;

    int slots() const noexcept { return options_.slots; }
    const TensorDesc& input_desc() const noexcept { return specs_.front().in; }
    const TensorDesc& output_desc() const noexcept { return specs_.back().out; }
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
    // release (optional): wait for the block's release time first (ReleaseWait); the trace's
    // `call` stamp is then taken after the wait.
    int64_t process(int slot, const void* block, int64_t n_valid, bool final, void* out = nullptr,
                    int64_t out_row_items = 0, const ReleaseWait* release = nullptr);
    // Non-blocking wait(): true (and the slot free again, *n_out its valid output items) once the
    // slot's block is done; false while it runs. A realtime stream under a dispatcher runs one
    // polling turn of the dispatcher first (help). Errors as wait().
    bool try_wait(int slot, int64_t* n_out);
    // The first half of a paced block's wait, for a caller that goes back to Python before the
    // release (so that the interpreter's path is warm when the block is due): sleep until
    // spin_us before release_ns, prewarm the slot (ReleaseWait::prewarm), then spin until
    // return_at_ns (<= release_ns) and return. process() with the release then spins the rest.
    void wait_release(int slot, const ReleaseWait& release, uint64_t return_at_ns);
    // Copies the slot's n_out valid output items into `dst`, channel rows of `row_items` items
    // (row_items >= n_out; n_out for a compact (channels, n_out) array).
    void copy_output(int slot, int64_t n_out, void* dst, int64_t row_items) const;

    // Copies `block` (channels x n_valid items, C order) into the free slot's pinned input and
    // zero-fills the tail (non-temporal stores where available). process() = fill + submit + wait.
    void fill(int slot, const void* block, int64_t n_valid);
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
    // records and a query per block otherwise wasted). While on, a block is filled before it is
    // launched (no overlap_fill: its GPU time must not include waiting for the host's copy).
    // Waits for in-flight work; creates the events on first use.
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
    // Resident mode (benchmarks, e.g. W2 beside W1 in W3): blocks skip the H2D and D2H copies and
    // compute on whatever the slot's device input holds (uploaded by the last normal block).
    void set_resident(bool on) { resident_.store(on); }
    bool resident() const noexcept { return resident_.load(); }
    // Benchmark entry point (resident mode, idle engine): resident blocks back to back with every
    // slot in flight, through submit()/wait() (so an attached engine goes through its
    // dispatcher), until `seconds` pass or stop_pump() is called; returns each block's
    // completion time (steady clock ns, the scheduler's clock). No Python per block.
    std::vector<uint64_t> pump_resident(double seconds);
    void stop_pump() { pump_stop_.store(true); }
    // Scheduled mode: submit() hands every block to `dispatcher` as a task of scheduler stream
    // `sched_stream`; the dispatcher's worker launches it chunk by chunk as the scheduler decides
    // and hands the slot back. process() goes through it too (no inline path). The engine must
    // be idle. detach() returns the engine to its own worker (waits for in-flight blocks first);
    // close() detaches.
    void attach(std::shared_ptr<Dispatcher> dispatcher, uint32_t sched_stream);
    void detach();
    bool attached() const;

    // Benchmark entry points (the engine must be idle: every submitted slot waited for).
    // Input already on the device (slot 0's pinned input copied once): replay slot 0's compute
    // `iterations` times, each timed with events; seconds per replay. Resets op state after.
    std::vector<double> time_resident(int iterations);
    // `blocks` blocks (the pinned inputs as they are) pipelined H2D -> compute -> D2H with
    // `slots` in flight; (wall seconds of the whole run, bytes copied host -> device).
    // Resets op state after.
    std::pair<double, double> time_streamed(int64_t blocks, int slots);
    // Pinned -> device copies of nbytes on the h2d stream, timed with events; bytes per second.
    double measure_h2d_bandwidth(size_t nbytes, int repeats);

private:
    friend class Dispatcher;
    enum SlotState : int { kFree = 0, kSubmitted = 1, kDone = 2 };

    struct Slot {
        std::shared_ptr<PinnedBuffer> h_in, h_out;
        std::unique_ptr<DeviceBuffer> d_in, d_out;
        CUevent ev_h2d = nullptr, ev_comp = nullptr, ev_done = nullptr;
        CUevent ev_t0 = nullptr, ev_t1 = nullptr;  // set_gpu_timing: timing events around the block
        CUgraphExec graph = nullptr;        // the ops only (compute stream)
        CUgraphExec block_graph = nullptr;  // single_stream: H2D + ops + D2H in one graph
        CUgraphExec prewarm_graph = nullptr;  // mapped_io: gk_io_touch over the slot (prewarm_slot)
        std::atomic<int> state{kFree};
        int64_t n_in = 0;   // written by submit() before publication
        bool final = false;
        int64_t n_out = 0;  // written by the worker before it marks the slot done
        // mapped I/O, flag_wait: the io flag value that marks this block done; 0: wait on ev_done.
        // Cleared when a block's first chunk is queued, set by enqueue_download() for the block it queues, cleared
        // again by the completion wait that consumes it.
        uint64_t flag_seq = 0;
        // trace stamps of the block in flight (written before the slot is marked done)
        uint64_t t_launch_begin = 0, t_launched = 0, t_done_seen = 0, gpu_ns = 0;
        bool timed = false;  // this block was queued between ev_t0 and ev_t1 (set_gpu_timing)
        // mapped_io: a mapped host word, 1 while h_in holds the block the next pull reads;
        // overlap_fill clears it before queueing a block and sets it after copying the block in.
        std::unique_ptr<PinnedBuffer> ready;
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
    };

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
    // Checks the options and the GPU, loads the io kernels, allocates the flag (build()).
    void setup_mapped_io();
    // A block's H2D on `stream`: cuMemcpyHtoDAsync, or with mapped_io the gk_io_pull kernel.
    void enqueue_upload(int slot, CUstream stream);
    // A block's D2H on `stream`: cuMemcpyDtoHAsync, or with mapped_io the gk_io_push kernel; with
    // flag_wait the push also bumps the io flag, and unless `capturing` (a graph launched later
    // does the accounting) the slot's flag_seq is set to the value that marks this block done.
    void enqueue_download(int slot, CUstream stream, bool capturing);
    // Numbers a flagged push just queued (eagerly or in a block graph): the slot's flag_seq
    // becomes the flag value that push writes.
    void note_flagged_push(Slot& slot);
    // CUDA_SUCCESS once the slot's block is done: its io flag reached (flag_wait), else
    // cuEventQuery(ev_done). While `spinning`, a flagged block is NOT_READY until the flag
    // arrives (no driver call).
    CUresult query_block_done(const Slot& slot, bool spinning) const;
    std::shared_ptr<Module> io_module_;
    CUfunction io_pull_ = nullptr, io_push_ = nullptr;
    unsigned io_pull_grid_ = 1, io_push_grid_ = 1;
    CUfunction io_touch_ = nullptr;           // prewarm (ReleaseWait::prewarm)
    CUevent prewarm_event_ = nullptr;         // mapped I/O: made with the io kernels (setup), for prewarm_slot
    // ReleaseWait: sleep / prewarm / spin up to the release (process()).
    void prewarm_slot(int slot, uint64_t until_ns, bool lines = false);
    std::unique_ptr<PinnedBuffer> io_flag_;   // flag_wait: one mapped host word the push writes
    std::unique_ptr<DeviceBuffer> io_state_;  // flag_wait: {push CTAs arrived, flagged pushes}
    bool direct_output_ = false;  // the block graphs' last op writes the mapped output (no push)
    std::atomic<uint64_t> io_pushes_{0};      // flagged pushes queued (= the flag once all are done)

    void build();
    void teardown() noexcept;
    std::vector<std::pair<std::string, double>> build_timings_;
    CUdeviceptr op_input(size_t op, int slot) const;
    CUdeviceptr op_output(size_t op, int slot) const;
    // Queue every op on the compute stream for slot s: full block (graph-capturable) or eager
    // with n valid items; returns the valid output items.
    // last_out: where the last op writes (0: the slot's device output).
    int64_t enqueue_ops(int slot, int64_t n, bool final, CUdeviceptr last_out = 0);
    void zero_tail(CUdeviceptr buffer, const TensorDesc& desc, int64_t n_valid);
    void capture_graphs();
    CUgraphExec capture_slot(int slot, bool with_copies);
    CUgraphExec capture_prewarm(int slot);
    CUresult launch_io_touch(const Slot& slot);  // on compute_ (the prewarm's GPU touch; captured or not)
    void warm_up();
    void enqueue_block(int slot);           // worker / inline process: the whole block as one chunk
    // Argument checks shared by submit() and the inline path.
    void check_submission(int slot, int64_t n_valid, bool final) const;
    // inline_submit: run slot `slot` on the calling thread if the engine is idle; false (nothing
    // done) when it is not, or when reset/close/timing holds the engine.
    // late_block (overlap_fill): the block is copied into the slot only after it is queued (the
    // pull kernel waits for the slot's ready word); *filled_at (if given) stamps the copy's end.
    bool process_inline(int slot, int64_t n_valid, bool final, int64_t* n_out, const void* late_block = nullptr,
                        uint64_t* filled_at = nullptr);
    // The copy of fill() into a slot whatever its state (callers check).
    void copy_into_slot(Slot& slot, const void* block, int64_t n_valid);
    // overlap_fill: the slot's mapped ready word (see Slot::ready).
    void set_ready(Slot& slot, unsigned value);
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
    std::atomic<bool> resident_{false};
    std::atomic<bool> gpu_timing_{false};    // set_gpu_timing
    std::atomic<uint64_t> last_gpu_ns_{0};
    std::atomic<uint64_t> last_launch_ns_{0};
    std::atomic<bool> pump_stop_{false};
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
