// The C++ side of pygpukit_dsp.errors. The bindings translate each class to its Python twin:
//   gk::DeviceError      -> pygpukit_dsp.errors.DeviceError
//   gk::CompileError     -> pygpukit_dsp.errors.CompileError(kernel, log)
//   gk::UnsupportedError -> pygpukit_dsp.errors.UnsupportedError(stage, backend, reason)
// std::invalid_argument (a bad argument from the caller) becomes ValueError.
#pragma once

#include <stdexcept>
#include <string>

#include "gk/cuda_api.h"

namespace gk {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The driver, a library or the GPU is missing or failed. `call` and `code` are set when a
// CUDA call failed ("cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY").
class DeviceError : public Error {
public:
    explicit DeviceError(const std::string& message, std::string call = {}, int code = 0,
                         std::string code_name = {})
        : Error(message), call_(std::move(call)), code_(code), code_name_(std::move(code_name)) {}
    const std::string& call() const noexcept { return call_; }
    int code() const noexcept { return code_; }
    const std::string& code_name() const noexcept { return code_name_; }

private:
    std::string call_;
    int code_;
    std::string code_name_;
};

class CompileError : public Error {
public:
    CompileError(std::string kernel, std::string log)
        : Error("kernel '" + kernel + "' failed to compile:\n" + log),
          kernel_(std::move(kernel)),
          log_(std::move(log)) {}
    const std::string& kernel() const noexcept { return kernel_; }
    const std::string& log() const noexcept { return log_; }

private:
    std::string kernel_;
    std::string log_;
};

class UnsupportedError : public Error {
public:
    UnsupportedError(std::string stage, std::string backend, std::string reason)
        : Error("stage '" + stage + "' is not supported on backend '" + backend + "': " + reason),
          stage_(std::move(stage)),
          backend_(std::move(backend)),
          reason_(std::move(reason)) {}
    const std::string& stage() const noexcept { return stage_; }
    const std::string& backend() const noexcept { return backend_; }
    const std::string& reason() const noexcept { return reason_; }

private:
    std::string stage_;
    std::string backend_;
    std::string reason_;
};

// "CUDA_ERROR_OUT_OF_MEMORY" / "out of memory" (through cuGetErrorName/String when the driver
// is loaded; a numeric fallback otherwise).
std::string cu_error_name(CUresult code);
std::string cu_error_string(CUresult code);

// Throws DeviceError("<call> failed: <NAME> (<string>) <context>") unless result is CUDA_SUCCESS.
void cu_check(CUresult result, const char* call, const std::string& context = {});

inline void cu_check(CUresult result, const char* call, const char* context) {
    if (result != CUDA_SUCCESS) cu_check(result, call, std::string(context));
}

}  // namespace gk
