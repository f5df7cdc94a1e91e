// The PortAudio side of live audio: see gk/audio_bridge.h.
#include "gk/audio_bridge.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gk::audio {

namespace {

int64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Waits on `sem` for at most `seconds` (sem_timedwait takes a CLOCK_REALTIME deadline).
void sem_wait_for(sem_t& sem, double seconds) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + int64_t(seconds * 1e9);
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    while (sem_timedwait(&sem, &ts) != 0 && errno == EINTR) {
    }
}

}  // namespace

// ------------------------------------------------------------------------------------ FrameRing

FrameRing::FrameRing(size_t capacity_frames, int channels)
    : capacity_(capacity_frames), channels_(channels), data_(capacity_frames * size_t(channels)) {
    if (capacity_frames == 0 || channels <= 0)
        throw std::invalid_argument("a frame ring needs at least one frame and one channel");
}

size_t FrameRing::readable() const {
    return size_t(head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_acquire));
}

size_t FrameRing::writable() const { return capacity_ - readable(); }

// copy(ring frame pointer, offset into the caller's frames, count) for at most two spans.
template <class Copy>
size_t FrameRing::push(size_t frames, Copy copy) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    const size_t n = std::min(frames, capacity_ - size_t(head - tail));
    const size_t pos = size_t(head % capacity_);
    const size_t first = std::min(n, capacity_ - pos);
    copy(data_.data() + pos * channels_, size_t(0), first);
    if (n > first) copy(data_.data(), first, n - first);
    head_.store(head + n, std::memory_order_release);
    return n;
}

template <class Copy>
size_t FrameRing::pop(size_t frames, Copy copy) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    const size_t n = std::min(frames, size_t(head - tail));
    const size_t pos = size_t(tail % capacity_);
    const size_t first = std::min(n, capacity_ - pos);
    copy(data_.data() + pos * channels_, size_t(0), first);
    if (n > first) copy(data_.data(), first, n - first);
    tail_.store(tail + n, std::memory_order_release);
    return n;
}

size_t FrameRing::push_gather(const float* src, size_t frames, int src_channels, const int* map) {
    const int ch = channels_;
    return push(frames, [&](float* ring, size_t offset, size_t count) {
        const float* s = src + offset * src_channels;
        for (size_t f = 0; f < count; ++f, s += src_channels, ring += ch)
            for (int c = 0; c < ch; ++c) ring[c] = s[map[c]];
    });
}

size_t FrameRing::push_planar(const float* src, size_t stride, size_t frames) {
    const int ch = channels_;
    return push(frames, [&](float* ring, size_t offset, size_t count) {
        for (int c = 0; c < ch; ++c) {
            const float* s = src + size_t(c) * stride + offset;
            float* r = ring + c;
            for (size_t f = 0; f < count; ++f, r += ch) *r = s[f];
        }
    });
}

size_t FrameRing::push_silence(size_t frames) {
    const int ch = channels_;
    return push(frames, [&](float* ring, size_t, size_t count) {
        std::memset(ring, 0, count * size_t(ch) * sizeof(float));
    });
}

size_t FrameRing::pop_scatter(float* dst, size_t frames, int dst_channels, const int* map) {
    const int ch = channels_;
    return pop(frames, [&](const float* ring, size_t offset, size_t count) {
        float* d = dst + offset * dst_channels;
        for (size_t f = 0; f < count; ++f, d += dst_channels, ring += ch)
            for (int c = 0; c < ch; ++c) d[map[c]] = ring[c];
    });
}

size_t FrameRing::pop_planar(float* dst, size_t stride, size_t frames) {
    const int ch = channels_;
    return pop(frames, [&](const float* ring, size_t offset, size_t count) {
        for (int c = 0; c < ch; ++c) {
            float* d = dst + size_t(c) * stride + offset;
            const float* r = ring + c;
            for (size_t f = 0; f < count; ++f, r += ch) d[f] = *r;
        }
    });
}

size_t FrameRing::discard(size_t frames) {
    return pop(frames, [](const float*, size_t, size_t) {});
}

// ---------------------------------------------------------------------------------- AudioBridge

