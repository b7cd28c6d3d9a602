/* C tests of the kernel-generation ABI (tgrad.h, "kernel generation"): names, the length query
 * and capacity protocol, determinism and the source hash, eligibility, argument checks, lazy
 * operands, and rendering from many threads at once. The generated kernels themselves run in
 * the MSL emulator tier (tests/python/test_msl_emu.py). Prints "N passed, N failed". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad.h"

#include "check.h"

static tgrad_tensor_t zeros(int64_t rows, int64_t cols) {
    tgrad_tensor_t t = 0;
    int64_t shape[2] = { rows, cols };
    float *data = calloc((size_t)(rows * cols > 0 ? rows * cols : 1), sizeof *data);
    EXPECT(tgrad_tensor_from_f32(data, 2, shape, &t), TGRAD_OK);
    free(data);
    return t;
}

static uint64_t fnv1a64(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

/* Render into a fresh malloc'd string (length query first); NULL on failure. */
static char *render(int32_t route, int32_t lang, tgrad_tensor_t a, tgrad_tensor_t b, struct tgrad_launch *launch) {
    size_t len = 0;
    launch->size = sizeof *launch;
    if (tgrad_render_matmul(route, lang, a, b, NULL, 0, &len, launch) != TGRAD_OK) return NULL;
    char *text = malloc(len + 1);
    size_t len2 = 0;
    if (tgrad_render_matmul(route, lang, a, b, text, len + 1, &len2, launch) != TGRAD_OK || len2 != len) {
        free(text);
        return NULL;
    }
    return text;
}

static void test_names(void) {
    const char *routes[] = { NULL, "naive", "tiled", "tc", "copy", "elementwise", "reduce", "cast", "gather", "concat", "where", "compare", "random", "softmax", "norm", "rope", "place", "scatter_add", "optim_step" };
    for (int32_t r = 1; r <= TGRAD_ROUTE_COUNT; r++) CHECK(strcmp(tgrad_route_name(r), routes[r]) == 0);
    CHECK(tgrad_route_name(0) == NULL && tgrad_route_name(TGRAD_ROUTE_COUNT + 1) == NULL);
    CHECK(strcmp(tgrad_lang_name(TGRAD_LANG_MSL), "msl") == 0);
    CHECK(strcmp(tgrad_lang_name(TGRAD_LANG_OPENCL), "opencl") == 0);
    CHECK(tgrad_lang_name(-1) == NULL);
    CHECK(strcmp(tgrad_status_name(TGRAD_ERR_ROUTE_NOT_ELIGIBLE), "route_not_eligible") == 0);
}

static void test_render_protocol(void) {
    tgrad_tensor_t a = zeros(33, 65), b = zeros(65, 97);
    struct tgrad_launch l1, l2;
    char *t1 = render(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, a, b, &l1);
    char *t2 = render(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, a, b, &l2);
    CHECK(t1 && t2 && strcmp(t1, t2) == 0);
    CHECK(t1 && l1.source_hash == fnv1a64(t1, strlen(t1)));
    CHECK(memcmp(&l1, &l2, sizeof l1) == 0);
    CHECK(l1.grid[0] == 4 && l1.grid[1] == 2 && l1.grid[2] == 1);
    CHECK(l1.threadgroup[0] == 16 && l1.threadgroup[1] == 16 && l1.threadgroup[2] == 1);
    CHECK(l1.buffer_count == 3 && l1.buffer_elements[0] == 33 * 65 && l1.buffer_elements[2] == 33 * 97);
    CHECK(t1 && strstr(t1, l1.kernel_name) != NULL);
    /* too small: nothing written */
    char small[64];
    memset(small, 'Z', sizeof small);
    size_t len = 7;
    struct tgrad_launch untouched;
    memset(&untouched, 0xab, sizeof untouched);
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, a, b, small, sizeof small, &len, &untouched),
           TGRAD_ERR_BUFFER_TOO_SMALL);
    CHECK(small[0] == 'Z' && len == 7 && untouched.grid[0] == 0xabababab);
    /* argument checks */
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, a, b, small, sizeof small, NULL, NULL),
           TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, a, b, NULL, 10, &len, &l1), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, a, b, NULL, 0, &len, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_render_copy(TGRAD_LANG_MSL, a, NULL, 0, &len, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_render_matmul(0, TGRAD_LANG_MSL, a, b, NULL, 0, &len, &l1), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TILED, 0, a, b, NULL, 0, &len, &l1), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, 0, b, NULL, 0, &len, &l1), TGRAD_ERR_INVALID_HANDLE);
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, b, b, NULL, 0, &len, &l1), TGRAD_ERR_SHAPE_MISMATCH);
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_COPY, TGRAD_LANG_MSL, a, b, NULL, 0, &len, &l1), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TC, TGRAD_LANG_OPENCL, a, b, NULL, 0, &len, &l1), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    EXPECT(tgrad_render_copy(TGRAD_LANG_MSL, a, NULL, 0, NULL, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_route_check(TGRAD_ROUTE_COPY, TGRAD_LANG_MSL, a, b), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_route_check(TGRAD_ROUTE_COPY, TGRAD_LANG_MSL, a, 0), TGRAD_OK);
    free(t1);
    free(t2);
    tgrad_tensor_release(a);
    tgrad_tensor_release(b);
}

