#include "gk/errors.h"

#include "gk/loader.h"

namespace gk {

std::string cu_error_name(CUresult code) {
    const char* text = nullptr;
    if (const DriverApi* api = driver_if_loaded())
        if (api->cuGetErrorName(code, &text) == CUDA_SUCCESS && text) return text;
    return "CUresult " + std::to_string(code);
}

std::string cu_error_string(CUresult code) {
    const char* text = nullptr;
    if (const DriverApi* api = driver_if_loaded())
        if (api->cuGetErrorString(code, &text) == CUDA_SUCCESS && text) return text;
    return "unrecognised error code";
}

void cu_check(CUresult result, const char* call, const std::string& context) {
    if (result == CUDA_SUCCESS) return;
    std::string name = cu_error_name(result);
    std::string message = std::string(call) + " failed: " + name + " (" + cu_error_string(result) + ")";
    if (!context.empty()) message += " while " + context;
    throw DeviceError(message, call, result, name);
}

}  // namespace gk
