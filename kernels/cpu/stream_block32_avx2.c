/* The block32 order's one-row products (rowvec) on AVX2 FMAs: B streamed in place, as the AVX2
 * variant streams it in the pairwise order, so that an AVX2-only CPU (AMD Zen 3, older Intel)
 * does not pack B for a one-row product (6-40x the pairwise order's streaming time through
 * avx2_block32's packed kernel). Each output keeps the order's two chains per block of 32 k (the
 * even elements' products in one fp32 accumulator, the odd elements' in another, fp32 FMAs under
 * MXCSR's FTZ and DAZ: contract_step.h's step), then acc + (even + odd) (docs/numerics.md, "The
 * block32 order"). Past K the padding's +0 products turn a chain of -0 into +0 as the order's
 * padding does (computed with +0 operands, or added once per block). A arrives as
 * pack_a_bf16's pair words (even k low, odd k high). stream_block32_avx512.c is the AVX-512
 * twin; ukernel_portable_block32.c the reference both are tested against. Compiled alone with
 * -mavx2 -mfma (meson). */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define NR 8
#include "pack_bf16_pairs.h"
#include "avx2_bf16.h"
#include "contract_step.h" /* lo_half, hi_half */
#include "fp_env.h"

enum { PAIRS = 16 }; /* pair words per block */

static inline uint32_t a_word(const uint32_t *a, int64_t p, int64_t kp) { return p < kp ? a[p] : 0u; }

/* 8 bf16 of a row from col (w of them real, the rest +0) as exact fp32. */
static inline __m256 row8(const uint16_t *src, int64_t w) {
    if (w >= 8) return widen8(src);
    uint16_t tmp[8] = { 0 };
    memcpy(tmp, src, (size_t)(w > 0 ? w : 0) * 2u);
    return widen8(tmp);
}

/* The sums of v's first `cols` lanes (up to 8) at element `at`: rounded to bf16 into out, or, with
 * out32 set (out unused), stored as float32 with NaN as 0x7FC00000 (the frame's store_f32_tile). */
