// StreamEngine: the hand-off between callers and the worker thread, the worker's loop, and the
// synchronous path (process(): the worker's or, inline, the caller's thread).
#include "stream_engine.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <stdexcept>

#include "dispatcher.h"
#include "engine_parts.h"
#include "gk/device.h"
#include "gk/loader.h"
#include "gk/memory.h"
#include "pinned_copy.h"

namespace gk {

using engine_detail::check_slot;
using engine_detail::Clock;
using engine_detail::kPollUs;
using engine_detail::now_ns;


// ---------------------------------------------------------------------------------------------
// The worker thread
// ---------------------------------------------------------------------------------------------

void StreamEngine::worker_main() {
    try {
        device_->make_current();
        const DriverApi& api = driver();
        const size_t K = slots_.size();
        const int spin = options_.spin_us;
        std::deque<int> inflight;
        uint64_t taken = 0;
        auto take_new = [&] {
            const uint64_t available = submitted_.load();
            while (taken < available) {
                const int s = ring_[taken % K];
                ++taken;
                enqueue_block(s);
                inflight.push_back(s);
            }
        };
        auto more_or_stop = [&] { return submitted_.load() > taken || stop_.load(); };
        auto more = [&] { return submitted_.load() > taken; };  // while draining, stop changes nothing
        for (;;) {
            take_new();
            if (inflight.empty()) {
                if (stop_.load() && submitted_.load() == taken) break;
                to_worker_.wait(more_or_stop, spin);
                continue;
            }
            const int s = inflight.front();
            Slot& slot = *slots_[static_cast<size_t>(s)];
            const auto deadline = Clock::now() + std::chrono::microseconds(spin);
            for (;;) {
                const CUresult r = api.cuEventQuery(slot.ev_done);
                if (r == CUDA_SUCCESS) break;
                if (r != CUDA_ERROR_NOT_READY)
                    cu_check(r, "cuEventQuery",
                             "waiting for a block of stages " + stage_names() + " (slot " + std::to_string(s) + ")");
                if (submitted_.load() > taken) {
                    // Queue the next block at once: its H2D overlaps this block's compute.
                    take_new();
                    continue;
                }
                if (inflight.size() == K) {
                    // Every slot is in flight: nothing can be handed over until this one is done.
                    const CUresult rs = api.cuEventSynchronize(slot.ev_done);
                    if (rs != CUDA_SUCCESS)
                        cu_check(rs, "cuEventSynchronize",
                                 "waiting for a block of stages " + stage_names() + " (slot " + std::to_string(s) + ")");
                    break;
                }
                if (Clock::now() < deadline) {
                    cpu_relax();
                    continue;
                }
                to_worker_.wait_for(more, 0, kPollUs);
            }
            slot.t_done_seen = now_ns();
            note_gpu_time(slot);
            counters_.completion_waits.fetch_add(1, std::memory_order_relaxed);
            inflight.pop_front();
            counters_.blocks.fetch_add(1, std::memory_order_relaxed);
            slot.state.store(kDone);
            completed_.fetch_add(1);
            to_caller_.notify();
        }
    } catch (const DeviceError& e) {
        fail(e.what(), e.call(), e.code(), e.code_name());
    } catch (const std::exception& e) {
        fail(std::string("the engine's worker failed: ") + e.what(), {}, 0, {});
    }
}

// ---------------------------------------------------------------------------------------------
// Caller side
// ---------------------------------------------------------------------------------------------

void StreamEngine::check_submission(int s, int64_t n_valid, bool final) const {
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    const int64_t items = block_items();
    if (n_valid < 0 || n_valid > items)
        throw std::invalid_argument("a block holds 0.." + std::to_string(items) + " items, got " +
                                    std::to_string(n_valid));
    if (n_valid < items && !final)
        throw std::invalid_argument("a partial block (" + std::to_string(n_valid) + " of " +
                                    std::to_string(items) + " items) must be the final block of the stream");
}

void StreamEngine::submit(int s, int64_t n_valid, bool final) {
    check_usable("submit");
    if (exclusive_.load())
        throw std::invalid_argument("submit() while reset() or a timing method runs on this engine");
    check_submission(s, n_valid, final);
    Slot& slot = *slots_[static_cast<size_t>(s)];
    init_input(slot);  // never filled nor viewed: a block of zeros, as before
    int expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kSubmitted))
        throw std::invalid_argument("slot " + std::to_string(s) +
                                    " is still in flight: wait() for it before submitting it again");
    slot.n_in = n_valid;
    slot.final = final;
    std::shared_ptr<Dispatcher> scheduled;
    bool helps = false;
    {
        // One producer at a time: the ring index and the published count move together.
        std::lock_guard<std::mutex> lock(producer_mutex_);
        if (dispatcher_) {
            // Scheduled mode: the block becomes a scheduler task; its hand-over time is its
            // arrival (read under the mutex, so one engine's arrivals never go backwards).
            sched_posted_.fetch_add(1);
            try {
                dispatcher_->post(this, sched_stream_, s, Dispatcher::now_ns());
            } catch (...) {
                sched_posted_.fetch_sub(1);
                slot.state.store(kFree);
                throw;
            }
            scheduled = dispatcher_;
            helps = help_dispatcher_;
        } else {
            const uint64_t k = submitted_.load();
            ring_[k % slots_.size()] = s;
            submitted_.store(k + 1);
        }
    }
    if (scheduled) {
        // a realtime stream launches it now if the scheduler says so, whether the worker runs or not
        if (helps) scheduled->help(this, true);
    } else {
        to_worker_.notify();
    }
}

