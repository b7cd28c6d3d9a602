/* The OpenCL backend (backend.h): driver calls only.
 *
 * The ICD loader is opened with dlopen at run time (TGRAD_OPENCL_LOADER, else libOpenCL.so.1, then
 * libOpenCL.so; the OpenCL framework on macOS), so libtgrad has no link-time dependency on OpenCL
 * and a machine without it reports backend_unavailable with the reason. The device is chosen once:
 * TGRAD_OPENCL_DEVICE = "P:D" (platform and device indices) or a case-insensitive substring of a
 * platform or device name; by default the first GPU, else the first device of any type.
 *
 * Kernels are built without -cl-fast-relaxed-math or -cl-mad-enable: the naive and tiled routes
 * rely on fma being fused and every other operation exact (docs/kernels.md). Every call blocks
 * until the device is done (copies are blocking, a launch ends with clFinish). device.c serializes
 * the calls; only init guards itself, because it may also be reached from the backend listing. */
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "opencl_api.h"

static struct {
#define TG_CL_FIELD(name) tg_##name name;
    TG_CL_FUNCTIONS(TG_CL_FIELD)
#undef TG_CL_FIELD
} cl;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static tgrad_status init_status;
static char init_reason[480];
static char device_label[256];
static cl_device_id device;
static cl_context context;
static cl_command_queue queue;
static cl_ulong max_alloc, local_mem;
static size_t max_group;
static char build_options[256];

typedef struct ocl_program {
    cl_program program;
    cl_kernel kernel;
} ocl_program;

static const char *cl_error_name(cl_int err) {
    switch (err) {
#define N(code) case code: return #code;
    N(CL_DEVICE_NOT_FOUND) N(CL_DEVICE_NOT_AVAILABLE) N(CL_COMPILER_NOT_AVAILABLE)
    N(CL_MEM_OBJECT_ALLOCATION_FAILURE) N(CL_OUT_OF_RESOURCES) N(CL_OUT_OF_HOST_MEMORY)
    N(CL_BUILD_PROGRAM_FAILURE) N(CL_INVALID_VALUE) N(CL_INVALID_DEVICE) N(CL_INVALID_CONTEXT)
    N(CL_INVALID_COMMAND_QUEUE) N(CL_INVALID_MEM_OBJECT) N(CL_INVALID_BUILD_OPTIONS) N(CL_INVALID_PROGRAM)
    N(CL_INVALID_PROGRAM_EXECUTABLE) N(CL_INVALID_KERNEL_NAME) N(CL_INVALID_KERNEL_DEFINITION)
    N(CL_INVALID_KERNEL) N(CL_INVALID_ARG_INDEX) N(CL_INVALID_ARG_VALUE) N(CL_INVALID_ARG_SIZE)
    N(CL_INVALID_KERNEL_ARGS) N(CL_INVALID_WORK_DIMENSION) N(CL_INVALID_WORK_GROUP_SIZE)
    N(CL_INVALID_WORK_ITEM_SIZE) N(CL_INVALID_OPERATION) N(CL_INVALID_BUFFER_SIZE)
    N(CL_INVALID_GLOBAL_WORK_SIZE) N(CL_PLATFORM_NOT_FOUND_KHR)
#undef N
    default: return "CL error";
    }
}

/* A failed driver call as a tgrad status: resource exhaustion is out_of_memory, a device or
 * compiler that went away is backend_unavailable, anything else means tgrad called it wrongly. */
static tgrad_status cl_fail(cl_int err, const char *call) {
    tgrad_status s = TGRAD_ERR_INTERNAL;
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY ||
        err == CL_INVALID_BUFFER_SIZE)
        s = TGRAD_ERR_OUT_OF_MEMORY;
    else if (err == CL_DEVICE_NOT_AVAILABLE || err == CL_COMPILER_NOT_AVAILABLE || err == CL_DEVICE_NOT_FOUND)
        s = TGRAD_ERR_BACKEND_UNAVAILABLE;
    return tg_fail(s, "opencl: %s failed: %s (%d) on %s", call, cl_error_name(err), (int)err, device_label);
}

/* ---- finding a device ---------------------------------------------------------------------- */
enum { MAX_PLATFORMS = 16, MAX_DEVICES = 64 };

