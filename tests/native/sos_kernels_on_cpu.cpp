// The sos kernels (native/ops/kernels/sos.cu) compiled for the CPU, so that their index arithmetic,
// shared-memory staging and warp synchronisation are checked without a GPU
// (tests/backends/test_cuda_sos_scan.py builds this with -DSOS_KERNELS="<copy of sos.cu>").
//
// Each CTA runs as blockDim.x std::threads; CTAs run one after another, so a __shared__ variable
// (a static here) is the CTA's own while it runs. __syncwarp(mask) is a barrier of the threads the
// mask names (a full warp, or one of its half-warps), which is what the kernels rely on. The host
// functions below queue the kernels as native/ops/sos.cpp does (same grids, same order, the same
// unit split of the scan form).
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

typedef unsigned long long gk_size_t;
struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};
thread_local Dim3 threadIdx, blockIdx;
Dim3 blockDim, gridDim;

struct Cta {
    std::vector<std::unique_ptr<std::barrier<>>> warp, half;
};
thread_local Cta* cta_now = nullptr;

inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) {
    const unsigned w = threadIdx.x / 32;
    if (mask == 0xFFFFFFFFu)
        cta_now->warp[w]->arrive_and_wait();
    else if (mask == 0x0000FFFFu)
        cta_now->half[2 * w]->arrive_and_wait();
    else if (mask == 0xFFFF0000u)
        cta_now->half[2 * w + 1]->arrive_and_wait();
    else
        std::abort();  // a mask the kernels do not use
}

using std::fma;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#include SOS_KERNELS

namespace {

template <class F>
void run_grid(unsigned grid, unsigned block, F kernel) {
    if (block % 16 != 0) std::abort();
    gridDim.x = grid;
    blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b) {
        Cta cta;
        for (unsigned w = 0; w < (block + 31) / 32; ++w) {
            const unsigned in_warp = block - 32 * w < 32 ? block - 32 * w : 32;
            cta.warp.push_back(std::make_unique<std::barrier<>>(in_warp));
            cta.half.push_back(std::make_unique<std::barrier<>>(16));
            cta.half.push_back(std::make_unique<std::barrier<>>(in_warp > 16 ? in_warp - 16 : 16));
        }
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t)
            threads.emplace_back([&, t] {
                threadIdx.x = t;
                blockIdx.x = b;
                cta_now = &cta;
                kernel();
            });
        for (auto& th : threads) th.join();
    }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
using u64 = unsigned long long;

}  // namespace

extern "C" {

// One thread per lane (gk_sos_f32/c64) over samples [t0, t1) of every lane.
void cpu_sos_samples(float* out, const float* in, double* zi, const double* coef, int sections,
                     int64_t n, int64_t lanes, int complex_data, int64_t t0, int64_t t1) {
    run_grid((unsigned)ceil_div(lanes, 32), 32, [=] {
        if (complex_data)
            gk_sos_c64(out, in, zi, coef, sections, (u64)n, (u64)lanes, (u64)t0, (u64)t1);
        else
            gk_sos_f32(out, in, zi, coef, sections, (u64)n, (u64)lanes, (u64)t0, (u64)t1);
    });
}

// The scan form over one block, as SosOp::enqueue (unit_groups 0) or, with unit_groups G > 0
// groups of `per_unit` chunks, as SosOp::enqueue_units over units 0..2G-1 one at a time.
void cpu_sos_scan(float* out, const float* in, double* zi, const double* coef, int sections,
                  int64_t n, int64_t lanes, int complex_data, int64_t chunk, int64_t per_group,
                  const double* phi, const double* phi_group, int64_t per_unit) {
    const int64_t chunks = ceil_div(n, chunk), groups = ceil_div(chunks, per_group);
    std::vector<double> zf(lanes * chunks * 16), starts(lanes * chunks * 16), agg(lanes * groups * 16),
        gstart(lanes * groups * 16);
    double *zf_p = zf.data(), *starts_p = starts.data(), *agg_p = agg.data(), *gstart_p = gstart.data();
    auto local = [&](int64_t c0, int64_t c1) {
        run_grid((unsigned)ceil_div(lanes * (c1 - c0), 32), 32, [=] {
            gk_sos_scan_local(zf_p, in, coef, sections, (u64)n, (u64)lanes, (u64)chunk, (u64)chunks,
                              complex_data, (u64)c0, (u64)c1);
        });
    };
    auto carry = [&] {
        const unsigned walkers = (unsigned)ceil_div(lanes * groups, 8);
        run_grid(walkers, 128, [=] {
            gk_sos_scan_groups(agg_p, zf_p, phi, (u64)lanes, (u64)chunks, (u64)per_group, (u64)groups);
        });
        run_grid((unsigned)ceil_div(lanes, 8), 128, [=] {
            gk_sos_scan_top(gstart_p, zi, agg_p, phi_group, sections, (u64)lanes, (u64)groups);
        });
        run_grid(walkers, 128, [=] {
            gk_sos_scan_starts(starts_p, gstart_p, zf_p, phi, (u64)lanes, (u64)chunks, (u64)per_group,
                               (u64)groups);
        });
    };
    auto apply = [&](int64_t c0, int64_t c1) {
        run_grid((unsigned)ceil_div(lanes * (c1 - c0), 32), 32, [=] {
            gk_sos_scan_apply(out, zi, starts_p, in, coef, sections, (u64)n, (u64)lanes, (u64)chunk,
                              (u64)chunks, complex_data, (u64)c0, (u64)c1);
        });
    };
    if (per_unit <= 0) {
        local(0, chunks);
        carry();
        apply(0, chunks);
        return;
    }
    const int64_t G = ceil_div(chunks, per_unit);
    for (int64_t u = 0; u < 2 * G; ++u) {
        const int64_t g = u < G ? u : u - G;
        const int64_t c0 = g * per_unit, c1 = g + 1 >= G ? chunks : (g + 1) * per_unit;
        if (u < G) {
            local(c0, c1);
        } else {
            if (u == G) carry();
            apply(c0, c1);
        }
    }
}

}  // extern "C"
