/* Comparisons (tgrad_compare), selection (tgrad_where) and the bool dtype through the ABI: every
 * pair of special bf16, f32 and i32 values against C's IEEE comparisons, mixed dtypes compared by
 * exact value, broadcasting through views, bool round trips and casts, big outputs on 1 and 3
 * threads (the same bytes), and refusals that change nothing. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const float specials[] = { 0.0f, -0.0f, 1.0f, -1.0f, 1.5f, 0.1f, INFINITY, -INFINITY, NAN, -NAN,
                                  1e-40f, -1e-40f, 3.3895314e38f, 65504.0f, 2.0f, 1.0f + 1.0f / 128 };
enum { NS = sizeof specials / sizeof specials[0] };

static int expect(int32_t cmp, double a, double b) {
    switch (cmp) {
    case TGRAD_COMPARE_EQ: return a == b;
    case TGRAD_COMPARE_NE: return a != b;
    case TGRAD_COMPARE_LT: return a < b;
    case TGRAD_COMPARE_LE: return a <= b;
    case TGRAD_COMPARE_GT: return a > b;
    default: return a >= b;
    }
}

static tgrad_tensor_t host(const void *data, int32_t src, int32_t ndim, const int64_t *shape, int32_t dtype) {
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_tensor_from_host(data, src, ndim, shape, dtype, &t), TGRAD_OK);
    return t;
}

/* a [NS, 1] against b [1, NS] (broadcast), every comparison, for a dtype pair: the bf16 operand
 * holds the specials rounded to bf16, compared here by the values read back. */
static void every_pair(int32_t da, int32_t db) {
    int64_t sa[2] = { NS, 1 }, sb[2] = { 1, NS };
    tgrad_tensor_t a = host(specials, TGRAD_DTYPE_F32, 2, sa, da), b = host(specials, TGRAD_DTYPE_F32, 2, sb, db);
    float va[NS], vb[NS];
    EXPECT(tgrad_tensor_read_f32(a, va, NS), TGRAD_OK);
    EXPECT(tgrad_tensor_read_f32(b, vb, NS), TGRAD_OK);
    for (int32_t cmp = TGRAD_COMPARE_EQ; cmp <= TGRAD_COMPARE_GE; cmp++) {
        tgrad_tensor_t c = 0;
        EXPECT(tgrad_compare(cmp, a, b, &c), TGRAD_OK);
        int32_t dtype = 0;
        EXPECT(tgrad_tensor_dtype(c, &dtype), TGRAD_OK);
        CHECK(dtype == TGRAD_DTYPE_BOOL);
        uint8_t got[NS * NS];
        EXPECT(tgrad_tensor_read(c, got, sizeof got), TGRAD_OK);
        int bad = 0;
        for (int i = 0; i < NS; i++)
            for (int j = 0; j < NS; j++) bad += got[i * NS + j] != expect(cmp, va[i], vb[j]);
        CHECK(bad == 0);
        tgrad_tensor_release(c);
    }
    tgrad_tensor_release(a), tgrad_tensor_release(b);
}

/* int32 against float32 by exact value: 2^24 + 1 is not a float32, so it is unequal to 2^24 (a
 * comparison through float32 would say equal). */
static void int_against_float_is_exact(void) {
    int32_t i = (1 << 24) + 1;
    float f = 16777216.0f;
    tgrad_tensor_t a = host(&i, TGRAD_DTYPE_I32, 0, NULL, TGRAD_DTYPE_I32), b = host(&f, TGRAD_DTYPE_F32, 0, NULL, TGRAD_DTYPE_F32);
    tgrad_tensor_t eq = 0, gt = 0;
    EXPECT(tgrad_compare(TGRAD_COMPARE_EQ, a, b, &eq), TGRAD_OK);
    EXPECT(tgrad_compare(TGRAD_COMPARE_GT, a, b, &gt), TGRAD_OK);
    uint8_t r[2] = { 9, 9 };
    EXPECT(tgrad_tensor_read(eq, &r[0], 1), TGRAD_OK);
    EXPECT(tgrad_tensor_read(gt, &r[1], 1), TGRAD_OK);
    CHECK(r[0] == 0 && r[1] == 1);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(eq), tgrad_tensor_release(gt);
}

