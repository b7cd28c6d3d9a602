/* Poisoned storage (TGRAD_POISON_STORAGE=1; meson sets it, and main sets it before the library's
 * first allocation): every new or reused tensor block starts as the NaN 0x7FA5, which no kernel
 * writes (NaN outputs are the canonical 0x7FC0). So an output element a kernel skips reads back as
 * 0x7FA5 instead of the zeros of a fresh page or the bytes of a cached block. Every matmul path
 * (rowvec, skinny, gemm, chunked, zeros), every CPU variant, several thread counts, the copy
 * kernel, reused large blocks and the OpenCL device (when available) are checked. Prints
 * "N passed, N failed". */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad.h"

#include "check.h"

#define POISON 0x7fa5u

static uint16_t out[1 << 20];

static tgrad_tensor_t filled(int64_t rows, int64_t cols, int seed) {
    float *v = malloc(sizeof(float) * (size_t)(rows * cols + 1));
    for (int64_t i = 0; i < rows * cols; i++) v[i] = (float)((i * 7 + seed) % 9) - 4.0f;
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_tensor_from_f32(v, 2, (int64_t[]){ rows, cols }, &t), TGRAD_OK);
    free(v);
    return t;
}

/* Realize t, read it back and look for a poisoned element. */
static void expect_written(tgrad_tensor_t t, const char *what, int64_t m, int64_t k, int64_t n) {
    int64_t numel = 0;
    EXPECT(tgrad_tensor_numel(t, &numel), TGRAD_OK);
    CHECK(numel <= (int64_t)(sizeof out / 2));
    EXPECT(tgrad_tensor_read_bf16(t, out, sizeof out / 2), TGRAD_OK);
    for (int64_t i = 0; i < numel; i++)
        if (out[i] == POISON) {
            failed++;
            fprintf(stderr, "%s %lldx%lldx%lld (%s, %d threads): element %lld was never written\n", what, (long long)m,
                    (long long)k, (long long)n, tgrad_cpu_isa(), tgrad_num_threads(), (long long)i);
            return;
        }
    passed++;
}

static const int64_t shapes[][3] = {
    { 1, 1, 1 }, { 1, 64, 300 }, { 1, 3, 1 }, { 3, 17, 5 }, { 5, 33, 129 }, { 16, 8, 700 }, { 17, 2, 700 },
    { 300, 40, 1 }, { 48, 100, 257 }, { 97, 301, 531 }, { 4, 0, 6 }, { 13, 1, 33 }, { 700, 16, 800 }, { 700, 16, 800 },
};

/* a @ b and a.T.T-style views of it: transposed and sliced operands take other packing paths. */
static void matmuls(void) {
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int64_t m = shapes[i][0], k = shapes[i][1], n = shapes[i][2];
        tgrad_tensor_t a = filled(m, k, 1), b = filled(k, n, 2), bt = filled(n, k, 3), btt = 0, c = 0, d = 0;
        EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
        expect_written(c, "matmul", m, k, n);
        EXPECT(tgrad_tensor_transpose(bt, 0, 1, &btt), TGRAD_OK); /* [k, n], column-major */
        EXPECT(tgrad_matmul(a, btt, &d), TGRAD_OK);
        expect_written(d, "matmul with B transposed", m, k, n);
        tgrad_tensor_release(d), tgrad_tensor_release(c), tgrad_tensor_release(btt);
        tgrad_tensor_release(bt), tgrad_tensor_release(b), tgrad_tensor_release(a);
    }
}

/* The copy kernel: reshape of a transposed tensor and contiguous() of a reversed slice materialize. */
static void copies(void) {
    tgrad_tensor_t a = filled(37, 53, 4), t = 0, r = 0, s = 0, c = 0;
    EXPECT(tgrad_tensor_transpose(a, 0, 1, &t), TGRAD_OK);
    EXPECT(tgrad_tensor_reshape(t, (int64_t[]){ -1 }, 1, &r), TGRAD_OK);
    expect_written(r, "reshape copy", 37, 53, 1);
    EXPECT(tgrad_tensor_slice(t, 1, 0, 0, -2, TGRAD_SLICE_START_NONE | TGRAD_SLICE_STOP_NONE, &s), TGRAD_OK);
    EXPECT(tgrad_tensor_contiguous(s, &c), TGRAD_OK);
    expect_written(c, "contiguous copy", 53, 19, 1);
    tgrad_tensor_release(c), tgrad_tensor_release(s), tgrad_tensor_release(r), tgrad_tensor_release(t);
    tgrad_tensor_release(a);
}

static void on_opencl(void) {
    const char *name, *device;
    int32_t built, available;
    if (tgrad_backend(TGRAD_DEVICE_OPENCL, &name, &built, &available, &device) || !available) return;
    for (int32_t route = TGRAD_ROUTE_NAIVE; route <= TGRAD_ROUTE_TILED; route++) {
        EXPECT(tgrad_set_device_route(route), TGRAD_OK);
        for (size_t i = 0; i < 7; i++) {
            int64_t m = shapes[i][0], k = shapes[i][1], n = shapes[i][2];
            tgrad_tensor_t a = filled(m, k, 5), b = filled(k, n, 6), ga = 0, gb = 0, gc = 0, gt = 0, gr = 0;
            EXPECT(tgrad_tensor_to(a, TGRAD_DEVICE_OPENCL, &ga), TGRAD_OK);
            EXPECT(tgrad_tensor_to(b, TGRAD_DEVICE_OPENCL, &gb), TGRAD_OK);
            EXPECT(tgrad_matmul(ga, gb, &gc), TGRAD_OK);
            expect_written(gc, "opencl matmul", m, k, n);
            EXPECT(tgrad_tensor_transpose(gc, 0, 1, &gt), TGRAD_OK);
            EXPECT(tgrad_tensor_reshape(gt, (int64_t[]){ -1 }, 1, &gr), TGRAD_OK);
            expect_written(gr, "opencl copy", n, m, 1);
            tgrad_tensor_release(gr), tgrad_tensor_release(gt), tgrad_tensor_release(gc);
            tgrad_tensor_release(gb), tgrad_tensor_release(ga), tgrad_tensor_release(b), tgrad_tensor_release(a);
        }
    }
    EXPECT(tgrad_set_device_route(0), TGRAD_OK);
}

int main(void) {
    setenv("TGRAD_POISON_STORAGE", "1", 0); /* unless set: read once, at the first allocation of storage */
    static const int32_t threads[] = { 1, 2, 3 };
    for (int32_t v = 0;; v++) {
        int32_t available = 0;
        const char *isa = tgrad_cpu_isa_name(v, &available);
        if (!isa) break;
        if (!available) continue;
        EXPECT(tgrad_set_cpu_isa(isa), TGRAD_OK);
        for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
            EXPECT(tgrad_set_num_threads(threads[t]), TGRAD_OK);
            matmuls();
        }
        /* the shared-chunk path with small chunks and K panels, A packed */
        EXPECT(tgrad_debug_cpu_blocking(4096, 16, TGRAD_DEBUG_CPU_NO_DIRECT_A), TGRAD_OK);
        matmuls();
        EXPECT(tgrad_debug_cpu_blocking(4096, 16, 0), TGRAD_OK);
        matmuls();
        EXPECT(tgrad_debug_cpu_blocking(0, 0, 0), TGRAD_OK);
    }
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
    copies();
    on_opencl();
    CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
