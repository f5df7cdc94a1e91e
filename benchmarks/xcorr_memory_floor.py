"""The memory floor beside xcorr's tensor kernel: its input reads and its output writes alone on
this GPU, with no arithmetic, against linear reads and writes of the same bytes. At 64 inputs,
1024 bins, 256 frames and runs of 64 the kernel reads the (inputs, frames, bins) complex64 block
once (128 MiB) and writes (2080 pairs, 4 runs, bins) complex64 (65 MiB). Its CTAs take 2 bins
(16 bytes of each 32-byte sector), so the reads and the writes are measured for 2, 4, 8 and 16
bins a CTA, laid out as the kernel lays them. Needs CuPy.

    python benchmarks/xcorr_memory_floor.py
"""
import numpy as np, cupy as cp

src = r'''
// the tensor kernel's fill: CTA (BINS bins, output frame blockIdx.y); a thread copies one bin's one frame of every
// (blockDim / (BINS * 16))-th input, 16 frames a round
extern "C" __global__ void read_pattern(float* sink, const float2* x, unsigned F, unsigned B, unsigned N,
                                        unsigned BINS, unsigned C) {
    const unsigned my_bin = threadIdx.x % BINS, my_frame = (threadIdx.x / BINS) % 16;
    const unsigned row0 = threadIdx.x / (BINS * 16), step = blockDim.x / (BINS * 16);
    const unsigned b = blockIdx.x * BINS + my_bin, f0 = blockIdx.y * N;
    float s = 0.0f;
    for (unsigned r = 0; r < N / 16; ++r)
        for (unsigned c = row0; c < C; c += step) {
            const float2 v = __ldg(x + ((size_t)c * F + f0 + r * 16 + my_frame) * B + b);
            s += v.x + v.y;
        }
    if (s == 123.0f) sink[0] = s;  // never: keeps the loads
}
// the epilogue: CTA (BINS bins, output frame blockIdx.y) writes every pair of its bins, consecutive threads its bins
extern "C" __global__ void write_pattern(float2* out, unsigned P, unsigned G, unsigned B, unsigned BINS) {
    const unsigned b0 = blockIdx.x * BINS, g = blockIdx.y;
    for (unsigned e = threadIdx.x; e < P * BINS; e += blockDim.x)
        out[((size_t)(e / BINS) * G + g) * B + b0 + e % BINS] = make_float2(1.0f, 2.0f);
}
extern "C" __global__ void read_linear(float* sink, const float4* x, size_t n4) {
    float s = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = __ldg(x + i);
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 123.0f) sink[0] = s;
}
extern "C" __global__ void write_linear(float4* out, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x)
        out[i] = make_float4(1.0f, 2.0f, 3.0f, 4.0f);
}
'''


def median_us(fn, grid, block, args, n=40):
    for _ in range(3):
        fn(grid, block, args)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for _ in range(n):
        e0.record(); fn(grid, block, args); e1.record(); e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    return float(np.median(ts))


def main() -> None:
    m = cp.RawModule(code=src)
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    print(f"{props['name'].decode()}, {sms} SMs", flush=True)
    C, F, N, B = 64, 256, 64, 1024
    G, P = F // N, C * (C + 1) // 2
    x, sink = cp.zeros((C, F, B), cp.complex64), cp.zeros(1, cp.float32)
    out = cp.zeros((P, G, B), cp.complex64)
    for bins in (2, 4, 8, 16):
        threads = max(128, 32 * bins)
        us = median_us(m.get_function("read_pattern"), (B // bins, G), (threads,),
                       (sink, x, np.uint32(F), np.uint32(B), np.uint32(N), np.uint32(bins), np.uint32(C)))
        print(f"reads as the kernel's, {bins:2d} bins a CTA: {us:6.1f} us, {x.nbytes / us / 1e6:.2f} TB/s", flush=True)
    us = median_us(m.get_function("read_linear"), (sms * 16,), (256,), (sink, x, np.uint64(x.nbytes // 16)))
    print(f"reads of the same bytes, linear:   {us:6.1f} us, {x.nbytes / us / 1e6:.2f} TB/s", flush=True)
    for bins in (2, 4, 8):
        us = median_us(m.get_function("write_pattern"), (B // bins, G), (128,),
                       (out, np.uint32(P), np.uint32(G), np.uint32(B), np.uint32(bins)))
        print(f"writes as the kernel's, {bins} bins a CTA: {us:6.1f} us, {out.nbytes / us / 1e6:.2f} TB/s", flush=True)
    us = median_us(m.get_function("write_linear"), (sms * 16,), (256,), (out, np.uint64(out.nbytes // 16)))
    print(f"writes of the same bytes, linear:  {us:6.1f} us, {out.nbytes / us / 1e6:.2f} TB/s", flush=True)


if __name__ == "__main__":
    main()