AudioBridge::AudioBridge(const BridgeConfig& config) : config_(config) {
    if (!(config.sample_rate > 0)) throw std::invalid_argument("sample_rate must be > 0");
    auto check_map = [](const std::vector<int>& map, int device_channels, const char* side) {
        for (int c : map)
            if (c < 0 || c >= device_channels)
                throw std::invalid_argument(std::string(side) + " channel " + std::to_string(c) +
                                            " is outside the stream's " +
                                            std::to_string(device_channels) + " channels");
    };
    if (config.device_in_channels > 0) {
        if (config.in_map.empty()) throw std::invalid_argument("an input side needs a channel map");
        check_map(config.in_map, config.device_in_channels, "input");
        in_ = std::make_unique<FrameRing>(config.in_capacity, int(config.in_map.size()));
    }
    if (config.device_out_channels > 0) {
        if (config.out_map.empty()) throw std::invalid_argument("an output side needs a channel map");
        check_map(config.out_map, config.device_out_channels, "output");
        out_ = std::make_unique<FrameRing>(config.out_capacity, int(config.out_map.size()));
    }
    if (!in_ && !out_) throw std::invalid_argument("an audio bridge needs an input or an output side");
    sem_init(&in_sem_, 0, 0);
    sem_init(&out_sem_, 0, 0);
}

AudioBridge::~AudioBridge() {
    sem_destroy(&in_sem_);
    sem_destroy(&out_sem_);
}

int AudioBridge::callback(const void* input, void* output, unsigned long frames, const PaTimeInfo* time,
                          PaFlags flags, void* user) {
    static_cast<AudioBridge*>(user)->on_callback(static_cast<const float*>(input),
                                                 static_cast<float*>(output), size_t(frames), time, flags);
    return kPaContinue;
}

void AudioBridge::on_callback(const float* in, float* out, size_t frames, const PaTimeInfo* time,
                              PaFlags flags) {
    callbacks_.fetch_add(1, std::memory_order_relaxed);
    device_frames_.fetch_add(frames, std::memory_order_relaxed);
    for (int bit = 0; bit < 5; ++bit)
        if (flags & (PaFlags(1) << bit)) flag_counts_[bit].fetch_add(1, std::memory_order_relaxed);

    if (in_ && in) {
        const uint64_t first = in_->written();
        const size_t n = in_->push_gather(in, frames, config_.device_in_channels, config_.in_map.data());
        if (n < frames) {
            in_overrun_frames_.fetch_add(frames - n, std::memory_order_relaxed);
            in_overrun_events_.fetch_add(1, std::memory_order_relaxed);
        }
        marks_[mark_count_++ % kMarks] = InputMark{first, n, time ? time->input_adc : 0.0};
        std::atomic_thread_fence(std::memory_order_seq_cst);  // publish, then look for a waiter
        if (in_waiting_.load(std::memory_order_relaxed)) sem_post(&in_sem_);
    }
    if (out_ && out) {
        std::memset(out, 0, frames * size_t(config_.device_out_channels) * sizeof(float));
        const uint64_t first = out_->read_count();
        const size_t n = out_->pop_scatter(out, frames, config_.device_out_channels, config_.out_map.data());
        if (n < frames && !ending_.load(std::memory_order_acquire)) {
            out_underrun_frames_.fetch_add(frames - n, std::memory_order_relaxed);
            out_underrun_events_.fetch_add(1, std::memory_order_relaxed);
        }
        // The first pipeline frame played here (after any pre-roll silence) and where it sits.
        if (in_ && time && n > 0 && first + n > primed_) {
            const size_t offset = first >= primed_ ? 0 : size_t(primed_ - first);
            measure_latency(first + offset - primed_, offset, time);
        }
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (out_waiting_.load(std::memory_order_relaxed)) sem_post(&out_sem_);
    }
    last_callback_ns_.store(monotonic_ns(), std::memory_order_release);
}

// Pipeline sample `sample` (input index = output index: the duplex pipeline keeps its rate) was
// captured in some earlier callback and plays `offset` frames into this one.
void AudioBridge::measure_latency(uint64_t sample, size_t offset, const PaTimeInfo* time) {
    if (time->input_adc == 0.0 && time->output_dac == 0.0) return;  // the host API gives no times
    const size_t look = size_t(std::min<uint64_t>(mark_count_, kMarks));
    for (size_t i = 1; i <= look; ++i) {
        const InputMark& m = marks_[(mark_count_ - i) % kMarks];
        if (sample >= m.first && sample < m.first + m.frames) {
            const double sr = config_.sample_rate;
            const double adc = m.adc + double(sample - m.first) / sr;
            const double dac = time->output_dac + double(offset) / sr;
            const uint64_t head = lat_head_.load(std::memory_order_relaxed);
            if (head - lat_tail_.load(std::memory_order_acquire) >= kLatencies) {
                latency_lost_.fetch_add(1, std::memory_order_relaxed);
                return;
            }
            latencies_[head % kLatencies] = dac - adc;
            lat_head_.store(head + 1, std::memory_order_release);
            return;
        }
        if (m.first + m.frames <= sample) return;  // older marks hold earlier frames only
    }
}

