/* AVX2+FMA variant: 6 rows x 16 columns of fp32 FMAs (12 ymm accumulators), two per k-pair in
 * the contract's order (odd product, then even); exact fp32 operands (A packed as fp32, B as
 * bf16 pair words widened in the kernel, as on AVX512F), MXCSR FTZ|DAZ for the kernel's
 * duration. */
#include <immintrin.h>

#include "fp_env.h"
#include <stdbool.h>
#include <string.h>

#define MR 6
#define NR 16
#include "pack_f32_pairs.h"
#include "pack_bf16_pairs.h"
#include "avx2_bf16.h"

/* ---- packing: vector paths for row-major A and row-major B ---- */

static inline __m256i daz16(__m256i w) { /* bf16 with a zero exponent -> signed zero */
    __m256i sub = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f80)), _mm256_setzero_si256());
    return _mm256_blendv_epi8(w, _mm256_and_si256(w, _mm256_set1_epi16((short)0x8000)), sub);
}

/* Row-major A: 8 pairs of a row per load, widened to (odd, even) fp32 entries, one 8-byte store
 * per pair; the pairs past the last multiple of 8 (and an odd K's last element) go one by one. */
static void pack_a_rows(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, float *dst) {
    int64_t kp = (kc + 1) / 2, full = kc / 2, vec = full / 8 * 8, step = 2 * mr;
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * step) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t r = 0; r < mr; r++) {
            float *d = dst + 2 * r;
            if (r >= rows) {
                for (int64_t p = 0; p < kp; p++) d[p * step] = d[p * step + 1] = 0.0f;
                continue;
            }
            const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0;
            for (int64_t p = 0; p < vec; p += 8) {
                __m256i w = daz16(_mm256_loadu_si256((const __m256i *)(row + 2 * p)));
                __m256 o = _mm256_castsi256_ps(_mm256_and_si256(w, odd_mask));
                __m256 e = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
                /* (odd, even) of pairs 0 1 4 5 and 2 3 6 7 */
                __m256d lo = _mm256_castps_pd(_mm256_unpacklo_ps(o, e)), hi = _mm256_castps_pd(_mm256_unpackhi_ps(o, e));
                __m128d l0 = _mm256_castpd256_pd128(lo), l1 = _mm256_extractf128_pd(lo, 1);
                __m128d h0 = _mm256_castpd256_pd128(hi), h1 = _mm256_extractf128_pd(hi, 1);
                float *q = d + p * step;
                _mm_storel_pd((double *)q, l0), _mm_storeh_pd((double *)(q + step), l0);
                _mm_storel_pd((double *)(q + 2 * step), h0), _mm_storeh_pd((double *)(q + 3 * step), h0);
                _mm_storel_pd((double *)(q + 4 * step), l1), _mm_storeh_pd((double *)(q + 5 * step), l1);
                _mm_storel_pd((double *)(q + 6 * step), h1), _mm_storeh_pd((double *)(q + 7 * step), h1);
            }
            for (int64_t p = vec; p < kp; p++) {
                d[p * step] = 2 * p + 1 < kc ? tg_widen_daz(row[2 * p + 1]) : 0.0f;
                d[p * step + 1] = tg_widen_daz(row[2 * p]);
            }
        }
    }
}

/* Row-major B: the pair words of 16 columns from rows 2p and 2p+1 (two unpacks, one lane fix). */
static void pack_b_rows(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
    int64_t kp = (kc + 1) / 2;
    for (int64_t j0 = 0; j0 + NR <= nb; j0 += NR, dst += kp * NR) {
        for (int64_t p = 0; p < kp; p++) {
            const uint16_t *even = B->base + (k0 + 2 * p) * B->s0 + n0 + j0;
            __m256i e = daz16(_mm256_loadu_si256((const __m256i *)even));
            __m256i o = 2 * p + 1 < kc ? daz16(_mm256_loadu_si256((const __m256i *)(even + B->s0))) : _mm256_setzero_si256();
            __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o); /* columns 0-3 8-11, 4-7 12-15 */
            _mm256_storeu_si256((__m256i *)(dst + p * NR), _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_storeu_si256((__m256i *)(dst + p * NR + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
        }
    }
    int64_t done = nb / NR * NR;
    if (done < nb) pack_b_bf16(B, k0, kc, n0 + done, nb - done, dst);
}

static void pack_a_fast(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, void *dst) {
    if (A->s1 == 1) pack_a_rows(A, m0, mb, k0, kc, mr, dst);
    else pack_a_f32(A, m0, mb, k0, kc, mr, dst);
}

static void pack_b_fast(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst) {
    if (B->s1 == 1) pack_b_rows(B, k0, kc, n0, nb, dst);
    else pack_b_bf16(B, k0, kc, n0, nb, dst);
}

/* ---- micro-kernel ---- */



static inline void store_row(uint16_t *o, __m256 lo, __m256 hi, int32_t cols) {
    if (cols >= NR) {
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rne_bf16(lo), rne_bf16(hi)), 0xd8);
        _mm256_storeu_si256((__m256i *)o, packed);
    } else {
        store_bf16x8(o, lo, cols);
        if (cols > 8) store_bf16x8(o + 8, hi, cols - 8);
    }
}

