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

/* xorshift64 */
static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* A row of n bfloat16 bits: normal-ish values at a random scale, with ties at the maximum, signed
 * zeros and (in some rows) infinities and NaNs. */
static void random_row(uint64_t *s, uint16_t *p, int64_t n, int specials) {
    int scale = (int)(rnd(s) % 40) - 20;
    for (int64_t j = 0; j < n; j++) {
        double u = ((double)(rnd(s) >> 11) * 0x1p-53 - 0.5) * 8.0;
        float f = (float)ldexp(u, scale);
        uint32_t b;
        memcpy(&b, &f, sizeof b);
        p[j] = (uint16_t)(b >> 16);
        uint64_t r = rnd(s) % 64;
        if (r == 0) p[j] = (uint16_t)(rnd(s) & 1 ? 0x8000 : 0);
        if (r == 1 && j) p[j] = p[rnd(s) % (uint64_t)j];
        if (specials && r == 2) p[j] = (uint16_t[]){ 0x7f80, 0xff80, 0x7fc0 }[rnd(s) % 3];
    }
}

static int same(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

/* The fused passes (load and scan, exp and sum) give the plain passes' doubles and summary on every
 * variant, and every variant's outputs and flags are the portable loops' on the same e (the AVX-512
 * variant's are intrinsics): random rows of every length up to 300 and of 4096, with specials. */
static void fused_passes_equal_the_plain_ones_on_every_variant(void) {
    enum { NMAX = 4096 };
    uint16_t *p = malloc(2 * NMAX), *o1 = malloc(4 * NMAX), *o2 = malloc(4 * NMAX);
    float *pf = malloc(4 * NMAX);
    double *x1 = malloc(8 * NMAX), *x2 = malloc(8 * NMAX), *e1 = malloc(8 * NMAX), *e2 = malloc(8 * NMAX);
    uint8_t *f1 = malloc(NMAX), *f2 = malloc(NMAX);
    CHECK(p && o1 && o2 && pf && x1 && x2 && e1 && e2 && f1 && f2);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int64_t mismatches = 0, rows = 0, decided = 0, ran = 0;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const tg_sm_variant *V = variants[v];
        if (!V->available()) continue;
        ran++;
        for (int it = 0; it < 420; it++) {
            int64_t n = it < 400 ? (int64_t)(rnd(&s) % 301) : NMAX;
            random_row(&s, p, n, it % 4 == 3);
            for (int64_t j = 0; j < n; j++) {
                uint32_t b = (uint32_t)p[j] << 16;
                memcpy(&pf[j], &b, sizeof b);
            }
            for (int k = 0; k < 2; k++) {
                if (k == 0) V->load_bf16(p, n, x1);
                else V->load_f32(pf, n, x1);
                tg_sm_scan a = V->scan(x1, n);
                tg_sm_scan b = k == 0 ? V->load_scan_bf16(p, n, x2) : V->load_scan_f32(pf, n, x2);
                mismatches += !same(x1, x2, 8 * (size_t)n) || !same(&a.m, &b.m, 8) || !same(&a.xmin, &b.xmin, 8) ||
                              a.nfinite != b.nfinite || a.nan != b.nan;
                if (k || a.nan || !(a.m > -INFINITY && a.m < INFINITY)) continue;
                int64_t t1 = 0, t2 = 0;
                V->exp_rows(x1, a.m, e1, n);
                double T1 = V->sum_below(x1, a.m, e1, n, &t1), T2 = V->exp_sum(x1, a.m, e2, n, &t2);
                mismatches += !same(e1, e2, 8 * (size_t)n) || !same(&T1, &T2, 8) || t1 != t2;
                double inv = 1.0 / (1.0 + T1 + (double)(t1 - 1));
                int64_t thr = (int64_t)(rnd(&s) % 4 == 0 ? rnd(&s) % (1u << 30) : 40 + rnd(&s) % 200);
                for (int32_t dt = 1; dt <= 2; dt++) {
                    int64_t b1 = tg_sm_portable.out_softmax(e1, n, inv, thr, dt, o1, f1);
                    int64_t b2 = V->out_softmax(e1, n, inv, thr, dt, o2, f2);
                    mismatches += b1 != b2 || !same(f1, f2, (size_t)n);
                    for (int64_t j = 0; j < n; j++)
                        if (!f1[j]) {
                            decided++;
                            mismatches += dt == 1 ? o1[j] != o2[j] : ((uint32_t *)o1)[j] != ((uint32_t *)o2)[j];
                        }
                }
                rows++;
            }
        }
    }
    printf("fused passes: %lld variants, %lld rows through exp, %lld outputs decided, %lld mismatches\n",
           (long long)ran, (long long)rows, (long long)decided, (long long)mismatches);
    /* About 340 rows and 180000 decided outputs a variant; the portable loops always run, and a CPU
     * without AVX-512 (an AMD Zen 2, say) runs two variants, not three, and aarch64 one. */
    CHECK(mismatches == 0 && ran >= 1 && rows > 300 * ran && decided > 50000 * ran);
    free(p), free(o1), free(o2), free(pf), free(x1), free(x2), free(e1), free(e2), free(f1), free(f2);
}

