#include "gk/cublas_handle.h"

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/loader.h"
#include "gk/memory.h"

namespace gk {

void cublas_check(cublasStatus_t status, const char* call, const std::string& context) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    const CublasApi& api = cublas();
    std::string name = "CUBLAS_STATUS " + std::to_string(status);
    std::string text = "cuBLAS error";
    if (api.cublasGetStatusName) {
        if (const char* n = api.cublasGetStatusName(status)) name = n;
    }
    if (api.cublasGetStatusString) {
        if (const char* t = api.cublasGetStatusString(status)) text = t;
    }
    std::string message = std::string(call) + " failed: " + name + " (" + text + ")";
    if (!context.empty()) message += " while " + context;
    throw DeviceError(message, call, status, name);
}

CublasHandle::CublasHandle(std::shared_ptr<Device> device, size_t workspace_bytes, bool allow_tf32)
    : device_(std::move(device)) {
    const CublasApi& api = cublas();  // DeviceError naming the missing library
    device_->make_current();
    cublas_check(api.cublasCreate(&handle_), "cublasCreate_v2",
                 "creating a cuBLAS handle on GPU " + std::to_string(device_->index()));
    try {
        cublas_check(api.cublasSetMathMode(handle_, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                : CUBLAS_DEFAULT_MATH),
                     "cublasSetMathMode");
        if (workspace_bytes == 0)
            workspace_bytes = device_->properties().sm_major >= 9 ? (size_t(32) << 20) : (size_t(4) << 20);
        if (api.cublasSetWorkspace) {
            workspace_ = std::make_unique<DeviceBuffer>(device_, workspace_bytes);
            workspace_bytes_ = workspace_bytes;
        }
    } catch (...) {
        api.cublasDestroy(handle_);
        throw;
    }
}

CublasHandle::~CublasHandle() {
    if (!handle_) return;
    try {
        device_->make_current();
        cublas().cublasDestroy(handle_);
    } catch (const Error&) {
        // Process teardown or a failed context: nothing more to release.
    }
}

cublasHandle_t CublasHandle::on(CUstream stream) {
    if (bound_ && stream == stream_) return handle_;
    const CublasApi& api = cublas();
    cublas_check(api.cublasSetStream(handle_, stream), "cublasSetStream_v2");
    if (workspace_)
        cublas_check(api.cublasSetWorkspace(handle_, reinterpret_cast<void*>(workspace_->ptr()),
                                            workspace_bytes_),
                     "cublasSetWorkspace_v2");
    stream_ = stream;
    bound_ = true;
    return handle_;
}

}  // namespace gk
