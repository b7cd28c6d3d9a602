/* The Metal backend (macOS only): backend.h's interface over Apple's Metal API, nothing more.
 *
 * Only driver calls live here (STYLE.md: the Objective-C is quarantined behind C handles, as in
 * ggml's Metal backend). device.c picks the route, renders the kernel, caches compiled programs by
 * the source's hash, computes the launch geometry, and serializes every call into this file with
 * the backend's mutex — so nothing here locks, and no state here is touched by two threads at once.
 *
 * Handles crossing into C: a buffer is an id<MTLBuffer>, a program an id<MTLComputePipelineState>.
 * Each leaves this file with __bridge_retained (one reference, owned by device.c) and comes back
 * with __bridge_transfer in free / release_program. Compiled with -fobjc-arc (libtgrad/meson.build).
 * Every entry point that creates autoreleased objects drains them in its own @autoreleasepool,
 * since callers are plain C threads with no pool of their own.
 *
 * Memory is shared storage (MTLResourceStorageModeShared): CPU and GPU address the same bytes, so
 * copy_in/copy_out are memcpy through -contents. launch waits until the GPU is done, so no buffer
 * is in use by the GPU outside a launch.
 *
 * This file has never been compiled against Apple's SDK; it is type-checked on Linux against the
 * stub headers of tests/metal_stub (tests/python/test_metal_syntax.py). docs/metal.md says what
 * that does and does not prove. */
#if !__has_feature(objc_arc)
#error "metal.m must be compiled with -fobjc-arc (see libtgrad/meson.build)"
#endif

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

/* ---- state (written by init only; device.c serializes every call) ---- */
static id<MTLDevice> g_device;      /* nil until init succeeds */
static id<MTLCommandQueue> g_queue;
static bool g_init_done;
static bool g_matrix_route;         /* Apple GPU family 7+: simdgroup matrices (the tc route) */
static tgrad_status g_init_status;  /* the first init's result, repeated to later calls */
static char g_init_reason[256];
static char g_device_name[256];

/* ---- a small buffer pool ----
 * A freed buffer waits here for the next allocation of exactly its length (a model runs the same
 * shapes again and again); anything beyond POOL_SLOTS buffers or POOL_MAX_BYTES is released at
 * once. newBufferWithLength:options: returns zeroed memory, so a reused buffer is zeroed too: the
 * two are indistinguishable, and no earlier tensor's bytes show through. */
enum { POOL_SLOTS = 16 };
#define POOL_MAX_BYTES ((NSUInteger)256 << 20)
static id<MTLBuffer> g_pool[POOL_SLOTS];
static NSUInteger g_pool_bytes; /* sum of the pooled buffers' lengths, <= POOL_MAX_BYTES */

static id<MTLBuffer> pool_take(NSUInteger length) {
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (g_pool[i] != nil && g_pool[i].length == length) {
            id<MTLBuffer> buffer = g_pool[i];
            g_pool[i] = nil;
            g_pool_bytes -= length;
            memset(buffer.contents, 0, length);
            return buffer;
        }
    }
    return nil;
}

/* Keep `buffer` for reuse if there is room; else the caller's reference is the last and ARC
 * releases the buffer when it goes out of scope. */
static void pool_put(id<MTLBuffer> buffer) {
    NSUInteger length = buffer.length;
    if (length > POOL_MAX_BYTES - g_pool_bytes) return;
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (g_pool[i] == nil) {
            g_pool[i] = buffer;
            g_pool_bytes += length;
            return;
        }
    }
}

/* error.localizedDescription copied into dst (an NSString's UTF8String lives only as long as the
 * string; `text` keeps it alive through the copy). For a compile failure it is the compiler log. */
static void describe(NSError *error, char *dst, size_t cap) {
    NSString *text = error.localizedDescription;
    const char *utf8 = text.UTF8String;
    snprintf(dst, cap, "%s", utf8 != NULL ? utf8 : "(no description)");
}

/* ---- init ---- */
static tgrad_status init_fail(const char *reason) {
    g_init_status = TGRAD_ERR_BACKEND_UNAVAILABLE;
    snprintf(g_init_reason, sizeof g_init_reason, "%s", reason);
    return tg_fail(g_init_status, "%s", g_init_reason);
}