static inline void store_sums(uint16_t *out, float *out32, int64_t at, __m256 v, int64_t cols) {
    if (!out32) {
        store8(out + at, v, cols);
        return;
    }
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)), nan);
    if (cols >= 8) {
        _mm256_storeu_ps(out32 + at, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    memcpy(out32 + at, tmp, (size_t)(cols > 0 ? cols : 0) * sizeof(float));
}

/* Row-major B, `rows` output rows (1 to 16): a strip of columns with each row's two chains and sums
 * in L1 (as the pairwise AVX2 kernel keeps its one; 32 columns at a time through all of K ran
 * 1.7-1.9x the pairwise order's time), B's rows read whole (long runs the prefetchers follow), each
 * B vector widened once for all the rows; the last group's columns past the strip's width are read
 * from a zero-padded copy. Row r's pair p is a[p * astride + r]. */
static void few_rows(const uint32_t *a, int64_t astride, int32_t rows, const uint16_t *b, int64_t ldb, int64_t K,
                     int64_t nb, uint16_t *out, float *out32, int64_t ldout) {
    enum { CAP = 4096, PREFETCH_PAIRS = 4 };
    __attribute__((aligned(32))) float acc[CAP], ev[CAP], od[CAP];
    int64_t kp = (K + 1) / 2, blocks = (K + 31) / 32, strip = CAP / rows / 8 * 8;
    if (strip > 1024) strip = 1024;
    if (strip > (nb + 7) / 8 * 8) strip = (nb + 7) / 8 * 8; /* a narrow B (attention's p v): no idle columns */
    for (int64_t s0 = 0; s0 < nb; s0 += strip) {
        int64_t w = nb - s0 < strip ? nb - s0 : strip, groups = (w + 7) / 8;
        for (int64_t i = 0; i < rows * strip; i += 8) _mm256_store_ps(acc + i, _mm256_setzero_ps());
        for (int64_t blk = 0; blk < blocks; blk++) {
            for (int64_t i = 0; i < rows * strip; i += 8)
                _mm256_store_ps(ev + i, _mm256_setzero_ps()), _mm256_store_ps(od + i, _mm256_setzero_ps());
            for (int64_t p = PAIRS * blk; p < PAIRS * (blk + 1); p++) {
                const uint16_t *even = b + 2 * p * ldb + s0, *odd = even + ldb;
                bool has_even = 2 * p < K, has_odd = 2 * p + 1 < K;
                if (!has_even) continue; /* the padding's +0 products: added to the chains below */
                float ae[16], ao[16]; /* each row's pair p, widened once for all the groups */
                for (int32_t r = 0; r < rows; r++) {
                    uint32_t word = p < kp ? a[p * astride + r] : 0u;
                    ae[r] = lo_half(word), ao[r] = hi_half(word);
                }
                for (int64_t g = 0; g < groups; g++) {
                    if (!(g & 3)) { /* rows jump by 2*ldb per pair: fetch a few pairs ahead */
                        _mm_prefetch((const char *)(even + PREFETCH_PAIRS * 2 * ldb + 8 * g), TG_PREFETCH_HINT);
                        _mm_prefetch((const char *)(odd + PREFETCH_PAIRS * 2 * ldb + 8 * g), TG_PREFETCH_HINT);
                    }
                    __m256 be = row8(even + 8 * g, w - 8 * g);
                    __m256 bo = has_odd ? row8(odd + 8 * g, w - 8 * g) : _mm256_setzero_ps();
                    for (int32_t r = 0; r < rows; r++) {
                        float *e = ev + r * strip + 8 * g, *o = od + r * strip + 8 * g;
                        _mm256_store_ps(e, _mm256_fmadd_ps(_mm256_broadcast_ss(ae + r), be, _mm256_load_ps(e)));
                        _mm256_store_ps(o, _mm256_fmadd_ps(_mm256_broadcast_ss(ao + r), bo, _mm256_load_ps(o)));
                    }
                }
            }
            bool padded = 32 * (blk + 1) > K; /* +0 products past K: chains of -0 become +0 */
            for (int64_t i = 0; i < rows * strip; i += 8) {
                __m256 e = _mm256_load_ps(ev + i), o = _mm256_load_ps(od + i);
                if (padded) e = _mm256_add_ps(e, _mm256_setzero_ps()), o = _mm256_add_ps(o, _mm256_setzero_ps());
                _mm256_store_ps(acc + i, _mm256_add_ps(_mm256_load_ps(acc + i), _mm256_add_ps(e, o)));
            }
        }
        for (int32_t r = 0; r < rows; r++)
            for (int64_t g = 0; g < groups; g++)
                store_sums(out, out32, r * ldout + s0 + 8 * g, _mm256_load_ps(acc + r * strip + 8 * g), w - 8 * g);
    }
}

static inline __m256 lo16(__m256i x) { return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), x)); }
static inline __m256 hi16(__m256i x) { return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), x)); }

/* One row times exactly 32 columns of row-major B (ldb >= 32), few_rows' order with its chains in
 * registers: per block the 4 groups' even and odd chains over its pairs, then acc + (even + odd).
 * A batch of [K, 32] panels stored one after another (x @ Wp with Wp [N/32, K, 32], a packed
 * weight: stream.c's shared-A batches) is read as one contiguous run: no transposes and one
 * stream a thread. Lanes: lo16 and hi16 of 16 columns hold columns 0-3, 8-11 and 4-7, 12-15,
 * put back in order at the end. */
