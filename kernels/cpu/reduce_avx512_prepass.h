/* The exact sum's first pass over a block (AVX-512BW): the largest magnitude's bits and the
 * smallest nonzero magnitude's bits of n bf16 or float32 values (kernels/cpu/reduce_avx512*.c).
 * Included by files compiled with AVX-512 flags. */
#ifndef TGRAD_KERNELS_CPU_REDUCE_AVX512_PREPASS_H
#define TGRAD_KERNELS_CPU_REDUCE_AVX512_PREPASS_H

#include <immintrin.h>
#include <stdint.h>

/* *mx: the largest |x|'s bits; *mn: the smallest nonzero |x|'s bits (0x10000 if none) */
static inline void tg_prepass_bf16(const uint16_t *x, int64_t n, uint32_t *mx, uint32_t *mn) {
    const __m512i magmask = _mm512_set1_epi16(0x7FFF), one = _mm512_set1_epi16(1);
    __m512i vmax = _mm512_setzero_si512(), vmin = _mm512_set1_epi32(-1);
    int64_t full = n & ~(int64_t)31;
    for (int64_t i = 0; i < full; i += 32) {
        __m512i m = _mm512_and_si512(_mm512_loadu_si512(x + i), magmask);
        vmax = _mm512_max_epu16(vmax, m);
        vmin = _mm512_min_epu16(vmin, _mm512_sub_epi16(m, one)); /* 0 wraps to 0xFFFF: skipped */
    }
    if (n > full) {
        __m512i m = _mm512_and_si512(_mm512_maskz_loadu_epi16((__mmask32)((UINT64_C(1) << (n - full)) - 1), x + full),
                                     magmask);
        vmax = _mm512_max_epu16(vmax, m);
        vmin = _mm512_min_epu16(vmin, _mm512_sub_epi16(m, one));
    }
    __m256i a = _mm256_max_epu16(_mm512_castsi512_si256(vmax), _mm512_extracti64x4_epi64(vmax, 1));
    __m128i b = _mm_max_epu16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    b = _mm_xor_si128(b, _mm_set1_epi32(-1)); /* max = ~min(~x) */
    *mx = 0xFFFFu & ~(uint32_t)_mm_cvtsi128_si32(_mm_minpos_epu16(b));
    a = _mm256_min_epu16(_mm512_castsi512_si256(vmin), _mm512_extracti64x4_epi64(vmin, 1));
    b = _mm_min_epu16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    *mn = (0xFFFFu & (uint32_t)_mm_cvtsi128_si32(_mm_minpos_epu16(b))) + 1;
}

/* The same for float32 bits; *mn is 0x80000000 if no value is nonzero. */
static inline void tg_prepass_f32(const uint32_t *x, int64_t n, uint32_t *mx, uint32_t *mn) {
    const __m512i magmask = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1);
    __m512i vmax = _mm512_setzero_si512(), vmin = _mm512_set1_epi32(-1);
    int64_t full = n & ~(int64_t)15;
    for (int64_t i = 0; i < full; i += 16) {
        __m512i m = _mm512_and_si512(_mm512_loadu_si512(x + i), magmask);
        vmax = _mm512_max_epu32(vmax, m);
        vmin = _mm512_min_epu32(vmin, _mm512_sub_epi32(m, one));
    }
    if (n > full) {
        __m512i m = _mm512_and_si512(_mm512_maskz_loadu_epi32((__mmask16)((1u << (n - full)) - 1), x + full), magmask);
        vmax = _mm512_max_epu32(vmax, m);
        vmin = _mm512_min_epu32(vmin, _mm512_sub_epi32(m, one));
    }
    *mx = _mm512_reduce_max_epu32(vmax);
    *mn = (uint32_t)_mm512_reduce_min_epu32(vmin) + 1u; /* 0xFFFFFFFF + 1 wraps to 0: see below */
    if (*mn == 0) *mn = 0x80000000u;
}

#endif
