/* Rope's fast path on AVX-512, 8 pairs a vector: the same double evaluation, error bound and
 * rounding decision as ops/rope.c's pair() (mul, mul, sub: no contraction, -ffp-contract=off),
 * so a pair decided here is decided there with the same bits; a pair not decided here (a
 * non-finite input, f_i = 0, either result too near a bf16 midpoint or outside bf16's normal
 * exponents) is marked for the caller, which runs pair() on it (binary128 where needed). Only
 * the rotate-half layout (the pair's elements n apart) at a position p != 0 comes here. */
#include <immintrin.h>
#include <stdint.h>

#include "ops/norm_exact.h"

/* fast_round of 8 doubles: the bf16 bits (low 16 of each lane) and the lanes decided. */
static inline __mmask8 round8(__m512d y, __m512d err, __m512i *bits) {
    __m512i u = _mm512_castpd_si512(y);
    __m512i e = _mm512_and_si512(_mm512_srli_epi64(u, 52), _mm512_set1_epi64(0x7FF));
    __m512i low = _mm512_and_si512(u, _mm512_set1_epi64(0x1FFFFFFFFFFFll));
    __m512i dd = _mm512_abs_epi64(_mm512_sub_epi64(low, _mm512_set1_epi64((int64_t)1 << 44)));
    __m512d dist = _mm512_cvtepi64_pd(dd);
    __m512d yabs = _mm512_abs_pd(y);
    __mmask8 ok = _mm512_cmpge_epi64_mask(e, _mm512_set1_epi64(1023 - 125)) &
                  _mm512_cmple_epi64_mask(e, _mm512_set1_epi64(1023 + 126)) &
                  _mm512_cmp_pd_mask(_mm512_mul_pd(dist, yabs), _mm512_mul_pd(err, _mm512_set1_pd(0x1p53)),
                                     _CMP_GT_OQ);
    __m512i mag = _mm512_and_si512(u, _mm512_set1_epi64(0x7FFFFFFFFFFFFFFFll));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi64(u, 45), _mm512_set1_epi64(1));
    __m512i t = _mm512_srli_epi64(_mm512_add_epi64(_mm512_add_epi64(mag, _mm512_set1_epi64(0xFFFFFFFFFFFll)), odd), 45);
    __m512i sign = _mm512_and_si512(_mm512_srli_epi64(u, 48), _mm512_set1_epi64(0x8000));
    *bits = _mm512_or_si512(sign, _mm512_sub_epi64(t, _mm512_set1_epi64((int64_t)(1023 - 127) << 7)));
    return ok;
}

/* 8 bf16 values as doubles, and which are finite. */
static inline __m512d load8(const uint16_t *x, __mmask8 m, __mmask8 *finite) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(m, x));
    *finite = _mm256_cmpneq_epi32_mask(_mm256_and_si256(w, _mm256_set1_epi32(0x7F80)), _mm256_set1_epi32(0x7F80));
    return _mm512_cvtps_pd(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
}

int32_t tg_rope_pairs_avx512f(const uint16_t *x1, const uint16_t *x2, const double *c, const double *s,
                              const double *e4, int32_t n, uint16_t *o1, uint16_t *o2, int32_t *undecided) {
    int32_t left = 0;
    for (int32_t i = 0; i < n; i += 8) {
        __mmask8 m = n - i >= 8 ? 0xFF : (__mmask8)((1u << (n - i)) - 1u), f1, f2;
        __m512d a = load8(x1 + i, m, &f1), b = load8(x2 + i, m, &f2);
        __m512d vc = _mm512_maskz_loadu_pd(m, c + i), vs = _mm512_maskz_loadu_pd(m, s + i);
        __m512d y1 = _mm512_sub_pd(_mm512_mul_pd(a, vc), _mm512_mul_pd(b, vs));
        __m512d y2 = _mm512_add_pd(_mm512_mul_pd(b, vc), _mm512_mul_pd(a, vs));
        /* pair()'s err = (|x1| + |x2|) * (E + 4u) * 1.01, E + 4u given per pair (NaN: f_i = 0) */
        __m512d err = _mm512_mul_pd(_mm512_mul_pd(_mm512_add_pd(_mm512_abs_pd(a), _mm512_abs_pd(b)),
                                                  _mm512_maskz_loadu_pd(m, e4 + i)), _mm512_set1_pd(1.01));
        __m512i r1, r2;
        __mmask8 ok = round8(y1, err, &r1) & round8(y2, err, &r2) & f1 & f2 & m;
        _mm512_mask_cvtepi64_storeu_epi16(o1 + i, ok, r1);
        _mm512_mask_cvtepi64_storeu_epi16(o2 + i, ok, r2);
        __mmask8 miss = (__mmask8)(m & ~ok);
        for (int32_t k = 0; k < 8; k++)
            if (miss >> k & 1) undecided[left++] = i + k;
    }
    return left;
}

int tg_rope_avx512f_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
