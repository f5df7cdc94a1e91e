// The numerically controlled oscillator shared by shift.cu and ddc.cu.
//
// The phase of sample n is frac(inc * n) cycles, held as a 64-bit fixed-point phase: `step` is
// round(inc * 2^64) mod 2^64 (computed exactly on the host), and the phase of sample n is
// step * n mod 2^64, exact in wrapping unsigned arithmetic for any n. Its error against the
// float64 `inc` is at most n * 2^-65 cycles (3e-10 cycles at n = 10^10). Read as a signed
// integer it is the phase in [-1/2, 1/2) cycles, rounded once to float (2^-24 of a half turn)
// for sincospif. The stream's sample index lives on the device (one uint64) and advances by the
// block size after each block (gk_nco_advance), so a captured graph replays it correctly.
#pragma once
#include "gk_common.cuh"

// exp(2j*pi*phase(n)) as (cos, sin).
__device__ __forceinline__ float2 gk_nco(unsigned long long step, unsigned long long n) {
    const long long ph = (long long)(step * n);  // wraps mod 2^64: exact
    const float half_turns = (float)ph * 1.0842021724855044e-19f;  // 2^-63: [-1, 1) half turns
    float s, c;
    sincospif(half_turns, &s, &c);
    return make_float2(c, s);
}

// grid 1, block 1: the sample index of the next block.
extern "C" __global__ void gk_nco_advance(unsigned long long* index, unsigned long long samples) {
    if (blockIdx.x == 0 && threadIdx.x == 0) index[0] += samples;
}
