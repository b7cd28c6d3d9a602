/* AVX512-BF16 variant: 12 rows x 32 columns, 24 zmm accumulators. vdpbf16ps computes, per fp32
 * lane, acc + odd product (rounded, flushed) + even product (rounded, flushed), with subnormal
 * inputs as zero: exactly the contract's step order, so this kernel is the contract in hardware.
 * Compiled alone with -mavx512bf16 (meson) and chosen at run time by cpuid.
 * B packing has vector paths for row-major B (interleave two rows with one permute) and
 * column-major B (pairs are already adjacent: 16x16 word transposes). */
#include <immintrin.h>
#include <stdbool.h>

#define MR 12
#define NR 32
#include "pack_bf16_pairs.h"
#include "store_bf16_avx512.h"
#include "pack_avx512.h"

/* ---- packing ---- */

/* Row-major B: pair words for 32 columns from rows 2p and 2p+1, one permute per 16 columns.
 * Rows are walked whole (pair outer, panels inner) so memory is read in long runs. */
static void pack_b_rows(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
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
            _mm_prefetch((const char *)(fetch + j0), _MM_HINT_T0);
            _mm_prefetch((const char *)(fetch + B->s0 + j0), _MM_HINT_T0);
            __m512i e = daz16(_mm512_maskz_loadu_epi16(m, even + j0));
            __m512i o = has_odd ? daz16(_mm512_maskz_loadu_epi16(m, even + B->s0 + j0)) : _mm512_setzero_si512();
            _mm512_storeu_si512(d, _mm512_permutex2var_epi16(e, lo_idx, o));
            _mm512_storeu_si512(d + 16, _mm512_permutex2var_epi16(e, hi_idx, o));
        }
    }
}


/* Column-major B (s0 == 1, even k0): column j's pair p is the word at column j + 2p, so a panel
 * is a transpose of 16-word runs from 16 columns at a time. */
static void pack_b_cols(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
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

/* Row-major A (s1 == 1): a panel's pair p is word p of each of its rows, so 16 pairs of up to 16
 * rows are one 16x16 word transpose; the first mr words of each transposed vector are stored. */
static void pack_a_rows(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, uint32_t *dst) {
    int64_t kp = (kc + 1) / 2, full = kc / 2;
    __mmask16 keep = (__mmask16)((1u << mr) - 1u);
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t p0 = 0; p0 < kp; p0 += 16) {
            __m512i r[16];
            int64_t pairs = load_pairs_transposed(A->base + (m0 + i0) * A->s0 + k0, A->s0, rows, p0, kp, full, r);
            for (int64_t p = 0; p < pairs; p++) _mm512_mask_storeu_epi32(dst + (p0 + p) * mr, keep, r[p]);
        }
    }
}

/* Column-major A (s0 == 1): the rows of a panel are adjacent in each column, so pair p is the
 * interleave of columns 2p and 2p+1 (one permute). */
static void pack_a_cols(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, uint32_t *dst) {
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    int64_t kp = (kc + 1) / 2;
    __mmask16 keep = (__mmask16)((1u << mr) - 1u);
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        __mmask32 m = (__mmask32)((1u << rows) - 1u);
        const uint16_t *col = A->base + (m0 + i0) + k0 * A->s1;
        for (int64_t p = 0; p < kp; p++) {
            __m512i e = daz16(_mm512_maskz_loadu_epi16(m, col + 2 * p * A->s1));
            __m512i o = 2 * p + 1 < kc ? daz16(_mm512_maskz_loadu_epi16(m, col + (2 * p + 1) * A->s1)) : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(dst + p * mr, keep, _mm512_permutex2var_epi16(e, lo_idx, o));
        }
    }
}

static void pack_a_fast(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, void *dst) {
    if (mr <= 16 && A->s1 == 1) pack_a_rows(A, m0, mb, k0, kc, mr, dst);
    else if (mr <= 16 && A->s0 == 1) pack_a_cols(A, m0, mb, k0, kc, mr, dst);
    else pack_a(A, m0, mb, k0, kc, mr, dst);
}

static void pack_b(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst) {
    if (B->s1 == 1) pack_b_rows(B, k0, kc, n0, nb, dst);
    else if (B->s0 == 1) pack_b_cols(B, k0, kc, n0, nb, dst);
    else pack_b_generic(B, k0, kc, n0, nb, dst);
}

/* ---- micro-kernels ----
 * One body for every tile height: ROWS x 32 columns, 2*ROWS zmm accumulators. 12 rows is the main
 * tile (24 accumulators, 2 B loads and 12 broadcasts per pair); 8, 4 and 1 rows serve short M
 * without computing padded rows. The accumulators are named variables, one per row and half,
 * generated by a row-list macro: held in an array, GCC spills all of them around the store loop,
 * which cost ~20% at K = 64. BCAST(r) is row r's pair-p word. */
#define R1(X) X(0)
#define R4(X) X(0) X(1) X(2) X(3)
#define R8(X) R4(X) X(4) X(5) X(6) X(7)
#define R12(X) R8(X) X(8) X(9) X(10) X(11)