/* Open the default device and a command queue (once, from metal_init). */
static tgrad_status open_device(void) API_AVAILABLE(macos(11.0));
static tgrad_status open_device(void) {
    @autoreleasepool {
        id<MTLDevice> device = MTLCreateSystemDefaultDevice();
        if (device == nil) {
            /* Apple: a process must link CoreGraphics to get a default device (meson links it);
             * if there is still none, take the first device there is. */
            NSArray<id<MTLDevice>> *devices = MTLCopyAllDevices();
            device = devices.firstObject;
        }
        if (device == nil) return init_fail("no Metal device on this machine");
        id<MTLCommandQueue> queue = [device newCommandQueue];
        if (queue == nil) return init_fail("cannot create a Metal command queue");
        NSString *name = device.name;
        const char *utf8 = name.UTF8String;
        snprintf(g_device_name, sizeof g_device_name, "%s", utf8 != NULL ? utf8 : "unnamed Metal device");
        /* bf16 operands in 8x8 fp32 simdgroup matrices need Apple GPU family 7 (M1, A14) or later */
        g_matrix_route = [device supportsFamily:MTLGPUFamilyApple7];
        g_device = device;
        g_queue = queue;
    }
    return TGRAD_OK;
}

static tgrad_status metal_init(void) {
    if (g_init_done)
        return g_init_status == TGRAD_OK ? TGRAD_OK : tg_fail(g_init_status, "%s", g_init_reason);
    g_init_done = true;
    g_init_status = TGRAD_OK;
    /* MSL 2.3 (the rendered kernels' language) and MTLGPUFamilyApple7 need macOS 11; every other
     * entry point runs only after a successful init, so this one check guards the whole file. */
    if (@available(macOS 11.0, *)) return open_device();
    return init_fail("needs macOS 11 or later (Metal Shading Language 2.3)");
}

static const char *metal_device_name(void) { return g_device_name; }

/* ---- memory ---- */
static tgrad_status metal_alloc(size_t bytes, void **mem) {
    if (g_device == nil || bytes == 0 || mem == NULL)
        return tg_fail(TGRAD_ERR_INTERNAL, "metal: alloc of %zu bytes before init or without output", bytes);
    if (bytes > g_device.maxBufferLength)
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "metal: %zu bytes exceed the device's largest buffer (%lu bytes)",
                       bytes, (unsigned long)g_device.maxBufferLength);
    @autoreleasepool {
        id<MTLBuffer> buffer = pool_take(bytes);
        if (buffer == nil) buffer = [g_device newBufferWithLength:bytes options:MTLResourceStorageModeShared];
        if (buffer == nil)
            return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "metal: cannot allocate a buffer of %zu bytes", bytes);
        *mem = (__bridge_retained void *)buffer;
    }
    return TGRAD_OK;
}

static void metal_free(void *mem) {
    if (mem == NULL) return;
    @autoreleasepool {
        id<MTLBuffer> buffer = (__bridge_transfer id<MTLBuffer>)mem; /* takes back alloc's reference */
        pool_put(buffer);
    }
}

static tgrad_status metal_copy_in(void *mem, size_t offset, const void *src, size_t bytes) {
    id<MTLBuffer> buffer = (__bridge id<MTLBuffer>)mem;
    NSUInteger length = buffer.length; /* 0 for nil */
    if (buffer == nil || offset > length || bytes > length - offset || (bytes > 0 && src == NULL))
        return tg_fail(TGRAD_ERR_INTERNAL, "metal: copy in of %zu bytes at %zu, outside a buffer of %lu bytes",
                       bytes, offset, (unsigned long)length);
    if (bytes > 0) memcpy((char *)buffer.contents + offset, src, bytes);
    return TGRAD_OK;
}

static tgrad_status metal_copy_out(const void *mem, size_t offset, void *dst, size_t bytes) {
    id<MTLBuffer> buffer = (__bridge id<MTLBuffer>)(void *)mem;
    NSUInteger length = buffer.length;
    if (buffer == nil || offset > length || bytes > length - offset || (bytes > 0 && dst == NULL))
        return tg_fail(TGRAD_ERR_INTERNAL, "metal: copy out of %zu bytes at %zu, outside a buffer of %lu bytes",
                       bytes, offset, (unsigned long)length);
    if (bytes > 0) memcpy(dst, (const char *)buffer.contents + offset, bytes);
    return TGRAD_OK;
}