size_t AudioBridge::take_latencies(double* dst, size_t max) {
    const uint64_t tail = lat_tail_.load(std::memory_order_relaxed);
    const uint64_t head = lat_head_.load(std::memory_order_acquire);
    const size_t n = size_t(std::min<uint64_t>(head - tail, max));
    for (size_t i = 0; i < n; ++i) dst[i] = latencies_[(tail + i) % kLatencies];
    lat_tail_.store(tail + n, std::memory_order_release);
    return n;
}

bool AudioBridge::input_ready(size_t frames) const { return in_->readable() >= frames; }
bool AudioBridge::output_space(size_t frames) const { return out_->writable() >= frames; }
bool AudioBridge::output_empty(size_t) const { return out_->readable() == 0; }

bool AudioBridge::wait(sem_t& sem, std::atomic<bool>& waiting, double timeout_s,
                       bool (AudioBridge::*ready)(size_t) const, size_t frames) {
    if ((this->*ready)(frames)) return true;
    const int64_t deadline = monotonic_ns() + int64_t(std::max(0.0, timeout_s) * 1e9);
    waiting.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // announce, then look at the ring
    bool ok = false;
    for (;;) {
        if ((this->*ready)(frames)) {
            ok = true;
            break;
        }
        const int64_t left = deadline - monotonic_ns();
        if (left <= 0) break;
        // Slices bound a wake-up lost to the race between the fence above and the callback's.
        sem_wait_for(sem, std::min(double(left) * 1e-9, 0.02));
    }
    waiting.store(false, std::memory_order_relaxed);
    return ok;
}

size_t AudioBridge::read(float* dst, size_t stride, size_t frames, double timeout_s) {
    if (!in_) throw std::logic_error("this audio stream has no input side");
    if (frames > in_->capacity())
        throw std::invalid_argument("a read of " + std::to_string(frames) + " frames exceeds the input ring (" +
                                    std::to_string(in_->capacity()) + " frames)");
    if (!wait(in_sem_, in_waiting_, timeout_s, &AudioBridge::input_ready, frames)) return 0;
    return in_->pop_planar(dst, stride, frames);
}

size_t AudioBridge::write(const float* src, size_t stride, size_t frames, double timeout_s) {
    if (!out_) throw std::logic_error("this audio stream has no output side");
    if (frames > out_->capacity())
        throw std::invalid_argument("a write of " + std::to_string(frames) + " frames exceeds the output ring (" +
                                    std::to_string(out_->capacity()) + " frames)");
    if (!wait(out_sem_, out_waiting_, timeout_s, &AudioBridge::output_space, frames)) return 0;
    return out_->push_planar(src, stride, frames);
}

size_t AudioBridge::prime(size_t frames) {
    if (!out_) throw std::logic_error("this audio stream has no output side");
    const size_t n = out_->push_silence(frames);
    primed_ += n;
    return n;
}

bool AudioBridge::wait_drained(double timeout_s) {
    if (!out_) return true;
    return wait(out_sem_, out_waiting_, timeout_s, &AudioBridge::output_empty, 0);
}

BridgeStats AudioBridge::stats() const {
    BridgeStats s;
    auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    s.callbacks = get(callbacks_);
    s.device_frames = get(device_frames_);
    s.in_frames = in_ ? in_->written() : 0;
    s.in_overrun_frames = get(in_overrun_frames_);
    s.in_overrun_events = get(in_overrun_events_);
    s.out_frames = out_ ? out_->read_count() : 0;
    s.out_underrun_frames = get(out_underrun_frames_);
    s.out_underrun_events = get(out_underrun_events_);
    s.input_underflow = get(flag_counts_[0]);
    s.input_overflow = get(flag_counts_[1]);
    s.output_underflow = get(flag_counts_[2]);
    s.output_overflow = get(flag_counts_[3]);
    s.priming_output = get(flag_counts_[4]);
    s.latency_samples = lat_head_.load(std::memory_order_acquire);
    s.latency_lost = get(latency_lost_);
    s.last_callback_ns = last_callback_ns_.load(std::memory_order_acquire);
    return s;
}

}  // namespace gk::audio
