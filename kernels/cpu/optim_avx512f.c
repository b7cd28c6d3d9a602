/* AdamW's element update (libtgrad/src/ops/optim_arith.h, every()) on 16 lanes, for contiguous
 * runs without amsgrad: the same IEEE float32 operations in the same order, each correctly rounded
 * on a vector as on a scalar (mul, sub, fma, sqrt, div, add; nothing contracted: the library is
 * built with -ffp-contract=off and these are explicit), every NaN made the canonical 0x7fc00000,
 * the bfloat16 parameter rounded as tg_acc_to_bf16: the portable loop's bytes. Called by
 * libtgrad/src/ops/optim_many.c when the CPU has AVX-512 and no other variant is forced. */
#include <immintrin.h>
#include <stdint.h>

#include "ops/optim_avx512f.h"

static inline __m512 canonical16(__m512 x) {
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(nan, x, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
}

int64_t tg_optim_adamw_avx512f(int64_t n, int32_t flags, const float *s, const float *P, const void *G, int32_t grad_bf16,
                               const float *M, const float *V, float *oP, float *oM, float *oV, uint16_t *oB) {
    const __m512 s0 = _mm512_set1_ps(s[0]), s1 = _mm512_set1_ps(s[1]), s2 = _mm512_set1_ps(s[2]),
                 s3 = _mm512_set1_ps(s[3]), s4 = _mm512_set1_ps(s[4]), s5 = _mm512_set1_ps(s[5]),
                 s6 = _mm512_set1_ps(s[6]), s7 = _mm512_set1_ps(s[7]);
    const __m512i sign = _mm512_set1_epi32((int32_t)0x80000000u), one = _mm512_set1_epi32(1),
                  half = _mm512_set1_epi32(0x7fff);
    const int small = (s[1] < 0 ? -s[1] : s[1]) < 0.5f; /* fabsf(w) < 0.5: the lerp's first form */
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 p = _mm512_loadu_ps(P + i), g;
        if (grad_bf16)
            g = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)G + i))), 16));
        else
            g = _mm512_loadu_ps((const float *)G + i);
        if (flags & TG_OPTIM_MAXIMIZE_FLAG) g = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign));
        if (flags & TG_OPTIM_DECAY_FLAG) p = _mm512_mul_ps(p, s0);
        __m512 m = _mm512_loadu_ps(M + i), d = _mm512_sub_ps(g, m);
        m = small ? _mm512_fmadd_ps(d, s1, m) : _mm512_fmadd_ps(d, s2, g);
        __m512 v = _mm512_fmadd_ps(_mm512_mul_ps(g, s4), g, _mm512_mul_ps(_mm512_loadu_ps(V + i), s3));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), s5), s6);
        __m512 pn = canonical16(_mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(m, s7), denom)));
        _mm512_storeu_ps(oM + i, canonical16(m));
        _mm512_storeu_ps(oV + i, canonical16(v));
        _mm512_storeu_ps(oP + i, pn);
        if (oB) { /* RNE to bfloat16; the canonical NaN rounds to 0x7fc0 by the same sum */
            __m512i u = _mm512_castps_si512(pn);
            u = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, half), _mm512_and_si512(_mm512_srli_epi32(u, 16), one)), 16);
            _mm256_storeu_si256((__m256i *)(oB + i), _mm512_cvtepi32_epi16(u));
        }
    }
    return i;
}

int tg_optim_avx512f_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}
