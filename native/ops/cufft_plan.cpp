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

// A plan an op has finished with, kept in the device's IdleLibraryObjects for the next op of the
// same layout: the handle with its work area (pool memory) still attached.
struct IdlePlan {
    cufftHandle handle;
    CUdeviceptr work;
};

void destroy_idle_plan(Device& device, void* object) {
    std::unique_ptr<IdlePlan> plan(static_cast<IdlePlan*>(object));
    try {
        device.make_current();
        cufft().cufftDestroy(plan->handle);
    } catch (const Error&) {
        // The library or context is gone: nothing left to free.
    }
    if (plan->work) device.memory_pool().release(plan->work);
}

std::string plan_key(const FftLayout& l) {
    return "cufft " + std::to_string(l.n) + " x" + std::to_string(l.batch) + " " + type_name(l.type) + " " +
           std::to_string(l.istride) + "/" + std::to_string(l.idist) + " " + std::to_string(l.ostride) + "/" +
           std::to_string(l.odist);
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

    // Made once per shape: an idle plan of this layout (a closed op's) is taken as it is.
    key_ = plan_key(layout_);
    if (void* idle = device_->idle_library_objects().take(key_)) {
        std::unique_ptr<IdlePlan> plan(static_cast<IdlePlan*>(idle));
        handle_ = plan->handle;
        work_ = plan->work;
        created_ = true;
        reused_ = true;
        return;
    }

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
        if (work > 0) {
            work_ = device_->memory_pool().acquire(work);
            cufft_check(api.cufftSetWorkArea(handle_, reinterpret_cast<void*>(work_)), "cufftSetWorkArea",
                        context);
        }
    } catch (...) {
        api.cufftDestroy(handle_);
        if (work_) device_->memory_pool().release(work_);
        created_ = false;
        throw;
    }
    device_->idle_library_objects().note_made();
}

CufftPlan::~CufftPlan() {
    if (!created_) return;
    // kept for the next op of the same layout (destroyed by the device's cache when not taken)
    device_->idle_library_objects().put(key_, new IdlePlan{handle_, work_}, destroy_idle_plan);
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
