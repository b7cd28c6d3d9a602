/* AVX512BW helpers for packing bf16 operands, shared by the AVX-512 variants (each includes this
 * file and compiles it with its own target flags), and their B packer: bf16 pair words
 * (pack_bf16_pairs.h's layout) for NR = 32 columns, with vector paths for row-major B
 * (interleave two rows with one permute) and column-major B (pairs are already adjacent: 16x16
 * word transposes). */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "pack_bf16_pairs.h"
_Static_assert(NR == 32, "the AVX-512 B packer writes 32-column panels");

/* bf16 pair words (even element low, odd high) -> the odd and the even elements as exact fp32;
 * 16 bf16 values -> fp32 (the FMA kernels widen in registers) */
static inline __m512 odd_f32(__m512i w) { return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u))); }
static inline __m512 even_f32(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
static inline __m512 widen16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

static inline __m512i daz16(__m512i v) { /* bf16 with a zero exponent -> signed zero */
    __mmask32 sub = _mm512_testn_epi16_mask(v, _mm512_set1_epi16(0x7f80));
    return _mm512_mask_mov_epi16(v, sub, _mm512_and_si512(v, _mm512_set1_epi16((short)0x8000)));
}

/* Pair words of two rows' 32 columns (the even k row's element in each low half, the odd k row's
 * in the high half: the layout vdpbf16ps reads): columns 0-15 in *lo, 16-31 in *hi. */
static inline void interleave_rows(__m512i even, __m512i odd, __m512i *lo, __m512i *hi) {
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    *lo = _mm512_permutex2var_epi16(even, lo_idx, odd);
    *hi = _mm512_permutex2var_epi16(even, _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16)), odd);
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
        /* 12-16 lines ld apart are more streams than the hardware prefetcher follows: each is
         * fetched 4 blocks (256 bytes) ahead (AVX512F's A packing went from ~5% to ~3% of
         * 1024^3, the whole call 2-3% faster) */
        _mm_prefetch((const char *)(row + 2 * 16 * 4), TG_PREFETCH_HINT);
        __m512i v = _mm512_maskz_loadu_epi32(words, row);
        if (whole < pairs) v = _mm512_mask_set1_epi32(v, (__mmask16)(1u << whole), (int)row[2 * whole]);
        r[c] = daz16(v);
    }
    transpose16(r);
    return pairs;
}

/* Row-major B: pair words for 32 columns from rows 2p and 2p+1, one permute per 16 columns.
 * Rows are walked whole (pair outer, panels inner) so memory is read in long runs. */
static inline void pack_b_rows(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
    int64_t kp = (kc + 1) / 2;
    /* rows jump by 2*s0 per pair, which the hardware prefetcher does not follow: fetch ahead by
     * ~64 panel steps' worth of pairs (a narrow block needs more pairs in flight) */
    int64_t panels = (nb + NR - 1) / NR, ahead = 64 / panels < 4 ? 4 : 64 / panels > 32 ? 32 : 64 / panels;
    for (int64_t p = 0; p < kp; p++) {
        const uint16_t *even = B->base + (k0 + 2 * p) * B->s0 + n0;
        const uint16_t *fetch = even + 2 * ahead * B->s0;
        bool has_odd = 2 * p + 1 < kc;
        uint32_t *d = dst + p * NR;
        for (int64_t j0 = 0; j0 < nb; j0 += NR, d += kp * NR) {
            int64_t w = nb - j0 < NR ? nb - j0 : NR;
            __mmask32 m = w >= 32 ? 0xffffffffu : (__mmask32)((1u << w) - 1u);
            _mm_prefetch((const char *)(fetch + j0), TG_PREFETCH_HINT);
            _mm_prefetch((const char *)(fetch + B->s0 + j0), TG_PREFETCH_HINT);
            __m512i e = daz16(_mm512_maskz_loadu_epi16(m, even + j0));
            __m512i o = has_odd ? daz16(_mm512_maskz_loadu_epi16(m, even + B->s0 + j0)) : _mm512_setzero_si512();
            __m512i lo, hi;
            interleave_rows(e, o, &lo, &hi);
            _mm512_storeu_si512(d, lo);
            _mm512_storeu_si512(d + 16, hi);
        }
    }
}


/* Column-major B (s0 == 1, even k0): column j's pair p is the word at column j + 2p, so a panel
 * is a transpose of 16-word runs from 16 columns at a time. */
static inline void pack_b_cols(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
    int64_t kp = (kc + 1) / 2, full = kc / 2;
    for (int64_t j0 = 0; j0 < nb; j0 += NR) {
        for (int64_t h = 0; h < NR; h += 16) {
            int64_t cols = nb - j0 - h;
            cols = cols < 0 ? 0 : cols > 16 ? 16 : cols;
            const uint16_t *first = cols ? B->base + (n0 + j0 + h) * B->s1 + k0 : B->base;
            for (int64_t p0 = 0; p0 < kp; p0 += 16) {
                __m512i r[16];
                int64_t pairs = load_pairs_transposed(first, B->s1, cols, p0, kp, full, r);
                for (int64_t p = 0; p < pairs; p++) _mm512_storeu_si512(dst + (p0 + p) * NR + h, r[p]);
            }
        }
        dst += kp * NR;
    }
}

TG_PACK_FN void pack_b_bf16_avx512(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst) {
    if (B->s1 == 1) pack_b_rows(B, k0, kc, n0, nb, dst);
    else if (B->s0 == 1) pack_b_cols(B, k0, kc, n0, nb, dst);
    else pack_b_bf16(B, k0, kc, n0, nb, dst);
}
