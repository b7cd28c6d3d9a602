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

int tg_norm_avx512f_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
