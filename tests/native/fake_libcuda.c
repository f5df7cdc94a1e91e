/* A stand-in for libcuda.so.1 so the C++ device, memory, stream and event code runs on a machine
 * without a GPU (CI). "Device memory" is host memory, copies are memcpy, kernels cannot run.
 * Built by tests/native/conftest.py and selected through GK_LIBCUDA=<path>.
 *
 * Environment knobs: FAKE_CUDA_DEVICES (default 1, at most 16), FAKE_CUDA_SM ("9.0"),
 * FAKE_CUDA_NAME ("Fake GPU"), FAKE_CUDA_INIT_ERROR (a CUresult cuInit returns),
 * FAKE_CUDA_ALLOC_LIMIT (bytes cuMemAlloc may hold on one GPU before CUDA_ERROR_OUT_OF_MEMORY),
 * FAKE_CUDA_LAUNCH_DELAY_US (every cuLaunchKernel call sleeps that long: a launch that holds its caller).
 *
 * Several GPUs: each has its own primary context (a distinct token), and device memory, streams
 * and events remember the context that was current when they were made. Allocations are counted
 * per GPU, and a launch, async copy or event record on a stream of another GPU's context than
 * the current one fails with CUDA_ERROR_INVALID_HANDLE (as the real driver refuses it) and is
 * counted (fake_cuda_context_mismatches), so a multi-GPU bug shows on a machine without a GPU.
 * fake_cuda_*() report what is live, for leak checks from ctypes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100,
    INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_SUPPORTED = 801
};

/* The counters are updated from several threads (engines' workers, dispatchers, callers): atomically,
 * or a lost update leaves a live count off by one. */
#define ATOMIC_ADD(var, n) __atomic_fetch_add(&(var), (n), __ATOMIC_RELAXED)

static int g_initialized = 0;
static long g_live_device_allocs = 0;
static long g_live_host_allocs = 0;
static long g_live_streams = 0;
static long g_live_events = 0;
static long g_retained_contexts = 0;
static size_t g_device_bytes = 0;
#define FAKE_MAX_DEVICES 16
static char g_context_tokens[FAKE_MAX_DEVICES][16];
static long g_retained_by_device[FAKE_MAX_DEVICES];
static size_t g_bytes_by_device[FAKE_MAX_DEVICES];
static long g_allocs_by_device[FAKE_MAX_DEVICES];
static long g_launches_by_device[FAKE_MAX_DEVICES];
static long g_context_mismatches = 0;
static __thread void* g_current = 0;

struct fake_stream { int priority; void* ctx; };
struct fake_event { double t; int recorded; unsigned flags; void* ctx; };

/* The GPU of a context token (-1: none current). */
static int ctx_device(void* ctx) {
    for (int i = 0; i < FAKE_MAX_DEVICES; ++i)
        if (ctx == (void*)g_context_tokens[i]) return i;
    return -1;
}

/* A stream (or event) of one context used while another is current. A null stream (the legacy
 * default stream of the current context) or no current context is left alone. */
static int wrong_context(void* object_ctx) {
    if (!object_ctx || !g_current || object_ctx == g_current) return 0;
    ATOMIC_ADD(g_context_mismatches, 1);
    return 1;
}
static void* stream_ctx(void* s) { return s ? ((struct fake_stream*)s)->ctx : 0; }