/* hgsoft: the derivatives through the ABI (tests/python/test_softmax_backward.py and
 * test_rope_backward.py prove them against exact references). */
static void backward_runs_through_the_abi(void) {
    float yv[6] = { 0.25f, 0.75f, 0.25f, 0.75f, 0.0f, -INFINITY }, gv[6] = { 1.0f, 3.0f, 2.0f, 2.0f, 1.0f, 2.0f };
    int64_t shape[2] = { 3, 2 }, other[2] = { 2, 3 };
    tgrad_tensor_t y = 0, g = 0, o = 0, lo = 0, g23 = 0, bad = 0;
    EXPECT(tgrad_tensor_from_host(yv, TGRAD_DTYPE_F32, 2, shape, TGRAD_DTYPE_F32, &y), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(gv, TGRAD_DTYPE_F32, 2, shape, TGRAD_DTYPE_F32, &g), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(gv, TGRAD_DTYPE_F32, 2, other, TGRAD_DTYPE_F32, &g23), TGRAD_OK);
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_SOFTMAX, y, g, -1, 0, &o), TGRAD_OK);
    float out[6];
    EXPECT(tgrad_tensor_read(o, out, sizeof out), TGRAD_OK);
    /* S = 2.5: 0.25 (1 - 2.5), 0.75 (3 - 2.5); a constant g: exact zeros, +0 */
    CHECK(out[0] == -0.375f && out[1] == 0.375f && out[2] == 0.0f && !signbit(out[2]) && !signbit(out[3]));
    /* log_softmax_backward: row 2 is z = (0, -inf), g = (1, 2): G = 3, 1 - 1 * 3 and 2 - 0 * 3 */
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_LOG_SOFTMAX, y, g, 1, TGRAD_DTYPE_BF16, &lo), TGRAD_OK);
    uint16_t lb[6];
    EXPECT(tgrad_tensor_read_bf16(lo, lb, 6), TGRAD_OK);
    CHECK(lb[4] == 0xc000 && lb[5] == 0x4000);
    int64_t live = tgrad_live_tensors();
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_LOGSUMEXP, y, g, 0, 0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_SOFTMAX, y, g23, 0, 0, &bad), TGRAD_ERR_SHAPE_MISMATCH);
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_SOFTMAX, y, g, 2, 0, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_SOFTMAX, y, g, 0, TGRAD_DTYPE_I32, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_SOFTMAX, y, g, 0, 0, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(bad == 0 && tgrad_live_tensors() == live);
    /* rope_backward at p is rope at -p (the same exact value, rounded once) */
    float xv[8] = { 1.0f, -2.0f, 0.5f, 3.0f, 0.25f, 7.0f, -1.0f, 2.0f };
    int32_t pv[2] = { 5, -(int32_t)0x7fffffff - 1 }, nv[2] = { -5, 0 };
    int64_t xs[3] = { 1, 2, 4 }, ps[1] = { 2 };
    tgrad_tensor_t x = 0, p = 0, n = 0, rb = 0, rf = 0;
    EXPECT(tgrad_tensor_from_host(xv, TGRAD_DTYPE_F32, 3, xs, TGRAD_DTYPE_BF16, &x), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(pv, TGRAD_DTYPE_I32, 1, ps, TGRAD_DTYPE_I32, &p), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(nv, TGRAD_DTYPE_I32, 1, ps, TGRAD_DTYPE_I32, &n), TGRAD_OK);
    EXPECT(tgrad_rope_backward(x, p, 0, 10000.0, 0, 0, &rb), TGRAD_OK);
    EXPECT(tgrad_rope(x, n, 0, 10000.0, 0, 0, &rf), TGRAD_OK);
    uint16_t b1[8], b2[8];
    EXPECT(tgrad_tensor_read_bf16(rb, b1, 8), TGRAD_OK);
    EXPECT(tgrad_tensor_read_bf16(rf, b2, 8), TGRAD_OK);
    CHECK(memcmp(b1, b2, 4 * sizeof b1[0]) == 0);
    live = tgrad_live_tensors();
    EXPECT(tgrad_rope_backward(x, p, 0, 10000.0, 3, 0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_rope_backward(x, g, 0, 10000.0, 0, 0, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    CHECK(bad == 0 && tgrad_live_tensors() == live);
    tgrad_tensor_release(y), tgrad_tensor_release(g), tgrad_tensor_release(o), tgrad_tensor_release(lo);
    tgrad_tensor_release(g23), tgrad_tensor_release(x), tgrad_tensor_release(p), tgrad_tensor_release(n);
    tgrad_tensor_release(rb), tgrad_tensor_release(rf);
}

int main(void) {
    exp_is_within_its_bound_on_every_variant();
    fused_passes_equal_the_plain_ones_on_every_variant();
    softmax_runs_through_the_abi();
    backward_runs_through_the_abi();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
