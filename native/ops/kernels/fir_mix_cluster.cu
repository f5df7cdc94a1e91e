// fir_mix's cluster kernel (SM 9.0+, C_in <= 64; native/ops/fir_mix.cpp picks it): a time
// tile's groups of 8 channels in one thread-block cluster, the mix's shares handed over through
// distributed shared memory. kernels/fir_mix.cu's header describes both kernels. A module of its
// own, so that NVRTC compiles (cold cache) only the kernel an engine uses. Empty below SM 9.0.
#include "fir_mix_common.cuh"

#if __CUDA_ARCH__ >= 900
namespace {

// ---- The cluster kernel (SM 9.0+, C_in <= 64): CTAs (time tile x, group g of 8 channels),
// 256 threads, the CL groups of a tile in one thread-block cluster. Each CTA mixes its own
// channels (a share: sum over r of M[o][c0 + r] y[c0 + r][t], an fmaf chain in channel order),
// stores the share into the shared memory of the cluster's CTA 0 (distributed shared memory),
// and CTA 0 adds the shares up in group order after the cluster barrier. No scratch in global
// memory, no fence, no arrival atomic, no reload through L2 on the critical path.
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// v into the shared memory of the cluster's CTA `rank`, at the address `local` has here.
__device__ __forceinline__ void store_to_cta(float* local, unsigned rank, float v) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(gk_smem_addr(local)), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}

