// Our own minimal declarations of the CUDA driver API, NVRTC, cuFFT and cuBLAS.
//
// Nothing from a CUDA toolkit is needed to build pygpukit-dsp: every library is opened at run
// time with dlopen and every entry point is reached through the function-pointer types below.
// Values and signatures were checked against cuda.h (CUDA 13.0/13.5), nvrtc.h, cufft.h,
// cublas_api.h and library_types.h. Only what the project uses is declared.
#pragma once

#include <cstddef>

extern "C" {

// ---------------------------------------------------------------------------------------------
// Driver API (libcuda.so.1)
// ---------------------------------------------------------------------------------------------
typedef int CUresult;  // enum cudaError_enum; an int keeps unknown future codes representable
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUevent_st* CUevent;
typedef struct CUstream_st* CUstream;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
typedef int CUdevice_attribute;
typedef int CUfunction_attribute;
typedef int CUstreamCaptureMode;

enum : int {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

enum : int {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
    CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
    CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
    CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
    CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
    CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40,
    CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED = 78,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
};

enum : int {
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
    CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
    CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

enum : unsigned int {
    CU_STREAM_DEFAULT = 0x0,
    CU_STREAM_NON_BLOCKING = 0x1,
    CU_EVENT_DEFAULT = 0x0,
    CU_EVENT_BLOCKING_SYNC = 0x1,
    CU_EVENT_DISABLE_TIMING = 0x2,
    CU_MEMHOSTALLOC_PORTABLE = 0x01,
    CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
    CU_MEMHOSTALLOC_WRITECOMBINED = 0x04,
};

enum : int {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

// Exported symbol names are given in loader.cpp; the _v2 suffix is the ABI the header macros
// select (cuMemAlloc -> cuMemAlloc_v2, ...).
typedef CUresult (*PFN_cuGetErrorName)(CUresult error, const char** pStr);
typedef CUresult (*PFN_cuGetErrorString)(CUresult error, const char** pStr);
typedef CUresult (*PFN_cuInit)(unsigned int Flags);
typedef CUresult (*PFN_cuDriverGetVersion)(int* driverVersion);
typedef CUresult (*PFN_cuDeviceGetCount)(int* count);
typedef CUresult (*PFN_cuDeviceGet)(CUdevice* device, int ordinal);
typedef CUresult (*PFN_cuDeviceGetName)(char* name, int len, CUdevice dev);
typedef CUresult (*PFN_cuDeviceGetAttribute)(int* pi, CUdevice_attribute attrib, CUdevice dev);
typedef CUresult (*PFN_cuDeviceTotalMem_v2)(size_t* bytes, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain)(CUcontext* pctx, CUdevice dev);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease_v2)(CUdevice dev);
typedef CUresult (*PFN_cuCtxSetCurrent)(CUcontext ctx);
typedef CUresult (*PFN_cuCtxGetCurrent)(CUcontext* pctx);
typedef CUresult (*PFN_cuCtxSynchronize)(void);
typedef CUresult (*PFN_cuCtxGetStreamPriorityRange)(int* leastPriority, int* greatestPriority);
typedef CUresult (*PFN_cuMemGetInfo_v2)(size_t* free, size_t* total);
typedef CUresult (*PFN_cuMemAlloc_v2)(CUdeviceptr* dptr, size_t bytesize);
typedef CUresult (*PFN_cuMemFree_v2)(CUdeviceptr dptr);
typedef CUresult (*PFN_cuMemHostAlloc)(void** pp, size_t bytesize, unsigned int Flags);
typedef CUresult (*PFN_cuMemFreeHost)(void* p);
// Device address of host memory from cuMemHostAlloc(..., CU_MEMHOSTALLOC_DEVICEMAP) (mapped I/O).
typedef CUresult (*PFN_cuMemHostGetDevicePointer_v2)(CUdeviceptr* pdptr, void* p, unsigned int Flags);
typedef CUresult (*PFN_cuMemcpyHtoD_v2)(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount);
typedef CUresult (*PFN_cuMemcpyDtoH_v2)(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount);
typedef CUresult (*PFN_cuMemcpyHtoDAsync_v2)(CUdeviceptr dstDevice, const void* srcHost,
                                             size_t ByteCount, CUstream hStream);
typedef CUresult (*PFN_cuMemcpyDtoHAsync_v2)(void* dstHost, CUdeviceptr srcDevice,
                                             size_t ByteCount, CUstream hStream);
typedef CUresult (*PFN_cuMemcpyDtoDAsync_v2)(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                             size_t ByteCount, CUstream hStream);
typedef CUresult (*PFN_cuMemsetD8Async)(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                        CUstream hStream);
// 2-D memset (the engine zeroes the tail of each channel row after a partial final block).
typedef CUresult (*PFN_cuMemsetD2D8Async)(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                          size_t Width, size_t Height, CUstream hStream);
typedef CUresult (*PFN_cuStreamCreateWithPriority)(CUstream* phStream, unsigned int flags,
                                                   int priority);
typedef CUresult (*PFN_cuStreamGetPriority)(CUstream hStream, int* priority);
typedef CUresult (*PFN_cuStreamDestroy_v2)(CUstream hStream);
typedef CUresult (*PFN_cuStreamSynchronize)(CUstream hStream);
typedef CUresult (*PFN_cuStreamQuery)(CUstream hStream);
typedef CUresult (*PFN_cuStreamWaitEvent)(CUstream hStream, CUevent hEvent, unsigned int Flags);
typedef CUresult (*PFN_cuEventCreate)(CUevent* phEvent, unsigned int Flags);
typedef CUresult (*PFN_cuEventDestroy_v2)(CUevent hEvent);
typedef CUresult (*PFN_cuEventRecord)(CUevent hEvent, CUstream hStream);
typedef CUresult (*PFN_cuEventSynchronize)(CUevent hEvent);
typedef CUresult (*PFN_cuEventQuery)(CUevent hEvent);
// cuEventElapsedTime and cuEventElapsedTime_v2 (driver >= 12.8) share this signature.
typedef CUresult (*PFN_cuEventElapsedTime)(float* pMilliseconds, CUevent hStart, CUevent hEnd);
typedef CUresult (*PFN_cuModuleLoadData)(CUmodule* module, const void* image);
typedef CUresult (*PFN_cuModuleUnload)(CUmodule hmod);
typedef CUresult (*PFN_cuModuleGetFunction)(CUfunction* hfunc, CUmodule hmod, const char* name);
typedef CUresult (*PFN_cuFuncGetAttribute)(int* pi, CUfunction_attribute attrib, CUfunction hfunc);
typedef CUresult (*PFN_cuFuncSetAttribute)(CUfunction hfunc, CUfunction_attribute attrib, int value);
// CUDA >= 12.4; lets a launch check the number and sizes of its arguments.
typedef CUresult (*PFN_cuFuncGetParamInfo)(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                           size_t* paramSize);
typedef CUresult (*PFN_cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX,
                                       unsigned int blockDimY, unsigned int blockDimZ,
                                       unsigned int sharedMemBytes, CUstream hStream,
                                       void** kernelParams, void** extra);
// cuLaunchKernelEx (driver >= 12.0) with launch attributes; only the ones used here are named.
typedef enum CUlaunchAttributeID_enum {
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
} CUlaunchAttributeID;
typedef union CUlaunchAttributeValue_union {
    char pad[64];
    struct {
        unsigned int x, y, z;
    } clusterDim;
    int programmaticStreamSerializationAllowed;
    void* align_;  // the union holds pointers in cuda.h: 8-byte aligned
} CUlaunchAttributeValue;
typedef struct CUlaunchAttribute_st {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute* attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
typedef CUresult (*PFN_cuLaunchKernelEx)(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                         void** extra);
typedef CUresult (*PFN_cuStreamBeginCapture_v2)(CUstream hStream, CUstreamCaptureMode mode);
typedef CUresult (*PFN_cuStreamEndCapture)(CUstream hStream, CUgraph* phGraph);
typedef CUresult (*PFN_cuGraphInstantiateWithFlags)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                    unsigned long long flags);
typedef CUresult (*PFN_cuGraphLaunch)(CUgraphExec hGraphExec, CUstream hStream);
typedef CUresult (*PFN_cuGraphExecDestroy)(CUgraphExec hGraphExec);
typedef CUresult (*PFN_cuGraphDestroy)(CUgraph hGraph);
// Uploads an instantiated graph ahead of its first launch (CUDA >= 11.1; optional).
typedef CUresult (*PFN_cuGraphUpload)(CUgraphExec hGraphExec, CUstream hStream);

// ---------------------------------------------------------------------------------------------
// NVRTC (libnvrtc.so.13 / .12)
// ---------------------------------------------------------------------------------------------
typedef int nvrtcResult;
typedef struct _nvrtcProgram* nvrtcProgram;
enum : int {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
};
typedef const char* (*PFN_nvrtcGetErrorString)(nvrtcResult result);
typedef nvrtcResult (*PFN_nvrtcVersion)(int* major, int* minor);
typedef nvrtcResult (*PFN_nvrtcGetNumSupportedArchs)(int* numArchs);
typedef nvrtcResult (*PFN_nvrtcGetSupportedArchs)(int* supportedArchs);
typedef nvrtcResult (*PFN_nvrtcCreateProgram)(nvrtcProgram* prog, const char* src, const char* name,
                                             int numHeaders, const char* const* headers,
                                             const char* const* includeNames);
typedef nvrtcResult (*PFN_nvrtcDestroyProgram)(nvrtcProgram* prog);
typedef nvrtcResult (*PFN_nvrtcCompileProgram)(nvrtcProgram prog, int numOptions,
                                              const char* const* options);
typedef nvrtcResult (*PFN_nvrtcGetProgramLogSize)(nvrtcProgram prog, size_t* logSizeRet);
typedef nvrtcResult (*PFN_nvrtcGetProgramLog)(nvrtcProgram prog, char* log);
typedef nvrtcResult (*PFN_nvrtcGetCUBINSize)(nvrtcProgram prog, size_t* cubinSizeRet);
typedef nvrtcResult (*PFN_nvrtcGetCUBIN)(nvrtcProgram prog, char* cubin);
typedef nvrtcResult (*PFN_nvrtcGetPTXSize)(nvrtcProgram prog, size_t* ptxSizeRet);
typedef nvrtcResult (*PFN_nvrtcGetPTX)(nvrtcProgram prog, char* ptx);

// ---------------------------------------------------------------------------------------------
// Shared by cuFFT and cuBLAS (library_types.h)
// ---------------------------------------------------------------------------------------------
typedef int libraryPropertyType;
enum : int { MAJOR_VERSION = 0, MINOR_VERSION = 1, PATCH_LEVEL = 2 };
typedef struct { float x, y; } gkComplex;  // layout of cuComplex / cufftComplex (float2)

// ---------------------------------------------------------------------------------------------
// cuFFT (libcufft.so.12 in CUDA 13, .11 in CUDA 12)
// ---------------------------------------------------------------------------------------------
typedef int cufftResult;
typedef int cufftHandle;
typedef int cufftType;
enum : int {
    CUFFT_SUCCESS = 0x0,
    CUFFT_R2C = 0x2a,
    CUFFT_C2R = 0x2c,
    CUFFT_C2C = 0x29,
    CUFFT_FORWARD = -1,
    CUFFT_INVERSE = 1,
};
typedef cufftResult (*PFN_cufftGetProperty)(libraryPropertyType type, int* value);
typedef cufftResult (*PFN_cufftCreate)(cufftHandle* handle);
typedef cufftResult (*PFN_cufftDestroy)(cufftHandle plan);
typedef cufftResult (*PFN_cufftSetAutoAllocation)(cufftHandle plan, int autoAllocate);
typedef cufftResult (*PFN_cufftSetWorkArea)(cufftHandle plan, void* workArea);
typedef cufftResult (*PFN_cufftMakePlanMany64)(cufftHandle plan, int rank, long long* n,
                                               long long* inembed, long long istride,
                                               long long idist, long long* onembed,
                                               long long ostride, long long odist, cufftType type,
                                               long long batch, size_t* workSize);
typedef cufftResult (*PFN_cufftSetStream)(cufftHandle plan, CUstream stream);
typedef cufftResult (*PFN_cufftExecC2C)(cufftHandle plan, gkComplex* idata, gkComplex* odata,
                                        int direction);
typedef cufftResult (*PFN_cufftExecR2C)(cufftHandle plan, float* idata, gkComplex* odata);
typedef cufftResult (*PFN_cufftExecC2R)(cufftHandle plan, gkComplex* idata, float* odata);

// ---------------------------------------------------------------------------------------------
// cuBLAS (libcublas.so.13 / .12)
// ---------------------------------------------------------------------------------------------
typedef int cublasStatus_t;
typedef struct cublasContext* cublasHandle_t;
typedef int cublasOperation_t;
typedef int cublasMath_t;
enum : int {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUBLAS_OP_C = 2,
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
};
typedef cublasStatus_t (*PFN_cublasGetProperty)(libraryPropertyType type, int* value);
typedef const char* (*PFN_cublasGetStatusName)(cublasStatus_t status);
typedef const char* (*PFN_cublasGetStatusString)(cublasStatus_t status);
typedef cublasStatus_t (*PFN_cublasCreate_v2)(cublasHandle_t* handle);
typedef cublasStatus_t (*PFN_cublasDestroy_v2)(cublasHandle_t handle);
typedef cublasStatus_t (*PFN_cublasSetStream_v2)(cublasHandle_t handle, CUstream streamId);
typedef cublasStatus_t (*PFN_cublasSetWorkspace_v2)(cublasHandle_t handle, void* workspace,
                                                    size_t workspaceSizeInBytes);
typedef cublasStatus_t (*PFN_cublasSetMathMode)(cublasHandle_t handle, cublasMath_t mode);
typedef cublasStatus_t (*PFN_cublasSgemm_v2)(cublasHandle_t handle, cublasOperation_t transa,
                                             cublasOperation_t transb, int m, int n, int k,
                                             const float* alpha, const float* A, int lda,
                                             const float* B, int ldb, const float* beta, float* C,
                                             int ldc);
typedef cublasStatus_t (*PFN_cublasCgemm_v2)(cublasHandle_t handle, cublasOperation_t transa,
                                             cublasOperation_t transb, int m, int n, int k,
                                             const gkComplex* alpha, const gkComplex* A, int lda,
                                             const gkComplex* B, int ldb, const gkComplex* beta,
                                             gkComplex* C, int ldc);
typedef cublasStatus_t (*PFN_cublasSgemmStridedBatched)(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float* alpha, const float* A, int lda, long long strideA, const float* B, int ldb,
    long long strideB, const float* beta, float* C, int ldc, long long strideC, int batchCount);
typedef cublasStatus_t (*PFN_cublasCgemmStridedBatched)(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const gkComplex* alpha, const gkComplex* A, int lda, long long strideA, const gkComplex* B,
    int ldb, long long strideB, const gkComplex* beta, gkComplex* C, int ldc, long long strideC,
    int batchCount);

}  // extern "C"