/* ---- programs ---- */
/* Fast math off: the naive and tiled routes promise the CPU's bytes (docs/kernels.md). */
static void use_exact_math(MTLCompileOptions *options) {
#if defined(__MAC_OS_X_VERSION_MAX_ALLOWED) && __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
    if (@available(macOS 15.0, *)) {
        options.mathMode = MTLMathModeSafe;
        options.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsPrecise;
        return;
    }
#endif
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    options.fastMathEnabled = NO; /* before macOS 15; the same as mathMode = safe */
#pragma clang diagnostic pop
}

static tgrad_status metal_compile(const char *source, size_t length, const char *kernel_name, void **program) {
    if (g_device == nil || source == NULL || kernel_name == NULL || program == NULL)
        return tg_fail(TGRAD_ERR_INTERNAL, "metal: compile before init or with a NULL argument");
    @autoreleasepool {
        NSString *text = [[NSString alloc] initWithBytes:source length:length encoding:NSUTF8StringEncoding];
        NSString *name = [NSString stringWithUTF8String:kernel_name];
        if (text == nil || name == nil)
            return tg_fail(TGRAD_ERR_INTERNAL, "metal: kernel source or name of %s is not UTF-8", kernel_name);
        MTLCompileOptions *options = [[MTLCompileOptions alloc] init];
        use_exact_math(options);
        if (@available(macOS 11.0, *)) options.languageVersion = MTLLanguageVersion2_3;
        char detail[512];
        NSError *error = nil;
        id<MTLLibrary> library = [g_device newLibraryWithSource:text options:options error:&error];
        if (library == nil) { /* a library with warnings comes back non-nil, error set: not a failure */
            describe(error, detail, sizeof detail);
            return tg_fail(TGRAD_ERR_KERNEL_COMPILE_FAILED, "metal: %s: %s", kernel_name, detail);
        }
        id<MTLFunction> function = [library newFunctionWithName:name];
        if (function == nil)
            return tg_fail(TGRAD_ERR_KERNEL_COMPILE_FAILED, "metal: the compiled source has no kernel %s", kernel_name);
        error = nil;
        id<MTLComputePipelineState> pipeline = [g_device newComputePipelineStateWithFunction:function error:&error];
        if (pipeline == nil) {
            describe(error, detail, sizeof detail);
            return tg_fail(TGRAD_ERR_KERNEL_COMPILE_FAILED, "metal: pipeline for %s: %s", kernel_name, detail);
        }
        *program = (__bridge_retained void *)pipeline;
    }
    return TGRAD_OK;
}

static void metal_release_program(void *program) {
    if (program == NULL) return;
    id<MTLComputePipelineState> pipeline = (__bridge_transfer id<MTLComputePipelineState>)program;
    (void)pipeline; /* ARC releases compile's reference at the end of this scope */
}

/* ---- launch ---- */
/* The tc route's kernels (render.c names them "tgrad_tc_...") spread each 8x8 simdgroup matrix
 * over 32 lanes and number simdgroups as thread_index / 32: on a pipeline whose SIMD width is not
 * 32 they would compute garbage. Apple7+ GPUs run 32 wide, but the API does not promise it. */
static const char TC_KERNEL_PREFIX[] = "tgrad_tc_";
enum { TC_SIMD_WIDTH = 32 };

static bool needs_simd_width_32(const struct tgrad_launch *launch) {
    return strncmp(launch->kernel_name, TC_KERNEL_PREFIX, sizeof TC_KERNEL_PREFIX - 1) == 0;
}