/* where over three broadcast operands, and through a transposed view. */
static void where_selects_bits(void) {
    uint8_t cbytes[3] = { 1, 0, 7 }; /* 7: any nonzero byte is stored as 1 */
    int64_t sc[2] = { 3, 1 }, sa[1] = { 4 }, sb[2] = { 1, 1 };
    float av[4] = { 1, -0.0f, NAN, 4 }, bv = -2;
    tgrad_tensor_t c = host(cbytes, TGRAD_DTYPE_BOOL, 2, sc, TGRAD_DTYPE_BOOL);
    tgrad_tensor_t a = host(av, TGRAD_DTYPE_F32, 1, sa, TGRAD_DTYPE_BF16), b = host(&bv, TGRAD_DTYPE_F32, 2, sb, TGRAD_DTYPE_BF16);
    uint8_t stored[3];
    EXPECT(tgrad_tensor_read(c, stored, sizeof stored), TGRAD_OK);
    CHECK(stored[0] == 1 && stored[1] == 0 && stored[2] == 1);
    tgrad_tensor_t w = 0, wt = 0, ct = 0;
    EXPECT(tgrad_where(c, a, b, &w), TGRAD_OK);
    uint16_t bits[12];
    EXPECT(tgrad_tensor_read_bf16(w, bits, 12), TGRAD_OK);
    const uint16_t row[4] = { 0x3f80, 0x8000, 0x7fc0, 0x4080 };
    CHECK(memcmp(bits, row, sizeof row) == 0 && memcmp(bits + 8, row, sizeof row) == 0);
    for (int j = 4; j < 8; j++) CHECK(bits[j] == 0xc000);
    int32_t perm[2] = { 1, 0 };
    EXPECT(tgrad_tensor_permute(c, perm, 2, &ct), TGRAD_OK); /* [1, 3] */
    EXPECT(tgrad_where(ct, b, b, &wt), TGRAD_OK);
    int64_t shape[2] = { 0, 0 };
    EXPECT(tgrad_tensor_shape(wt, shape), TGRAD_OK);
    CHECK(shape[0] == 1 && shape[1] == 3);
    tgrad_tensor_release(w), tgrad_tensor_release(wt), tgrad_tensor_release(ct);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(c);
}

/* bool casts: to numbers 0/1; from numbers x != 0 (NaN true, -0 false). */
static void bool_casts(void) {
    float v[5] = { 0.0f, -0.0f, NAN, 1e-40f, -3 };
    int64_t n = 5;
    tgrad_tensor_t x = host(v, TGRAD_DTYPE_F32, 1, &n, TGRAD_DTYPE_F32), b = 0, back = 0, i = 0;
    EXPECT(tgrad_cast(x, TGRAD_DTYPE_BOOL, &b), TGRAD_OK);
    uint8_t got[5];
    EXPECT(tgrad_tensor_read(b, got, sizeof got), TGRAD_OK);
    CHECK(got[0] == 0 && got[1] == 0 && got[2] == 1 && got[3] == 1 && got[4] == 1);
    EXPECT(tgrad_cast(b, TGRAD_DTYPE_BF16, &back), TGRAD_OK);
    EXPECT(tgrad_cast(b, TGRAD_DTYPE_I32, &i), TGRAD_OK);
    uint16_t bits[5];
    int32_t ints[5];
    EXPECT(tgrad_tensor_read_bf16(back, bits, 5), TGRAD_OK);
    EXPECT(tgrad_tensor_read(i, ints, sizeof ints), TGRAD_OK);
    CHECK(bits[0] == 0 && bits[2] == 0x3f80 && ints[1] == 0 && ints[4] == 1);
    CHECK(tgrad_dtype_size(TGRAD_DTYPE_BOOL) == 1);
    tgrad_tensor_release(x), tgrad_tensor_release(b), tgrad_tensor_release(back), tgrad_tensor_release(i);
}

