// An op's own cuBLAS handle: created in the op's constructor, bound to the stream it is given at
// enqueue time, with a user workspace set so that a gemm never allocates (required for CUDA
// graph capture). Default math mode: no TF32 unless asked. Made once: when the op goes, the handle
// (with its workspace) is kept in the device's IdleLibraryObjects and the next op that asks for a
// handle with the same workspace size takes it (its math mode set again).
#pragma once

#include <memory>
#include <string>

#include "gk/cuda_api.h"

namespace gk {

class Device;
class DeviceBuffer;

// Throws DeviceError("<call> failed: CUBLAS_STATUS_... (<text>) while <context>") unless
// status is CUBLAS_STATUS_SUCCESS.
void cublas_check(cublasStatus_t status, const char* call, const std::string& context = {});

class CublasHandle {
public:
    // workspace_bytes 0 picks cuBLAS's recommendation: 32 MiB on SM 9.0+, 4 MiB below.
    CublasHandle(std::shared_ptr<Device> device, size_t workspace_bytes = 0, bool allow_tf32 = false);
    ~CublasHandle();
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;

    // Binds the handle to `stream` (and re-applies the workspace, which cublasSetStream resets)
    // when it differs from the last one; returns the handle for a library call.
    cublasHandle_t on(CUstream stream);
    cublasHandle_t get() const noexcept { return handle_; }
    size_t workspace_bytes() const noexcept { return workspace_bytes_; }
    bool reused() const noexcept { return reused_; }

private:
    std::shared_ptr<Device> device_;
    std::string key_;
    cublasHandle_t handle_ = nullptr;
    CUdeviceptr workspace_ = 0;  // from the device's pool
    size_t workspace_bytes_ = 0;
    bool reused_ = false;
    CUstream stream_ = nullptr;
    bool bound_ = false;
};

}  // namespace gk
