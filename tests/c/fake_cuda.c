/* A fake CUDA driver and NVRTC in one shared object, for testing the CUDA backend without a GPU:
 * libtgrad loads it through TGRAD_CUDA_DRIVER (the driver) and TGRAD_NVRTC (the compiler).
 *
 * TGRAD_FAKE_CUDA chooses its behaviour:
 *   ok (or unset)   one device, "Fake CUDA Device", compute capability 9.0; device memory is host
 *                   memory, copies are memcpy, a launch does nothing and succeeds;
 *   init:<code>     cuInit returns <code> (e.g. init:100, CUDA_ERROR_NO_DEVICE);
 *   no-devices      cuDeviceGetCount reports 0;
 *   module:<code>   cuModuleLoadData returns <code>;
 *   launch:<code>   cuLaunchKernel returns <code>;
 *   cc:<major><minor>  the device's compute capability (e.g. cc:75);
 *   compile-fails   the fake NVRTC rejects every kernel.
 * The fake NVRTC "compiles" any source (the CUBIN is the text itself) unless told to fail, and then
 * fails with a log, as NVRTC does. fake_cuda_live() counts device allocations not yet freed, modules
 * not yet unloaded and programs not yet destroyed, so a test can see that nothing leaked. */
#include <stdlib.h>
#include <string.h>

#define FAKE_API __attribute__((visibility("default")))

typedef int CUresult;
static int live_allocations, live_modules, live_programs;

static const char *mode(void) {
    const char *m = getenv("TGRAD_FAKE_CUDA");
    return m && *m ? m : "ok";
}

/* The error code of "<prefix>:<code>" when the mode is that, else 0. */
static int injected(const char *prefix) {
    size_t n = strlen(prefix);
    const char *m = mode();
    return strncmp(m, prefix, n) == 0 && m[n] == ':' ? atoi(m + n + 1) : 0;
}

FAKE_API void fake_cuda_live(int *allocations, int *modules, int *programs) {
    *allocations = live_allocations, *modules = live_modules, *programs = live_programs;
}

/* ---- the driver ---- */
FAKE_API CUresult cuInit(unsigned flags) { return flags ? 1 : injected("init"); }
FAKE_API CUresult cuDeviceGetCount(int *count) {
    *count = strcmp(mode(), "no-devices") == 0 ? 0 : 1;
    return 0;
}
FAKE_API CUresult cuDeviceGet(int *device, int ordinal) {
    *device = ordinal;
    return ordinal == 0 ? 0 : 101;
}
FAKE_API CUresult cuDeviceGetName(char *name, int len, int device) {
    (void)device;
    strncpy(name, "Fake CUDA Device", (size_t)len);
    return 0;
}
FAKE_API CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    int cc = injected("cc") ? injected("cc") : 90;
    switch (attribute) {
    case 1: *value = 1024; return 0;       /* max threads per block */
    case 8: *value = 48 * 1024; return 0;  /* shared memory per block */
    case 75: *value = cc / 10; return 0;
    case 76: *value = cc % 10; return 0;
    default: return 1;
    }
}
static int the_context;
FAKE_API CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
    (void)device;
    *context = &the_context;
    return 0;
}
FAKE_API CUresult cuCtxSetCurrent(void *context) { return context == &the_context ? 0 : 201; }
FAKE_API CUresult cuCtxSynchronize(void) { return 0; }
FAKE_API CUresult cuMemAlloc_v2(unsigned long long *ptr, size_t bytes) {
    void *p = calloc(1, bytes);
    if (!p) return 2;
    live_allocations++;
    *ptr = (unsigned long long)(size_t)p;
    return 0;
}
FAKE_API CUresult cuMemFree_v2(unsigned long long ptr) {
    live_allocations--;
    free((void *)(size_t)ptr);
    return 0;
}
FAKE_API CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes) {
    memcpy((void *)(size_t)dst, src, bytes);
    return 0;
}
FAKE_API CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t bytes) {
    memcpy(dst, (const void *)(size_t)src, bytes);
    return 0;
}
static int the_module, the_function;
FAKE_API CUresult cuModuleLoadData(void **module, const void *image) {
    if (!image) return 1;
    if (injected("module")) return injected("module");
    live_modules++;
    *module = &the_module;
    return 0;
}
FAKE_API CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    (void)name;
    *function = &the_function;
    return module == &the_module ? 0 : 400;
}
FAKE_API CUresult cuModuleUnload(void *module) {
    live_modules--;
    return module == &the_module ? 0 : 400;
}
FAKE_API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, void *stream, void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)stream, (void)extra;
    if (f != &the_function || !params) return 400;
    return injected("launch");
}
FAKE_API CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case 0: *name = "CUDA_SUCCESS"; return 0;
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 218: *name = "CUDA_ERROR_INVALID_PTX"; return 0;
    case 700: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return 0;
    case 701: *name = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; return 0;
    case 719: *name = "CUDA_ERROR_LAUNCH_FAILED"; return 0;
    default: *name = NULL; return 1; /* as the driver: CUDA_ERROR_INVALID_VALUE */
    }
}