#define K_DECL(r) __m512 c##r##a = _mm512_setzero_ps(), c##r##b = _mm512_setzero_ps();
#define K_LOAD(r) c##r##a = _mm512_loadu_ps(t->acc + r * t->ldacc), c##r##b = _mm512_loadu_ps(t->acc + r * t->ldacc + 16);
#define K_STEP(r)                                                                                   \
    {                                                                                               \
        __m512bh av = (__m512bh)_mm512_set1_epi32(BCAST(r));                                        \
        c##r##a = _mm512_dpbf16_ps(c##r##a, av, b0), c##r##b = _mm512_dpbf16_ps(c##r##b, av, b1);  \
    }
#define K_OUT(r) if (r < t->rows) store_bf16x32(t->out + r * t->ldout, c##r##a, c##r##b, m, t->stream);
#define K_ACC(r) _mm512_storeu_ps(t->acc + r * t->ldacc, c##r##a), _mm512_storeu_ps(t->acc + r * t->ldacc + 16, c##r##b);
#define TILE_BODY(ROWLIST)                                                                          \
    ROWLIST(K_DECL)                                                                                 \
    if (t->load) { ROWLIST(K_LOAD) }                                                                \
    for (int64_t p = 0; p < kpairs; p++) {                                                          \
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)(b + p * NR));                     \
        __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + p * NR + 16));                \
        ROWLIST(K_STEP)                                                                             \
    }                                                                                               \
    if (t->out) {                                                                                   \
        __mmask32 m = col_mask32(t->cols);                                                          \
        ROWLIST(K_OUT)                                                                              \
    } else {                                                                                        \
        ROWLIST(K_ACC)                                                                              \
    }

/* packed A: a panel of ROWS words per pair */
#define BCAST(r) (int)a[p * TILE_ROWS + r]
#define DEFINE_KERNEL(NAME, ROWS, ROWLIST)                                                          \
    static void NAME(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {           \
        enum { TILE_ROWS = ROWS };                                                                  \
        const uint32_t *a = a_, *b = b_;                                                            \
        TILE_BODY(ROWLIST)                                                                          \
    }
DEFINE_KERNEL(kernel, MR, R12)
DEFINE_KERNEL(kernel_8, 8, R8)
DEFINE_KERNEL(kernel_4, 4, R4)
DEFINE_KERNEL(kernel_1, 1, R1)
#undef BCAST

/* The main tile reading A in place (row-major, whole pairs): the broadcasts come from four row bases
 * (rows 3q, 3q+1, 3q+2 at base[q], base[q] + lda, base[q] + 2*lda: one address register each).
 * vdpbf16ps ignores subnormal inputs, which is what packing's DAZ does. */
/* A row may start at any element, so a pair word is only 2-byte aligned: read it as such. */
typedef int unaligned_int __attribute__((aligned(1), may_alias));
#define BCAST(r) *(const unaligned_int *)(base[(r) / 3] + ((r) % 3) * ld + 4 * p)
static void kernel_direct(int64_t kpairs, const uint16_t *a, int64_t lda, const void *b_, const tg_tile *t) {
    const uint32_t *b = b_;
    const char *base[4];
    int64_t ld = lda * 2; /* bytes */
    for (int q = 0; q < 4; q++) base[q] = (const char *)a + 3 * q * ld;
    TILE_BODY(R12)
}
#undef BCAST

/* ---- one output row, B streamed once (M = 1, and N = 1 after the frame's transpose) ----
 * Memory-bound shapes want each byte of B read once, in long runs. vdpbf16ps treats subnormal
 * inputs as zero itself, so these paths read B unpacked. */

/* Row-major B: a strip of up to 512 columns, fp32 accumulators in L1, rows read whole. */
static void rowvec_rows(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    enum { STRIP = 1024, PREFETCH_PAIRS = 4 };
    __attribute__((aligned(64))) float acc[STRIP];
    for (int64_t s0 = 0; s0 < nb; s0 += STRIP) {
        int64_t w = nb - s0 < STRIP ? nb - s0 : STRIP;
        int64_t groups = (w + 31) / 32;
        for (int64_t g = 0; g < groups * 32; g += 16) _mm512_store_ps(acc + g, _mm512_setzero_ps());
        for (int64_t p = 0; p < (K + 1) / 2; p++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)apairs[p]);
            const uint16_t *even = B->base + 2 * p * B->s0 + n0 + s0;
            const uint16_t *odd = even + B->s0;
            bool has_odd = 2 * p + 1 < K;
            for (int64_t g = 0; g < groups; g++) {
                int64_t left = w - 32 * g;
                __mmask32 m = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1u);
                /* rows jump by 2*s0 per pair: fetch a few pairs ahead, the prefetcher does not */
                _mm_prefetch((const char *)(even + PREFETCH_PAIRS * 2 * B->s0 + 32 * g), _MM_HINT_T0);
                _mm_prefetch((const char *)(odd + PREFETCH_PAIRS * 2 * B->s0 + 32 * g), _MM_HINT_T0);
                __m512i e = _mm512_maskz_loadu_epi16(m, even + 32 * g);
                __m512i o = has_odd ? _mm512_maskz_loadu_epi16(m, odd + 32 * g) : _mm512_setzero_si512();
                float *c = acc + 32 * g;
                _mm512_store_ps(c, _mm512_dpbf16_ps(_mm512_load_ps(c), av, (__m512bh)_mm512_permutex2var_epi16(e, lo_idx, o)));
                _mm512_store_ps(c + 16, _mm512_dpbf16_ps(_mm512_load_ps(c + 16), av, (__m512bh)_mm512_permutex2var_epi16(e, hi_idx, o)));
            }
        }
        for (int64_t g = 0; g < w; g += 16) store_bf16x16(out + s0 + g, _mm512_load_ps(acc + g), col_mask((int32_t)(w - g)));
    }
}

