/* tgrad_unary and tgrad_binary as graph nodes: numpy broadcasting through views (0-d, size-1 and
 * missing axes, reversed and strided slices, expanded operands, empty shapes), the threaded pass
 * over a big output against the ops applied to compact copies, and the refusals (op code, arity,
 * shapes that do not broadcast) before anything is allocated. Public API only. Prints "N passed,
 * N failed". */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static tgrad_tensor_t iota(int32_t ndim, const int64_t *shape, int64_t n) {
    uint16_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = (uint16_t)(0x3c00 + (i * 37) % 1500); /* 2^-7 .. about 2^5, varied */
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_tensor_from_bf16(v, ndim, shape, &t), TGRAD_OK);
    free(v);
    return t;
}

static uint16_t *read_all(tgrad_tensor_t t, int64_t n) {
    uint16_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    EXPECT(tgrad_tensor_read_bf16(t, v, (size_t)n), TGRAD_OK);
    return v;
}

/* op(a, b) through the node equals op over compact copies of the broadcast operands (read back
 * through tgrad_tensor_contiguous of an expand: the view machinery's own answer). */
static void check_binary(tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t b, int32_t ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    tgrad_tensor_t y = 0, ea = 0, eb = 0, ra = 0, rb = 0;
    EXPECT(tgrad_binary(op, a, b, &y), TGRAD_OK);
    int64_t got_shape[TGRAD_MAX_DIMS];
    int32_t got_ndim = -1;
    EXPECT(tgrad_tensor_ndim(y, &got_ndim), TGRAD_OK);
    EXPECT(tgrad_tensor_shape(y, got_shape), TGRAD_OK);
    CHECK(got_ndim == ndim && (ndim == 0 || memcmp(got_shape, shape, sizeof *shape * (size_t)ndim) == 0));
    int32_t nda, ndb;
    EXPECT(tgrad_tensor_ndim(a, &nda), TGRAD_OK);
    EXPECT(tgrad_tensor_ndim(b, &ndb), TGRAD_OK);
    /* expand needs the same rank: reshape to leading 1s first */
    int64_t sa[TGRAD_MAX_DIMS], sb[TGRAD_MAX_DIMS], pa[TGRAD_MAX_DIMS], pb[TGRAD_MAX_DIMS];
    EXPECT(tgrad_tensor_shape(a, sa), TGRAD_OK);
    EXPECT(tgrad_tensor_shape(b, sb), TGRAD_OK);
    for (int32_t i = 0; i < ndim; i++) {
        pa[i] = i < ndim - nda ? 1 : sa[i - (ndim - nda)];
        pb[i] = i < ndim - ndb ? 1 : sb[i - (ndim - ndb)];
    }
    EXPECT(tgrad_tensor_reshape(a, pa, ndim, &ra), TGRAD_OK);
    EXPECT(tgrad_tensor_reshape(b, pb, ndim, &rb), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(ra, shape, ndim, &ea), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(rb, shape, ndim, &eb), TGRAD_OK);
    uint16_t *va = read_all(ea, n), *vb = read_all(eb, n), *want = malloc(sizeof *want * (size_t)(n ? n : 1));
    EXPECT(tgrad_debug_elementwise(op, va, vb, want, n), TGRAD_OK);
    uint16_t *got = read_all(y, n);
    CHECK(memcmp(got, want, sizeof *got * (size_t)n) == 0);
    free(va), free(vb), free(want), free(got);
    tgrad_tensor_t all[] = { y, ea, eb, ra, rb };
    for (int i = 0; i < 5; i++) tgrad_tensor_release(all[i]);
}

static void test_broadcasting(void) {
    tgrad_tensor_t m = iota(2, (int64_t[]){ 3, 4 }, 12), row = iota(1, (int64_t[]){ 4 }, 4);
    tgrad_tensor_t col = iota(2, (int64_t[]){ 3, 1 }, 3), s = iota(0, NULL, 1);
    tgrad_tensor_t cube = iota(3, (int64_t[]){ 2, 3, 4 }, 24), empty = iota(2, (int64_t[]){ 0, 4 }, 0);
    check_binary(TGRAD_OP_ADD, m, row, 2, (int64_t[]){ 3, 4 });
    check_binary(TGRAD_OP_SUB, row, m, 2, (int64_t[]){ 3, 4 });
    check_binary(TGRAD_OP_MUL, col, row, 2, (int64_t[]){ 3, 4 });
    check_binary(TGRAD_OP_DIV, s, m, 2, (int64_t[]){ 3, 4 });
    check_binary(TGRAD_OP_MAXIMUM, m, s, 2, (int64_t[]){ 3, 4 });
    check_binary(TGRAD_OP_MINIMUM, cube, col, 3, (int64_t[]){ 2, 3, 4 });
    check_binary(TGRAD_OP_ADD, s, s, 0, NULL);
    check_binary(TGRAD_OP_ADD, empty, row, 2, (int64_t[]){ 0, 4 });
    /* operands through views: transposed, reversed with a step, expanded */
    tgrad_tensor_t mt = 0, rev = 0, ex = 0, big = iota(2, (int64_t[]){ 4, 6 }, 24);
    EXPECT(tgrad_tensor_transpose(m, 0, 1, &mt), TGRAD_OK); /* [4, 3] */
    EXPECT(tgrad_tensor_slice(big, 1, -1, 0, -2, TGRAD_SLICE_STOP_NONE, &rev), TGRAD_OK); /* [4, 3], stride -2 */
    check_binary(TGRAD_OP_MUL, mt, rev, 2, (int64_t[]){ 4, 3 });
    EXPECT(tgrad_tensor_expand(col, (int64_t[]){ 3, 5 }, 2, &ex), TGRAD_OK);
    check_binary(TGRAD_OP_SUB, ex, ex, 2, (int64_t[]){ 3, 5 });
    tgrad_tensor_t all[] = { m, row, col, s, cube, empty, mt, rev, ex, big };
    for (int i = 0; i < 10; i++) tgrad_tensor_release(all[i]);
}