int64_t StreamEngine::wait(int s) {
    if (closed_.load()) throw Error("StreamEngine.wait(): the engine is closed");
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    Slot& slot = *slots_[static_cast<size_t>(s)];
    if (slot.state.load() == kFree)
        throw std::invalid_argument("slot " + std::to_string(s) + " was not submitted");
    auto ready = [&] { return slot.state.load() == kDone || failed_.load(); };
    std::shared_ptr<Dispatcher> helped;
    {
        std::lock_guard<std::mutex> lock(producer_mutex_);
        if (help_dispatcher_) helped = dispatcher_;
    }
    if (helped && !ready()) {
        // A realtime stream helps the dispatcher while spinning (polling turns see this block
        // too), so that the hand-back does not wait for its worker thread to get a CPU.
        const auto deadline = Clock::now() + std::chrono::microseconds(options_.spin_us);
        for (unsigned i = 1; !ready(); ++i) {
            if (helped->help(this, false)) continue;
            cpu_relax();
            if ((i & 15u) == 0 && Clock::now() >= deadline) break;
        }
    }
    to_caller_.wait(ready, helped ? 0 : options_.spin_us);
    if (slot.state.load() == kDone) {
        const int64_t n = slot.n_out;
        slot.state.store(kFree);
        return n;
    }
    rethrow_failure();
}

void StreamEngine::fill(int s, const void* block, int64_t n) {
    check_fill(s, n);
    copy_into_slot(*slots_[static_cast<size_t>(s)], block, n);
}

void StreamEngine::fill_bytes(int s, size_t offset, const void* src, size_t bytes) {
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    Slot& slot = *slots_[static_cast<size_t>(s)];
    if (slot.state.load() != kFree)
        throw std::invalid_argument("slot " + std::to_string(s) + " still holds a submitted block");
    const size_t size = slot.h_in->nbytes();
    if (offset > size || bytes > size - offset)
        throw std::invalid_argument("fill_bytes(): bytes [" + std::to_string(offset) + ", " +
                                    std::to_string(offset + bytes) + ") lie outside the slot's " +
                                    std::to_string(size) + "-byte input");
    init_input(slot);  // the bytes it does not write read as zeros
    copy_to_pinned(static_cast<unsigned char*>(slot.h_in->data()) + offset, static_cast<const unsigned char*>(src),
                   bytes);
}

void StreamEngine::check_fill(int s, int64_t n) const {
    // a graph's sources are written into their slices of the packed input (CudaGraphEngine), or
    // the packed input is written whole (a full block of every source: run_paced, the instrument)
    const TensorDesc& in = input_desc();
    if (plan_.enabled && n != in.items)
        throw std::invalid_argument("a graph engine's input is filled source by source through input_slot(), "
                                    "or whole (" + std::to_string(in.items) + " float32 words)");
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    if (n < 1 || n > in.items)
        throw std::invalid_argument("a block holds 1.." + std::to_string(in.items) + " items, got " +
                                    std::to_string(n));
    if (slots_[static_cast<size_t>(s)]->state.load() != kFree)
        throw std::invalid_argument("slot " + std::to_string(s) + " still holds a submitted block");
}