typedef struct candidate {
    cl_platform_id platform;
    cl_device_id device;
    int32_t p, d;
    bool gpu, usable;
    char platform_name[96], device_name[128];
} candidate;

/* Why init failed; without an "opencl:" prefix, which device.c and the backend listing add. */
#define UNAVAILABLE(...) (snprintf(init_reason, sizeof init_reason, __VA_ARGS__), TGRAD_ERR_BACKEND_UNAVAILABLE)

static tgrad_status open_loader(void) {
    static const char *const defaults[] = {
#if defined(__APPLE__)
        "/System/Library/Frameworks/OpenCL.framework/OpenCL",
#endif
        "libOpenCL.so.1", "libOpenCL.so",
    };
    const char *override = getenv("TGRAD_OPENCL_LOADER");
    const char *const *paths = defaults;
    size_t npaths = sizeof defaults / sizeof defaults[0];
    if (override && *override) paths = &override, npaths = 1;
    void *lib = NULL;
    const char *path = NULL, *why = "";
    for (size_t i = 0; i < npaths && !lib; i++) {
        path = paths[i];
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) why = dlerror();
    }
    if (!lib)
        return UNAVAILABLE("no OpenCL ICD loader could be opened (%s%s: %s); install one and a driver, "
                           "e.g. the packages ocl-icd-libopencl1 and pocl-opencl-icd",
                           override && *override ? "TGRAD_OPENCL_LOADER=" : "tried libOpenCL.so.1, libOpenCL.so; last ",
                           path, why ? why : "");
#define TG_CL_SYM(name)                                                                                      \
    if (!(*(void **)&cl.name = dlsym(lib, #name)))                                                           \
        return UNAVAILABLE("the ICD loader %s lacks %s (not an OpenCL 1.2 loader)", path, #name);
    TG_CL_FUNCTIONS(TG_CL_SYM)
#undef TG_CL_SYM
    return TGRAD_OK; /* the loader stays open for the library's lifetime */
}

static int list_candidates(candidate *c, int cap, cl_uint *nplatforms) {
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint np = 0;
    if (cl.clGetPlatformIDs(MAX_PLATFORMS, platforms, &np) != CL_SUCCESS) np = 0;
    if (np > MAX_PLATFORMS) np = MAX_PLATFORMS;
    *nplatforms = np;
    int n = 0;
    for (cl_uint p = 0; p < np; p++) {
        char pname[96] = "";
        cl.clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        cl_device_id devices[MAX_DEVICES];
        cl_uint nd = 0;
        if (cl.clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devices, &nd) != CL_SUCCESS) nd = 0;
        if (nd > MAX_DEVICES) nd = MAX_DEVICES;
        for (cl_uint d = 0; d < nd && n < cap; d++, n++) {
            candidate *x = &c[n];
            memset(x, 0, sizeof *x);
            x->platform = platforms[p], x->device = devices[d], x->p = (int32_t)p, x->d = (int32_t)d;
            snprintf(x->platform_name, sizeof x->platform_name, "%s", pname);
            cl.clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof x->device_name - 1, x->device_name, NULL);
            cl_device_type type = 0;
            cl_bool available = 0, compiler = 0;
            cl.clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            cl.clGetDeviceInfo(devices[d], CL_DEVICE_AVAILABLE, sizeof available, &available, NULL);
            cl.clGetDeviceInfo(devices[d], CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler, NULL);
            x->gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
            x->usable = available && compiler;
        }
    }
    return n;
}

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return true;
    }
    return n == 0;
}

/* "0:0 Portable Computing Language / pthread-x; 0:1 ..." for messages that name what was there. */
static void describe(const candidate *c, int n, char *dst, size_t cap) {
    size_t len = 0;
    dst[0] = 0;
    for (int i = 0; i < n && len + 1 < cap; i++) {
        int w = snprintf(dst + len, cap - len, "%s%d:%d %s / %s%s", i ? "; " : "", c[i].p, c[i].d,
                         c[i].platform_name, c[i].device_name, c[i].usable ? "" : " (unusable)");
        if (w < 0) break;
        len += (size_t)w;
    }
}

