/* The CUDA backend (backend.h): driver and NVRTC calls only.
 *
 * The driver API is opened with dlopen at run time (TGRAD_CUDA_DRIVER, a path, else libcuda.so.1)
 * and so is NVRTC, the run-time compiler (TGRAD_NVRTC, else libnvrtc.so.13, .so.12, libnvrtc.so;
 * the Python package preloads the nvidia-cuda-nvrtc wheel's copy), so libtgrad has no link-time
 * dependency on CUDA and a machine without it reports backend_unavailable with the reason.
 *
 * Kernels are rendered CUDA C++ (src/gen, TGRAD_LANG_CUDA) compiled by NVRTC for the device's
 * sm_XY with --fmad=false and no fast math (the naive and tiled routes rely on fmaf being fused and
 * every other operation exact, docs/kernels.md), to a CUBIN; when NVRTC is older than the device
 * it compiles PTX for the newest architecture it knows and the driver finishes the job. Every call
 * blocks until the device is done (synchronous copies, a launch ends with cuCtxSynchronize).
 * device.c serializes the calls; the primary context is made current on the calling thread
 * first, since CUDA's current context is per thread. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_api.h"
#include "kernel_cache.h"

static struct {
#define TG_CU_FIELD(name) tg_##name name;
    TG_CU_FUNCTIONS(TG_CU_FIELD)
#undef TG_CU_FIELD
} cu;

static struct {
#define TG_NV_FIELD(name) tg_##name name;
    TG_NVRTC_FUNCTIONS(TG_NV_FIELD)
#undef TG_NV_FIELD
} nv;

static pthread_once_t init_once = PTHREAD_ONCE_INIT, nvrtc_once = PTHREAD_ONCE_INIT;
static tgrad_status init_status, nvrtc_status;
static char init_reason[480], nvrtc_reason[400];
static char device_label[256];
static CUcontext context;
static int cc_major, cc_minor, max_threads, max_shared;
static char arch_option[48]; /* --gpu-architecture=sm_90 (CUBIN) or =compute_90 (PTX) */
static int use_ptx;

typedef struct cuda_program {
    CUmodule module;
    CUfunction function;
} cuda_program;

/* Why init failed; without a "cuda:" prefix, which device.c and the backend listing add. */
#define UNAVAILABLE(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), TGRAD_ERR_BACKEND_UNAVAILABLE)

static const char *cu_error_name(CUresult err) {
    const char *name = NULL;
    if (cu.cuGetErrorName && cu.cuGetErrorName(err, &name) == CUDA_SUCCESS && name) return name;
    return "CUDA error";
}

/* A failed driver call as a tgrad status: exhaustion is out_of_memory, a device or driver that
 * went away is backend_unavailable, a module the driver cannot load is kernel_compile_failed, a
 * block larger than the function allows is route_not_eligible, anything else is internal. */
static tgrad_status cu_fail(CUresult err, const char *call) {
    tgrad_status s = TGRAD_ERR_INTERNAL;
    switch (err) {
    case CUDA_ERROR_OUT_OF_MEMORY: s = TGRAD_ERR_OUT_OF_MEMORY; break;
    case CUDA_ERROR_NO_DEVICE: case CUDA_ERROR_DEINITIALIZED: case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEVICE_UNAVAILABLE: case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: s = TGRAD_ERR_BACKEND_UNAVAILABLE; break;
    case CUDA_ERROR_INVALID_IMAGE: case CUDA_ERROR_NO_BINARY_FOR_GPU: case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND: case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
        s = TGRAD_ERR_KERNEL_COMPILE_FAILED; break;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: s = TGRAD_ERR_ROUTE_NOT_ELIGIBLE; break;
    default: break;
    }
    return tg_fail(s, "cuda: %s failed: %s (%d) on %s", call, cu_error_name(err), (int)err, device_label);
}

