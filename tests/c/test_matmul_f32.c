/* tgrad_matmul_ex(a, b, TGRAD_DTYPE_F32, &c): the fp32 accumulators of the documented order
 * (docs/numerics.md), unrounded, NaN canonical 0x7FC00000; and the bf16 product equals them
 * rounded to nearest even. Checked against a scalar reference of the contract written here, on
 * every runnable CPU variant at 1 and 3 threads, for shapes around the tiles, past the K panels,
 * one row and one column, with NaN, inf and subnormal inputs. Run under guard pages too (meson):
 * a float32 tile store past the result faults there. Also: bad dtypes refused before allocating. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract_ref.h"

static uint32_t reference(const uint16_t *a, const uint16_t *b, int64_t K, int64_t N, int64_t m, int64_t n) {
    float acc = 0.0f;
    for (int64_t j = 0; 2 * j < K; j++) {
        float ao = 2 * j + 1 < K ? daz(a[m * K + 2 * j + 1]) : 0.0f, bo = 2 * j + 1 < K ? daz(b[(2 * j + 1) * N + n]) : 0.0f;
        acc = step(acc, ao, bo);
        acc = step(acc, daz(a[m * K + 2 * j]), daz(b[2 * j * N + n]));
    }
    uint32_t u;
    memcpy(&u, &acc, 4);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u;
}

static uint64_t rng = 88172645463325252ull;
/* special: one input in about `special` is NaN, inf, subnormal or -0 (0: none) */
static uint16_t random_bf16(int64_t special) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    static const uint16_t picks[] = { 0x7fc0, 0x7f80, 0xff80, 0x0001, 0x807f, 0x8000 };
    if (special && rng % (uint64_t)special == 0) return picks[(rng >> 8) % 6];
    /* exponents 2^-8 .. 2^7, any sign and mantissa */
    return (uint16_t)((rng >> 20 & 0x8000) | ((119 + (rng >> 32) % 16) << 7) | (rng >> 40 & 0x7f));
}

static void one_shape(int64_t M, int64_t K, int64_t N, int special_on) {
    int64_t special = special_on ? 2 * K + 2 : 0; /* a few per row and column: most outputs stay finite */
    uint16_t *a = malloc(sizeof *a * (size_t)(M * K + 1)), *b = malloc(sizeof *b * (size_t)(K * N + 1));
    uint32_t *want = malloc(4 * (size_t)(M * N + 1)), *got = malloc(4 * (size_t)(M * N + 1));
    uint16_t *got16 = malloc(2 * (size_t)(M * N + 1));
    for (int64_t i = 0; i < M * K; i++) a[i] = random_bf16(special);
    for (int64_t i = 0; i < K * N; i++) b[i] = random_bf16(special);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) want[m * N + n] = reference(a, b, K, N, m, n);
    int64_t sa[2] = { M, K }, sb[2] = { K, N };
    tgrad_tensor_t ta = 0, tb = 0;
    EXPECT(tgrad_tensor_from_bf16(a, 2, sa, &ta), TGRAD_OK);
    EXPECT(tgrad_tensor_from_bf16(b, 2, sb, &tb), TGRAD_OK);
    int32_t available = 0;
    for (int32_t v = 0; tgrad_cpu_isa_name(v, &available); v++) {
        if (!available) continue;
        EXPECT(tgrad_set_cpu_isa(tgrad_cpu_isa_name(v, &available)), TGRAD_OK);
        for (int32_t threads = 1; threads <= 3; threads += 2) {
            EXPECT(tgrad_set_num_threads(threads), TGRAD_OK);
            tgrad_tensor_t c = 0, c16 = 0;
            int32_t dtype = 0;
            EXPECT(tgrad_matmul_ex(ta, tb, TGRAD_DTYPE_F32, &c), TGRAD_OK);
            EXPECT(tgrad_matmul(ta, tb, &c16), TGRAD_OK);
            EXPECT(tgrad_tensor_dtype(c, &dtype), TGRAD_OK);
            CHECK(dtype == TGRAD_DTYPE_F32);
            EXPECT(tgrad_tensor_read(c, got, 4 * (size_t)(M * N)), TGRAD_OK);
            EXPECT(tgrad_tensor_read_bf16(c16, got16, (size_t)(M * N)), TGRAD_OK);
            int64_t bad = 0, bad16 = 0;
            for (int64_t i = 0; i < M * N; i++) bad += got[i] != want[i], bad16 += got16[i] != rne(got[i]);
            if (bad || bad16)
                fprintf(stderr, "%lldx%lldx%lld special=%d %s threads=%d: %lld float32 and %lld bf16 outputs differ\n",
                        (long long)M, (long long)K, (long long)N, special_on, tgrad_cpu_isa_name(v, &available),
                        (int)threads, (long long)bad, (long long)bad16);
            CHECK(bad == 0 && bad16 == 0);
            tgrad_tensor_release(c);
            tgrad_tensor_release(c16);
        }
    }
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
    tgrad_tensor_release(ta);
    tgrad_tensor_release(tb);
    free(a), free(b), free(want), free(got), free(got16);
}

static void refusals(void) {
    float v[6] = { 1, 2, 3, 4, 5, 6 };
    int64_t s23[2] = { 2, 3 }, s32[2] = { 3, 2 };
    tgrad_tensor_t a = 0, b = 0, f = 0, out = 77;
    EXPECT(tgrad_tensor_from_f32(v, 2, s23, &a), TGRAD_OK);
    EXPECT(tgrad_tensor_from_f32(v, 2, s32, &b), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(v, TGRAD_DTYPE_F32, 2, s32, TGRAD_DTYPE_F32, &f), TGRAD_OK);
    int64_t tensors = tgrad_live_tensors(), buffers = tgrad_live_buffers();
    EXPECT(tgrad_matmul_ex(a, b, TGRAD_DTYPE_I32, &out), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_matmul_ex(a, b, TGRAD_DTYPE_F64, &out), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_matmul_ex(a, b, 0, &out), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_matmul_ex(a, f, TGRAD_DTYPE_F32, &out), TGRAD_ERR_DTYPE_UNSUPPORTED); /* operands bf16 only */
    EXPECT(tgrad_matmul_ex(a, a, TGRAD_DTYPE_F32, &out), TGRAD_ERR_SHAPE_MISMATCH);
    EXPECT(tgrad_matmul_ex(a, b, TGRAD_DTYPE_F32, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(out == 77 && tgrad_live_tensors() == tensors && tgrad_live_buffers() == buffers);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(f);
}

int main(void) {
    /* this file checks the pairwise order's contract (its reference above); test_block32.c checks
     * block32, the default */
    EXPECT(tgrad_set_matmul_order(TGRAD_MATMUL_ORDER_PAIRWISE), TGRAD_OK);
    refusals();
    static const int64_t shapes[][3] = { { 1, 1, 1 }, { 4, 4, 4 }, { 13, 37, 45 }, { 1, 300, 70 }, { 70, 300, 1 },
                                         { 5, 1100, 33 }, { 130, 530, 97 }, { 3, 0, 5 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int special = 0; special < 2; special++) one_shape(shapes[i][0], shapes[i][1], shapes[i][2], special);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