static void row32(const uint32_t *a, const uint16_t *b, int64_t ldb, int64_t K, uint16_t *out, float *out32) {
    enum { AHEAD = 6144 }; /* bytes ahead in a contiguous panel run */
    int64_t kp = (K + 1) / 2, blocks = (K + 31) / 32;
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t blk = 0; blk < blocks; blk++) {
        __m256 ev[4], od[4];
        for (int g = 0; g < 4; g++) ev[g] = _mm256_setzero_ps(), od[g] = _mm256_setzero_ps();
        int64_t p1 = PAIRS * (blk + 1) < kp ? PAIRS * (blk + 1) : kp; /* pairs past K: the padding, below */
        for (int64_t p = PAIRS * blk; p < p1; p++) {
            const uint16_t *even = b + 2 * p * ldb, *odd = even + ldb;
            const char *ahead = ldb == 32 ? (const char *)even + AHEAD : (const char *)(even + 8 * ldb);
            _mm_prefetch(ahead, TG_PREFETCH_HINT);
            _mm_prefetch(ldb == 32 ? ahead + 64 : ahead + 2 * ldb, TG_PREFETCH_HINT);
            __m256 e = _mm256_set1_ps(lo_half(a[p])), o = _mm256_set1_ps(hi_half(a[p]));
            __m256i r0 = _mm256_loadu_si256((const __m256i *)even), r1 = _mm256_loadu_si256((const __m256i *)(even + 16));
            ev[0] = _mm256_fmadd_ps(e, lo16(r0), ev[0]), ev[1] = _mm256_fmadd_ps(e, hi16(r0), ev[1]);
            ev[2] = _mm256_fmadd_ps(e, lo16(r1), ev[2]), ev[3] = _mm256_fmadd_ps(e, hi16(r1), ev[3]);
            if (2 * p + 1 < K) { /* an odd K's last pair has no odd element: its +0 product is the padding's */
                r0 = _mm256_loadu_si256((const __m256i *)odd), r1 = _mm256_loadu_si256((const __m256i *)(odd + 16));
                od[0] = _mm256_fmadd_ps(o, lo16(r0), od[0]), od[1] = _mm256_fmadd_ps(o, hi16(r0), od[1]);
                od[2] = _mm256_fmadd_ps(o, lo16(r1), od[2]), od[3] = _mm256_fmadd_ps(o, hi16(r1), od[3]);
            }
        }
        bool padded = 32 * (blk + 1) > K; /* +0 products past K: chains of -0 become +0 */
        for (int g = 0; g < 4; g++) {
            if (padded) ev[g] = _mm256_add_ps(ev[g], _mm256_setzero_ps()), od[g] = _mm256_add_ps(od[g], _mm256_setzero_ps());
            acc[g] = _mm256_add_ps(acc[g], _mm256_add_ps(ev[g], od[g]));
        }
    }
    for (int h = 0; h < 2; h++) { /* acc[2h] holds columns 16h + 0-3, 8-11; acc[2h + 1] 4-7, 12-15 */
        store_sums(out, out32, 16 * h, _mm256_permute2f128_ps(acc[2 * h], acc[2 * h + 1], 0x20), 8);
        store_sums(out, out32, 16 * h + 8, _mm256_permute2f128_ps(acc[2 * h], acc[2 * h + 1], 0x31), 8);
    }
}

static void rowvec_rows(const uint32_t *a, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out,
                        float *out32) {
    if (nb == 32 && B->s0 >= 32) row32(a, B->base + n0, B->s0, K, out, out32);
    else few_rows(a, 1, 1, B->base + n0, B->s0, K, nb, out, out32, 0);
}

/* Column-major B (column j's pairs are adjacent words): per 8 columns and block, two 8 x 8 word
 * transposes give each pair's 8 columns in a vector. Whole blocks of 8 columns load as vectors;
 * the edges (columns past nb, pairs past K, an odd K's last element alone) through a zero-padded
 * copy. */
static inline __attribute__((always_inline)) void cols_words(const uint16_t *col, int64_t s1, int64_t p0, int64_t cols,
                                                             int64_t kp, int64_t full, __m256i r[PAIRS]) {
    if (cols == 8 && p0 + PAIRS <= full) {
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const uint16_t *src = col + c * s1 + 2 * p0;
            _mm_prefetch((const char *)(src + 256), TG_PREFETCH_HINT); /* 512 bytes ahead in the column */
            r[c] = _mm256_loadu_si256((const __m256i *)src);
            r[8 + c] = _mm256_loadu_si256((const __m256i *)(src + 16));
        }
    } else {
        uint32_t words[8][PAIRS] = { { 0 } };
        int64_t pairs = kp - p0 < 0 ? 0 : kp - p0 < PAIRS ? kp - p0 : PAIRS;
        for (int64_t c = 0; c < cols; c++) {
            const uint16_t *src = col + c * s1 + 2 * p0;
            for (int64_t p = 0; p < pairs; p++)
                words[c][p] = p0 + p < full ? (uint32_t)src[2 * p] | (uint32_t)src[2 * p + 1] << 16 : src[2 * p];
        }
        for (int c = 0; c < 8; c++) {
            r[c] = _mm256_loadu_si256((const __m256i *)words[c]);
            r[8 + c] = _mm256_loadu_si256((const __m256i *)(words[c] + 8));
        }
    }
    transpose8(r);     /* pairs 0-7 */
    transpose8(r + 8); /* pairs 8-15 */
}