static const candidate *choose(const candidate *c, int n, const char *want) {
    if (want && *want) {
        int p, d, used = 0;
        if (sscanf(want, "%d:%d%n", &p, &d, &used) == 2 && want[used] == 0) {
            for (int i = 0; i < n; i++)
                if (c[i].p == p && c[i].d == d) return &c[i];
            return NULL;
        }
        for (int i = 0; i < n; i++)
            if (contains_nocase(c[i].platform_name, want) || contains_nocase(c[i].device_name, want)) return &c[i];
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (c[i].usable && c[i].gpu) return &c[i];
    for (int i = 0; i < n; i++)
        if (c[i].usable) return &c[i];
    return NULL;
}

static tgrad_status init_device(void) {
    tgrad_status s = open_loader();
    if (s != TGRAD_OK) return s;
    static candidate c[MAX_DEVICES];
    cl_uint nplatforms = 0;
    int n = list_candidates(c, MAX_DEVICES, &nplatforms);
    if (nplatforms == 0)
        return UNAVAILABLE("the ICD loader found no OpenCL platform (no driver is registered in "
                           "/etc/OpenCL/vendors; e.g. install pocl-opencl-icd)");
    char seen[320];
    describe(c, n, seen, sizeof seen);
    const char *want = getenv("TGRAD_OPENCL_DEVICE");
    const candidate *pick = choose(c, n, want);
    if (!pick) {
        if (want && *want)
            return UNAVAILABLE("TGRAD_OPENCL_DEVICE=%s matches no device (\"P:D\" indices or part of a "
                               "platform or device name); devices: %s", want, n ? seen : "none");
        return UNAVAILABLE("no usable OpenCL device on %u platform(s); devices: %s", (unsigned)nplatforms,
                           n ? seen : "none");
    }
    snprintf(device_label, sizeof device_label, "%s / %s", pick->platform_name, pick->device_name);
    if (!pick->usable)
        return UNAVAILABLE("device %d:%d %s is not available or has no compiler", pick->p, pick->d,
                           device_label);
    device = pick->device;
    cl_device_fp_config fp = 0;
    cl.clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    cl.clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    cl.clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_group, &max_group, NULL);
    cl.clGetDeviceInfo(device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    const char *extra = getenv("TGRAD_OPENCL_BUILD_OPTIONS");
    extra = extra ? extra : "";
    static const char *const relaxing[] = { "-cl-fast-relaxed-math", "-cl-mad-enable", "-cl-unsafe-math-optimizations",
                                            "-cl-finite-math-only", "-cl-no-signed-zeros" };
    for (size_t i = 0; i < sizeof relaxing / sizeof relaxing[0]; i++)
        if (strstr(extra, relaxing[i]))
            return UNAVAILABLE("TGRAD_OPENCL_BUILD_OPTIONS holds %s, which would break the bit-exact "
                               "routes (docs/opencl.md)", relaxing[i]);
    if (strlen(extra) > sizeof build_options - 64)
        return UNAVAILABLE("TGRAD_OPENCL_BUILD_OPTIONS is longer than %zu characters", sizeof build_options - 64);
    /* No kernel divides or takes a square root today; if one ever does, it gets IEEE results
     * where the device offers them (OpenCL's default allows 2.5 ulp). */
    snprintf(build_options, sizeof build_options, "%s%s%s",
             fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT ? "-cl-fp32-correctly-rounded-divide-sqrt" : "",
             *extra && (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ? " " : "", extra);
    cl_int err = CL_SUCCESS;
    const cl_context_properties props[] = { CL_CONTEXT_PLATFORM, (cl_context_properties)pick->platform, 0 };
    context = cl.clCreateContext(props, 1, &device, NULL, NULL, &err);
    if (!context || err != CL_SUCCESS)
        return UNAVAILABLE("clCreateContext failed on %s: %s (%d)", device_label, cl_error_name(err), (int)err);
    queue = cl.clCreateCommandQueue(context, device, 0, &err);
    if (!queue || err != CL_SUCCESS) {
        cl.clReleaseContext(context);
        context = NULL;
        return UNAVAILABLE("clCreateCommandQueue failed on %s: %s (%d)", device_label, cl_error_name(err),
                           (int)err);
    }
    return TGRAD_OK;
}

static void init_once_fn(void) {
    init_status = init_device();
    if (init_status != TGRAD_OK) context = NULL;
}

static tgrad_status ocl_init(void) {
    pthread_once(&init_once, init_once_fn);
    if (init_status != TGRAD_OK) return tg_fail(init_status, "%s", init_reason);
    return TGRAD_OK;
}

static const char *ocl_device_name(void) {
    pthread_once(&init_once, init_once_fn);
    return init_status == TGRAD_OK ? device_label : init_reason;
}

#define REQUIRE_DEVICE(what)                                                                                 \
    if (!context) return tg_fail(TGRAD_ERR_INTERNAL, "opencl: %s before a successful init", what)

/* ---- memory ---------------------------------------------------------------------------------- */
static tgrad_status ocl_alloc(size_t bytes, void **mem) {
    REQUIRE_DEVICE("alloc");
    if (!mem || bytes == 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "opencl: alloc of 0 bytes or to NULL");
    if (max_alloc && bytes > max_alloc)
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY,
                       "opencl: %zu bytes exceed the largest buffer %s allows (%llu bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE)",
                       bytes, device_label, (unsigned long long)max_alloc);
    cl_int err = CL_SUCCESS;
    cl_mem m = cl.clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!m || err != CL_SUCCESS) return cl_fail(err, "clCreateBuffer");
    *mem = m;
    return TGRAD_OK;
}

