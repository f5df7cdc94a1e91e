// Run-time loader for the CUDA driver, NVRTC, cuFFT and cuBLAS.
//
// Nothing is opened at import time. Each library is opened on first use (dlopen with
// RTLD_NOW | RTLD_LOCAL) and its entry points resolved with dlsym:
//   driver : $GK_LIBCUDA if set (a path or soname; tests use it), else libcuda.so.1 from the
//            system (ldconfig / LD_LIBRARY_PATH).
//   nvrtc  : libnvrtc.so.13, libnvrtc.so.12
//   cufft  : libcufft.so.12 (CUDA 13), libcufft.so.11 (CUDA 12)
//   cublas : libcublas.so.13, libcublas.so.12
// For the last three, every folder given to set_library_dirs() is tried first (each soname in
// order, newest first), then each soname through the system search path.
// A failed load is remembered with its reason until set_library_dirs() changes the folders.
// All functions are thread-safe.
#pragma once

#include <string>
#include <vector>

#include "gk/cuda_api.h"

namespace gk {

struct LibraryStatus {
    bool found = false;
    std::string path;     // the file that was opened
    std::string version;  // "13.0" (driver, nvrtc) or "12.0.0" (cufft, cublas); "" if unknown
    std::string reason;   // why it is unusable; "" when found
};

struct DriverApi {
    PFN_cuGetErrorName cuGetErrorName = nullptr;
    PFN_cuGetErrorString cuGetErrorString = nullptr;
    PFN_cuInit cuInit = nullptr;
    PFN_cuDriverGetVersion cuDriverGetVersion = nullptr;
    PFN_cuDeviceGetCount cuDeviceGetCount = nullptr;
    PFN_cuDeviceGet cuDeviceGet = nullptr;
    PFN_cuDeviceGetName cuDeviceGetName = nullptr;
    PFN_cuDeviceGetAttribute cuDeviceGetAttribute = nullptr;
    PFN_cuDeviceTotalMem_v2 cuDeviceTotalMem = nullptr;
    PFN_cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain = nullptr;
    PFN_cuDevicePrimaryCtxRelease_v2 cuDevicePrimaryCtxRelease = nullptr;
    PFN_cuCtxSetCurrent cuCtxSetCurrent = nullptr;
    PFN_cuCtxGetCurrent cuCtxGetCurrent = nullptr;
    PFN_cuCtxSynchronize cuCtxSynchronize = nullptr;
    PFN_cuCtxGetStreamPriorityRange cuCtxGetStreamPriorityRange = nullptr;
    PFN_cuMemGetInfo_v2 cuMemGetInfo = nullptr;
    PFN_cuMemAlloc_v2 cuMemAlloc = nullptr;
    PFN_cuMemFree_v2 cuMemFree = nullptr;
    PFN_cuMemHostAlloc cuMemHostAlloc = nullptr;
    PFN_cuMemFreeHost cuMemFreeHost = nullptr;
    PFN_cuMemcpyHtoD_v2 cuMemcpyHtoD = nullptr;
    PFN_cuMemcpyDtoH_v2 cuMemcpyDtoH = nullptr;
    PFN_cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync = nullptr;
    PFN_cuMemcpyDtoHAsync_v2 cuMemcpyDtoHAsync = nullptr;
    PFN_cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync = nullptr;
    PFN_cuMemsetD8Async cuMemsetD8Async = nullptr;
    PFN_cuStreamCreateWithPriority cuStreamCreateWithPriority = nullptr;
    PFN_cuStreamGetPriority cuStreamGetPriority = nullptr;
    PFN_cuStreamDestroy_v2 cuStreamDestroy = nullptr;
    PFN_cuStreamSynchronize cuStreamSynchronize = nullptr;
    PFN_cuStreamQuery cuStreamQuery = nullptr;
    PFN_cuStreamWaitEvent cuStreamWaitEvent = nullptr;
    PFN_cuEventCreate cuEventCreate = nullptr;
    PFN_cuEventDestroy_v2 cuEventDestroy = nullptr;
    PFN_cuEventRecord cuEventRecord = nullptr;
    PFN_cuEventSynchronize cuEventSynchronize = nullptr;
    PFN_cuEventQuery cuEventQuery = nullptr;
    PFN_cuEventElapsedTime cuEventElapsedTime = nullptr;  // _v2 when the driver has it
    PFN_cuModuleLoadData cuModuleLoadData = nullptr;
    PFN_cuModuleUnload cuModuleUnload = nullptr;
    PFN_cuModuleGetFunction cuModuleGetFunction = nullptr;
    PFN_cuFuncGetAttribute cuFuncGetAttribute = nullptr;
    PFN_cuFuncSetAttribute cuFuncSetAttribute = nullptr;
    PFN_cuFuncGetParamInfo cuFuncGetParamInfo = nullptr;  // optional (driver >= 12.4)
    PFN_cuLaunchKernel cuLaunchKernel = nullptr;
    PFN_cuLaunchKernelEx cuLaunchKernelEx = nullptr;  // optional (driver >= 12.0)
    // Graph capture (used by the engine); optional: null on a driver without them.
    PFN_cuStreamBeginCapture_v2 cuStreamBeginCapture = nullptr;
    PFN_cuStreamEndCapture cuStreamEndCapture = nullptr;
    PFN_cuGraphInstantiateWithFlags cuGraphInstantiateWithFlags = nullptr;
    PFN_cuGraphLaunch cuGraphLaunch = nullptr;
    PFN_cuGraphExecDestroy cuGraphExecDestroy = nullptr;
    PFN_cuGraphDestroy cuGraphDestroy = nullptr;
    PFN_cuGraphUpload cuGraphUpload = nullptr;              // optional
    PFN_cuMemsetD2D8Async cuMemsetD2D8Async = nullptr;      // optional
    // Mapped host memory (the engine's mapped_io); optional: the engine refuses mapped_io without it.
    PFN_cuMemHostGetDevicePointer_v2 cuMemHostGetDevicePointer = nullptr;
};

struct NvrtcApi {
    PFN_nvrtcGetErrorString nvrtcGetErrorString = nullptr;
    PFN_nvrtcVersion nvrtcVersion = nullptr;
    PFN_nvrtcGetNumSupportedArchs nvrtcGetNumSupportedArchs = nullptr;  // optional
    PFN_nvrtcGetSupportedArchs nvrtcGetSupportedArchs = nullptr;        // optional
    PFN_nvrtcCreateProgram nvrtcCreateProgram = nullptr;
    PFN_nvrtcDestroyProgram nvrtcDestroyProgram = nullptr;
    PFN_nvrtcCompileProgram nvrtcCompileProgram = nullptr;
    PFN_nvrtcGetProgramLogSize nvrtcGetProgramLogSize = nullptr;
    PFN_nvrtcGetProgramLog nvrtcGetProgramLog = nullptr;
    PFN_nvrtcGetCUBINSize nvrtcGetCUBINSize = nullptr;
    PFN_nvrtcGetCUBIN nvrtcGetCUBIN = nullptr;
    PFN_nvrtcGetPTXSize nvrtcGetPTXSize = nullptr;  // optional (the build-time tool uses it)
    PFN_nvrtcGetPTX nvrtcGetPTX = nullptr;          // optional
    int version_major = 0;
    int version_minor = 0;
};

struct CufftApi {
    PFN_cufftGetProperty cufftGetProperty = nullptr;
    PFN_cufftCreate cufftCreate = nullptr;
    PFN_cufftDestroy cufftDestroy = nullptr;
    PFN_cufftSetAutoAllocation cufftSetAutoAllocation = nullptr;
    PFN_cufftSetWorkArea cufftSetWorkArea = nullptr;
    PFN_cufftMakePlanMany64 cufftMakePlanMany64 = nullptr;
    PFN_cufftSetStream cufftSetStream = nullptr;
    PFN_cufftExecC2C cufftExecC2C = nullptr;
    PFN_cufftExecR2C cufftExecR2C = nullptr;
    PFN_cufftExecC2R cufftExecC2R = nullptr;
};

struct CublasApi {
    PFN_cublasGetProperty cublasGetProperty = nullptr;
    PFN_cublasGetStatusName cublasGetStatusName = nullptr;      // optional (cuBLAS >= 11.4)
    PFN_cublasGetStatusString cublasGetStatusString = nullptr;  // optional
    PFN_cublasCreate_v2 cublasCreate = nullptr;
    PFN_cublasDestroy_v2 cublasDestroy = nullptr;
    PFN_cublasSetStream_v2 cublasSetStream = nullptr;
    PFN_cublasSetWorkspace_v2 cublasSetWorkspace = nullptr;  // optional (cuBLAS >= 11.x)
    PFN_cublasSetMathMode cublasSetMathMode = nullptr;
    PFN_cublasSgemm_v2 cublasSgemm = nullptr;
    PFN_cublasCgemm_v2 cublasCgemm = nullptr;
    PFN_cublasSgemmStridedBatched cublasSgemmStridedBatched = nullptr;
    PFN_cublasCgemmStridedBatched cublasCgemmStridedBatched = nullptr;
};

// Folders searched before the system path for NVRTC, cuFFT and cuBLAS (Python passes the
// NVIDIA wheel folders here). Libraries already opened stay as they are.
void set_library_dirs(const std::vector<std::string>& dirs);
std::vector<std::string> library_dirs();
bool library_dirs_set();

// Each returns the loaded table or throws gk::DeviceError naming the missing piece:
//   "CUDA driver not detected (libcuda.so.1: cannot open shared object file: ...)".
const DriverApi& driver();
const NvrtcApi& nvrtc();
const CufftApi& cufft();
const CublasApi& cublas();

// Try to load (if not yet tried) and report; never throws.
LibraryStatus driver_status();
LibraryStatus nvrtc_status();
LibraryStatus cufft_status();
LibraryStatus cublas_status();

// Non-null only when the driver is loaded; for error formatting, never throws.
const DriverApi* driver_if_loaded() noexcept;

}  // namespace gk
