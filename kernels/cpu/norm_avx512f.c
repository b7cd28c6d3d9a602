/* The norms' hot loops for AVX-512: the output loops are kernels/cpu/norm_loops.h compiled with
 * AVX-512 F, BW and VL (the same source as the portable build); the row sums are written here
 * with intrinsics (16 doubles in flight). Any summation order satisfies the error bound the
 * caller uses, and each output is decided by that bound or flagged for the exact path, so this
 * variant gives the portable one's bytes. */
#include <immintrin.h>

#include "ops/norm_exact.h"

#define NORM_FN(name) tg_##name##_avx512f
#define NORM_OWN_SUMS
#include "norm_loops.h"

/* 16 bf16 values as two vectors of 8 doubles. */
static inline void load16(const uint16_t *x, __m512d *lo, __m512d *hi) {
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)x)), 16);
    __m512 f = _mm512_castsi512_ps(w);
    *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    *hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
}

static inline double tail_bf(uint16_t b) { return tg_bf_avx512f(b); }

void tg_norm_sumsq_avx512f(const uint16_t *x, int64_t n, double *sumsq) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512d lo, hi;
        load16(x + i, &lo, &hi);
        a0 = _mm512_fmadd_pd(lo, lo, a0), a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; i++) s += tail_bf(x[i]) * tail_bf(x[i]);
    *sumsq = s;
}

void tg_norm_sums_avx512f(const uint16_t *x, int64_t n, double *sum, double *sumabs) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd(), b0 = _mm512_setzero_pd(), b1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512d lo, hi;
        load16(x + i, &lo, &hi);
        a0 = _mm512_add_pd(a0, lo), a1 = _mm512_add_pd(a1, hi);
        b0 = _mm512_add_pd(b0, _mm512_abs_pd(lo)), b1 = _mm512_add_pd(b1, _mm512_abs_pd(hi));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1)), sa = _mm512_reduce_add_pd(_mm512_add_pd(b0, b1));
    for (; i < n; i++) s += tail_bf(x[i]), sa += fabs(tail_bf(x[i]));
    *sum = s, *sumabs = sa;
}

void tg_norm_sumdev_avx512f(const uint16_t *x, int64_t n, double mu, double *q) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd(), m = _mm512_set1_pd(mu);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512d lo, hi;
        load16(x + i, &lo, &hi);
        lo = _mm512_sub_pd(lo, m), hi = _mm512_sub_pd(hi, m);
        a0 = _mm512_fmadd_pd(lo, lo, a0), a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; i < n; i++) s += (tail_bf(x[i]) - mu) * (tail_bf(x[i]) - mu);
    *q = s;
}

/* ---- layer_norm's outputs in float32 (docs/numerics.md, "Norms: the float32 outputs") ---- */
static inline __m512 bf16x16(__m256i bits) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

/* 16 outputs (mask m) of y = w (x - muf) invf + b, each its bf16 where the bound decides it,
 * else 0xFFFF; returns how many of the m lanes are undecided. */
static inline int64_t layer16(const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *out, __mmask16 m,
                              __m512 vmu, __m512 vinv, __m512 vc1, __m512 vc2) {
    const __m512 two_u = _mm512_set1_ps(0x1p-23f), k = _mm512_set1_ps(0x1.0004p24f), a = _mm512_set1_ps(0x1p-122f);
    const __m512 half = _mm512_set1_ps(32768.0f), lo_lim = _mm512_set1_ps(0x1p-125f), hi_lim = _mm512_set1_ps(0x1p127f);
    const __m512i c7fff = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1), ffff = _mm512_set1_epi32(0xFFFF);
    __m512 xv = bf16x16(_mm256_maskz_loadu_epi16(m, x)), wv = bf16x16(_mm256_maskz_loadu_epi16(m, w));
    __m512 bv = bf16x16(_mm256_maskz_loadu_epi16(m, b));
    __m512 dx = _mm512_sub_ps(xv, vmu);
    __m512 y = _mm512_fmadd_ps(wv, _mm512_mul_ps(dx, vinv), bv);
    __m512 ay = _mm512_abs_ps(y);
    __m512 err = _mm512_fmadd_ps(ay, two_u, _mm512_mul_ps(_mm512_fmadd_ps(_mm512_abs_ps(dx), vc1, vc2), _mm512_abs_ps(wv)));
    __m512i u = _mm512_castps_si512(y);
    /* distance to the nearest rounding midpoint, in float ulps of y (exact integers) */
    __m512 dist = _mm512_abs_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(u, ffff)), half));
    __mmask16 ok = _mm512_cmp_ps_mask(_mm512_mul_ps(dist, ay), _mm512_fmadd_ps(err, k, a), _CMP_GT_OQ) &
                   _mm512_cmp_ps_mask(ay, lo_lim, _CMP_GE_OQ) & _mm512_cmp_ps_mask(ay, hi_lim, _CMP_LT_OQ) & m;
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(c7fff, _mm512_and_si512(_mm512_srli_epi32(u, 16), one))), 16);
    _mm512_mask_cvtepi32_storeu_epi16(out, m, _mm512_mask_mov_epi32(ffff, ok, r));
    return __builtin_popcount((unsigned)(m & (__mmask16)~ok));
}

int64_t tg_norm_layer_out_f32_avx512f(const uint16_t *x, const uint16_t *w, const uint16_t *b, int64_t n, double mu,
                                      double inv, double delta, double rho, uint16_t *out) {
    const double uf = 0x1p-24;
    if (!(inv >= 0x1p-60 && inv <= 0x1p60 && rho <= 0x1p-20 && fabs(mu) <= 0x1p127 && delta <= 0x1p60)) return -1;
    float muf = (float)mu, invf = (float)inv;
    double deltaf = (delta + fabs(mu - (double)muf)) * (1 + 0x1p-40); /* |muf - exact mean| */
    double rhof = (rho + uf * (1 + rho)) * 1.01;                      /* invf's relative error */
    double c1 = (rhof + 5 * uf) * 1.01, c2 = deltaf * (1 + rhof + uf) * 1.01;
    /* err = |w| (|dx| c1i + c2i) + 2 uf |y|, c1i >= c1 invf, c2i >= c2 invf + 2^-120 (the underflow
     * allowance), their float roundings covered by 2^-20 */
    double c1d = c1 * (double)invf * (1 + 0x1p-20), c2d = (c2 * (double)invf + 0x1p-120) * (1 + 0x1p-20);
    if (!(c2d <= 0x1p100)) return -1;
    __m512 vmu = _mm512_set1_ps(muf), vinv = _mm512_set1_ps(invf);
    __m512 vc1 = _mm512_set1_ps((float)c1d), vc2 = _mm512_set1_ps((float)c2d);
    int64_t i = 0, undecided = 0;
    for (; i + 16 <= n; i += 16) undecided += layer16(x + i, w + i, b + i, out + i, 0xFFFF, vmu, vinv, vc1, vc2);
    if (i < n)
        undecided += layer16(x + i, w + i, b + i, out + i, (__mmask16)((1u << (n - i)) - 1), vmu, vinv, vc1, vc2);
    return undecided;
}

int tg_norm_avx512f_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