/* A big output goes through the pool; a transposed operand walks a stride in every run. */
static void test_threaded_pass(void) {
    int64_t R = 700, C = 500, n = R * C;
    tgrad_tensor_t x = iota(2, (int64_t[]){ C, R }, n), xt = 0, y = 0, compact = 0;
    EXPECT(tgrad_tensor_transpose(x, 0, 1, &xt), TGRAD_OK);
    EXPECT(tgrad_tensor_contiguous(xt, &compact), TGRAD_OK);
    uint16_t *v = read_all(compact, n), *want = malloc(sizeof *want * (size_t)n);
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_GELU_TANH, v, NULL, want, n), TGRAD_OK);
    for (int32_t threads = 1; threads <= 3; threads += 2) {
        EXPECT(tgrad_set_num_threads(threads), TGRAD_OK);
        EXPECT(tgrad_unary(TGRAD_OP_GELU_TANH, xt, &y), TGRAD_OK);
        uint16_t *got = read_all(y, n);
        CHECK(memcmp(got, want, sizeof *got * (size_t)n) == 0);
        free(got);
        tgrad_tensor_release(y);
    }
    free(v), free(want);
    tgrad_tensor_release(x), tgrad_tensor_release(xt), tgrad_tensor_release(compact);
}

/* An output of 16 MiB or more is written past the caches (non-temporal stores of whole lines,
 * plain stores for each run's unaligned head and tail): compact operands, a broadcast row (runs of
 * C = 2833 elements, most starting off a line), a transposed operand (gathered), on every CPU
 * variant (each forces its elementwise loops) at 1 and 3 threads. */
static void test_streamed_pass(void) {
    int64_t R = 3001, C = 2833, n = R * C; /* 17.0 MB of bf16 */
    tgrad_tensor_t a = iota(2, (int64_t[]){ R, C }, n), b = iota(2, (int64_t[]){ R, C }, n);
    tgrad_tensor_t row = iota(1, (int64_t[]){ C }, C), at = iota(2, (int64_t[]){ C, R }, n), t = 0;
    EXPECT(tgrad_tensor_transpose(at, 0, 1, &t), TGRAD_OK);
    int32_t threads_before = tgrad_num_threads();
    for (int32_t i = 0;; i++) {
        int32_t available = 0;
        const char *name = tgrad_cpu_isa_name(i, &available);
        if (!name) break;
        if (!available) continue;
        EXPECT(tgrad_set_cpu_isa(name), TGRAD_OK);
        for (int32_t threads = 1; threads <= 3; threads += 2) {
            EXPECT(tgrad_set_num_threads(threads), TGRAD_OK);
            check_binary(TGRAD_OP_ADD, a, b, 2, (int64_t[]){ R, C });
            check_binary(TGRAD_OP_MUL, row, a, 2, (int64_t[]){ R, C });
            check_binary(TGRAD_OP_MAXIMUM, t, b, 2, (int64_t[]){ R, C });
        }
    }
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
    EXPECT(tgrad_set_num_threads(threads_before), TGRAD_OK);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(row);
    tgrad_tensor_release(at), tgrad_tensor_release(t);
}

static void test_refusals(void) {
    tgrad_tensor_t a = iota(2, (int64_t[]){ 2, 3 }, 6), b = iota(1, (int64_t[]){ 4 }, 4), y = 123;
    int64_t buffers = tgrad_live_buffers(), tensors = tgrad_live_tensors();
    EXPECT(tgrad_binary(TGRAD_OP_ADD, a, b, &y), TGRAD_ERR_SHAPE_MISMATCH);
    CHECK(strstr(tgrad_last_error(), "[2, 3]") && strstr(tgrad_last_error(), "[4]"));
    EXPECT(tgrad_binary(TGRAD_OP_RELU, a, a, &y), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_unary(TGRAD_OP_ADD, a, &y), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_unary(0, a, &y), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_unary(tgrad_op_count() + 1, a, &y), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_unary(TGRAD_OP_EXP, a, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_unary(TGRAD_OP_EXP, 0, &y), TGRAD_ERR_INVALID_HANDLE);
    CHECK(y == 123 && tgrad_live_buffers() == buffers && tgrad_live_tensors() == tensors);
    tgrad_tensor_release(a), tgrad_tensor_release(b);
}

int main(void) {
    test_broadcasting();
    test_threaded_pass();
    test_streamed_pass();
    test_refusals();
    CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