/* One block of 8 columns: af holds the block's A pairs widened (even, odd), so each FMA's
 * broadcast is a load, not a shuffle (Zen 2 runs both on the same two pipes as the transposes). */
static inline __attribute__((always_inline)) __m256 cols_block(const float *af, const uint16_t *col, int64_t s1,
                                                               int64_t p0, int64_t cols, int64_t kp, int64_t full,
                                                               __m256 acc) {
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    __m256i r[PAIRS];
    cols_words(col, s1, p0, cols, kp, full, r);
    __m256 ev = _mm256_setzero_ps(), od = _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int p = 0; p < PAIRS; p++) {
        ev = _mm256_fmadd_ps(_mm256_broadcast_ss(af + 2 * p), _mm256_castsi256_ps(_mm256_slli_epi32(r[p], 16)), ev);
        od = _mm256_fmadd_ps(_mm256_broadcast_ss(af + 2 * p + 1), _mm256_castsi256_ps(_mm256_and_si256(r[p], odd_mask)),
                             od);
    }
    return _mm256_add_ps(acc, _mm256_add_ps(ev, od));
}

/* A's pairs [p0, p0 + n) widened to (even, odd) floats at af, +0 past kp. */
static void widen_a(const uint32_t *a, int64_t p0, int64_t n, int64_t kp, float *af) {
    for (int64_t p = 0; p < n; p++) {
        uint32_t w = a_word(a, p0 + p, kp);
        af[2 * p] = lo_half(w), af[2 * p + 1] = hi_half(w);
    }
}

/* Four groups of 8 columns through one block: each group's words transposed into w (L1), then
 * the block's 16 pairs with the 4 groups' 8 chains interleaved: independent chains, so one's FMA
 * latency hides behind the others' (two groups in flight left the FMAs waiting: W in L2 on one
 * Zen 2 core 12 -> 15-16 GB/s, attention's 64-long columns 12 -> 21; docs/performance.md,
 * "Session 28"). Each chain's own order is cols_block's. */
static inline __attribute__((always_inline)) void cols_block4(const float *af, const uint16_t *col, int64_t s1,
                                                                int64_t p0, int64_t kp, int64_t full, __m256 acc[4]) {
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    __attribute__((aligned(32))) __m256i w[4][PAIRS];
    for (int g = 0; g < 4; g++) cols_words(col + 8 * g * s1, s1, p0, 8, kp, full, w[g]);
    __m256 ev[4], od[4];
    for (int g = 0; g < 4; g++) ev[g] = _mm256_setzero_ps(), od[g] = _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int p = 0; p < PAIRS; p++) {
        __m256 e = _mm256_broadcast_ss(af + 2 * p), o = _mm256_broadcast_ss(af + 2 * p + 1);
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m256i r = _mm256_load_si256(&w[g][p]);
            ev[g] = _mm256_fmadd_ps(e, _mm256_castsi256_ps(_mm256_slli_epi32(r, 16)), ev[g]);
            od[g] = _mm256_fmadd_ps(o, _mm256_castsi256_ps(_mm256_and_si256(r, odd_mask)), od[g]);
        }
    }
    for (int g = 0; g < 4; g++) acc[g] = _mm256_add_ps(acc[g], _mm256_add_ps(ev[g], od[g]));
}

/* At block blk, line blk of each of the `next` columns from `ahead` (a column's K bf16 are as many
 * 64-byte lines as the order has blocks): one stream the prefetchers are ahead of, not the next
 * columns each read in 64-byte steps (a decode step's products from DRAM on an AMD Zen 2:
 * docs/performance.md, "Session 26"). */
static inline void fetch_next(const uint16_t *ahead, int64_t s1, int64_t next, int64_t blk) {
    for (int64_t c = 0; c < next; c++) _mm_prefetch((const char *)(ahead + c * s1) + 64 * blk, TG_PREFETCH_HINT);
}

/* 32 columns at a time while 32 remain, the next 32 fetched meanwhile; the last columns 16 at a
 * time. */
