// The bridge between a PortAudio stream and a pipeline thread: two lock-free single-producer
// single-consumer rings of float32 frames and the PortAudio callback that serves them.
//
// The callback is plain C++ (sounddevice opens the stream with its address, as python-rtmixer
// does): it never takes a lock, never allocates, never touches Python. It copies the device's
// input frames (the mapped channels) into the input ring and the output ring's frames into the
// device's output buffer, counts every overflow, underrun and PortAudio status flag, and records
// each block's ADC-to-DAC latency. Nothing here links PortAudio: its callback types are
// declared below, ABI-compatible with portaudio.h.
#pragma once

#include <semaphore.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gk::audio {

// portaudio.h's PaStreamCallbackTimeInfo and status flags.
struct PaTimeInfo {
    double input_adc;   // inputBufferAdcTime
    double current;     // currentTime
    double output_dac;  // outputBufferDacTime
};
using PaFlags = unsigned long;
constexpr PaFlags kInputUnderflow = 0x1, kInputOverflow = 0x2, kOutputUnderflow = 0x4,
                  kOutputOverflow = 0x8, kPrimingOutput = 0x10;
constexpr int kPaContinue = 0;

// Single-producer single-consumer ring of interleaved float32 frames. The producer and the
// consumer each own one index; they publish it with release and read the other's with acquire.
class FrameRing {
public:
    FrameRing(size_t capacity_frames, int channels);

    int channels() const { return channels_; }
    size_t capacity() const { return capacity_; }
    size_t readable() const;  // frames the consumer may take
    size_t writable() const;  // frames the producer may add
    uint64_t written() const { return head_.load(std::memory_order_acquire); }
    uint64_t read_count() const { return tail_.load(std::memory_order_acquire); }

    // Producer. `gather`: frames of `src_channels` interleaved channels, ring channel c taken
    // from src channel map[c]. `planar`: channel c at src + c * stride. Return frames added.
    size_t push_gather(const float* src, size_t frames, int src_channels, const int* map);
    size_t push_planar(const float* src, size_t stride, size_t frames);
    size_t push_silence(size_t frames);

    // Consumer. `scatter`: into frames of `dst_channels` interleaved channels (ring channel c to
    // dst channel map[c]; unmapped dst channels untouched). `planar`: channel c at dst + c *
    // stride. Return frames taken.
    size_t pop_scatter(float* dst, size_t frames, int dst_channels, const int* map);
    size_t pop_planar(float* dst, size_t stride, size_t frames);
    size_t discard(size_t frames);

private:
    template <class Copy>
    size_t push(size_t frames, Copy copy);
    template <class Copy>
    size_t pop(size_t frames, Copy copy);

    const size_t capacity_;
    const int channels_;
    std::vector<float> data_;
    alignas(64) std::atomic<uint64_t> head_{0};  // frames ever written
    alignas(64) std::atomic<uint64_t> tail_{0};  // frames ever read
};

struct BridgeConfig {
    double sample_rate = 48000.0;
    int device_in_channels = 0;   // channels the stream opens on the input side (0: no input)
    std::vector<int> in_map;      // pipeline input channel c = device channel in_map[c]
    int device_out_channels = 0;  // channels the stream opens on the output side (0: no output)
    std::vector<int> out_map;     // pipeline output channel c -> device channel out_map[c]
    size_t in_capacity = 0;       // frames
    size_t out_capacity = 0;      // frames
};

struct BridgeStats {
    uint64_t callbacks = 0;
    uint64_t device_frames = 0;        // frames the device asked for (callbacks x frames)
    uint64_t in_frames = 0;            // frames captured into the input ring
    uint64_t in_overrun_frames = 0;    // captured frames lost: the input ring was full
    uint64_t in_overrun_events = 0;    // callbacks that lost some
    uint64_t out_frames = 0;           // pipeline frames played (pre-roll silence included)
    uint64_t out_underrun_frames = 0;  // frames of silence played because the ring ran dry
    uint64_t out_underrun_events = 0;  // callbacks that played some
    uint64_t input_overflow = 0;       // PortAudio status flags, one count per callback
    uint64_t input_underflow = 0;
    uint64_t output_underflow = 0;
    uint64_t output_overflow = 0;
    uint64_t priming_output = 0;
    uint64_t latency_samples = 0;      // ADC-to-DAC measurements taken
    uint64_t latency_lost = 0;         // measurements not kept: the reader fell behind
    int64_t last_callback_ns = 0;      // CLOCK_MONOTONIC of the last callback (0: none yet)
};

class AudioBridge {
public:
    explicit AudioBridge(const BridgeConfig& config);
    ~AudioBridge();
    AudioBridge(const AudioBridge&) = delete;
    AudioBridge& operator=(const AudioBridge&) = delete;

    // The PortAudio stream callback; `user` is the AudioBridge.
    static int callback(const void* input, void* output, unsigned long frames, const PaTimeInfo* time,
                        PaFlags flags, void* user);

    const BridgeConfig& config() const { return config_; }
    FrameRing* input() { return in_.get(); }
    FrameRing* output() { return out_.get(); }

    // Pipeline thread. Both wait at most `timeout_s` for all `frames`; on time-out they move
    // nothing and return 0 (the caller decides whether the device stalled).
    size_t read(float* dst, size_t stride, size_t frames, double timeout_s);
    size_t write(const float* src, size_t stride, size_t frames, double timeout_s);
    // Silence into the output ring before the stream starts: the pre-roll.
    size_t prime(size_t frames);
    // Wait until the output ring is empty (all played); false on time-out.
    bool wait_drained(double timeout_s);
    // From now on an empty output ring is the end of the stream, not an underrun.
    void set_output_ending(bool ending) { ending_.store(ending, std::memory_order_release); }

    BridgeStats stats() const;
    // ADC-to-DAC latencies (seconds) measured since the last call, oldest first.
    size_t take_latencies(double* dst, size_t max);

private:
    struct InputMark {  // where one callback's input frames sit in the pipeline's stream
        uint64_t first = 0;
        uint64_t frames = 0;
        double adc = 0.0;
    };
    static constexpr size_t kMarks = 256;
    static constexpr size_t kLatencies = 8192;

    void on_callback(const float* in, float* out, size_t frames, const PaTimeInfo* time, PaFlags flags);
    void measure_latency(uint64_t first_real, size_t offset, const PaTimeInfo* time);
    bool wait(sem_t& sem, std::atomic<bool>& waiting, double timeout_s,
              bool (AudioBridge::*ready)(size_t) const, size_t frames);
    bool input_ready(size_t frames) const;
    bool output_space(size_t frames) const;
    bool output_empty(size_t) const;

    BridgeConfig config_;
    std::unique_ptr<FrameRing> in_, out_;
    uint64_t primed_ = 0;  // silent frames primed into the output ring (written before start)

    // Counters written only by the callback; read by stats() from other threads.
    std::atomic<uint64_t> callbacks_{0}, device_frames_{0}, in_overrun_frames_{0}, in_overrun_events_{0},
        out_underrun_frames_{0}, out_underrun_events_{0}, flag_counts_[5]{}, latency_lost_{0};
    std::atomic<int64_t> last_callback_ns_{0};
    std::atomic<bool> ending_{false};

    InputMark marks_[kMarks];  // written and read by the callback only
    uint64_t mark_count_ = 0;
    double latencies_[kLatencies];
    std::atomic<uint64_t> lat_head_{0}, lat_tail_{0};

    sem_t in_sem_, out_sem_;
    std::atomic<bool> in_waiting_{false}, out_waiting_{false};
};

}  // namespace gk::audio