/* ---- NVRTC ---- */
typedef struct fake_program {
    char *source;
    int failed;
} fake_program;

FAKE_API const char *nvrtcGetErrorString(int result) {
    return result == 0 ? "NVRTC_SUCCESS" : result == 6 ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR";
}
FAKE_API int nvrtcVersion(int *major, int *minor) {
    *major = 99, *minor = 0;
    return 0;
}
FAKE_API int nvrtcCreateProgram(fake_program **program, const char *source, const char *name, int nheaders,
                                const char *const *headers, const char *const *include_names) {
    (void)name, (void)nheaders, (void)headers, (void)include_names;
    fake_program *p = calloc(1, sizeof *p);
    size_t n = strlen(source) + 1;
    if (!p || !(p->source = malloc(n))) {
        free(p);
        return 1;
    }
    memcpy(p->source, source, n);
    live_programs++;
    *program = p;
    return 0;
}
FAKE_API int nvrtcDestroyProgram(fake_program **program) {
    if (!program || !*program) return 4;
    live_programs--;
    free((*program)->source);
    free(*program);
    *program = NULL;
    return 0;
}
FAKE_API int nvrtcCompileProgram(fake_program *p, int noptions, const char *const *options) {
    int fmad_off = 0;
    for (int i = 0; i < noptions; i++) fmad_off |= strcmp(options[i], "--fmad=false") == 0;
    if (!fmad_off) return 5; /* the backend must never compile with contraction on */
    p->failed = strcmp(mode(), "compile-fails") == 0;
    return p->failed ? 6 : 0;
}
static const char fake_log[] = "fake.cu(1): error: #error directive: fake NVRTC refuses this kernel\n";
FAKE_API int nvrtcGetProgramLogSize(fake_program *p, size_t *size) {
    *size = p->failed ? sizeof fake_log : 1;
    return 0;
}
FAKE_API int nvrtcGetProgramLog(fake_program *p, char *log) {
    strcpy(log, p->failed ? fake_log : "");
    return 0;
}
FAKE_API int nvrtcGetCUBINSize(fake_program *p, size_t *size) {
    *size = strlen(p->source) + 1;
    return 0;
}
FAKE_API int nvrtcGetCUBIN(fake_program *p, char *cubin) {
    strcpy(cubin, p->source);
    return 0;
}
FAKE_API int nvrtcGetPTXSize(fake_program *p, size_t *size) { return nvrtcGetCUBINSize(p, size); }
FAKE_API int nvrtcGetPTX(fake_program *p, char *ptx) { return nvrtcGetCUBIN(p, ptx); }
static const int fake_archs[] = { 75, 80, 86, 89, 90 };
FAKE_API int nvrtcGetNumSupportedArchs(int *count) {
    *count = (int)(sizeof fake_archs / sizeof fake_archs[0]);
    return 0;
}
FAKE_API int nvrtcGetSupportedArchs(int *archs) {
    memcpy(archs, fake_archs, sizeof fake_archs);
    return 0;
}
