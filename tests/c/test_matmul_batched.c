/* tgrad_matmul on operands of rank other than 2 (torch.matmul's rule) through the ABI: each
 * batch's bytes are the 2-D product of that batch's matrices, on 1 and 2 threads, for a
 * broadcast operand, a transposed one and batches spread over the pool; 1-D operands promoted
 * and the added axis removed; refusals before anything is made. (Every view and variant:
 * tests/python/test_matmul_batched.py.) */
#include <stdlib.h>
#include <string.h>

#include "check.h"

static uint32_t seed = 12345;
static uint16_t rand_bf16(void) {
    seed = seed * 1664525u + 1013904223u;
    /* sign, an exponent near 1.0 (2^-8 .. 2^7) and 7 random mantissa bits */
    return (uint16_t)(((seed >> 31) << 15) | ((119u + (seed >> 8) % 16u) << 7) | ((seed >> 16) & 0x7fu));
}

static tgrad_tensor_t make(int32_t ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    uint16_t *bits = malloc((size_t)n * 2 + 2);
    for (int64_t i = 0; i < n; i++) bits[i] = rand_bf16();
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_tensor_from_bf16(bits, ndim, shape, &t), TGRAD_OK);
    free(bits);
    return t;
}

/* a [B, M, K] (as given) @ b: the batched result equals the stack of a[i] @ b (or b[i]). */
static void check_batches(tgrad_tensor_t a, tgrad_tensor_t b, int64_t B, int64_t M, int64_t N, int b_batched) {
    int64_t n = B * M * N;
    uint16_t *got = malloc((size_t)n * 2), *want = malloc((size_t)n * 2);
    for (int32_t threads = 1; threads <= 2; threads++) {
        EXPECT(tgrad_set_num_threads(threads), TGRAD_OK);
        tgrad_tensor_t c = 0;
        EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
        EXPECT(tgrad_tensor_read_bf16(c, got, n), TGRAD_OK);
        tgrad_tensor_release(c);
        for (int64_t i = 0; i < B; i++) {
            tgrad_tensor_t ai = 0, bi = 0, ci = 0;
            EXPECT(tgrad_tensor_select(a, 0, i, &ai), TGRAD_OK);
            if (b_batched) EXPECT(tgrad_tensor_select(b, 0, i, &bi), TGRAD_OK);
            EXPECT(tgrad_matmul(ai, b_batched ? bi : b, &ci), TGRAD_OK);
            EXPECT(tgrad_tensor_read_bf16(ci, want + i * M * N, M * N), TGRAD_OK);
            tgrad_tensor_release(ai), tgrad_tensor_release(bi), tgrad_tensor_release(ci);
        }
        CHECK(memcmp(got, want, (size_t)n * 2) == 0);
    }
    free(got), free(want);
}

static void test_batches_are_their_2d_products(void) {
    /* broadcast right operand, small products (one after another) */
    int64_t sa[3] = { 3, 5, 7 }, sb[2] = { 7, 4 };
    tgrad_tensor_t a = make(3, sa), b = make(2, sb);
    check_batches(a, b, 3, 5, 4, 0);
    tgrad_tensor_release(a), tgrad_tensor_release(b);
    /* both batched, b transposed in its last two axes, products spread over the pool */
    int64_t sa2[3] = { 9, 64, 72 }, sbt[3] = { 9, 64, 72 };
    tgrad_tensor_t a2 = make(3, sa2), bt = make(3, sbt), b2 = 0;
    EXPECT(tgrad_tensor_transpose(bt, 1, 2, &b2), TGRAD_OK);
    check_batches(a2, b2, 9, 64, 64, 1);
    tgrad_tensor_release(a2), tgrad_tensor_release(bt), tgrad_tensor_release(b2);
    /* products above the one-thread threshold, each threaded over its tiles */
    int64_t sa3[3] = { 2, 140, 130 }, sb3[3] = { 2, 130, 150 };
    tgrad_tensor_t a3 = make(3, sa3), b3 = make(3, sb3);
    check_batches(a3, b3, 2, 140, 150, 1);
    tgrad_tensor_release(a3), tgrad_tensor_release(b3);
}

static void test_1d_operands(void) {
    int64_t sv[1] = { 6 }, sm[2] = { 6, 3 }, sbm[3] = { 2, 4, 6 };
    tgrad_tensor_t v = make(1, sv), m = make(2, sm), bm = make(3, sbm), c = 0;
    int64_t shape[TGRAD_MAX_DIMS];
    int32_t ndim = -1;
    EXPECT(tgrad_matmul(v, m, &c), TGRAD_OK); /* [6] @ [6, 3] -> [3] */
    EXPECT(tgrad_tensor_ndim(c, &ndim), TGRAD_OK);
    EXPECT(tgrad_tensor_shape(c, shape), TGRAD_OK);
    CHECK(ndim == 1 && shape[0] == 3);
    tgrad_tensor_release(c);
    EXPECT(tgrad_matmul(bm, v, &c), TGRAD_OK); /* [2, 4, 6] @ [6] -> [2, 4] */
    EXPECT(tgrad_tensor_ndim(c, &ndim), TGRAD_OK);
    EXPECT(tgrad_tensor_shape(c, shape), TGRAD_OK);
    CHECK(ndim == 2 && shape[0] == 2 && shape[1] == 4);
    tgrad_tensor_release(c);
    EXPECT(tgrad_matmul(v, v, &c), TGRAD_OK); /* [6] @ [6] -> [] */
    EXPECT(tgrad_tensor_ndim(c, &ndim), TGRAD_OK);
    CHECK(ndim == 0);
    uint16_t one = 0;
    EXPECT(tgrad_tensor_read_bf16(c, &one, 1), TGRAD_OK);
    tgrad_tensor_release(c);
    tgrad_tensor_release(v), tgrad_tensor_release(m), tgrad_tensor_release(bm);
}

static void test_refusals(void) {
    int64_t sa[3] = { 2, 3, 4 }, sb[3] = { 3, 4, 5 };
    tgrad_tensor_t a = make(3, sa), b = make(3, sb), c = 77;
    int64_t live = tgrad_live_tensors();
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_ERR_SHAPE_MISMATCH);
    CHECK(strstr(tgrad_last_error(), "matmul: [2, 3, 4] @ [3, 4, 5]: batch dimensions do not broadcast") != NULL);
    EXPECT(tgrad_matmul_ex(a, a, TGRAD_DTYPE_F32, &c), TGRAD_ERR_SHAPE_MISMATCH);
    CHECK(strstr(tgrad_last_error(), "inner dimensions 4 and 3 differ") != NULL);
    CHECK(c == 77 && tgrad_live_tensors() == live);
    tgrad_tensor_release(a), tgrad_tensor_release(b);
}

int main(void) {
    test_batches_are_their_2d_products();
    test_1d_operands();
    test_refusals();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