/* Accumulators are named variables (not an array) so that all 12 stay in the 16 ymm registers:
 * with an array GCC spills them every iteration. */
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

static void kernel(int64_t kpairs, const void *a_, const void *b_, const tg_tile *t) {
    const float *a = a_;
    const uint32_t *b = b_;
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
#define DECL(r) __m256 c##r##0 = t->load ? _mm256_loadu_ps(t->acc + r * t->ldacc) : _mm256_setzero_ps(), \
                     c##r##1 = t->load ? _mm256_loadu_ps(t->acc + r * t->ldacc + 8) : _mm256_setzero_ps();
    ROWS(DECL)
    for (int64_t p = 0; p < kpairs; p++) {
        const uint32_t *bp = b + p * NR;
        const float *ap = a + p * 2 * MR;
        /* the odd elements are the words' high halves; the even ones, shifted up */
        __m256 b0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)bp), odd_mask));
        __m256 b1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256((const __m256i *)(bp + 8)), odd_mask));
#define ODD(r) { __m256 x = _mm256_broadcast_ss(ap + 2 * r); c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1); }
        ROWS(ODD)
        b0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)bp), 16));
        b1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(bp + 8)), 16));
#define EVEN(r) { __m256 x = _mm256_broadcast_ss(ap + 2 * r + 1); c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1); }
        ROWS(EVEN)
    }
    _mm_setcsr(csr);
    if (t->out) {
#define OUT(r) if (r < t->rows) store_row(t->out + r * t->ldout, c##r##0, c##r##1, t->cols);
        ROWS(OUT)
    } else {
#define ACC(r) _mm256_storeu_ps(t->acc + r * t->ldacc, c##r##0), _mm256_storeu_ps(t->acc + r * t->ldacc + 8, c##r##1);
        ROWS(ACC)
    }
}

/* ---- one output row (M = 1, and N = 1 after the frame's transpose) and a few rows ----
 * B streamed once, read in place (stream_fma.h says what is shared with AVX512F). Through the
 * packed frame a one-row product computed a 6-row tile per 16 columns and packed all of B (Zen 4,
 * 2 threads: 1x4096x4096 2.8 ms, 4096x4096x1 10.8 ms). */
#define SK_TILE 16
#include "stream_fma.h"



/* Row-major B: a strip of up to 1024 columns, fp32 accumulators in L1, B's rows read whole; the
 * last group's columns past the strip's width are read from a zero-padded copy. */
static void rowvec_rows(const float *a, const uint16_t *b, int64_t ldb, int64_t K, int64_t nb, uint16_t *out) {
    enum { STRIP = 1024, PREFETCH_PAIRS = 4 };
    __attribute__((aligned(32))) float acc[STRIP];
    int64_t kp = (K + 1) / 2;
    for (int64_t s0 = 0; s0 < nb; s0 += STRIP) {
        int64_t w = nb - s0 < STRIP ? nb - s0 : STRIP, whole = w / 8, groups = (w + 7) / 8;
        for (int64_t g = 0; g < groups; g++) _mm256_store_ps(acc + 8 * g, _mm256_setzero_ps());
        for (int64_t p = 0; p < kp; p++) {
            __m256 ao = _mm256_broadcast_ss(a + 2 * p), ae = _mm256_broadcast_ss(a + 2 * p + 1);
            const uint16_t *even = b + 2 * p * ldb + s0, *odd = even + ldb;
            bool has_odd = 2 * p + 1 < K;
            for (int64_t g = 0; g < groups; g++) {
                __m256 be, bo;
                if (g < whole) {
                    if (!(g & 3)) { /* rows jump by 2*ldb per pair: fetch a few pairs ahead */
                        _mm_prefetch((const char *)(even + PREFETCH_PAIRS * 2 * ldb + 8 * g), TG_PREFETCH_HINT);
                        _mm_prefetch((const char *)(odd + PREFETCH_PAIRS * 2 * ldb + 8 * g), TG_PREFETCH_HINT);
                    }
                    be = widen8(even + 8 * g);
                    bo = has_odd ? widen8(odd + 8 * g) : _mm256_setzero_ps();
                } else {
                    uint16_t e8[8] = { 0 }, o8[8] = { 0 };
                    memcpy(e8, even + 8 * g, (size_t)(w - 8 * g) * 2u);
                    if (has_odd) memcpy(o8, odd + 8 * g, (size_t)(w - 8 * g) * 2u);
                    be = widen8(e8), bo = widen8(o8);
                }
                __m256 c = _mm256_load_ps(acc + 8 * g);
                c = _mm256_fmadd_ps(ao, bo, c);
                _mm256_store_ps(acc + 8 * g, _mm256_fmadd_ps(ae, be, c));
            }
        }
        for (int64_t g = 0; g < groups; g++) store8(out + s0 + 8 * g, _mm256_load_ps(acc + 8 * g), w - 8 * g);
    }
}