/* ---- loading the libraries --------------------------------------------------------------------- */
static void *open_first(const char *env, const char *const *defaults, size_t n, const char **path,
                        const char **why) {
    const char *override = getenv(env);
    if (override && *override) defaults = &override, n = 1;
    void *lib = NULL;
    *why = "";
    for (size_t i = 0; i < n && !lib; i++) {
        *path = defaults[i];
        lib = dlopen(*path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) *why = dlerror();
    }
    return lib; /* stays open for the library's lifetime */
}

static tgrad_status open_driver(void) {
    static const char *const defaults[] = { "libcuda.so.1" };
    const char *path = NULL, *why = NULL;
    void *lib = open_first("TGRAD_CUDA_DRIVER", defaults, 1, &path, &why);
    if (!lib) return UNAVAILABLE(init_reason, "no NVIDIA driver (%s)", why && *why ? why : path); /* dlerror names the file */
#define TG_CU_SYM(name)                                                                                      \
    if (!(*(void **)&cu.name = dlsym(lib, #name)))                                                           \
        return UNAVAILABLE(init_reason, "the driver %s lacks %s (not a CUDA driver, or one older than 4.0)", \
                           path, #name);
    TG_CU_FUNCTIONS(TG_CU_SYM)
#undef TG_CU_SYM
    return TGRAD_OK;
}

/* NVRTC opens its builtins library (libnvrtc-builtins.so.<major>.<minor>) by soname when it first
 * compiles, found through its own RUNPATH ($ORIGIN). A process whose dlopen is intercepted (an
 * AddressSanitizer runtime preloaded) loses $ORIGIN, so when NVRTC came from a path the builtins
 * beside it are opened here first, by path; NVRTC's later dlopen then finds them loaded. */
static void preload_builtins(const char *nvrtc_path) {
    const char *slash = strrchr(nvrtc_path, '/');
    int major = 0, minor = 0;
    if (!slash || nv.nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return;
    char path[1024];
    int n = snprintf(path, sizeof path, "%.*s/libnvrtc-builtins.so.%d.%d", (int)(slash - nvrtc_path), nvrtc_path,
                     major, minor);
    if (n > 0 && (size_t)n < sizeof path) dlopen(path, RTLD_NOW | RTLD_GLOBAL); /* absent: NVRTC's own search */
}

static void open_nvrtc_once(void) {
    static const char *const defaults[] = { "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so" };
    const char *path = NULL, *why = NULL;
    void *lib = open_first("TGRAD_NVRTC", defaults, sizeof defaults / sizeof defaults[0], &path, &why);
    if (!lib) {
        const char *env = getenv("TGRAD_NVRTC");
        nvrtc_status = UNAVAILABLE(nvrtc_reason, "NVRTC not found (pip install 'tgrad[cuda]'); %s: %s",
                                   env && *env ? "TGRAD_NVRTC" : "tried libnvrtc.so.13, .so.12, libnvrtc.so",
                                   why && *why ? why : path);
        return;
    }
#define TG_NV_SYM(name)                                                                                      \
    if (!(*(void **)&nv.name = dlsym(lib, #name))) {                                                         \
        nvrtc_status = UNAVAILABLE(nvrtc_reason, "NVRTC %s lacks %s (NVRTC 11.2 or later is needed)", path, #name); \
        return;                                                                                              \
    }
    TG_NVRTC_FUNCTIONS(TG_NV_SYM)
#undef TG_NV_SYM
    preload_builtins(path);
}

static tgrad_status open_nvrtc(void) {
    pthread_once(&nvrtc_once, open_nvrtc_once);
    return nvrtc_status;
}

/* ---- finding the device ------------------------------------------------------------------------ */
/* The architecture NVRTC compiles for: the device's own (a CUBIN) when NVRTC knows it, else the
 * newest older one as PTX, which the driver compiles for the device when the module loads. */
static tgrad_status choose_arch(void) {
    int want = cc_major * 10 + cc_minor, count = 0, best = 0;
    int archs[128];
    if (nv.nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0 || count > 128 ||
        nv.nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS)
        count = 0;
    for (int i = 0; i < count; i++)
        if (archs[i] <= want && archs[i] > best) best = archs[i];
    if (best == 0) return UNAVAILABLE(init_reason, "NVRTC cannot compile for sm_%d or any older architecture", want);
    use_ptx = best != want;
    snprintf(arch_option, sizeof arch_option, "--gpu-architecture=%s_%d", use_ptx ? "compute" : "sm", best);
    return TGRAD_OK;
}

static tgrad_status init_device(void) {
    tgrad_status s = open_driver();
    if (s) return s;
    CUresult err = cu.cuInit(0);
    if (err != CUDA_SUCCESS) return UNAVAILABLE(init_reason, "cuInit: %s", cu_error_name(err));
    int count = 0;
    err = cu.cuDeviceGetCount(&count);
    if (err != CUDA_SUCCESS) return UNAVAILABLE(init_reason, "cuDeviceGetCount: %s", cu_error_name(err));
    if (count <= 0) return UNAVAILABLE(init_reason, "no CUDA device");
    const char *want = getenv("TGRAD_CUDA_DEVICE");
    int ordinal = 0, used = 0;
    if (want && *want && (sscanf(want, "%d%n", &ordinal, &used) != 1 || want[used] || ordinal < 0 || ordinal >= count))
        return UNAVAILABLE(init_reason, "TGRAD_CUDA_DEVICE=%s is not a device index (the driver sees %d device(s))",
                           want, count);
    CUdevice dev = 0;
    char name[128] = "";
    if ((err = cu.cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS ||
        (err = cu.cuDeviceGetName(name, (int)sizeof name - 1, dev)) != CUDA_SUCCESS ||
        (err = cu.cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) != CUDA_SUCCESS ||
        (err = cu.cuDeviceGetAttribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) != CUDA_SUCCESS ||
        (err = cu.cuDeviceGetAttribute(&max_threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev)) != CUDA_SUCCESS ||
        (err = cu.cuDeviceGetAttribute(&max_shared, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, dev)) != CUDA_SUCCESS)
        return UNAVAILABLE(init_reason, "reading device %d: %s", ordinal, cu_error_name(err));
    if ((s = open_nvrtc()) != TGRAD_OK) return UNAVAILABLE(init_reason, "%s", nvrtc_reason);
    if ((s = choose_arch()) != TGRAD_OK) return s;
    if ((err = cu.cuDevicePrimaryCtxRetain(&context, dev)) != CUDA_SUCCESS || !context) {
        context = NULL;
        return UNAVAILABLE(init_reason, "cuDevicePrimaryCtxRetain: %s", cu_error_name(err));
    }
    int nv_major = 0, nv_minor = 0;
    nv.nvrtcVersion(&nv_major, &nv_minor);
    snprintf(device_label, sizeof device_label, "%s (sm_%d%d, NVRTC %d.%d%s)", name, cc_major, cc_minor, nv_major,
             nv_minor, use_ptx ? ", PTX" : "");
    return TGRAD_OK;
}

static void init_once_fn(void) {
    init_status = init_device();
    if (init_status != TGRAD_OK) context = NULL;
}

static tgrad_status cuda_init(void) {
    pthread_once(&init_once, init_once_fn);
    if (init_status != TGRAD_OK) return tg_fail(init_status, "%s", init_reason);
    return TGRAD_OK;
}

static const char *cuda_device_name(void) {
    pthread_once(&init_once, init_once_fn);
    return init_status == TGRAD_OK ? device_label : init_reason;
}

/* The primary context, current on this thread (CUDA keeps the current context per thread). */
#define REQUIRE_DEVICE(what)                                                                                 \
    do {                                                                                                     \
        if (!context) return tg_fail(TGRAD_ERR_INTERNAL, "cuda: %s before a successful init", what);        \
        CUresult set_ = cu.cuCtxSetCurrent(context);                                                         \
        if (set_ != CUDA_SUCCESS) return cu_fail(set_, "cuCtxSetCurrent");                                   \
    } while (0)

/* ---- memory ------------------------------------------------------------------------------------ */
static tgrad_status cuda_alloc(size_t bytes, void **mem) {
    REQUIRE_DEVICE("alloc");
    if (!mem || bytes == 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cuda: alloc of 0 bytes or to NULL");
    CUdeviceptr p = 0;
    CUresult err = cu.cuMemAlloc_v2(&p, bytes);
    if (err != CUDA_SUCCESS || !p) return cu_fail(err == CUDA_SUCCESS ? CUDA_ERROR_OUT_OF_MEMORY : err, "cuMemAlloc");
    *mem = (void *)(uintptr_t)p;
    return TGRAD_OK;
}

static void cuda_free(void *mem) {
    if (!mem || !context || cu.cuCtxSetCurrent(context) != CUDA_SUCCESS) return;
    cu.cuMemFree_v2((CUdeviceptr)(uintptr_t)mem);
}

static tgrad_status cuda_copy_in(void *mem, size_t offset, const void *src, size_t bytes) {
    REQUIRE_DEVICE("copy_in");
    if (bytes == 0) return TGRAD_OK;
    CUresult err = cu.cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)mem + offset, src, bytes);
    return err == CUDA_SUCCESS ? TGRAD_OK : cu_fail(err, "cuMemcpyHtoD");
}

static tgrad_status cuda_copy_out(const void *mem, size_t offset, void *dst, size_t bytes) {
    REQUIRE_DEVICE("copy_out");
    if (bytes == 0) return TGRAD_OK;
    CUresult err = cu.cuMemcpyDtoH_v2(dst, (CUdeviceptr)(uintptr_t)mem + offset, bytes);
    return err == CUDA_SUCCESS ? TGRAD_OK : cu_fail(err, "cuMemcpyDtoH");
}

/* ---- programs ---------------------------------------------------------------------------------- */
/* NVRTC's log after a failed compile, from its first error line (warnings before it are noise). */
static tgrad_status compile_failed(nvrtcProgram prog, nvrtcResult res, const char *kernel_name) {
    size_t size = 0;
    char *log = NULL;
    if (nv.nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 0 && (log = tg_malloc(size + 1)) != NULL) {
        if (nv.nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) size = 0;
        log[size] = 0;
    }
    const char *text = log && *log ? log : "(NVRTC gave no log)";
    const char *first_error = strstr(text, "error");
    if (first_error) {
        while (first_error > text && first_error[-1] != '\n') first_error--;
        text = first_error;
    }
    tgrad_status s = tg_fail(res == NVRTC_ERROR_OUT_OF_MEMORY ? TGRAD_ERR_OUT_OF_MEMORY : TGRAD_ERR_KERNEL_COMPILE_FAILED,
                             "cuda: NVRTC failed to compile %s (%s); log:\n%s", kernel_name,
                             nv.nvrtcGetErrorString(res), text);
    free(log);
    return s;
}

/* Compile `source` with NVRTC for `arch` (an --gpu-architecture= option) into a malloc'ed image:
 * a CUBIN, or NUL-terminated PTX when `ptx`. */
static tgrad_status nvrtc_compile(const char *source, size_t length, const char *kernel_name, const char *arch,
                                  int ptx, char **image, size_t *size) {
    char *text = tg_malloc(length + 1);
    if (!text) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cuda: out of memory compiling %s", kernel_name);
    memcpy(text, source, length);
    text[length] = 0;
    nvrtcProgram prog = NULL;
    nvrtcResult res = nv.nvrtcCreateProgram(&prog, text, "tgrad_kernel.cu", 0, NULL, NULL);
    free(text);
    if (res != NVRTC_SUCCESS)
        return tg_fail(res == NVRTC_ERROR_OUT_OF_MEMORY ? TGRAD_ERR_OUT_OF_MEMORY : TGRAD_ERR_INTERNAL,
                       "cuda: nvrtcCreateProgram failed for %s: %s", kernel_name, nv.nvrtcGetErrorString(res));
    /* Fast math off: no --use_fast_math, no contraction into fma (--fmad=false); precise division
     * and square roots and no flush to zero are NVRTC's defaults. */
    const char *options[] = { arch, "--fmad=false" };
    tgrad_status s = TGRAD_OK;
    res = nv.nvrtcCompileProgram(prog, 2, options);
    if (res != NVRTC_SUCCESS) {
        s = res == NVRTC_ERROR_INVALID_OPTION
                ? tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "cuda: NVRTC refuses %s (%s)", arch, nv.nvrtcGetErrorString(res))
                : compile_failed(prog, res, kernel_name);
        goto done;
    }
    res = ptx ? nv.nvrtcGetPTXSize(prog, size) : nv.nvrtcGetCUBINSize(prog, size);
    if (res == NVRTC_SUCCESS && !(*image = tg_malloc(*size + 1))) {
        s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cuda: out of memory for the %zu-byte image of %s", *size, kernel_name);
        goto done;
    }
    if (res == NVRTC_SUCCESS) res = ptx ? nv.nvrtcGetPTX(prog, *image) : nv.nvrtcGetCUBIN(prog, *image);
    if (res != NVRTC_SUCCESS) {
        free(*image);
        *image = NULL;
        s = tg_fail(TGRAD_ERR_INTERNAL, "cuda: reading NVRTC's %s of %s: %s", ptx ? "PTX" : "CUBIN", kernel_name,
                    nv.nvrtcGetErrorString(res));
    }
done:
    nv.nvrtcDestroyProgram(&prog);
    return s;
}

/* The image of `source`: from the kernel cache (kernel_cache.h) unless `fresh`, else compiled by
 * NVRTC and stored there. */
static tgrad_status image_of(const char *source, size_t length, const char *kernel_name, bool fresh, char **image,
                             size_t *size, bool *cached) {
    char tag[400]; /* everything the image depends on besides the source: device, NVRTC, options */
    snprintf(tag, sizeof tag, "%s|%s|--fmad=false|%s", device_label, arch_option, use_ptx ? "ptx" : "cubin");
    *cached = !fresh && tg_kernel_cache_load("cuda", tag, source, length, image, size);
    if (*cached) return TGRAD_OK;
    tgrad_status s = nvrtc_compile(source, length, kernel_name, arch_option, use_ptx, image, size);
    if (!s) tg_kernel_cache_store("cuda", tag, source, length, *image, *size);
    return s;
}

static tgrad_status cuda_compile(const char *source, size_t length, const char *kernel_name, void **program) {
    REQUIRE_DEVICE("compile");
    if (!source || !kernel_name || !program) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cuda: compile with NULL");
    char *image = NULL;
    size_t size = 0;
    bool cached = false;
    tgrad_status s = image_of(source, length, kernel_name, false, &image, &size, &cached);
    if (s) return s;
    cuda_program *p = tg_calloc(1, sizeof *p);
    if (!p) {
        free(image);
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cuda: out of memory compiling %s", kernel_name);
    }
    CUresult err = cu.cuModuleLoadData(&p->module, image);
    free(image);
    image = NULL;
    if (err != CUDA_SUCCESS && cached) { /* a stored image the driver refuses: compile it afresh */
        s = image_of(source, length, kernel_name, true, &image, &size, &cached);
        err = s ? CUDA_SUCCESS : cu.cuModuleLoadData(&p->module, image);
        free(image);
        if (s) {
            free(p);
            return s;
        }
    }
    if (err != CUDA_SUCCESS) {
        free(p);
        return cu_fail(err, "cuModuleLoadData");
    }
    err = cu.cuModuleGetFunction(&p->function, p->module, kernel_name);
    if (err != CUDA_SUCCESS) {
        cu.cuModuleUnload(p->module);
        free(p);
        return err == CUDA_ERROR_NOT_FOUND
                   ? tg_fail(TGRAD_ERR_KERNEL_COMPILE_FAILED, "cuda: the module has no kernel named %s (%s)",
                             kernel_name, cu_error_name(err))
                   : cu_fail(err, "cuModuleGetFunction");
    }
    *program = p;
    return TGRAD_OK;
}

static void cuda_release_program(void *program) {
    cuda_program *p = program;
    if (!p) return;
    if (context && cu.cuCtxSetCurrent(context) == CUDA_SUCCESS) cu.cuModuleUnload(p->module);
    free(p);
}

/* ---- launches ---------------------------------------------------------------------------------- */
static tgrad_status cuda_launch(void *program, const struct tgrad_launch *launch, void *const *buffers,
                                uint32_t nbuffers) {
    REQUIRE_DEVICE("launch");
    const cuda_program *p = program;
    if (!p || !launch || (nbuffers && !buffers) || nbuffers > TGRAD_LAUNCH_MAX_BUFFERS)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cuda: launch with NULL or too many buffers");
    const uint32_t *g = launch->grid, *b = launch->threadgroup;
    if (!g[0] || !g[1] || !g[2]) return TGRAD_OK; /* an empty problem */
    uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
    if (max_threads > 0 && threads > (uint64_t)max_threads)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "cuda: %s needs blocks of %llu threads; %s allows %d",
                       launch->kernel_name, (unsigned long long)threads, device_label, max_threads);
    if (max_shared > 0 && launch->threadgroup_memory > (uint32_t)max_shared)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "cuda: %s needs %u bytes of shared memory; %s has %d per block",
                       launch->kernel_name, launch->threadgroup_memory, device_label, max_shared);
    CUdeviceptr args[TGRAD_LAUNCH_MAX_BUFFERS];
    void *params[TGRAD_LAUNCH_MAX_BUFFERS];
    for (uint32_t i = 0; i < nbuffers; i++) args[i] = (CUdeviceptr)(uintptr_t)buffers[i], params[i] = &args[i];
    /* Shared memory is static in every rendered kernel: no dynamic bytes. */
    CUresult err = cu.cuLaunchKernel(p->function, g[0], g[1], g[2], b[0], b[1], b[2], 0, NULL, params, NULL);
    if (err != CUDA_SUCCESS) return cu_fail(err, "cuLaunchKernel");
    err = cu.cuCtxSynchronize();
    return err == CUDA_SUCCESS ? TGRAD_OK : cu_fail(err, "cuCtxSynchronize");
}

/* bf16 mma.sync needs sm_80 (Ampere) or later. */
static int cuda_has_matrix_route(void) { return cc_major >= 8; }

static const tg_backend cuda_backend = {
    .name = "cuda",
    .lang = TGRAD_LANG_CUDA,
    .init = cuda_init,
    .device_name = cuda_device_name,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_in = cuda_copy_in,
    .copy_out = cuda_copy_out,
    .compile = cuda_compile,
    .release_program = cuda_release_program,
    .launch = cuda_launch,
    .has_matrix_route = cuda_has_matrix_route,
};

const tg_backend *const tg_backend_cuda = &cuda_backend;

/* ---- testing aid ------------------------------------------------------------------------------- */
TGRAD_API tgrad_status tgrad_debug_cuda_compile(const char *source, int32_t sm, int64_t *image_bytes) {
    if (!source || !image_bytes || sm < 10 || sm > 999)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_cuda_compile: NULL source or output, or sm %d outside 10..999", sm);
    if (open_nvrtc() != TGRAD_OK) return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "cuda: %s", nvrtc_reason);
    char arch[48];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d", (int)sm);
    char *image = NULL;
    size_t size = 0;
    tgrad_status s = nvrtc_compile(source, strlen(source), "the kernel", arch, 0, &image, &size);
    free(image);
    if (!s) *image_bytes = (int64_t)size;
    return s;
}