static long env_long(const char* name, long fallback) {
    const char* v = getenv(name);
    return v && *v ? strtol(v, 0, 10) : fallback;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int device_count(void) {
    long n = env_long("FAKE_CUDA_DEVICES", 1);
    return (int)(n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : n);
}

static void sm_version(int* major, int* minor) {
    const char* v = getenv("FAKE_CUDA_SM");
    *major = 9;
    *minor = 0;
    if (v && *v) {
        *major = (int)strtol(v, 0, 10);
        const char* dot = strchr(v, '.');
        *minor = dot ? (int)strtol(dot + 1, 0, 10) : 0;
    }
}

long fake_cuda_live_device_allocs(void) { return g_live_device_allocs; }
long fake_cuda_live_host_allocs(void) { return g_live_host_allocs; }
long fake_cuda_live_streams(void) { return g_live_streams; }
long fake_cuda_live_events(void) { return g_live_events; }
long fake_cuda_retained_contexts(void) { return g_retained_contexts; }
long fake_cuda_device_retained(int dev) { return dev >= 0 && dev < FAKE_MAX_DEVICES ? g_retained_by_device[dev] : -1; }
long fake_cuda_device_bytes(int dev) { return dev >= 0 && dev < FAKE_MAX_DEVICES ? (long)g_bytes_by_device[dev] : -1; }
long fake_cuda_device_allocs(int dev) { return dev >= 0 && dev < FAKE_MAX_DEVICES ? g_allocs_by_device[dev] : -1; }
long fake_cuda_device_launches(int dev) { return dev >= 0 && dev < FAKE_MAX_DEVICES ? g_launches_by_device[dev] : -1; }
long fake_cuda_context_mismatches(void) { return g_context_mismatches; }
int fake_cuda_current_device(void) { return ctx_device(g_current); }

CUresult cuGetErrorName(CUresult e, const char** s) {
    switch (e) {
    case OK: *s = "CUDA_SUCCESS"; return OK;
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; return OK;
    case NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; return OK;
    case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; return OK;
    case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return OK;
    case NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; return OK;
    default: *s = 0; return INVALID_VALUE;
    }
}

CUresult cuGetErrorString(CUresult e, const char** s) {
    switch (e) {
    case OUT_OF_MEMORY: *s = "out of memory"; return OK;
    case NO_DEVICE: *s = "no CUDA-capable device is detected"; return OK;
    case NOT_SUPPORTED: *s = "operation not supported"; return OK;
    case NOT_FOUND: *s = "named symbol not found"; return OK;
    default: return cuGetErrorName(e, s);
    }
}

CUresult cuInit(unsigned flags) {
    (void)flags;
    long forced = env_long("FAKE_CUDA_INIT_ERROR", 0);
    if (forced) return (CUresult)forced;
    g_initialized = 1;
    return OK;
}

CUresult cuDriverGetVersion(int* v) { *v = 13000; return OK; }

CUresult cuDeviceGetCount(int* n) {
    if (!g_initialized) return NOT_INITIALIZED;
    *n = device_count();
    return OK;
}

CUresult cuDeviceGet(int* dev, int ordinal) {
    if (!g_initialized) return NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= device_count()) return INVALID_VALUE;
    *dev = ordinal;
    return OK;
}

CUresult cuDeviceGetName(char* name, int len, int dev) {
    (void)dev;
    const char* n = getenv("FAKE_CUDA_NAME");
    strncpy(name, n && *n ? n : "Fake GPU", (size_t)len);
    name[len - 1] = 0;
    return OK;
}

CUresult cuDeviceGetAttribute(int* value, int attribute, int dev) {
    int major, minor;
    sm_version(&major, &minor);
    switch (attribute) {
    case 75: *value = major; break;
    case 76: *value = minor; break;
    case 16: *value = 132; break;             /* multiprocessors */
    case 38: *value = 50 * 1024 * 1024; break; /* L2 */
    case 1: *value = 1024; break;
    case 8: *value = 48 * 1024; break;
    case 97: *value = 227 * 1024; break;
    case 81: *value = 228 * 1024; break;
    case 10: *value = 32; break;
    case 78: *value = 1; break;
    case 33: *value = 0x18 + 0x10 * dev; break; /* PCI bus: 0000:18:00.0, 0000:28:00.0, ... */
    case 34: *value = 0; break;               /* PCI device */
    case 50: *value = 0; break;               /* PCI domain */
    default: *value = 1; break;
    }
    return OK;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, int dev) {
    (void)dev;
    *bytes = (size_t)80 << 30;
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
    if (dev < 0 || dev >= device_count()) return INVALID_VALUE;
    ATOMIC_ADD(g_retained_contexts, 1);
    ATOMIC_ADD(g_retained_by_device[dev], 1);
    *ctx = g_context_tokens[dev];
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    if (dev < 0 || dev >= device_count()) return INVALID_VALUE;
    ATOMIC_ADD(g_retained_contexts, -1);
    ATOMIC_ADD(g_retained_by_device[dev], -1);
    return OK;
}

CUresult cuCtxSetCurrent(void* ctx) { g_current = ctx; return OK; }
CUresult cuCtxGetCurrent(void** ctx) { *ctx = g_current; return OK; }
CUresult cuCtxSynchronize(void) { return g_current ? OK : INVALID_CONTEXT; }

CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
    *least = 0;
    *greatest = -5;
    return OK;
}

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    int dev = ctx_device(g_current);
    if (dev < 0) return INVALID_CONTEXT;
    *total = (size_t)80 << 30;
    *free_bytes = *total - g_bytes_by_device[dev];
    return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
    if (!g_current) return INVALID_CONTEXT;
    int dev = ctx_device(g_current);
    if (dev < 0) return INVALID_CONTEXT;
    long limit = env_long("FAKE_CUDA_ALLOC_LIMIT", 0);
    if (limit && g_bytes_by_device[dev] + n > (size_t)limit) return OUT_OF_MEMORY;
    /* 256 bytes of header in front keep the size and the GPU for cuMemFree and the block
     * 256-aligned. */
    char* mem = aligned_alloc(256, 256 + (n + 255) / 256 * 256);
    if (!mem) return OUT_OF_MEMORY;
    memcpy(mem, &n, sizeof n);
    memcpy(mem + sizeof n, &dev, sizeof dev);
    ATOMIC_ADD(g_live_device_allocs, 1);
    ATOMIC_ADD(g_allocs_by_device[dev], 1);
    ATOMIC_ADD(g_device_bytes, n);
    ATOMIC_ADD(g_bytes_by_device[dev], n);
    *p = (CUdeviceptr)(uintptr_t)(mem + 256);
    return OK;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
    if (!g_current) return INVALID_CONTEXT;
    char* mem = (char*)(uintptr_t)p - 256;
    size_t n;
    int dev;
    memcpy(&n, mem, sizeof n);
    memcpy(&dev, mem + sizeof n, sizeof dev);
    ATOMIC_ADD(g_device_bytes, -n);
    ATOMIC_ADD(g_bytes_by_device[dev], -n);
    ATOMIC_ADD(g_allocs_by_device[dev], -1);
    free(mem);
    ATOMIC_ADD(g_live_device_allocs, -1);
    return OK;
}

CUresult cuMemHostAlloc(void** p, size_t n, unsigned flags) {
    (void)flags;
    if (!g_current) return INVALID_CONTEXT;
    *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    if (!*p) return OUT_OF_MEMORY;
    ATOMIC_ADD(g_live_host_allocs, 1);
    return OK;
}

/* Host memory is the device's memory here: a mapped pinned buffer's device address is its own.
 * -DFAKE_NO_HOST_POINTER leaves the entry point out (a driver that cannot map host memory). */
#ifndef FAKE_NO_HOST_POINTER
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned flags) {
    (void)flags;
    *d = (CUdeviceptr)(uintptr_t)p;
    return OK;
}
#endif

CUresult cuMemFreeHost(void* p) {
    free(p);
    ATOMIC_ADD(g_live_host_allocs, -1);
    return OK;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) {
    memcpy((void*)(uintptr_t)d, s, n);
    return OK;
}
CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) {
    memcpy(d, (const void*)(uintptr_t)s, n);
    return OK;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void* st) {
    if (wrong_context(stream_ctx(st))) return INVALID_HANDLE;
    return cuMemcpyHtoD_v2(d, s, n);
}
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void* st) {
    if (wrong_context(stream_ctx(st))) return INVALID_HANDLE;
    return cuMemcpyDtoH_v2(d, s, n);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void* st) {
    if (wrong_context(stream_ctx(st))) return INVALID_HANDLE;
    memmove((void*)(uintptr_t)d, (const void*)(uintptr_t)s, n);
    return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void* st) {
    if (wrong_context(stream_ctx(st))) return INVALID_HANDLE;
    memset((void*)(uintptr_t)d, v, n);
    return OK;
}

CUresult cuStreamCreateWithPriority(void** s, unsigned flags, int priority) {
    (void)flags;
    struct fake_stream* fs = malloc(sizeof *fs);
    fs->priority = priority;
    fs->ctx = g_current;
    *s = fs;
    ATOMIC_ADD(g_live_streams, 1);
    return OK;
}
CUresult cuStreamGetPriority(void* s, int* p) { *p = ((struct fake_stream*)s)->priority; return OK; }
CUresult cuStreamDestroy_v2(void* s) { free(s); ATOMIC_ADD(g_live_streams, -1); return OK; }
CUresult cuStreamSynchronize(void* s) { (void)s; return OK; }
CUresult cuStreamQuery(void* s) { (void)s; return OK; }
CUresult cuStreamWaitEvent(void* s, void* e, unsigned f) { (void)s; (void)e; (void)f; return OK; }

