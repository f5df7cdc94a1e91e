// Block transfers as kernels, for the engine's mapped_io latency mode (docs/cuda.md, "Mapped I/O"),
// and the check of every block's input for non-finite samples.
//
// The slot's pinned host buffers are mapped into the device's address space (cuMemHostAlloc with
// CU_MEMHOSTALLOC_DEVICEMAP); instead of two copy-engine DMAs per block, gk_io_pull reads the
// input straight from host memory into the slot's device input and gk_io_push writes the device
// output straight into host memory. Many 16-byte loads in flight per thread and many CTAs keep the
// PCIe/C2C link busy; a tail of fewer than 16 bytes is copied byte by byte.
#include "gk_common.cuh"

#define GK_IO_UNROLL 4

// dst[0, nbytes) = src[0, nbytes) over the whole grid. FROM_HOST: src is mapped host memory,
// read with ld.global.cv (a system-memory line the GPU may hold is stale: fetch it again);
// else dst is mapped host memory, written with st.global.wt (straight through to system memory
// instead of waiting in L2 for a flush).
template <bool FROM_HOST, class T>
__device__ __forceinline__ T gk_io_load(const T* p) {
    if (FROM_HOST) return __ldcv(p);
    return *p;
}
template <bool FROM_HOST, class T>
__device__ __forceinline__ void gk_io_store(T* p, T v) {
    if (FROM_HOST)
        *p = v;
    else
        __stwt(p, v);
}

template <bool FROM_HOST>
__device__ __forceinline__ void gk_io_copy(unsigned char* dst, const unsigned char* src, gk_size_t nbytes) {
    const gk_size_t first = gk_thread_index();
    const gk_size_t stride = gk_grid_stride();
    if (!gk_aligned(dst, 16) || !gk_aligned(src, 16)) {
        // The engine's buffers are always 16-byte aligned; this keeps any other caller correct.
        for (gk_size_t i = first; i < nbytes; i += stride)
            gk_io_store<FROM_HOST>(dst + i, gk_io_load<FROM_HOST>(src + i));
        return;
    }
    const gk_size_t vectors = nbytes >> 4;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    // GK_IO_UNROLL independent loads are issued before the first store: with host memory a load
    // takes about a microsecond, so the link stays busy only with many requests in flight.
    for (gk_size_t i = first; i < vectors; i += GK_IO_UNROLL * stride) {
        uint4 v[GK_IO_UNROLL];
#pragma unroll
        for (int k = 0; k < GK_IO_UNROLL; ++k) {
            const gk_size_t j = i + k * stride;
            v[k] = j < vectors ? gk_io_load<FROM_HOST>(s + j) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int k = 0; k < GK_IO_UNROLL; ++k) {
            const gk_size_t j = i + k * stride;
            if (j < vectors) gk_io_store<FROM_HOST>(d + j, v[k]);
        }
    }
    const gk_size_t done = vectors << 4;  // the tail: fewer than 16 bytes
    if (first < nbytes - done)
        gk_io_store<FROM_HOST>(dst + done + first, gk_io_load<FROM_HOST>(src + done + first));
}

// Non-finite input samples (StreamEngine's input check; docs/cuda.md, "Non-finite input").
// Every block's input is scanned on the GPU where it arrives: in gk_io_pull with mapped I/O, else
// by gk_check_finite right after the H2D copy. Both kinds of block (float32, complex64) are
// float32 words; a word is non-finite (NaN, +-Inf) when its exponent bits are all ones. A slot's
// record is two device words {count, index of the first non-finite word} (the host resets it to
// {0, ~0}); its flag is a mapped host word the kernel sets to 1 when it found any, so that the
// host tests one word per block and reads the record only then. With `zero` the words are
// replaced by 0 in the device input, before the first op reads the block.
__device__ __forceinline__ bool gk_nonfinite_word(unsigned w) { return (w & 0x7f800000u) == 0x7f800000u; }

__device__ __forceinline__ unsigned gk_nf_word(unsigned w, gk_size_t index, bool zero, unsigned& count,
                                               gk_size_t& first) {
    if (!gk_nonfinite_word(w)) return w;
    ++count;
    if (index < first) first = index;
    return zero ? 0u : w;
}

__device__ __forceinline__ uint4 gk_nf_vector(uint4 v, gk_size_t word0, bool zero, unsigned& count,
                                              gk_size_t& first) {
    v.x = gk_nf_word(v.x, word0, zero, count, first);
    v.y = gk_nf_word(v.y, word0 + 1, zero, count, first);
    v.z = gk_nf_word(v.z, word0 + 2, zero, count, first);
    v.w = gk_nf_word(v.w, word0 + 3, zero, count, first);
    return v;
}

