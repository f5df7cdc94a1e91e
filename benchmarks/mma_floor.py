"""The tensor cores' floor beside xcorr's tensor kernel: mma.sync.m16n8k8 TF32 throughput on this GPU
with register operands and no memory traffic (8 independent accumulators a warp, 4 to 32 warps an
SM), and the mma count of xcorr at 64 inputs, 1024 bins, 256 frames (3xTF32 on 16 x 16 tiles),
so its time at that rate. Needs CuPy.

    python benchmarks/mma_floor.py
"""
import numpy as np, cupy as cp
src = r'''
extern "C" __global__ void peak(float* out, int iters, unsigned seed) {
    unsigned a0 = seed ^ threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u, b0 = a0 * 11u, b1 = a0 * 13u;
    float d[8][4];
    #pragma unroll
    for (int i = 0; i < 8; ++i) for (int e = 0; e < 4; ++e) d[i][e] = 0.0f;
    for (int it = 0; it < iters; ++it) {
        #pragma unroll
        for (int i = 0; i < 8; ++i)
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < 8; ++i) for (int e = 0; e < 4; ++e) s += d[i][e];
    if (s == 12345.678f) out[0] = s;
}
'''
fn = cp.RawModule(code=src).get_function("peak")
props = cp.cuda.runtime.getDeviceProperties(0)
sms = props["multiProcessorCount"]
out = cp.zeros(1, cp.float32)
best = 0.0
for warps_per_sm in (4, 8, 12, 16, 32):
    iters = 4096
    blocks, threads = sms * (warps_per_sm // 4), 128
    fn((blocks,), (threads,), (out, np.int32(16), np.uint32(1)))
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for _ in range(5):
        e0.record(); fn((blocks,), (threads,), (out, np.int32(iters), np.uint32(1))); e1.record(); e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
    t = min(ts)
    n = blocks * threads // 32 * iters * 8
    best = max(best, n / t)
    print(f"mma.sync m16n8k8 tf32: {warps_per_sm} warps/SM: {n / t / 1e9:.1f} G mma/s = {n * 2048 / t / 1e12:.1f} TFLOP/s "
          f"({n / t / sms / 1.98e9:.3f} mma/clk/SM at 1.98 GHz)", flush=True)
# what xcorr at C = 64, 1024 bins, F = 256 asks: 10 tiles x 2 halves x 12 mma per bin and 8 frames
need = 10 * 2 * 12 * 1024 * (256 // 8)
print(f"xcorr C=64 3xTF32 on 16x16 tiles: {need / 1e6:.2f} M mma, {need / best * 1e6:.1f} us at the best rate", flush=True)