static tgrad_status metal_launch(void *program, const struct tgrad_launch *launch, void *const *buffers,
                                 uint32_t nbuffers) {
    if (g_queue == nil || program == NULL || launch == NULL || nbuffers > TGRAD_LAUNCH_MAX_BUFFERS ||
        (nbuffers > 0 && buffers == NULL))
        return tg_fail(TGRAD_ERR_INTERNAL, "metal: launch before init or with bad arguments");
    for (uint32_t i = 0; i < nbuffers; i++)
        if (buffers[i] == NULL) return tg_fail(TGRAD_ERR_INTERNAL, "metal: launch without buffer %u", i);
    const uint32_t *grid = launch->grid, *group = launch->threadgroup;
    const int name_max = TGRAD_KERNEL_NAME_MAX;
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return TGRAD_OK; /* an empty result: nothing to run */
    id<MTLComputePipelineState> pipeline = (__bridge id<MTLComputePipelineState>)program;

    /* What this pipeline can run on this device: refuse, typed, before encoding anything. */
    NSUInteger max_threads = pipeline.maxTotalThreadsPerThreadgroup;
    uint64_t threads = 0;
    if (group[0] == 0 || group[1] == 0 || group[2] == 0 ||
        __builtin_mul_overflow((uint64_t)group[0], (uint64_t)group[1], &threads) ||
        __builtin_mul_overflow(threads, (uint64_t)group[2], &threads) || threads > max_threads)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE,
                       "metal: kernel %.*s wants a threadgroup of %u x %u x %u threads; its pipeline allows %lu here",
                       name_max, launch->kernel_name, group[0], group[1], group[2], (unsigned long)max_threads);
    NSUInteger tg_memory = pipeline.staticThreadgroupMemoryLength;
    if (tg_memory > g_device.maxThreadgroupMemoryLength)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE,
                       "metal: kernel %.*s declares %lu bytes of threadgroup memory; this device has %lu",
                       name_max, launch->kernel_name, (unsigned long)tg_memory,
                       (unsigned long)g_device.maxThreadgroupMemoryLength);
    NSUInteger simd_width = pipeline.threadExecutionWidth;
    if (needs_simd_width_32(launch) && simd_width != TC_SIMD_WIDTH)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE,
                       "metal: kernel %.*s (route tc) needs simdgroups of %d threads; this pipeline's "
                       "threadExecutionWidth is %lu",
                       name_max, launch->kernel_name, TC_SIMD_WIDTH, (unsigned long)simd_width);

    @autoreleasepool {
        id<MTLCommandBuffer> command_buffer = [g_queue commandBuffer];
        id<MTLComputeCommandEncoder> encoder = [command_buffer computeCommandEncoder];
        if (command_buffer == nil || encoder == nil)
            return tg_fail(TGRAD_ERR_INTERNAL, "metal: cannot create a command buffer for %.*s", name_max,
                           launch->kernel_name);
        [encoder setComputePipelineState:pipeline];
        for (uint32_t i = 0; i < nbuffers; i++)
            [encoder setBuffer:(__bridge id<MTLBuffer>)buffers[i] offset:0 atIndex:i];
        [encoder dispatchThreadgroups:MTLSizeMake(grid[0], grid[1], grid[2])
                threadsPerThreadgroup:MTLSizeMake(group[0], group[1], group[2])];
        [encoder endEncoding];
        [command_buffer commit];
        [command_buffer waitUntilCompleted];
        if (command_buffer.status != MTLCommandBufferStatusCompleted) {
            NSError *error = command_buffer.error;
            char detail[512];
            describe(error, detail, sizeof detail);
            bool oom = [error.domain isEqualToString:MTLCommandBufferErrorDomain] &&
                       error.code == (NSInteger)MTLCommandBufferErrorOutOfMemory;
            return tg_fail(oom ? TGRAD_ERR_OUT_OF_MEMORY : TGRAD_ERR_INTERNAL, "metal: kernel %.*s failed on the GPU: %s",
                           name_max, launch->kernel_name, detail);
        }
    }
    return TGRAD_OK;
}

/* Decided once by init; a plain read, so it is safe from any thread (device.c asks while choosing a
 * route, outside the backend's mutex). */
static int metal_has_matrix_route(void) { return g_matrix_route ? 1 : 0; }

static const tg_backend metal_backend = {
    .name = "metal",
    .lang = TGRAD_LANG_MSL,
    .init = metal_init,
    .device_name = metal_device_name,
    .alloc = metal_alloc,
    .free = metal_free,
    .copy_in = metal_copy_in,
    .copy_out = metal_copy_out,
    .compile = metal_compile,
    .release_program = metal_release_program,
    .launch = metal_launch,
    .has_matrix_route = metal_has_matrix_route,
};

const tg_backend *const tg_backend_metal = &metal_backend;