static void ocl_free(void *mem) {
    if (mem) cl.clReleaseMemObject((cl_mem)mem);
}

static tgrad_status ocl_copy_in(void *mem, size_t offset, const void *src, size_t bytes) {
    REQUIRE_DEVICE("copy_in");
    if (bytes == 0) return TGRAD_OK;
    cl_int err = cl.clEnqueueWriteBuffer(queue, (cl_mem)mem, CL_TRUE, offset, bytes, src, 0, NULL, NULL);
    return err == CL_SUCCESS ? TGRAD_OK : cl_fail(err, "clEnqueueWriteBuffer");
}

static tgrad_status ocl_copy_out(const void *mem, size_t offset, void *dst, size_t bytes) {
    REQUIRE_DEVICE("copy_out");
    if (bytes == 0) return TGRAD_OK;
    cl_int err = cl.clEnqueueReadBuffer(queue, (cl_mem)mem, CL_TRUE, offset, bytes, dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? TGRAD_OK : cl_fail(err, "clEnqueueReadBuffer");
}

/* ---- programs --------------------------------------------------------------------------------- */
/* The build failed: the compiler's log, from its first error line (warnings before it are noise). */
static tgrad_status build_failed(cl_program program, cl_int err, const char *kernel_name) {
    if (err == CL_COMPILER_NOT_AVAILABLE || err == CL_OUT_OF_HOST_MEMORY || err == CL_OUT_OF_RESOURCES)
        return cl_fail(err, "clBuildProgram");
    size_t size = 0;
    char *log = NULL;
    if (cl.clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) == CL_SUCCESS && size > 0 &&
        (log = tg_malloc(size + 1)) != NULL) {
        if (cl.clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log, NULL) != CL_SUCCESS) size = 0;
        log[size] = 0;
    }
    const char *text = log && *log ? log : "(the driver gave no build log)";
    const char *first_error = strstr(text, "error");
    if (first_error) {
        while (first_error > text && first_error[-1] != '\n') first_error--;
        text = first_error;
    }
    tgrad_status s = tg_fail(TGRAD_ERR_KERNEL_COMPILE_FAILED, "opencl: building %s failed (%s); build log:\n%s",
                             kernel_name, cl_error_name(err), text);
    free(log);
    return s;
}