void StreamEngine::copy_into_slot(Slot& slot, const void* block, int64_t n) {
    const TensorDesc& in = input_desc();
    const size_t item_bytes = dtype_size(in.dtype) * static_cast<size_t>(in.frames() ? in.bins : 1);
    const size_t full_row = item_bytes * static_cast<size_t>(in.items);
    const size_t row = item_bytes * static_cast<size_t>(n);
    auto* dst = static_cast<unsigned char*>(slot.h_in->data());
    const auto* src = static_cast<const unsigned char*>(block);
    if (n == in.items) {
        copy_to_pinned(dst, src, in.nbytes());
    } else {
        for (int64_t c = 0; c < in.channels; ++c) {
            copy_to_pinned(dst + c * full_row, src + c * row, row);
            std::memset(dst + c * full_row + row, 0, full_row - row);
        }
    }
    slot.in_init.store(true, std::memory_order_release);  // every byte of it written
}

int64_t StreamEngine::process(int s, const void* block, int64_t n, bool final, void* out,
                              int64_t out_row_items) {
    if (closed_.load()) throw Error("StreamEngine.process(): the engine is closed");
    check_slot(s, slots());
    const bool tracing = tracing_.load(std::memory_order_relaxed);
    BlockTrace t;
    if (tracing) t.call = now_ns();
    const bool scheduled = attached();
    fill(s, block, n);
    if (tracing) t.filled = now_ns();
    int64_t n_out = 0;
    if (!(options_.inline_submit && !scheduled && process_inline(s, n, final, &n_out))) {
        submit(s, n, final);
        n_out = wait(s);
    }
    if (tracing) t.woke = now_ns();
    if (out) copy_output(s, n_out, out, out_row_items > 0 ? out_row_items : n_out);
    if (tracing) {
        t.copied = out ? now_ns() : t.woke;
        const Slot& slot = *slots_[static_cast<size_t>(s)];
        t.launch_begin = slot.t_launch_begin;
        t.launched = slot.t_launched;
        t.done_seen = slot.t_done_seen;
        t.gpu_ns = slot.gpu_ns;
        t.scheduled = scheduled ? 1 : 0;
        record_trace(t);
    }
    return n_out;
}

int64_t StreamEngine::process_filled(int s, int64_t n, bool final) {
    if (closed_.load()) throw Error("StreamEngine.process_filled(): the engine is closed");
    check_slot(s, slots());
    int64_t n_out = 0;
    if (!(options_.inline_submit && !attached() && process_inline(s, n, final, &n_out))) {
        submit(s, n, final);
        n_out = wait(s);
    }
    return n_out;
}

bool StreamEngine::try_wait(int s, int64_t* n_out) {
    if (closed_.load()) throw Error("StreamEngine.try_wait(): the engine is closed");
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    Slot& slot = *slots_[static_cast<size_t>(s)];
    if (slot.state.load() == kFree) throw std::invalid_argument("slot " + std::to_string(s) + " was not submitted");
    if (slot.state.load() != kDone && !failed_.load()) {
        std::shared_ptr<Dispatcher> helped;
        {
            std::lock_guard<std::mutex> lock(producer_mutex_);
            if (help_dispatcher_) helped = dispatcher_;
        }
        if (helped) helped->help(this, false);
    }
    if (slot.state.load() == kDone) {
        *n_out = slot.n_out;
        slot.state.store(kFree);
        return true;
    }
    if (failed_.load()) rethrow_failure();
    return false;
}

void StreamEngine::copy_output(int s, int64_t n_out, void* dst, int64_t row_items) const {
    if (s < 0 || s >= slots()) throw std::invalid_argument("no slot " + std::to_string(s));
    const TensorDesc& d = output_desc();
    if (plan_.enabled && (n_out != d.items || row_items != d.items))
        throw std::invalid_argument("a graph engine's sinks are read from their slices of output_slot(), or "
                                    "the packed output whole");
    if (n_out < 0 || n_out > d.items || row_items < n_out)
        throw std::invalid_argument("copy_output: " + std::to_string(n_out) + " items into rows of " +
                                    std::to_string(row_items) + " (block of " + std::to_string(d.items) + ")");
    const size_t item = dtype_size(d.dtype) * static_cast<size_t>(d.frames() ? d.bins : 1);
    const auto* src = static_cast<const unsigned char*>(slots_[static_cast<size_t>(s)]->h_out->data());
    auto* to = static_cast<unsigned char*>(dst);
    if (row_items == d.items && n_out == d.items) {
        std::memcpy(to, src, item * static_cast<size_t>(d.channels * d.items));
        return;
    }
    for (int64_t c = 0; c < d.channels; ++c)
        std::memcpy(to + static_cast<size_t>(c * row_items) * item, src + static_cast<size_t>(c * d.items) * item,
                    item * static_cast<size_t>(n_out));
}

