/* The block32 order (docs/numerics.md, "The block32 order": AMX's TDPBF16PS order) through the
 * ABI: tgrad_matmul_ordered's float32 accumulators and bf16 results against a scalar reference
 * written here, on the kernel the automatic choice takes (AMX where this CPU has it), on the FMA
 * and vdpbf16ps kernels (forced avx512f, avx2, avx512bf16, where this CPU runs them) and on the portable one (forced
 * "portable"), at 1 and 3 threads; fills: ordinary values with specials,
 * every bf16 bit pattern at random, and values whose partial sums cross fp32's flush threshold.
 * Also: the thread's order setting, refusals that change nothing. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract_ref.h"

/* K padded with +0 to whole blocks of 32; per block two chains, then acc + (even + odd) */
static uint32_t reference(const uint16_t *a, const uint16_t *b, int64_t K, int64_t N, int64_t m, int64_t n) {
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
        float chain[2] = { 0.0f, 0.0f };
        for (int64_t k = k0; k < k0 + 32; k++)
            chain[k & 1] = k < K ? step(chain[k & 1], daz(a[m * K + k]), daz(b[k * N + n])) : step(chain[k & 1], 0.0f, 0.0f);
        acc = step(acc, step(chain[0], chain[1], 1.0f), 1.0f);
    }
    uint32_t u;
    memcpy(&u, &acc, 4);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { return rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17; }

enum fill { ORDINARY, ALL_BITS, NEAR_FLUSH };
static uint16_t random_bf16(enum fill f, int64_t K) {
    uint64_t r = next();
    static const uint16_t picks[] = { 0x7fc0, 0x7f80, 0xff80, 0x0001, 0x807f, 0x8000 };
    if (f == ALL_BITS) return (uint16_t)(r >> 24);
    if (f == NEAR_FLUSH) /* products around 2^-126 */
        return (uint16_t)((r >> 20 & 0x8000) | ((61 + (r >> 32) % 8) << 7) | (r >> 40 & 0x7f));
    if (r % (uint64_t)(2 * K + 2) == 0) return picks[(r >> 8) % 6];
    return (uint16_t)((r >> 20 & 0x8000) | ((119 + (r >> 32) % 16) << 7) | (r >> 40 & 0x7f));
}

static void one_shape(int64_t M, int64_t K, int64_t N, enum fill f) {
    uint16_t *a = malloc(sizeof *a * (size_t)(M * K + 1)), *b = malloc(sizeof *b * (size_t)(K * N + 1));
    uint32_t *want = malloc(4 * (size_t)(M * N + 1)), *got = malloc(4 * (size_t)(M * N + 1));
    uint16_t *got16 = malloc(2 * (size_t)(M * N + 1));
    for (int64_t i = 0; i < M * K; i++) a[i] = random_bf16(f, K);
    for (int64_t i = 0; i < K * N; i++) b[i] = random_bf16(f, K);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) want[m * N + n] = reference(a, b, K, N, m, n);
    int64_t sa[2] = { M, K }, sb[2] = { K, N };
    tgrad_tensor_t ta = 0, tb = 0;
    EXPECT(tgrad_tensor_from_bf16(a, 2, sa, &ta), TGRAD_OK);
    EXPECT(tgrad_tensor_from_bf16(b, 2, sb, &tb), TGRAD_OK);
    /* the forced ones where the CPU runs them: each has a block32 kernel of its own */
    static const char *const isas[] = { "auto", "portable", "avx512bf16", "avx512f", "avx2", "neon" };
    for (int v = 0; v < 6; v++) {
        if (tgrad_set_cpu_isa(isas[v]) != TGRAD_OK) continue;
        for (int32_t threads = 1; threads <= 3; threads += 2) {
            EXPECT(tgrad_set_num_threads(threads), TGRAD_OK);
            tgrad_tensor_t c = 0, c16 = 0;
            EXPECT(tgrad_matmul_ordered(ta, tb, TGRAD_DTYPE_F32, TGRAD_MATMUL_ORDER_BLOCK32, &c), TGRAD_OK);
            EXPECT(tgrad_set_matmul_order(TGRAD_MATMUL_ORDER_BLOCK32), TGRAD_OK); /* the thread's setting */
            EXPECT(tgrad_matmul(ta, tb, &c16), TGRAD_OK);
            EXPECT(tgrad_set_matmul_order(TGRAD_MATMUL_ORDER_PAIRWISE), TGRAD_OK);
            EXPECT(tgrad_tensor_read(c, got, 4 * (size_t)(M * N)), TGRAD_OK);
            EXPECT(tgrad_tensor_read_bf16(c16, got16, (size_t)(M * N)), TGRAD_OK);
            int64_t bad = 0, bad16 = 0;
            for (int64_t i = 0; i < M * N; i++) bad += got[i] != want[i], bad16 += got16[i] != rne(want[i]);
            if (bad || bad16)
                fprintf(stderr, "%lldx%lldx%lld fill=%d kernel=%s threads=%d: %lld float32 and %lld bf16 outputs differ\n",
                        (long long)M, (long long)K, (long long)N, (int)f,
                        tgrad_matmul_order_kernel(TGRAD_MATMUL_ORDER_BLOCK32), (int)threads, (long long)bad,
                        (long long)bad16);
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

static void settings_and_refusals(void) {
    CHECK(tgrad_matmul_order() == TGRAD_MATMUL_ORDER_BLOCK32); /* the default since 0.2 */
    CHECK(tgrad_matmul_order_kernel(TGRAD_MATMUL_ORDER_BLOCK32) != NULL);
    CHECK(tgrad_matmul_order_kernel(7) == NULL);
    float v[4] = { 1, 2, 3, 4 };
    int64_t s22[2] = { 2, 2 };
    tgrad_tensor_t a = 0, out = 77;
    EXPECT(tgrad_tensor_from_f32(v, 2, s22, &a), TGRAD_OK);
    int64_t tensors = tgrad_live_tensors(), buffers = tgrad_live_buffers();
    EXPECT(tgrad_set_matmul_order(2), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_set_matmul_order(-1), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(tgrad_matmul_order() == TGRAD_MATMUL_ORDER_BLOCK32);
    EXPECT(tgrad_matmul_ordered(a, a, TGRAD_DTYPE_BF16, 2, &out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_matmul_ordered(a, a, TGRAD_DTYPE_BF16, TGRAD_MATMUL_ORDER_BLOCK32, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_matmul_ordered(a, a, TGRAD_DTYPE_I32, TGRAD_MATMUL_ORDER_BLOCK32, &out), TGRAD_ERR_DTYPE_UNSUPPORTED);
    CHECK(out == 77 && tgrad_live_tensors() == tensors && tgrad_live_buffers() == buffers);
    tgrad_tensor_release(a);
}

int main(void) {
    settings_and_refusals();
    static const int64_t shapes[][3] = { { 1, 1, 1 }, { 4, 31, 4 }, { 17, 33, 35 }, { 33, 64, 40 }, { 1, 300, 70 },
                                         { 70, 300, 1 }, { 40, 700, 45 }, { 130, 530, 97 }, { 3, 0, 5 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int f = ORDINARY; f <= NEAR_FLUSH; f++) one_shape(shapes[i][0], shapes[i][1], shapes[i][2], (enum fill)f);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
