// A cuFFT plan owned by an op: made once (in the op's constructor), executed every block.
//
// The plan is created with cufftMakePlanMany64 and auto-allocation off; its work area comes from
// the device's memory pool and lives as long as the plan. Plans are made once per shape: when
// the op goes, its plan (with its work area) is kept in the device's IdleLibraryObjects and the
// next plan of the same layout on that device takes it instead of planning again. exec_*() binds the plan to the stream
// it is given (cufftSetStream, only when the stream changes) and queues the transform: nothing is
// allocated and nothing synchronises, so the call can be captured into a CUDA graph.
// cuFFT is opened at run time (gk::cufft()); a missing library is a DeviceError naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gk/cuda_api.h"

namespace gk {

class Device;
class DeviceBuffer;

// One batched 1-D transform in cuFFT's advanced layout: element e of batch b is read at
// in[b * idist + e * istride] and written to out[b * odist + e * ostride] (in elements of the
// input / output type: float for R2C input and C2R output, complex otherwise).
struct FftLayout {
    int64_t n = 0;        // transform length
    int64_t batch = 1;
    cufftType type = CUFFT_C2C;
    int64_t istride = 1;
    int64_t idist = 0;    // 0: the natural distance (n, or n/2+1 for C2R input)
    int64_t ostride = 1;
    int64_t odist = 0;    // 0: the natural distance (n, or n/2+1 for R2C output)
};

// "CUFFT_INVALID_SIZE" etc.
const char* cufft_result_name(cufftResult result);
// Throws DeviceError("<call> failed: CUFFT_... (<code>) while <context>") unless CUFFT_SUCCESS.
void cufft_check(cufftResult result, const char* call, const std::string& context);

class CufftPlan {
public:
    // `what` names the plan in error messages ("stage 'spec' (stft): 4096-point C2C x 4096").
    CufftPlan(std::shared_ptr<Device> device, const FftLayout& layout, std::string what);
    ~CufftPlan();
    CufftPlan(const CufftPlan&) = delete;
    CufftPlan& operator=(const CufftPlan&) = delete;

    const FftLayout& layout() const noexcept { return layout_; }
    bool reused() const noexcept { return reused_; }  // taken from an idle plan of the same layout

    // direction: CUFFT_FORWARD (-1, unnormalised) or CUFFT_INVERSE (+1, unnormalised).
    void exec_c2c(CUstream stream, CUdeviceptr in, CUdeviceptr out, int direction);
    void exec_r2c(CUstream stream, CUdeviceptr in, CUdeviceptr out);
    // C2R overwrites its input (cuFFT's rule): pass a scratch copy when the input must survive.
    void exec_c2r(CUstream stream, CUdeviceptr in, CUdeviceptr out);

private:
    void bind(CUstream stream);

    std::shared_ptr<Device> device_;
    FftLayout layout_;
    std::string what_;
    std::string key_;
    cufftHandle handle_ = 0;
    bool created_ = false;
    bool reused_ = false;
    CUdeviceptr work_ = 0;  // from the device's pool
    CUstream bound_stream_ = nullptr;
    bool stream_bound_ = false;
};

}  // namespace gk
