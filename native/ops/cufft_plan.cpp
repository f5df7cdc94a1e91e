#include "gk/cufft_plan.h"

#include <stdexcept>

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/loader.h"
#include "gk/memory.h"

namespace gk {

const char* cufft_result_name(cufftResult result) {
    switch (result) {
        case 0: return "CUFFT_SUCCESS";
        case 1: return "CUFFT_INVALID_PLAN";
        case 2: return "CUFFT_ALLOC_FAILED";
        case 3: return "CUFFT_INVALID_TYPE";
        case 4: return "CUFFT_INVALID_VALUE";
        case 5: return "CUFFT_INTERNAL_ERROR";
        case 6: return "CUFFT_EXEC_FAILED";
        case 7: return "CUFFT_SETUP_FAILED";
        case 8: return "CUFFT_INVALID_SIZE";
        case 9: return "CUFFT_UNALIGNED_DATA";
        case 10: return "CUFFT_INCOMPLETE_PARAMETER_LIST";
        case 11: return "CUFFT_INVALID_DEVICE";
        case 12: return "CUFFT_PARSE_ERROR";
        case 13: return "CUFFT_NO_WORKSPACE";
        case 14: return "CUFFT_NOT_IMPLEMENTED";
        case 15: return "CUFFT_LICENSE_ERROR";
        case 16: return "CUFFT_NOT_SUPPORTED";
        default: return "CUFFT_UNKNOWN_ERROR";
    }
}

void cufft_check(cufftResult result, const char* call, const std::string& context) {
    if (result == CUFFT_SUCCESS) return;
    std::string message = std::string(call) + " failed: " + cufft_result_name(result) + " (" +
                          std::to_string(result) + ")";
    if (!context.empty()) message += " while " + context;
    throw DeviceError(message, call, result, cufft_result_name(result));
}

namespace {

const char* type_name(cufftType type) {
    switch (type) {
        case CUFFT_R2C: return "R2C";
        case CUFFT_C2R: return "C2R";
        default: return "C2C";
    }
}

}  // namespace

CufftPlan::CufftPlan(std::shared_ptr<Device> device, const FftLayout& layout, std::string what)
    : device_(std::move(device)), layout_(layout), what_(std::move(what)) {
    if (layout_.n < 1 || layout_.batch < 1)
        throw std::invalid_argument(what_ + ": an FFT needs n >= 1 and batch >= 1");
    const int64_t half = layout_.n / 2 + 1;
    const int64_t in_len = layout_.type == CUFFT_C2R ? half : layout_.n;
    const int64_t out_len = layout_.type == CUFFT_R2C ? half : layout_.n;
    if (layout_.idist == 0) layout_.idist = in_len * layout_.istride;
    if (layout_.odist == 0) layout_.odist = out_len * layout_.ostride;

    const CufftApi& api = cufft();
    device_->make_current();
    const std::string context = "planning " + std::to_string(layout_.n) + "-point " +
                                type_name(layout_.type) + " x " + std::to_string(layout_.batch) +
                                " for " + what_;
    cufft_check(api.cufftCreate(&handle_), "cufftCreate", context);
    created_ = true;
    try {
        cufft_check(api.cufftSetAutoAllocation(handle_, 0), "cufftSetAutoAllocation", context);
        long long n[1] = {layout_.n};
        long long inembed[1] = {in_len};
        long long onembed[1] = {out_len};
        size_t work = 0;
        cufft_check(api.cufftMakePlanMany64(handle_, 1, n, inembed, layout_.istride, layout_.idist,
                                            onembed, layout_.ostride, layout_.odist, layout_.type,
                                            layout_.batch, &work),
                    "cufftMakePlanMany64", context);
        work_bytes_ = work;
        if (work > 0) {
            work_ = std::make_unique<DeviceBuffer>(device_, work);
            cufft_check(api.cufftSetWorkArea(handle_, reinterpret_cast<void*>(work_->ptr())),
                        "cufftSetWorkArea", context);
        }
    } catch (...) {
        api.cufftDestroy(handle_);
        created_ = false;
        throw;
    }
}

CufftPlan::~CufftPlan() {
    if (!created_) return;
    try {
        device_->make_current();
        cufft().cufftDestroy(handle_);
    } catch (const Error&) {
        // The library or context is gone: nothing left to free.
    }
}

void CufftPlan::bind(CUstream stream) {
    if (stream_bound_ && stream == bound_stream_) return;
    cufft_check(cufft().cufftSetStream(handle_, stream), "cufftSetStream", what_);
    bound_stream_ = stream;
    stream_bound_ = true;
}

void CufftPlan::exec_c2c(CUstream stream, CUdeviceptr in, CUdeviceptr out, int direction) {
    if (layout_.type != CUFFT_C2C) throw std::logic_error(what_ + ": exec_c2c on a non-C2C plan");
    device_->make_current();
    bind(stream);
    cufft_check(cufft().cufftExecC2C(handle_, reinterpret_cast<gkComplex*>(in),
                                     reinterpret_cast<gkComplex*>(out), direction),
                "cufftExecC2C", what_);
}

void CufftPlan::exec_r2c(CUstream stream, CUdeviceptr in, CUdeviceptr out) {
    if (layout_.type != CUFFT_R2C) throw std::logic_error(what_ + ": exec_r2c on a non-R2C plan");
    device_->make_current();
    bind(stream);
    cufft_check(cufft().cufftExecR2C(handle_, reinterpret_cast<float*>(in),
                                     reinterpret_cast<gkComplex*>(out)),
                "cufftExecR2C", what_);
}

void CufftPlan::exec_c2r(CUstream stream, CUdeviceptr in, CUdeviceptr out) {
    if (layout_.type != CUFFT_C2R) throw std::logic_error(what_ + ": exec_c2r on a non-C2R plan");
    device_->make_current();
    bind(stream);
    cufft_check(cufft().cufftExecC2R(handle_, reinterpret_cast<gkComplex*>(in),
                                     reinterpret_cast<float*>(out)),
                "cufftExecC2R", what_);
}

}  // namespace gk
