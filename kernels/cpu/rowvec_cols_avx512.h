/* The one-row path's column-major B for the AVX-512 variants (column j's k-pairs are adjacent
 * words): 16 columns x 16 pairs per transpose, two 16-column groups in flight so the two
 * accumulator chains hide each other's latency (each lane's sum is one chain in pair order: the
 * contract's). Whole 16x16 blocks take an unrolled path (indexing the transposed vectors with a
 * variable spilled them all) with each column's stream prefetched ahead; the edges take the
 * masked path.
 *
 * The including variant defines COL_A, the type of its packed A row's entries, and
 * COL_STEP(acc, a, p, w): acc after pair p, whose A entry is in a and whose 16 columns' pair words
 * are the lanes of w, in the contract's order. Include after pack_avx512.h and
 * store_bf16_avx512.h. */
#ifndef TGRAD_CPU_ROWVEC_COLS_AVX512_H
#define TGRAD_CPU_ROWVEC_COLS_AVX512_H

static inline void cols_block_masked(const COL_A *a, const tg_operand *B, int64_t n0, int64_t nb, int64_t col0,
                                     int64_t p0, int64_t kp, int64_t full, __m512 *acc) {
    int64_t cols = nb - col0 < 0 ? 0 : nb - col0 > 16 ? 16 : nb - col0;
    __m512i r[16];
    int64_t pairs = load_pairs_transposed(cols ? B->base + (n0 + col0) * B->s1 : B->base, B->s1, cols, p0, kp, full, r);
    for (int64_t p = 0; p < pairs; p++) COL_STEP(*acc, a, p0 + p, r[p]);
}

static inline __attribute__((always_inline)) __m512 cols_block_whole(const COL_A *a, const uint16_t *col, int64_t s1,
                                                                     int64_t p0, __m512 acc) {
    enum { AHEAD = 256 }; /* elements: 512 bytes ahead in each column's stream (measured best) */
    __m512i r[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) {
        const uint16_t *src = col + c * s1 + 2 * p0;
        _mm_prefetch((const char *)(src + AHEAD), TG_PREFETCH_HINT);
        r[c] = _mm512_loadu_si512((const void *)src);
    }
    transpose16(r);
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++) COL_STEP(acc, a, p0 + p, r[p]);
    return acc;
}

static void rowvec_cols(const COL_A *a, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    int64_t kp = (K + 1) / 2, full = K / 2, whole_blocks = full / 16 * 16;
    for (int64_t j0 = 0; j0 < nb; j0 += 32) {
        __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
        int64_t p0 = 0;
        if (j0 + 32 <= nb) {
            const uint16_t *col = B->base + (n0 + j0) * B->s1;
            for (; p0 < whole_blocks; p0 += 16) {
                acc[0] = cols_block_whole(a, col, B->s1, p0, acc[0]);
                acc[1] = cols_block_whole(a, col + 16 * B->s1, B->s1, p0, acc[1]);
            }
        }
        for (; p0 < kp; p0 += 16)
            for (int h = 0; h < 2; h++) cols_block_masked(a, B, n0, nb, j0 + 16 * h, p0, kp, full, &acc[h]);
        store_bf16x16(out + j0, acc[0], col_mask((int32_t)(nb - j0)));
        store_bf16x16(out + j0 + 16, acc[1], col_mask((int32_t)(nb - j0 - 16)));
    }
}

#endif
