#include "gk/cublas_handle.h"

#include <memory>

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

namespace {

// A handle an op has finished with, kept in the device's IdleLibraryObjects with its workspace.
struct IdleHandle {
    cublasHandle_t handle;
    CUdeviceptr workspace;
};

void destroy_idle_handle(Device& device, void* object) {
    std::unique_ptr<IdleHandle> h(static_cast<IdleHandle*>(object));
    try {
        device.make_current();
        cublas().cublasDestroy(h->handle);
    } catch (const Error&) {
        // Process teardown or a failed context: nothing more to release.
    }
    if (h->workspace) device.memory_pool().release(h->workspace);
}

}  // namespace

CublasHandle::CublasHandle(std::shared_ptr<Device> device, size_t workspace_bytes, bool allow_tf32)
    : device_(std::move(device)) {
    const CublasApi& api = cublas();  // DeviceError naming the missing library
    device_->make_current();
    if (workspace_bytes == 0)
        workspace_bytes = device_->properties().sm_major >= 9 ? (size_t(32) << 20) : (size_t(4) << 20);
    const bool with_workspace = api.cublasSetWorkspace != nullptr;
    key_ = "cublas " + std::to_string(with_workspace ? workspace_bytes : 0);
    // Made once: an idle handle with the same workspace size (a closed op's) is taken as it is.
    if (void* idle = device_->idle_library_objects().take(key_)) {
        std::unique_ptr<IdleHandle> h(static_cast<IdleHandle*>(idle));
        handle_ = h->handle;
        workspace_ = h->workspace;
        workspace_bytes_ = workspace_ ? workspace_bytes : 0;
        reused_ = true;
    } else {
        cublas_check(api.cublasCreate(&handle_), "cublasCreate_v2",
                     "creating a cuBLAS handle on GPU " + std::to_string(device_->index()));
        device_->idle_library_objects().note_made();
        if (with_workspace) {
            try {
                workspace_ = device_->memory_pool().acquire(workspace_bytes);
            } catch (...) {
                api.cublasDestroy(handle_);
                handle_ = nullptr;
                throw;
            }
            workspace_bytes_ = workspace_bytes;
        }
    }
    try {
        cublas_check(api.cublasSetMathMode(handle_, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                : CUBLAS_DEFAULT_MATH),
                     "cublasSetMathMode");
    } catch (...) {
        api.cublasDestroy(handle_);
        if (workspace_) device_->memory_pool().release(workspace_);
        handle_ = nullptr;
        throw;
    }
}

CublasHandle::~CublasHandle() {
    if (!handle_) return;
    // kept for the next op that wants one (destroyed by the device's cache when not taken)
    device_->idle_library_objects().put(key_, new IdleHandle{handle_, workspace_}, destroy_idle_handle);
}

cublasHandle_t CublasHandle::on(CUstream stream) {
    if (bound_ && stream == stream_) return handle_;
    const CublasApi& api = cublas();
    cublas_check(api.cublasSetStream(handle_, stream), "cublasSetStream_v2");
    if (workspace_)
        cublas_check(api.cublasSetWorkspace(handle_, reinterpret_cast<void*>(workspace_), workspace_bytes_),
                     "cublasSetWorkspace_v2");
    stream_ = stream;
    bound_ = true;
    return handle_;
}

}  // namespace gk