bool StreamEngine::process_inline(int s, int64_t n_valid, bool final, int64_t* n_out) {
    // control_mutex_: reset(), close() and the timing methods cannot start (or tear the streams
    // down) while this thread uses them; when one of them holds it, take the worker path, which
    // refuses or queues exactly as without inline_submit.
    std::unique_lock<std::mutex> control(control_mutex_, std::try_to_lock);
    if (!control.owns_lock()) return false;
    check_usable("process");
    check_submission(s, n_valid, final);
    Slot& slot = *slots_[static_cast<size_t>(s)];
    {
        // Producers hand slots to the worker under producer_mutex_; with it held and every
        // handed-over block completed (completed_ == submitted_), the worker has nothing to issue
        // and nothing to wait for, and nothing new can reach it until the mutex is released.
        // Keep it until this block is queued, so that a block submitted meanwhile by another
        // thread is queued after this one on the same streams (stream order = state order).
        std::unique_lock<std::mutex> producer(producer_mutex_);
        // Idle = every other slot is free: each block handed to the worker was collected with
        // wait(). A submitted, uncollected block (done or not) sends this one through the worker
        // too, so the path depends on the call sequence only, never on timing.
        for (size_t k = 0; k < slots_.size(); ++k)
            if (static_cast<int>(k) != s && slots_[k]->state.load() != kFree) return false;
        // All collected, so all marked done; the worker counts a block completed just after it
        // marks the slot done: wait out that gap (nanoseconds; nothing else can be pending).
        while (completed_.load() != submitted_.load()) {
            if (failed_.load()) rethrow_failure();
            cpu_relax();
        }
        int expected = kFree;
        if (!slot.state.compare_exchange_strong(expected, kSubmitted))
            throw std::invalid_argument("slot " + std::to_string(s) +
                                        " is still in flight: wait() for it before submitting it again");
        slot.n_in = n_valid;
        slot.final = final;
        try {
            device_->make_current();  // the context on the calling thread (a no-op when it is)
            enqueue_block(s);
        } catch (const DeviceError& e) {
            slot.state.store(kFree);
            fail(e.what(), e.call(), e.code(), e.code_name());
            throw;
        } catch (const std::exception& e) {
            slot.state.store(kFree);
            fail(std::string("queueing a block failed: ") + e.what(), {}, 0, {});
            rethrow_failure();
        }
    }
    // The block's completion, as the worker waits for it: spin on the event for spin_us, then a
    // blocking synchronise. One completion wait.
    const DriverApi& api = driver();
    auto what = [&] {  // built on the error path only
        return "waiting for a block of stages " + stage_names() + " (slot " + std::to_string(s) + ")";
    };
    try {
        const auto deadline = Clock::now() + std::chrono::microseconds(options_.spin_us);
        for (unsigned i = 0;; ++i) {
            const CUresult r = api.cuEventQuery(slot.ev_done);
            if (r == CUDA_SUCCESS) break;
            if (r != CUDA_ERROR_NOT_READY) cu_check(r, "cuEventQuery", what());
            if ((i & 15u) == 15u && Clock::now() >= deadline) {
                const CUresult rs = api.cuEventSynchronize(slot.ev_done);
                if (rs != CUDA_SUCCESS) cu_check(rs, "cuEventSynchronize", what());
                break;
            }
            cpu_relax();
        }
    } catch (const DeviceError& e) {
        slot.state.store(kFree);
        fail(e.what(), e.call(), e.code(), e.code_name());
        throw;
    }
    slot.t_done_seen = now_ns();
    note_gpu_time(slot);
    counters_.completion_waits.fetch_add(1, std::memory_order_relaxed);
    counters_.blocks.fetch_add(1, std::memory_order_relaxed);
    inline_blocks_.fetch_add(1, std::memory_order_relaxed);
    *n_out = slot.n_out;
    slot.state.store(kFree);  // the caller's again, as after wait()
    return true;
}

}  // namespace gk
