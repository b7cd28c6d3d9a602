/* AVX2 helpers for bf16 operands, shared by the AVX2 variants (ukernel_avx2.c and the block32
 * order's one-row kernel, stream_block32_avx2.c; each compiles it with its own target flags):
 * widening, bf16 stores (round to nearest even, NaN made 0x7FC0) and the 8x8 word transpose. */
#ifndef TGRAD_CPU_AVX2_BF16_H
#define TGRAD_CPU_AVX2_BF16_H
#include <immintrin.h>
#include <stdint.h>

static inline void store_bf16x8(uint16_t *dst, __m256 v, int32_t cols) {
    float f[8];
    _mm256_storeu_ps(f, v);
    for (int32_t j = 0; j < cols && j < 8; j++) {
        union { float f; uint32_t u; } x = { f[j] };
        dst[j] = (x.u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0
                                                   : (uint16_t)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);
    }
}

static inline __m256i rne_bf16(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
}

static inline __m256 widen8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* 8 outputs as bf16 (RNE, NaN made 0x7FC0); fewer than 8 one by one */
static inline void store8(uint16_t *o, __m256 v, int64_t cols) {
    if (cols < 8) {
        store_bf16x8(o, v, (int32_t)cols);
        return;
    }
    __m256i r = rne_bf16(v);
    _mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8)));
}

/* 8x8 transpose of 32-bit words held in r[0..7]. */
static inline void transpose8(__m256i r[8]) {
    __m256i t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2x128_si256(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2x128_si256(r[i], r[i + 4], 0x31);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

#endif