// Every thread of the CTA calls it once: nothing happens unless one of them found a word.
__device__ __forceinline__ void gk_nf_report(unsigned count, gk_size_t first, unsigned long long* record,
                                             unsigned* flag) {
    if (!__syncthreads_or(count != 0u)) return;
    if (count != 0u) {
        atomicAdd(&record[0], (unsigned long long)count);
        atomicMin(&record[1], (unsigned long long)first);
    }
    if (threadIdx.x == 0) {
        *reinterpret_cast<volatile unsigned*>(flag) = 1u;
        __threadfence_system();
    }
}

// data[0, nwords): the block in the slot's device input (16-byte aligned, as every engine buffer).
extern "C" __global__ void gk_check_finite(unsigned* data, gk_size_t nwords, unsigned long long* record,
                                           unsigned* flag, unsigned zero) {
    unsigned count = 0u;
    gk_size_t first = ~0ull;
    const gk_size_t vectors = nwords >> 2;
    uint4* d = reinterpret_cast<uint4*>(data);
    for (gk_size_t i = gk_thread_index(); i < vectors; i += gk_grid_stride()) {
        const uint4 v = d[i];
        const uint4 w = gk_nf_vector(v, i << 2, zero != 0u, count, first);
        if (w.x != v.x || w.y != v.y || w.z != v.z || w.w != v.w) d[i] = w;
    }
    const gk_size_t tail = gk_thread_index() + (vectors << 2);
    if (tail < nwords) {
        const unsigned v = data[tail];
        const unsigned w = gk_nf_word(v, tail, zero != 0u, count, first);
        if (w != v) data[tail] = w;
    }
    gk_nf_report(count, first, record, flag);
}

// Host -> device: the slot's mapped pinned input into its device input, checked for non-finite
// words on the way when nf_record is given (the engine's buffers: 16-byte aligned, a whole number
// of 4-byte words).
//
// On SM 9.0+ it lets the next kernel launch at once (griddepcontrol.launch_dependents): one
// launched as a programmatic dependent launch (fir_mix) then does what does not need the block
// while this copies it, and waits for this kernel (griddepcontrol.wait: until it has finished,
// the zeroing of non-finite words included) before reading it.
extern "C" __global__ void gk_io_pull(unsigned char* dst, const unsigned char* src, gk_size_t nbytes,
                                      unsigned long long* nf_record, unsigned* nf_flag, unsigned nf_zero) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    if (nf_record == nullptr || !gk_aligned(dst, 16) || !gk_aligned(src, 16)) {
        gk_io_copy<true>(dst, src, nbytes);
        return;
    }
    const bool zero = nf_zero != 0u;
    unsigned count = 0u;
    gk_size_t first = ~0ull;
    const gk_size_t first_thread = gk_thread_index();
    const gk_size_t stride = gk_grid_stride();
    const gk_size_t vectors = nbytes >> 4;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (gk_size_t i = first_thread; i < vectors; i += GK_IO_UNROLL * stride) {
        uint4 v[GK_IO_UNROLL];
#pragma unroll
        for (int k = 0; k < GK_IO_UNROLL; ++k) {
            const gk_size_t j = i + k * stride;
            v[k] = j < vectors ? gk_io_load<true>(s + j) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int k = 0; k < GK_IO_UNROLL; ++k) {
            const gk_size_t j = i + k * stride;
            if (j < vectors) gk_io_store<true>(d + j, gk_nf_vector(v[k], j << 2, zero, count, first));
        }
    }
    const gk_size_t words = nbytes >> 2, tail = first_thread + (vectors << 2);  // fewer than 4 words left
    if (tail < words) {
        const unsigned v = gk_io_load<true>(reinterpret_cast<const unsigned*>(src) + tail);
        gk_io_store<true>(reinterpret_cast<unsigned*>(dst) + tail, gk_nf_word(v, tail, zero, count, first));
    }
    gk_nf_report(count, first, nf_record, nf_flag);
}

// Device -> host: the slot's device output into its mapped pinned output; the kernel's completion
// (the event the engine records after it) orders these writes before the host's reads.
extern "C" __global__ void gk_io_push(unsigned char* dst, const unsigned char* src, gk_size_t nbytes) {
    gk_io_copy<false>(dst, src, nbytes);
}

// Prewarm of a paced block (EngineInstrument::process with a release time and prewarm; docs/cuda.md,
// "Paced blocks"): one thread per 4 KiB page reads one word of each mapped pinned buffer, so that
// the GPU's translations of the slot's host pages (and the launch path itself) are warm when the
// block's pull kernel reads them after the release. Reads only (volatile: never optimised away).
extern "C" __global__ void gk_io_touch(const unsigned* a, gk_size_t a_bytes, const unsigned* b, gk_size_t b_bytes) {
    const gk_size_t pages_a = (a_bytes + 4095) / 4096, pages_b = (b_bytes + 4095) / 4096;
    for (gk_size_t i = gk_thread_index(); i < pages_a + pages_b; i += gk_grid_stride()) {
        const unsigned* p = i < pages_a ? a + i * 1024 : b + (i - pages_a) * 1024;
        (void)*reinterpret_cast<const volatile unsigned*>(p);
    }
}