/* Column-major B (column j's k-pairs are adjacent words): 16 columns x 16 pairs per transpose,
 * two 16-column groups in flight so the two accumulator chains hide each other's latency (each
 * lane's sum is one chain in pair order: the contract's). Whole 16x16 blocks take an unrolled
 * path (indexing the transposed vectors with a variable spilled them all) with each column's
 * stream prefetched ahead; the edges take the masked path. */
static inline void cols_block_masked(const uint32_t *apairs, const tg_operand *B, int64_t n0, int64_t nb, int64_t col0,
                                     int64_t p0, int64_t kp, int64_t full, __m512 *acc) {
    int64_t cols = nb - col0 < 0 ? 0 : nb - col0 > 16 ? 16 : nb - col0;
    __m512i r[16];
    int64_t pairs = load_pairs_transposed(cols ? B->base + (n0 + col0) * B->s1 : B->base, B->s1, cols, p0, kp, full, r);
    for (int64_t p = 0; p < pairs; p++)
        *acc = _mm512_dpbf16_ps(*acc, (__m512bh)_mm512_set1_epi32((int)apairs[p0 + p]), (__m512bh)r[p]);
}

static inline __attribute__((always_inline)) __m512 cols_block_whole(const uint32_t *apairs, const uint16_t *col,
                                                                     int64_t s1, int64_t p0, __m512 acc) {
    enum { AHEAD = 256 }; /* elements: 512 bytes ahead in each column's stream (measured best) */
    __m512i r[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) {
        const uint16_t *src = col + c * s1 + 2 * p0;
        _mm_prefetch((const char *)(src + AHEAD), _MM_HINT_T0);
        r[c] = _mm512_loadu_si512((const void *)src);
    }
    transpose16(r);
#pragma GCC unroll 16
    for (int p = 0; p < 16; p++)
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)apairs[p0 + p]), (__m512bh)r[p]);
    return acc;
}

static void rowvec_cols(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    int64_t kp = (K + 1) / 2, full = K / 2, whole_blocks = full / 16 * 16;
    for (int64_t j0 = 0; j0 < nb; j0 += 32) {
        __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() };
        int64_t p0 = 0;
        if (j0 + 32 <= nb) {
            const uint16_t *col = B->base + (n0 + j0) * B->s1;
            for (; p0 < whole_blocks; p0 += 16) {
                acc[0] = cols_block_whole(apairs, col, B->s1, p0, acc[0]);
                acc[1] = cols_block_whole(apairs, col + 16 * B->s1, B->s1, p0, acc[1]);
            }
        }
        for (; p0 < kp; p0 += 16)
            for (int h = 0; h < 2; h++) cols_block_masked(apairs, B, n0, nb, j0 + 16 * h, p0, kp, full, &acc[h]);
        store_bf16x16(out + j0, acc[0], col_mask((int32_t)(nb - j0)));
        store_bf16x16(out + j0 + 16, acc[1], col_mask((int32_t)(nb - j0 - 16)));
    }
}

static bool rowvec(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    if (B->s1 == 1) rowvec_rows(apairs, B, K, n0, nb, out);
    else if (B->s0 == 1) rowvec_cols(apairs, B, K, n0, nb, out);
    else return false;
    return true;
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

/* 24 independent vdpbf16ps chains: the instruction's throughput, 64 flops each. */
static double peak(int64_t iters) {
    __m512 acc[24];
#pragma GCC unroll 32
    for (int i = 0; i < 24; i++) acc[i] = _mm512_set1_ps((float)i); /* distinct: no chain merges */
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x00010001);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 32
        for (int i = 0; i < 24; i++) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
        __asm__ volatile("" : "+v"(x));
    }
    __m512 s = acc[0];
#pragma GCC unroll 32
    for (int i = 1; i < 24; i++) s = _mm512_add_ps(s, acc[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * 24 * 64;
}

const tg_ukernel tg_ukernel_avx512bf16 = {
    .name = "avx512bf16", .mr = MR, .nr = NR, .entry_bytes = 4, .kc = 512, .pack_a = pack_a_fast, .pack_b = pack_b,
    .kernel = kernel, .short_kernels = { { 8, kernel_8 }, { 4, kernel_4 }, { 1, kernel_1 } }, .rowvec = rowvec,
    .kernel_direct = kernel_direct, .available = available, .peak = peak };