static void rowvec_cols(const uint32_t *a, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out,
                        float *out32) {
    enum { WIDE = 4096 }; /* A widened once for the whole strip up to this many pairs, else per block */
    int64_t kp = (K + 1) / 2, full = K / 2, blocks = (K + 31) / 32;
    __attribute__((aligned(32))) float af[2 * WIDE];
    bool whole = blocks * PAIRS <= WIDE;
    if (whole) widen_a(a, 0, blocks * PAIRS, kp, af);
    int64_t j0 = 0;
    for (; j0 + 32 <= nb; j0 += 32) {
        const uint16_t *col = B->base + (n0 + j0) * B->s1;
        int64_t next = nb - j0 - 32 < 32 ? nb - j0 - 32 : 32;
        __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
        for (int64_t blk = 0; blk < blocks; blk++) {
            fetch_next(col + 32 * B->s1, B->s1, next, blk);
            const float *ab = af + 2 * PAIRS * blk;
            if (!whole) widen_a(a, PAIRS * blk, PAIRS, kp, af), ab = af;
            cols_block4(ab, col, B->s1, PAIRS * blk, kp, full, acc);
        }
        for (int g = 0; g < 4; g++) store_sums(out, out32, j0 + 8 * g, acc[g], 8);
    }
    for (; j0 < nb; j0 += 16) { /* two 8-column groups in flight */
        int64_t c0 = nb - j0 < 8 ? nb - j0 : 8, c1 = nb - j0 - 8 < 0 ? 0 : nb - j0 - 8 < 8 ? nb - j0 - 8 : 8;
        const uint16_t *col = B->base + (n0 + j0) * B->s1;
        int64_t next = nb - j0 - 16 < 0 ? 0 : nb - j0 - 16 < 16 ? nb - j0 - 16 : 16;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        for (int64_t blk = 0; blk < blocks; blk++) {
            fetch_next(col + 16 * B->s1, B->s1, next, blk);
            const float *ab = af + 2 * PAIRS * blk;
            if (!whole) widen_a(a, PAIRS * blk, PAIRS, kp, af), ab = af;
            acc0 = cols_block(ab, col, B->s1, PAIRS * blk, c0, kp, full, acc0);
            if (c1) acc1 = cols_block(ab, col + 8 * B->s1, B->s1, PAIRS * blk, c1, kp, full, acc1);
        }
        store_sums(out, out32, j0, acc0, c0);
        if (c1) store_sums(out, out32, j0 + 8, acc1, c1);
    }
}

static bool rowvec_to(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out,
                      float *out32) {
    if (B->s1 != 1 && B->s0 != 1) return false;
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    if (B->s1 == 1) rowvec_rows(apairs, B, K, n0, nb, out, out32);
    else rowvec_cols(apairs, B, K, n0, nb, out, out32);
    _mm_setcsr(csr);
    return true;
}

static bool rowvec(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    return rowvec_to(apairs, B, K, n0, nb, out, NULL);
}

/* The fp32 sums of a one-row product with a float32 result (a decode step's attention scores) */
static bool rowvec_f32(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, float *out) {
    return rowvec_to(apairs, B, K, n0, nb, NULL, out);
}

/* The few-row hook: A one 16-row panel (row r's pair p at a[16 p + r]), B row-major in place. */
static void skinny(int64_t K, const uint32_t *a, int32_t rows, const uint16_t *b, int64_t ldb, int32_t cols,
                   uint16_t *out, int64_t ldout) {
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    few_rows(a, 16, rows, b, ldb, K, cols, out, NULL, ldout);
    _mm_setcsr(csr);
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Streaming only: the frame calls pack_a (one row, or a 16-row panel) and rowvec or skinny;
 * products of more rows take the block32 packed variant (avx2_block32). */
const tg_ukernel tg_ukernel_avx2_block32_stream = {
    .name = "avx2_block32", .mr = 1, .nr = NR, .a_entry_bytes = 4, .b_entry_bytes = 4, .kc = 256,
    .pack_a = pack_a_bf16, .rowvec = rowvec, .rowvec_f32 = rowvec_f32, .skinny = skinny, .available = available,
    .order = TG_UK_ORDER_BLOCK32 };