template <int KT>
__device__ __forceinline__ void fir_mix_cluster(float* __restrict__ out, const float* __restrict__ in,
                                                float* __restrict__ hist2, unsigned* __restrict__ sync,
                                                const float* __restrict__ taps,
                                                const float* __restrict__ matrix, gk_size_t n,
                                                gk_size_t n_valid, gk_size_t hist_len,
                                                gk_size_t tap_row, int stages, int c_in, int c_out,
                                                unsigned tile0, unsigned tiles_total) {
    constexpr int CG = 8, THREADS = CG * 32;
    __shared__ FirSmem<KT, CG> sm;
    __shared__ __align__(16) float m_sh[MAX_ENTRIES];  // M[o][c0 + r] at o * cgs + r
    __shared__ float y_sh[CG][TILE];
    extern __shared__ float shares[];  // [CTAs per cluster][c_out * TILE]: used in the cluster's CTA 0

    // Arrive now, wait before the first store into CTA 0: every CTA of the cluster has started.
    cluster_arrive_relaxed();
    const int tid = threadIdx.x;
    const unsigned rank = cluster_rank();
    const unsigned tile = tile0 + blockIdx.x;  // this CTA's time tile in the whole block
    const long long t0 = (long long)tile * TILE;
    const long long c0 = (long long)blockIdx.y * CG;
    const int cg_here = c_in - (int)c0 < CG ? c_in - (int)c0 : CG;  // <= 0: a CTA padding the cluster
    const int cgs = c_in < CG ? c_in : CG;  // row stride of m_sh
    const unsigned phase = *reinterpret_cast<volatile unsigned*>(sync);
    const gk_size_t hist_size = hist_len * (gk_size_t)c_in;
    const float* hist = hist2 + (gk_size_t)phase * hist_size;
    float* next_hist = hist2 + (gk_size_t)(phase ^ 1u) * hist_size;
    unsigned* ctas_done = sync + 1;
    const bool vec_in = (n % 4 == 0) && gk_aligned(in, 16);
    const int tile_items = c_out * TILE;
    unsigned counted_before = 0u;

    if (cg_here > 0) {
        const float yv = fir_tile<KT, CG>(
            sm,
            [&] {
                if (cg_here == CG && c_in % 4 == 0 && gk_aligned(matrix, 16)) {
                    for (int e = tid; e < c_out * (CG / 4); e += THREADS) {
                        const int o = e / (CG / 4), j = e - o * (CG / 4);
                        gk_cp_async_16(m_sh + o * cgs + 4 * j, matrix + o * c_in + c0 + 4 * j, 16);
                    }
                } else {
                    for (int e = tid; e < c_out * cg_here; e += THREADS) {
                        const int o = e / cg_here, r = e - o * cg_here;
                        gk_cp_async_4(m_sh + o * cgs + r, matrix + o * c_in + c0 + r, 4);
                    }
                }
            },
            [&] {
                // Every thread of this CTA has read the phase: count the CTA (the result is
                // needed only at the end); once every CTA has counted, the last may flip it.
                if (tid == 0) counted_before = atomicAdd(ctas_done, 1u);
            },
            in, hist, next_hist, taps, c0, cg_here, t0, n, hist_len, tap_row, stages, vec_in);
        if (tid < CG * TILE) y_sh[tid / TILE][tid % TILE] = yv;
        __syncthreads();
        cluster_wait();  // every CTA of the cluster has started: CTA 0's shared memory is there
        for (int f = tid; f < tile_items; f += THREADS) {
            const int o = f / TILE, tt = f - o * TILE;
            float acc = 0.0f;
            for (int r = 0; r < cg_here; ++r) acc = fmaf(m_sh[o * cgs + r], y_sh[r][tt], acc);
            store_to_cta(shares + rank * tile_items + f, 0u, acc);
        }
        keep_history(next_hist, hist, c0, cg_here, n, hist_len, tile, tiles_total);
    } else {
        if (tid == 0) counted_before = atomicAdd(ctas_done, 1u);
        cluster_wait();
    }
    cluster_arrive_release();  // the shares stored, visible to CTA 0 after its wait
    cluster_wait();
    if (tid == 0 && counted_before == tiles_total * gridDim.y - 1u) {
        *ctas_done = 0u;  // every CTA has read the phase: flip it for the next launch
        sync[0] = phase ^ 1u;
    }
    if (rank != 0u) return;

    // CTA 0: out[o][t] = the shares added in group order
    const int groups = (c_in + CG - 1) / CG;
    for (int f = tid; f < tile_items; f += THREADS) {
        const int o = f / TILE, tt = f - o * TILE;
        const long long t = t0 + tt;
        if (t >= (long long)n) continue;
        float sum = shares[f];
        for (int g = 1; g < groups; ++g) sum += shares[g * tile_items + f];
        // write-through: `out` may be mapped host memory (Op::writes_output_once)
        __stwt(out + (long long)o * (long long)n + t, t < (long long)n_valid ? sum : 0.0f);
    }
}

}  // namespace

// Cluster kernel (SM 9.0+): grid (ceil(n / 16), CL), block 256, launched in clusters of (1, CL, 1)
// (cuLaunchKernelEx; CL a power of two >= ceil(c_in / 8), at most 8: CTAs past the last channel
// only join the barriers); dynamic shared memory CL * c_out * 16 floats; sync: {phase, CTAs
// done}; tile0, tiles_total: the launch's time tiles [tile0, tile0 + gridDim.x) of the block's
// (kernels/fir_mix.cu); the other arguments as above.
#define GK_FIR_MIX_CLUSTER(NAME, KT)                                                             \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                      \
        float* out, const float* in, float* hist2, unsigned* sync, const float* taps,            \
        const float* matrix, gk_size_t n, gk_size_t n_valid, gk_size_t hist_len,                 \
        gk_size_t tap_row, int stages, int c_in, int c_out, unsigned tile0,                      \
        unsigned tiles_total) {                                                                  \
        fir_mix_cluster<KT>(out, in, hist2, sync, taps, matrix, n, n_valid, hist_len, tap_row,   \
                            stages, c_in, c_out, tile0, tiles_total);                            \
    }

GK_FIR_MIX_CLUSTER(gk_fir_mix_cluster_k32, 32)
GK_FIR_MIX_CLUSTER(gk_fir_mix_cluster_k128, 128)
#endif