/* A big comparison and where (threaded): the same bytes on 1 and 3 threads, and right. */
static void threads_give_the_same_bytes(void) {
    enum { N = 1 << 17 };
    float *v = malloc(sizeof(float) * N);
    uint8_t *r1 = malloc(N), *r3 = malloc(N);
    uint16_t *w1 = malloc(2 * N), *w3 = malloc(2 * N);
    for (int i = 0; i < N; i++) v[i] = (float)((i * 7919) % 1000) - 500.0f;
    int64_t n = N;
    float zero = 0;
    tgrad_tensor_t x = host(v, TGRAD_DTYPE_F32, 1, &n, TGRAD_DTYPE_BF16), z = host(&zero, TGRAD_DTYPE_F32, 0, NULL, TGRAD_DTYPE_BF16);
    int32_t before = tgrad_num_threads();
    for (int round = 0; round < 2; round++) {
        EXPECT(tgrad_set_num_threads(round ? 3 : 1), TGRAD_OK);
        tgrad_tensor_t c = 0, w = 0;
        EXPECT(tgrad_compare(TGRAD_COMPARE_GT, x, z, &c), TGRAD_OK);
        EXPECT(tgrad_where(c, x, z, &w), TGRAD_OK);
        EXPECT(tgrad_tensor_read(c, round ? r3 : r1, N), TGRAD_OK);
        EXPECT(tgrad_tensor_read_bf16(w, round ? w3 : w1, N), TGRAD_OK);
        tgrad_tensor_release(c), tgrad_tensor_release(w);
    }
    tgrad_set_num_threads(before);
    CHECK(memcmp(r1, r3, N) == 0 && memcmp(w1, w3, 2 * N) == 0);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += r1[i] != (v[i] > 0);
    CHECK(bad == 0);
    tgrad_tensor_release(x), tgrad_tensor_release(z);
    free(v), free(r1), free(r3), free(w1), free(w3);
}

static void refusals_change_nothing(void) {
    float v[6] = { 0 };
    int64_t s23[2] = { 2, 3 }, s4 = 4;
    tgrad_tensor_t x = host(v, TGRAD_DTYPE_F32, 2, s23, TGRAD_DTYPE_BF16), y = host(v, TGRAD_DTYPE_F32, 1, &s4, TGRAD_DTYPE_BF16);
    tgrad_tensor_t f = host(v, TGRAD_DTYPE_F32, 2, s23, TGRAD_DTYPE_F32), c = 0, bad = 0;
    EXPECT(tgrad_compare(TGRAD_COMPARE_EQ, x, x, &c), TGRAD_OK);
    int64_t live = tgrad_live_tensors();
    EXPECT(tgrad_compare(0, x, x, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_compare(7, x, x, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_compare(TGRAD_COMPARE_LT, x, y, &bad), TGRAD_ERR_SHAPE_MISMATCH);
    EXPECT(tgrad_compare(TGRAD_COMPARE_LT, x, 12345, &bad), TGRAD_ERR_INVALID_HANDLE);
    EXPECT(tgrad_compare(TGRAD_COMPARE_LT, x, x, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_where(x, x, x, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED); /* the condition must be bool */
    EXPECT(tgrad_where(c, x, f, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED); /* one dtype for the values */
    EXPECT(tgrad_where(c, x, y, &bad), TGRAD_ERR_SHAPE_MISMATCH);
    EXPECT(tgrad_where(c, x, 0, &bad), TGRAD_ERR_INVALID_HANDLE);
    EXPECT(tgrad_unary(TGRAD_OP_NEG, c, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED); /* no arithmetic on bool */
    EXPECT(tgrad_reduce(TGRAD_REDUCE_SUM, c, NULL, -1, 0, 0, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_tensor_from_host(v, TGRAD_DTYPE_F32, 1, &s4, TGRAD_DTYPE_BOOL, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    CHECK(bad == 0 && tgrad_live_tensors() == live);
    tgrad_tensor_release(x), tgrad_tensor_release(y), tgrad_tensor_release(f), tgrad_tensor_release(c);
}

int main(void) {
    const int32_t dtypes[2] = { TGRAD_DTYPE_BF16, TGRAD_DTYPE_F32 };
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) every_pair(dtypes[i], dtypes[j]);
    int_against_float_is_exact();
    where_selects_bits();
    bool_casts();
    threads_give_the_same_bytes();
    refusals_change_nothing();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
