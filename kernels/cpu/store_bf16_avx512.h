/* Store 16 fp32 accumulators as bf16 under a column mask: round to nearest even, NaN made 0x7FC0.
 * With AVX512-BF16 the rounding is vcvtneps2bf16 (its input-DAZ never matters: the contract's
 * accumulators are never subnormal); without it, the same rounding in integer arithmetic. */
#include <immintrin.h>

static inline __m256i rne_bf16x16(__m512 v) {
#if defined(__AVX512BF16__)
    return (__m256i)_mm512_cvtneps_pbh(v);
#else
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16));
#endif
}

static inline void store_bf16x16(uint16_t *dst, __m512 v, __mmask16 cols) {
    __m256i h = rne_bf16x16(v);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    h = _mm256_mask_blend_epi16(nan, h, _mm256_set1_epi16(0x7fc0));
    _mm256_mask_storeu_epi16(dst, cols, h);
}

static inline __mmask16 col_mask(int32_t cols) {
    return cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols > 0 ? cols : 0)) - 1u);
}

/* 32 columns (lo: 0-15, hi: 16-31) in one 64-byte store; a whole aligned line goes around the
 * caches when `stream` is set (the frame fences before anyone reads it). */
static inline void store_bf16x32(uint16_t *dst, __m512 lo, __m512 hi, __mmask32 cols, int stream) {
#if defined(__AVX512BF16__)
    __m512i h = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
#else
    __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(rne_bf16x16(lo)), rne_bf16x16(hi), 1);
#endif
    __mmask32 nan = (__mmask32)_mm512_cmp_ps_mask(lo, lo, _CMP_UNORD_Q) |
                    (__mmask32)_mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q) << 16;
    h = _mm512_mask_blend_epi16(nan, h, _mm512_set1_epi16(0x7fc0));
    if (stream && cols == 0xffffffffu && ((uintptr_t)dst & 63) == 0) _mm512_stream_si512((void *)dst, h);
    else _mm512_mask_storeu_epi16(dst, cols, h);
}

static inline __mmask32 col_mask32(int32_t cols) {
    return cols >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (cols > 0 ? cols : 0)) - 1u);
}