static tgrad_status ocl_compile(const char *source, size_t length, const char *kernel_name, void **program) {
    REQUIRE_DEVICE("compile");
    if (!source || !kernel_name || !program) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "opencl: compile with NULL");
    ocl_program *p = tg_calloc(1, sizeof *p);
    if (!p) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "opencl: out of memory compiling %s", kernel_name);
    cl_int err = CL_SUCCESS;
    tgrad_status s = TGRAD_OK;
    p->program = cl.clCreateProgramWithSource(context, 1, &source, &length, &err);
    if (!p->program || err != CL_SUCCESS) {
        s = cl_fail(err, "clCreateProgramWithSource");
        p->program = NULL;
        goto fail;
    }
    err = cl.clBuildProgram(p->program, 1, &device, build_options, NULL, NULL);
    if (err != CL_SUCCESS) {
        s = build_failed(p->program, err, kernel_name);
        goto fail;
    }
    p->kernel = cl.clCreateKernel(p->program, kernel_name, &err);
    if (!p->kernel || err != CL_SUCCESS) {
        p->kernel = NULL;
        s = err == CL_INVALID_KERNEL_NAME || err == CL_INVALID_KERNEL_DEFINITION
                ? tg_fail(TGRAD_ERR_KERNEL_COMPILE_FAILED, "opencl: the program has no kernel named %s (%s)",
                          kernel_name, cl_error_name(err))
                : cl_fail(err, "clCreateKernel");
        goto fail;
    }
    *program = p;
    return TGRAD_OK;
fail:
    if (p->program) cl.clReleaseProgram(p->program);
    free(p);
    return s;
}

static void ocl_release_program(void *program) {
    ocl_program *p = program;
    if (!p) return;
    if (p->kernel) cl.clReleaseKernel(p->kernel);
    if (p->program) cl.clReleaseProgram(p->program);
    free(p);
}

/* ---- launches --------------------------------------------------------------------------------- */
static tgrad_status ocl_launch(void *program, const struct tgrad_launch *launch, void *const *buffers,
                               uint32_t nbuffers) {
    REQUIRE_DEVICE("launch");
    const ocl_program *p = program;
    if (!p || !launch || (nbuffers && !buffers))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "opencl: launch with NULL");
    size_t global[3], local[3], group = 1;
    for (int i = 0; i < 3; i++) {
        local[i] = launch->threadgroup[i];
        global[i] = (size_t)launch->grid[i] * local[i]; /* grid counts threadgroups */
        group *= local[i];
    }
    if (global[0] == 0 || global[1] == 0 || global[2] == 0) return TGRAD_OK; /* an empty problem */
    if (max_group && group > max_group)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE,
                       "opencl: %s needs work-groups of %zu work-items; %s allows %zu (CL_DEVICE_MAX_WORK_GROUP_SIZE)",
                       launch->kernel_name, group, device_label, max_group);
    if (local_mem && launch->threadgroup_memory > local_mem)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE,
                       "opencl: %s needs %u bytes of local memory; %s has %llu (CL_DEVICE_LOCAL_MEM_SIZE)",
                       launch->kernel_name, launch->threadgroup_memory, device_label, (unsigned long long)local_mem);
    for (uint32_t i = 0; i < nbuffers; i++) {
        cl_int err = cl.clSetKernelArg(p->kernel, i, sizeof(cl_mem), &buffers[i]);
        if (err != CL_SUCCESS) return cl_fail(err, "clSetKernelArg");
    }
    cl_int err = cl.clEnqueueNDRangeKernel(queue, p->kernel, 3, NULL, global, local, 0, NULL, NULL);
    if (err == CL_INVALID_WORK_GROUP_SIZE) /* a per-kernel limit below the device's */
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "opencl: %s refuses work-groups of %zu work-items for %s",
                       device_label, group, launch->kernel_name);
    if (err != CL_SUCCESS) return cl_fail(err, "clEnqueueNDRangeKernel");
    err = cl.clFinish(queue);
    return err == CL_SUCCESS ? TGRAD_OK : cl_fail(err, "clFinish");
}

/* OpenCL C 1.2 has no sub-group matrices: the renderer refuses the tc route for it. */
static int ocl_has_matrix_route(void) { return 0; }

static const tg_backend opencl_backend = {
    .name = "opencl",
    .lang = TGRAD_LANG_OPENCL,
    .init = ocl_init,
    .device_name = ocl_device_name,
    .alloc = ocl_alloc,
    .free = ocl_free,
    .copy_in = ocl_copy_in,
    .copy_out = ocl_copy_out,
    .compile = ocl_compile,
    .release_program = ocl_release_program,
    .launch = ocl_launch,
    .has_matrix_route = ocl_has_matrix_route,
};

const tg_backend *const tg_backend_opencl = &opencl_backend;