/* Column-major B (column j's k-pairs are adjacent words): 8 columns x 8 pairs per transpose, two
 * 8-column groups in flight (each lane's sum is one chain in pair order, the contract's). Whole
 * 8x8 blocks are loaded as vectors, unrolled (indexing the transposed vectors with a variable
 * spills them), each column's stream prefetched ahead; the edges (columns past nb, pairs past K,
 * an odd K's last element alone) go through a zero-padded copy. */
#define COL_STEP(acc, p, w)                                                                         \
    acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 2 * (p)), _mm256_castsi256_ps(_mm256_and_si256(w, odd_mask)), acc), \
    acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + 2 * (p) + 1), _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), acc)
static inline __attribute__((always_inline)) __m256 cols_block_whole(const float *a, const uint16_t *col, int64_t s1,
                                                                     int64_t p0, __m256 acc) {
    enum { AHEAD = 256 }; /* elements: 512 bytes ahead in each column's stream */
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    __m256i r[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const uint16_t *src = col + c * s1 + 2 * p0;
        _mm_prefetch((const char *)(src + AHEAD), TG_PREFETCH_HINT);
        r[c] = _mm256_loadu_si256((const __m256i *)src);
    }
    transpose8(r);
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) COL_STEP(acc, p0 + p, r[p]);
    return acc;
}

static void cols_block_edge(const float *a, const tg_operand *B, int64_t n0, int64_t nb, int64_t col0, int64_t p0,
                            int64_t kp, int64_t full, __m256 *acc) {
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    int64_t cols = nb - col0 < 0 ? 0 : nb - col0 > 8 ? 8 : nb - col0, pairs = kp - p0 < 8 ? kp - p0 : 8;
    uint32_t words[8][8] = { { 0 } };
    for (int64_t c = 0; c < cols; c++) {
        const uint16_t *src = B->base + (n0 + col0 + c) * B->s1 + 2 * p0;
        for (int64_t p = 0; p < pairs; p++)
            words[c][p] = p0 + p < full ? (uint32_t)src[2 * p] | (uint32_t)src[2 * p + 1] << 16 : src[2 * p];
    }
    __m256i r[8];
    for (int c = 0; c < 8; c++) r[c] = _mm256_loadu_si256((const __m256i *)words[c]);
    transpose8(r);
    for (int64_t p = 0; p < pairs; p++) COL_STEP(*acc, p0 + p, r[p]);
}
#undef COL_STEP

static void rowvec_cols(const float *a, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    int64_t kp = (K + 1) / 2, full = K / 2, whole_blocks = full / 8 * 8;
    for (int64_t j0 = 0; j0 < nb; j0 += 16) {
        __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
        int64_t p0 = 0;
        if (j0 + 16 <= nb) {
            const uint16_t *col = B->base + (n0 + j0) * B->s1;
            for (; p0 < whole_blocks; p0 += 8) {
                acc[0] = cols_block_whole(a, col, B->s1, p0, acc[0]);
                acc[1] = cols_block_whole(a, col + 8 * B->s1, B->s1, p0, acc[1]);
            }
        }
        for (; p0 < kp; p0 += 8)
            for (int h = 0; h < 2; h++) cols_block_edge(a, B, n0, nb, j0 + 8 * h, p0, kp, full, &acc[h]);
        store8(out + j0, acc[0], nb - j0);
        if (nb - j0 > 8) store8(out + j0 + 8, acc[1], nb - j0 - 8);
    }
}

/* A few rows (2..16): a tile is 16 columns of up to 6 rows (12 accumulators, two widened B
 * vectors, one A broadcast: the 16 registers); more rows are further groups over the same chunk,
 * in L2 by then. The last tile of a strip narrower than 16 columns reads B through a zero-padded
 * copy. Zen 4, 2 threads, against the packed frame (the previous build and this one alternated in
 * one process): 2 rows x 4096 x 4096 1.8x, 4 rows 1.55x, 8 rows 1.19x, 12 rows 1.09x, 16 rows
 * 0.97x (the three row groups each read the chunk from L2, and 16 columns are half a line: ~60% of
 * the FMA peak on one thread); passes of 12 rows for 24-48 rows measured 19-26% slower, so
 * skinny_rows is 16. Widening with two in-lane unpacks against zero instead of vpmovzxwd and a
 * shift needs a register for the zero, and the spill made it 1.6x slower. */
