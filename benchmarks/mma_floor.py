"""The tensor cores' floor beside xcorr's tensor kernel: mma.sync throughput on this GPU with
register operands and no memory traffic (8 independent accumulators a warp, 4 to 32 warps an SM),
for the shape the kernel issues (m16n8k16 FP16 with FP32 accumulation) and for m16n8k8 TF32, and
the mma count of xcorr at 64 inputs, 1024 bins, 256 frames (two-part FP16 split on 16 x 16 tiles:
12 mma a tile half and 16 frames), so its time at that rate. Needs CuPy.

    python benchmarks/mma_floor.py
"""
import numpy as np, cupy as cp

SHAPES = {  # name: (PTX of one mma, MACs of one)
    "m16n8k16 f16": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16 * 8 * 16),
    "m16n8k8 tf32": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 16 * 8 * 8),
}
src = r'''
extern "C" __global__ void peak(float* out, int iters, unsigned seed) {
    unsigned a0 = seed ^ threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u, b0 = a0 * 11u, b1 = a0 * 13u;
    float d[8][4];
    #pragma unroll
    for (int i = 0; i < 8; ++i) for (int e = 0; e < 4; ++e) d[i][e] = 0.0f;
    for (int it = 0; it < iters; ++it) {
        #pragma unroll
        for (int i = 0; i < 8; ++i)
            asm volatile("MMA {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < 8; ++i) for (int e = 0; e < 4; ++e) s += d[i][e];
    if (s == 12345.678f) out[0] = s;
}
'''
props = cp.cuda.runtime.getDeviceProperties(0)
sms, clock = props["multiProcessorCount"], props["clockRate"] * 1e3
out = cp.zeros(1, cp.float32)
best = {}
for shape, (ptx, macs) in SHAPES.items():
    fn = cp.RawModule(code=src.replace("MMA", ptx)).get_function("peak")
    best[shape] = 0.0
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
        best[shape] = max(best[shape], n / t)
        print(f"mma.sync {shape}: {warps_per_sm} warps/SM: {n / t / 1e9:.1f} G mma/s = {n * 2 * macs / t / 1e12:.1f} "
              f"TFLOP/s ({n / t / sms / clock:.3f} mma/clk/SM at {clock / 1e9:.2f} GHz)", flush=True)
# what xcorr at C = 64, 1024 bins, F = 256 asks: 10 tiles x 2 halves x 12 mma per bin and 16 frames
need = 10 * 2 * 12 * 1024 * (256 // 16)
print(f"xcorr C=64, two-part FP16 on 16x16 tiles: {need / 1e6:.2f} M mma m16n8k16, "
      f"{need / best['m16n8k16 f16'] * 1e6:.1f} us at the best rate", flush=True)
