/* AVX512BW helpers for packing bf16 operands, shared by the AVX-512 variants (each includes this
 * file and compiles it with its own target flags). */
#include <immintrin.h>
#include <stdint.h>

static inline __m512i daz16(__m512i v) { /* bf16 with a zero exponent -> signed zero */
    __mmask32 sub = _mm512_testn_epi16_mask(v, _mm512_set1_epi16(0x7f80));
    return _mm512_mask_mov_epi16(v, sub, _mm512_and_si512(v, _mm512_set1_epi16((short)0x8000)));
}

/* 16x16 transpose of 32-bit words held in r[0..15]. */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 8; i++) { /* 128-bit blocks: (0,4), (1,5), ... then (0,8), ... */
        int a = (i & 3) + (i & 4) * 2, b = a + 4;
        t[a] = _mm512_shuffle_i32x4(r[a], r[b], 0x88);
        t[b] = _mm512_shuffle_i32x4(r[a], r[b], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
}

/* Pairs [p0, p0 + 16) of up to 16 lines whose pairs are adjacent (rows of a row-major A, columns
 * of a column-major B; line i at base + i * ld, pair p = elements 2p and 2p+1), DAZ applied
 * (harmless where vdpbf16ps reads the result: it ignores subnormal inputs itself), transposed:
 * r[p] holds pair p0 + p of every line in word i (lines past `rows` are zero). kp pairs in all,
 * the first `full` of them whole (odd K: the last pair has only its even element, the odd one
 * +0). Returns how many of r are pairs. */
static inline int64_t load_pairs_transposed(const uint16_t *base, int64_t ld, int64_t rows, int64_t p0, int64_t kp,
                                            int64_t full, __m512i r[16]) {
    int64_t pairs = kp - p0 < 16 ? kp - p0 : 16;
    int64_t whole = full - p0 < 16 ? full - p0 : 16;
    __mmask16 words = (__mmask16)((1u << whole) - 1u);
    for (int64_t c = 0; c < 16; c++) {
        if (c >= rows) {
            r[c] = _mm512_setzero_si512();
            continue;
        }
        const uint16_t *row = base + c * ld + 2 * p0;
        __m512i v = _mm512_maskz_loadu_epi32(words, row);
        if (whole < pairs) v = _mm512_mask_set1_epi32(v, (__mmask16)(1u << whole), (int)row[2 * whole]);
        r[c] = daz16(v);
    }
    transpose16(r);
    return pairs;
}