#define R2(X) X(0) X(1)
#define R4(X) R2(X) X(2) X(3)
#define SK_INIT(r)                                                                                  \
    __m256 c##r##0 = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + (r0 + r) * SK_STRIP + j),   \
           c##r##1 = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + (r0 + r) * SK_STRIP + j + 8);
#define SK_ODD(r) { __m256 x = _mm256_broadcast_ss(ap + 2 * (r)); c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1); }
#define SK_EVEN(r) { __m256 x = _mm256_broadcast_ss(ap + 2 * (r) + 1); c##r##0 = _mm256_fmadd_ps(x, b0, c##r##0); c##r##1 = _mm256_fmadd_ps(x, b1, c##r##1); }
#define SK_OUT(r)                                                                                   \
    if (r0 + r < rows) {                                                                            \
        store8(out + (r0 + r) * ldout + j, c##r##0, w - j);                                         \
        if (w - j > 8) store8(out + (r0 + r) * ldout + j + 8, c##r##1, w - j - 8);                  \
    }
#define SK_SAVE(r) _mm256_store_ps(acc + (r0 + r) * SK_STRIP + j, c##r##0), _mm256_store_ps(acc + (r0 + r) * SK_STRIP + j + 8, c##r##1);
#define DEFINE_SK_GROUP(NAME, ROWLIST)                                                              \
    static void NAME(int32_t r0, const sk_args *S) {                                                \
        SK_UNPACK(S)                                                                                \
        bool whole = w - j >= 16;                                                                   \
        ROWLIST(SK_INIT)                                                                            \
        for (int64_t p = q0; p < q1; p++) {                                                         \
            if (next) tg_prefetch_lines(next, 2);                                                   \
            const uint16_t *even = b + 2 * p * ldb + j, *odd = even + ldb;                          \
            uint16_t e16[16] = { 0 }, o16[16] = { 0 };                                              \
            if (!whole) { /* the strip's last, narrower tile */                                     \
                memcpy(e16, even, (size_t)(w - j) * 2u);                                            \
                if (p < full) memcpy(o16, odd, (size_t)(w - j) * 2u);                               \
                even = e16, odd = o16;                                                              \
            }                                                                                       \
            const float *ap = a + p * 32 + 2 * r0;                                                  \
            __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();                              \
            if (p < full) b0 = widen8(odd), b1 = widen8(odd + 8);                                   \
            ROWLIST(SK_ODD)                                                                         \
            b0 = widen8(even), b1 = widen8(even + 8);                                               \
            ROWLIST(SK_EVEN)                                                                        \
        }                                                                                           \
        if (last) { ROWLIST(SK_OUT) }                                                               \
        else { ROWLIST(SK_SAVE) }                                                                   \
    }
DEFINE_SK_GROUP(sk_group_2, R2)
DEFINE_SK_GROUP(sk_group_4, R4)
DEFINE_SK_GROUP(sk_group_6, ROWS)
#undef SK_INIT
#undef SK_ODD
#undef SK_EVEN
#undef SK_OUT
#undef SK_SAVE
#undef DEFINE_SK_GROUP

static int32_t sk_group(int32_t r0, const sk_args *S) { /* 6 rows, then 2 or 4: never past row 16 */
    int32_t rest = S->rows - r0;
    if (rest <= 2) return sk_group_2(r0, S), 2;
    if (rest <= 4) return sk_group_4(r0, S), 4;
    return sk_group_6(r0, S), 6;
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* (also the avx2 block32 kernel's: the same FMA unit) */
double tg_avx2_fma_peak(int64_t iters) {
    __m256 acc[12];
#pragma GCC unroll 32
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i); /* distinct: no chain merges */
    __m256 x = _mm256_set1_ps(1.0f), y = _mm256_set1_ps(1e-9f);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 32
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(x, y, acc[i]);
        __asm__ volatile("" : "+x"(x));
    }
    __m256 s = acc[0];
#pragma GCC unroll 32
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, acc[i]);
    float f[8];
    _mm256_storeu_ps(f, s);
    volatile float sink = f[0];
    (void)sink;
    return (double)iters * 12 * 16;
}

const tg_ukernel tg_ukernel_avx2 = {
    .name = "avx2", .mr = MR, .nr = NR, .a_entry_bytes = 8, .b_entry_bytes = 4, .kc = 256, .pack_a = pack_a_fast, .pack_b = pack_b_fast,
    .kernel = kernel, .rowvec = rowvec, .skinny = skinny, .skinny_rows = 16, .available = available, .peak = tg_avx2_fma_peak };