CUresult cuEventCreate(void** e, unsigned flags) {
    struct fake_event* fe = calloc(1, sizeof *fe);
    fe->flags = flags;
    fe->ctx = g_current;
    *e = fe;
    ATOMIC_ADD(g_live_events, 1);
    return OK;
}
CUresult cuEventDestroy_v2(void* e) { free(e); ATOMIC_ADD(g_live_events, -1); return OK; }
CUresult cuEventRecord(void* e, void* s) {
    if (wrong_context(stream_ctx(s))) return INVALID_HANDLE;
    void* ectx = ((struct fake_event*)e)->ctx;
    void* sctx = stream_ctx(s);
    if (ectx && sctx && ectx != sctx) {  /* the event and the stream of different GPUs */
        ATOMIC_ADD(g_context_mismatches, 1);
        return INVALID_HANDLE;
    }
    ((struct fake_event*)e)->t = now_ms();
    ((struct fake_event*)e)->recorded = 1;
    return OK;
}
CUresult cuEventSynchronize(void* e) { (void)e; return OK; }
CUresult cuEventQuery(void* e) { (void)e; return OK; }
CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) {
    struct fake_event* start = a;
    struct fake_event* end = b;
    if ((start->flags & 2) || (end->flags & 2)) return INVALID_HANDLE;
    if (!start->recorded || !end->recorded) return INVALID_HANDLE;
    *ms = (float)(end->t - start->t);
    return OK;
}

static int g_module_token;
static int g_function_token;
static long g_live_modules = 0;
long fake_cuda_live_modules(void) { return g_live_modules; }

/* Accepts only an ELF image (what NVRTC's CUBIN is). */
CUresult cuModuleLoadData(void** m, const void* image) {
    if (!g_current) return INVALID_CONTEXT;
    if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200; /* CUDA_ERROR_INVALID_IMAGE */
    *m = &g_module_token;
    ATOMIC_ADD(g_live_modules, 1);
    return OK;
}
CUresult cuModuleUnload(void* m) { (void)m; ATOMIC_ADD(g_live_modules, -1); return OK; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    (void)m;
    if (strstr(name, "missing")) return NOT_FOUND;
    *f = &g_function_token;
    return OK;
}
CUresult cuFuncGetAttribute(int* v, int a, void* f) { (void)f; *v = a == 0 ? 1024 : 0; return OK; }
CUresult cuFuncSetAttribute(void* f, int a, int v) { (void)f; (void)a; (void)v; return OK; }

/* Parameter sizes from FAKE_CUDA_PARAM_SIZES ("8,4,8"); unset: the driver "cannot tell". */
CUresult cuFuncGetParamInfo(void* f, size_t index, size_t* offset, size_t* size) {
    (void)f;
    const char* spec = getenv("FAKE_CUDA_PARAM_SIZES");
    if (!spec) return NOT_SUPPORTED;
    size_t i = 0, at = 0;
    while (*spec) {
        char* end;
        size_t v = (size_t)strtoul(spec, &end, 10);
        if (end == spec) break;
        if (i == index) {
            *offset = at;
            if (size) *size = v;
            return OK;
        }
        at += v;
        ++i;
        spec = *end == ',' ? end + 1 : end;
    }
    return INVALID_VALUE;
}

/* The last launch, for tests: dims and the first 8 bytes of each parameter (every parameter's
 * storage is padded to at least 8 bytes by gk::KernelArgs). */
#define FAKE_MAX_PARAMS 16
static unsigned g_last_dims[7];
static unsigned char g_last_params[FAKE_MAX_PARAMS][8];
static long g_launches = 0;
long fake_cuda_launches(void) { return g_launches; }
unsigned fake_cuda_last_dim(int i) { return g_last_dims[i]; }
void fake_cuda_last_param(int i, unsigned char* out) { memcpy(out, g_last_params[i], 8); }

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void* s, void** params, void** extra) {
    (void)f; (void)extra;
    if (env_long("FAKE_CUDA_LAUNCH_ERROR", 0)) return NOT_SUPPORTED;
    {
        long delay_us = env_long("FAKE_CUDA_LAUNCH_DELAY_US", 0);  /* a launch call that holds its caller */
        if (delay_us > 0) {
            struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
            nanosleep(&ts, 0);
        }
    }
    if (wrong_context(stream_ctx(s))) return INVALID_HANDLE;
    {
        int dev = ctx_device(s ? stream_ctx(s) : g_current);
        if (dev >= 0) ATOMIC_ADD(g_launches_by_device[dev], 1);
    }
    unsigned dims[7] = {gx, gy, gz, bx, by, bz, smem};
    memcpy(g_last_dims, dims, sizeof dims);
    long count = env_long("FAKE_CUDA_PARAM_COUNT", 0);
    for (long i = 0; i < count && i < FAKE_MAX_PARAMS; ++i) memcpy(g_last_params[i], params[i], 8);
    ATOMIC_ADD(g_launches, 1);
    return OK;
}
