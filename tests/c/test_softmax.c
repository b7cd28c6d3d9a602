/* The softmax kind's C side: the row loops' exp is within TG_SM_EXP_REL of expl on 2^20 points of
 * [-708, 0] on every variant (docs/numerics.md quotes the measured maximum), every variant's loops
 * give the same doubles, and tgrad_softmax runs end to end with its refusals typed and allocating
 * nothing. Linked from libtgrad's objects (hidden symbols). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/softmax_kernel.h"
#include "tgrad.h"

static const tg_sm_variant *const variants[] = {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    &tg_sm_avx512f, &tg_sm_avx2,
#endif
    &tg_sm_portable,
};

static void exp_is_within_its_bound_on_every_variant(void) {
    enum { N = 1 << 20 };
    double *x = malloc(sizeof(double) * N), *e = malloc(sizeof(double) * N), *ref = malloc(sizeof(double) * N);
    CHECK(x && e && ref);
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = i < 16 ? -(double)i * 0.34657359027997264 : -708.0 * (double)(s >> 11) * 0x1p-53;
    }
    double worst_all = 0;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        if (!variants[v]->available()) continue;
        variants[v]->exp_rows(x, 0.0, e, N);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            long double want = expl((long double)x[i]);
            double rel = (double)fabsl(((long double)e[i] - want) / want);
            if (rel > worst) worst = rel;
        }
        printf("exp %s: max relative error %.3g (2^%.1f)\n", variants[v]->name, worst, log2(worst));
        CHECK(worst < TG_SM_EXP_REL);
        if (worst > worst_all) worst_all = worst;
    }
    double below[3] = { -709.0, -1e300, -INFINITY }, zeros[3];
    tg_sm_portable.exp_rows(below, 0.0, zeros, 3);
    CHECK(zeros[0] == 0 && zeros[1] == 0 && zeros[2] == 0);
    free(x), free(e), free(ref);
}

static void softmax_runs_through_the_abi(void) {
    float v[6] = { 1.0f, 2.0f, 3.0f, 0.5f, -INFINITY, 0.5f };
    int64_t shape[2] = { 2, 3 };
    tgrad_tensor_t x = 0, y = 0, l = 0, bad = 0;
    EXPECT(tgrad_tensor_from_host(v, TGRAD_DTYPE_F32, 2, shape, TGRAD_DTYPE_F32, &x), TGRAD_OK);
    EXPECT(tgrad_softmax(TGRAD_SOFTMAX_SOFTMAX, x, -1, 0, 0, &y), TGRAD_OK);
    float out[6];
    EXPECT(tgrad_tensor_read(y, out, sizeof out), TGRAD_OK);
    CHECK(out[3] == 0.5f && out[4] == 0.0f && out[5] == 0.5f); /* a mask and two equal terms */
    CHECK(fabsf(out[0] - 0.09003057f) < 1e-7f);
    EXPECT(tgrad_softmax(TGRAD_SOFTMAX_LOGSUMEXP, x, 1, 1, TGRAD_DTYPE_BF16, &l), TGRAD_OK);
    uint16_t lb[2];
    EXPECT(tgrad_tensor_read_bf16(l, lb, 2), TGRAD_OK);
    CHECK(lb[0] == 0x405a); /* log(e + e^2 + e^3) = 3.4076 -> 3.40625 */
    int64_t live = tgrad_live_tensors();
    EXPECT(tgrad_softmax(0, x, 0, 0, 0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_softmax(TGRAD_SOFTMAX_SOFTMAX, x, 2, 0, 0, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_softmax(TGRAD_SOFTMAX_SOFTMAX, x, -3, 0, 0, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_softmax(TGRAD_SOFTMAX_SOFTMAX, x, 0, 1, 0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_softmax(TGRAD_SOFTMAX_SOFTMAX, x, 0, 0, TGRAD_DTYPE_I32, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_softmax(TGRAD_SOFTMAX_SOFTMAX, x, 0, 0, 0, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(bad == 0 && tgrad_live_tensors() == live);
    CHECK(strcmp(tgrad_softmax_name(TGRAD_SOFTMAX_LOGSUMEXP), "logsumexp") == 0);
    int64_t counts[TGRAD_DEBUG_SOFTMAX_COUNT];
    EXPECT(tgrad_debug_softmax_slow_path(counts, TGRAD_DEBUG_SOFTMAX_COUNT), TGRAD_OK);
    CHECK(counts[TGRAD_DEBUG_SOFTMAX_ROWS] == 4 && counts[TGRAD_DEBUG_SOFTMAX_ELEMENTS] == 8);
    EXPECT(tgrad_debug_softmax_slow_path(counts, 0), TGRAD_ERR_INVALID_ARGUMENT);
    tgrad_tensor_release(x), tgrad_tensor_release(y), tgrad_tensor_release(l);
}

int main(void) {
    exp_is_within_its_bound_on_every_variant();
    softmax_runs_through_the_abi();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
