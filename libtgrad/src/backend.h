/* The one small interface every GPU backend implements (private; not ABI).
 *
 * A backend owns device memory and runs kernel source that libtgrad rendered (src/gen). Everything
 * else — which route, the kernel text, launch geometry, the program cache, views, the graph —
 * lives in portable C (device.c) where CI exercises it. A backend file holds only the driver
 * calls (OpenCL through a dlopen'ed ICD loader; CUDA through the dlopen'ed driver API and NVRTC;
 * Metal in Objective-C, macOS only).
 *
 * Threading: device.c serializes all calls into one backend with that backend's mutex, so a
 * backend needs no locking of its own. Errors: return a tgrad status, recording the detail with
 * tg_fail() (a compile failure carries the compiler's log). */
#ifndef TGRAD_BACKEND_H
#define TGRAD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

typedef struct tg_backend {
    const char *name; /* "opencl", "metal", "cuda" */
    int32_t lang;     /* TGRAD_LANG_* the backend compiles */
    /* Find a device (once; later calls return the first result). TGRAD_ERR_BACKEND_UNAVAILABLE
     * with the reason when there is none (no driver, no device, not built). */
    tgrad_status (*init)(void);
    /* A description of the chosen device, valid after a successful init. */
    const char *(*device_name)(void);
    /* Device memory of at least `bytes` (> 0). */
    tgrad_status (*alloc)(size_t bytes, void **mem);
    void (*free)(void *mem); /* NULL is a no-op */
    tgrad_status (*copy_in)(void *mem, size_t offset, const void *src, size_t bytes);
    tgrad_status (*copy_out)(const void *mem, size_t offset, void *dst, size_t bytes);
    /* Compile `source` (fast math off) and return the entry point `kernel_name`;
     * TGRAD_ERR_KERNEL_COMPILE_FAILED with the build log in the detail. device.c caches results
     * by the source's hash, so a backend compiles each text once. */
    tgrad_status (*compile)(const char *source, size_t length, const char *kernel_name, void **program);
    void (*release_program)(void *program);
    /* Run `program` over the grid in `launch` with buffers[i] bound at index i (as rendered),
     * and wait for it to finish. */
    tgrad_status (*launch)(void *program, const struct tgrad_launch *launch, void *const *buffers,
                           uint32_t nbuffers);
    /* optional: does the device support simdgroup/sub-group matrices (the tc route)? */
    int (*has_matrix_route)(void);
} tg_backend;

/* The backends compiled into this library, in the order tgrad_backend() lists them after "cpu";
 * an entry is NULL when that backend is not built on this platform. */
extern const tg_backend *const tg_backend_opencl; /* NULL unless built */
extern const tg_backend *const tg_backend_metal;  /* NULL unless built (macOS) */
extern const tg_backend *const tg_backend_cuda;   /* NULL unless built (dlopen, not macOS) */

#endif