static void test_eligibility(void) {
    tgrad_tensor_t a = zeros(4, 32), b = zeros(32, 4), c = zeros(8, 8);
    EXPECT(tgrad_route_check(TGRAD_ROUTE_TC, TGRAD_LANG_MSL, a, b), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    CHECK(strstr(tgrad_last_error(), "tiled takes every shape") != NULL);
    EXPECT(tgrad_route_check(TGRAD_ROUTE_TILED, TGRAD_LANG_MSL, a, b), TGRAD_OK);
    EXPECT(tgrad_route_check(TGRAD_ROUTE_NAIVE, TGRAD_LANG_OPENCL, a, b), TGRAD_OK);
    EXPECT(tgrad_route_check(TGRAD_ROUTE_TC, TGRAD_LANG_MSL, c, c), TGRAD_OK);
    /* tc needs matrix hardware: MSL's simdgroup matrices or CUDA's warp-level mma, not OpenCL C */
    EXPECT(tgrad_route_check(TGRAD_ROUTE_TC, TGRAD_LANG_OPENCL, c, c), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    CHECK(strstr(tgrad_last_error(), "warp-level bf16 mma.sync") != NULL);
    EXPECT(tgrad_route_check(TGRAD_ROUTE_TC, TGRAD_LANG_CUDA, a, b), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    struct tgrad_launch l;
    char *text = render(TGRAD_ROUTE_TC, TGRAD_LANG_CUDA, c, c, &l);
    CHECK(text && strstr(text, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") != NULL);
    CHECK(l.threadgroup[0] == 128 && l.threadgroup[1] == 1 && l.threadgroup_memory == 2048); /* bf16 tiles */
    free(text);
    text = render(TGRAD_ROUTE_TC, TGRAD_LANG_MSL, c, c, &l);
    CHECK(text && l.threadgroup_memory == 8192); /* fp32 tiles and a c tile */
    free(text);
    tgrad_tensor_release(a);
    tgrad_tensor_release(b);
    tgrad_tensor_release(c);
}

static void test_views_and_lazy_operands(void) {
    tgrad_tensor_t base = zeros(12, 10), t = 0, lazy = 0;
    EXPECT(tgrad_tensor_transpose(base, 0, 1, &t), TGRAD_OK); /* [10, 12], strides (1, 10) */
    EXPECT(tgrad_matmul(base, t, &lazy), TGRAD_OK);            /* [12, 12], not computed */
    struct tgrad_launch l;
    char *text = render(TGRAD_ROUTE_NAIVE, TGRAD_LANG_MSL, lazy, t, &l); /* [12, 12] @ [12, 10]... */
    CHECK(text == NULL); /* ...does not fit: inner 12 vs 10 */
    text = render(TGRAD_ROUTE_NAIVE, TGRAD_LANG_MSL, t, lazy, &l);
    CHECK(text && strstr(text, "// a[m, k] = a[m + k * 10]") != NULL);
    int32_t realized = 1;
    EXPECT(tgrad_tensor_is_realized(lazy, &realized), TGRAD_OK);
    CHECK(realized == 0);
    size_t len = 0;
    EXPECT(tgrad_render_copy(TGRAD_LANG_OPENCL, t, NULL, 0, &len, &l), TGRAD_OK);
    CHECK(len > 0 && l.buffer_count == 2 && l.buffer_elements[0] == 120 && l.buffer_elements[1] == 120);
    free(text);
    tgrad_tensor_release(lazy);
    tgrad_tensor_release(t);
    tgrad_tensor_release(base);
}

typedef struct { tgrad_tensor_t a, b; uint64_t hash; int ok; } job;

static void *render_job(void *arg) {
    job *j = arg;
    for (int i = 0; i < 50; i++) {
        struct tgrad_launch l;
        char *text = render(TGRAD_ROUTE_TC, TGRAD_LANG_MSL, j->a, j->b, &l);
        j->ok += text && l.source_hash == fnv1a64(text, strlen(text));
        if (i == 0) j->hash = l.source_hash;
        else j->ok -= l.source_hash != j->hash;
        free(text);
    }
    return NULL;
}

static void test_threads_render_the_same_text(void) {
    tgrad_tensor_t a = zeros(64, 40), b = zeros(40, 72);
    job jobs[4];
    pthread_t ids[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){ a, b, 0, 0 };
        pthread_create(&ids[i], NULL, render_job, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(ids[i], NULL);
    for (int i = 0; i < 4; i++) CHECK(jobs[i].ok == 50 && jobs[i].hash == jobs[0].hash);
    tgrad_tensor_release(a);
    tgrad_tensor_release(b);
}

int main(void) {
    test_names();
    test_render_protocol();
    test_eligibility();
    test_views_and_lazy_operands();
    test_threads_render_the_same_text();
    CHECK(tgrad_live_tensors() == 0);
    CHECK(tgrad_live_buffers() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
