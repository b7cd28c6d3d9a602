/* The block32 order (docs/numerics.md, "The block32 order") with AVX512-BF16's vdpbf16ps, exactly
 * and at the instruction's full rate. vdpbf16ps computes per fp32 lane
 *     acc = step(step(acc, odd half * odd half), even half * even half)
 * (contract_step.h's step: one rounding, subnormal inputs as zero, tiny results flushed), so a
 * pair word whose HIGH half is a chain's earlier element and whose low half its next one walks
 * that chain in ascending k. Per block of 32 k (from k0), packing writes each operand's words as
 *     word 2g     = (high x[k0+4g],   low x[k0+4g+2])   the even-k chain's elements 2g, 2g+1
 *     word 2g + 1 = (high x[k0+4g+1], low x[k0+4g+3])   the odd-k chain's
 * (g = 0..7; A and B alike, so every product pairs the same k): a permutation inside each group
 * of 4 elements. The kernel keeps two accumulators per output, the even chain (words 2g) and the
 * odd chain (words 2g+1), both from +0 each block; after the block's 8 vdpbf16ps per chain it
 * folds acc = acc + (even + odd) with vaddps under MXCSR's FTZ and DAZ. That fold is two steps
 * exactly: x86 detects tininess after rounding, as step does, and a sum of two fp32 values that
 * are normal or zero is never in step's one boundary case (|exact| just below 2^-126 yet
 * rounding to it), since it is a multiple of 2^-149; DAZ never applies (vdpbf16ps flushes its
 * results, and the fold's too are flushed). The rounding mode is set to nearest-even with them.
 * ukernel_portable_block32.c is the reference this is tested against (tests/c/test_block32_kernels.c
 * and tests/python/test_matmul_order.py); the packing was checked against TDPBF16PS (issue 38).
 *
 * Layouts: A per block, mr rows of 16 words each (a row's block is one 64-byte vector: packing
 * row-major A is a load, a DAZ and one vpshufb); B per word, NR = 32 columns (pack_bf16_pairs.h's
 * layout, words permuted). K panels are zero-padded to whole blocks (kpair_align 16). Tile: 12
 * rows x 32 columns, as the pairwise kernel's (the micro-kernels below say how). The fold's two
 * vaddps per output and block are its only extra work: on Intel they share vdpbf16ps's ports
 * (~5% of the kernel's rate there; AMD's Zen cores have separate FP add pipes, not measured).
 * Chosen where the pairwise packed products take avx512bf16 and there is no AMX, and under a
 * forced avx512bf16 (variants.c). Compiled alone with -mavx512bf16 (meson). */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#define MR 12
#define NR 32
#include "pack_avx512.h"
#include "pack_block32.h"
#include "store_bf16_avx512.h"

enum { KC = 512, WORDS = B32_PAIRS }; /* a 32-column B micro-panel of KC/2 words is 32 KiB: L1 */
_Static_assert(KC % (2 * B32_PAIRS) == 0, "K panels start at block boundaries");

/* Word w of a block: its high half is element src[2w+1] of the block's group, its low half
 * src[2w] (the group of 4 is elements 4(w/2) .. 4(w/2)+3). */
static const int8_t src_of[4] = { 2, 0, 3, 1 }; /* packed position within a group -> k offset */
static inline int64_t chain_k(int64_t e) { return (e & ~(int64_t)3) + src_of[e & 3]; }

/* vpshufb control: within each 8-byte group (4 elements x0..x3), the order x2 x0 x3 x1. */
static inline __m512i permute_groups(__m512i v) {
    const __m512i ctl = _mm512_broadcast_i32x4(_mm_setr_epi8(4, 5, 0, 1, 6, 7, 2, 3, 12, 13, 8, 9, 14, 15, 10, 11));
    return _mm512_shuffle_epi8(v, ctl);
}

static inline __mmask32 elems_mask(int64_t left) { return left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1u); }

/* ---- packing A: panels of mr rows, per block mr x 16 words ---- */
static void pack_a_scalar(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr,
                          uint32_t *dst) {
    int64_t kp = b32_pairs(kc);
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t blk = 0; blk < kp / WORDS; blk++)
            for (int64_t r = 0; r < mr; r++) {
                uint32_t *d = dst + (blk * mr + r) * WORDS;
                const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0 * A->s1;
                for (int64_t w = 0; w < WORDS; w++) {
                    int64_t k = 32 * blk + chain_k(2 * w);
                    d[w] = r >= rows ? 0u : b32_at(row, A->s1, k, kc) | b32_at(row, A->s1, k - 2, kc) << 16;
                }
            }
    }
}

static void pack_a_b32(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, void *dst_) {
    uint32_t *dst = dst_;
    if (A->s1 != 1) {
        pack_a_scalar(A, m0, mb, k0, kc, mr, dst);
        return;
    }
    int64_t kp = b32_pairs(kc), blocks = kp / WORDS;
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t r = 0; r < mr; r++) {
            const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0;
            for (int64_t blk = 0; blk < blocks; blk++) {
                __mmask32 m = r >= rows ? 0 : elems_mask(kc - 32 * blk);
                __m512i v = permute_groups(daz16(_mm512_maskz_loadu_epi16(m, row + 32 * blk)));
                _mm512_storeu_si512(dst + (blk * mr + r) * WORDS, v);
            }
        }
    }
}

/* ---- packing B: per word, NR columns (panels of NR columns) ---- */
static void pack_b_scalar(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
    int64_t kp = b32_pairs(kc);
    for (int64_t j0 = 0; j0 < nb; j0 += NR, dst += kp * NR) {
        int64_t w = nb - j0 < NR ? nb - j0 : NR;
        for (int64_t p = 0; p < kp; p++)
            for (int64_t j = 0; j < NR; j++) {
                const uint16_t *col = B->base + k0 * B->s0 + (n0 + j0 + j) * B->s1;
                int64_t k = 32 * (p / WORDS) + chain_k(2 * (p % WORDS));
                dst[p * NR + j] = j >= w ? 0u : b32_at(col, B->s0, k, kc) | b32_at(col, B->s0, k - 2, kc) << 16;
            }
    }
}

/* Row-major B: per group of 4 rows, word 2g interleaves rows 4g+2 (low) and 4g (high), word 2g+1
 * rows 4g+3 and 4g+1; rows walked whole, fetched ahead as pack_avx512.h's pack_b_rows does. No
 * DAZ pass: vdpbf16ps, the only reader of these panels, treats subnormal inputs as zero itself
 * (the streaming hooks pack B for every few rows of output, where the pass cost ~10%). */
static void pack_b_rows_b32(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
    int64_t kp = b32_pairs(kc), groups = kp / 2;
    int64_t panels = (nb + NR - 1) / NR, ahead = 64 / panels < 2 ? 2 : 64 / panels > 16 ? 16 : 64 / panels;
    for (int64_t g = 0; g < groups; g++) {
        const uint16_t *row0 = B->base + (k0 + 4 * g) * B->s0 + n0;
        const uint16_t *fetch = row0 + 4 * ahead * B->s0;
        int64_t have = kc - 4 * g; /* rows of this group inside the panel */
        uint32_t *d = dst + 2 * g * NR;
        for (int64_t j0 = 0; j0 < nb; j0 += NR, d += kp * NR) {
            int64_t w = nb - j0 < NR ? nb - j0 : NR;
            __mmask32 m = elems_mask(w);
            __m512i x[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                if (4 * g + 4 * ahead + i < kc) _mm_prefetch((const char *)(fetch + i * B->s0 + j0), TG_PREFETCH_HINT);
                x[i] = i < have ? _mm512_maskz_loadu_epi16(m, row0 + i * B->s0 + j0) : _mm512_setzero_si512();
            }
            __m512i lo, hi;
            interleave_rows(x[2], x[0], &lo, &hi);
            _mm512_storeu_si512(d, lo);
            _mm512_storeu_si512(d + 16, hi);
            interleave_rows(x[3], x[1], &lo, &hi);
            _mm512_storeu_si512(d + NR, lo);
            _mm512_storeu_si512(d + NR + 16, hi);
        }
    }
}

/* Column-major B (s0 == 1): a column's block is 64 contiguous bytes; 16 columns' blocks, each
 * permuted, transposed give the block's 16 words of those columns. */
static void pack_b_cols_b32(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, uint32_t *dst) {
    int64_t kp = b32_pairs(kc), blocks = kp / WORDS;
    for (int64_t j0 = 0; j0 < nb; j0 += NR, dst += kp * NR)
        for (int64_t h = 0; h < NR; h += 16) {
            int64_t cols = nb - j0 - h;
            cols = cols < 0 ? 0 : cols > 16 ? 16 : cols;
            for (int64_t blk = 0; blk < blocks; blk++) {
                __mmask32 m = elems_mask(kc - 32 * blk);
                __m512i r[16];
                for (int64_t c = 0; c < 16; c++) {
                    if (c >= cols) {
                        r[c] = _mm512_setzero_si512();
                        continue;
                    }
                    const uint16_t *col = B->base + (n0 + j0 + h + c) * B->s1 + k0 + 32 * blk;
                    _mm_prefetch((const char *)(col + 32 * 4), TG_PREFETCH_HINT); /* 4 blocks ahead */
                    r[c] = permute_groups(daz16(_mm512_maskz_loadu_epi16(m, col)));
                }
                transpose16(r);
                for (int64_t p = 0; p < WORDS; p++) _mm512_storeu_si512(dst + (blk * WORDS + p) * NR + h, r[p]);
            }
        }
}

static void pack_b_b32(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst) {
    if (B->s1 == 1) pack_b_rows_b32(B, k0, kc, n0, nb, dst);
    else if (B->s0 == 1) pack_b_cols_b32(B, k0, kc, n0, nb, dst);
    else pack_b_scalar(B, k0, kc, n0, nb, dst);
}

/* ---- micro-kernels: ROWS x 32 columns ----
 * Per block, the running sums (L1: sums[]) take acc + (even + odd) once per output. Two shapes of
 * the block's work, the chain accumulators named variables (a row-list macro):
 *  - split (12 and 8 rows): the two 16-column halves one after the other, 2 chains per row in
 *    registers (24 for 12 rows, 2 B vectors, A broadcast per vdpbf16ps). A 12-row panel reads the
 *    B panel once per 12 rows, as the pairwise kernel does: a 6 x 32 tile with all 4 chains per
 *    row in registers read it twice as often, and in the shared-chunk frame (K panels up to 4096
 *    deep, B streaming from L2) ran ~3% slower than this;
 *  - joint (4 and 1 rows): both halves at once, 4 chains per row, for more independent chains.
 * Row r's word w of the block is ab[r * 16 + w]. */
#define R1(X) X(0)
#define R4(X) X(0) X(1) X(2) X(3)
#define R8(X) R4(X) X(4) X(5) X(6) X(7)
#define R12(X) R8(X) X(8) X(9) X(10) X(11)

#define A_EVEN(r) (__m512bh)_mm512_set1_epi32((int)ab[r * WORDS + 2 * g])
#define A_ODD(r) (__m512bh)_mm512_set1_epi32((int)ab[r * WORDS + 2 * g + 1])
#define FOLD(s, e, o) _mm512_store_ps(s, _mm512_add_ps(_mm512_load_ps(s), _mm512_add_ps(e, o)));
#define B_AT(w, h) (__m512bh)_mm512_loadu_si512(bb + (w) * NR + (h))

#define S_DECL(r) __m512 e##r, o##r;
#define S_ZERO(r) e##r = o##r = _mm512_setzero_ps();
#define S_STEP(r) e##r = _mm512_dpbf16_ps(e##r, A_EVEN(r), be), o##r = _mm512_dpbf16_ps(o##r, A_ODD(r), bo);
#define S_FOLD(r) FOLD(sums + r * 32 + h, e##r, o##r)
#define BLOCK_SPLIT(ROWLIST)                                                                        \
    for (int h = 0; h < 32; h += 16) {                                                              \
        /* A's words are broadcast again for each half (loads from L1): shared, GCC keeps the 192 \
         * broadcast vectors on the stack instead */                                                \
        __asm__("" : "+r"(ab));                                                                     \
        ROWLIST(S_ZERO)                                                                             \
        _Pragma("GCC unroll 8") for (int g = 0; g < WORDS / 2; g++) {                              \
            __m512bh be = B_AT(2 * g, h), bo = B_AT(2 * g + 1, h);                                  \
            ROWLIST(S_STEP)                                                                         \
        }                                                                                           \
        ROWLIST(S_FOLD)                                                                             \
    }

#define J_DECL(r) __m512 e##r##a, e##r##b, o##r##a, o##r##b;
#define J_ZERO(r) e##r##a = e##r##b = o##r##a = o##r##b = _mm512_setzero_ps();
#define J_STEP(r)                                                                                   \
    {                                                                                               \
        __m512bh x = A_EVEN(r), y = A_ODD(r);                                                       \
        e##r##a = _mm512_dpbf16_ps(e##r##a, x, be0), e##r##b = _mm512_dpbf16_ps(e##r##b, x, be1);  \
        o##r##a = _mm512_dpbf16_ps(o##r##a, y, bo0), o##r##b = _mm512_dpbf16_ps(o##r##b, y, bo1);  \
    }
#define J_FOLD(r) FOLD(sums + r * 32, e##r##a, o##r##a) FOLD(sums + r * 32 + 16, e##r##b, o##r##b)
#define BLOCK_JOINT(ROWLIST)                                                                        \
    ROWLIST(J_ZERO)                                                                                 \
    _Pragma("GCC unroll 8") for (int g = 0; g < WORDS / 2; g++) {                                  \
        __m512bh be0 = B_AT(2 * g, 0), be1 = B_AT(2 * g, 16), bo0 = B_AT(2 * g + 1, 0), bo1 = B_AT(2 * g + 1, 16); \
        ROWLIST(J_STEP)                                                                             \
    }                                                                                               \
    ROWLIST(J_FOLD)

/* MXCSR: exceptions masked, round to nearest even, FTZ (bit 15) and DAZ (bit 6). */
#define B32_MXCSR (0x1f80u | 0x8040u)

/* NAME: the micro-kernel (an A panel of ROWS rows); NAME##_at: the same over ROWS rows of an A
 * panel packed `astride` rows high (the streaming hooks' 16-row and 1-row panels), setting MXCSR
 * itself (own_csr) or running under the caller's setting of it, and prefetching per_block lines
 * of walk (when set) per block. */
#define DEFINE_KERNEL(NAME, ROWS, ROWLIST, DECL, BLOCK)                                             \
    static inline __attribute__((always_inline)) void NAME##_at(                                    \
        int64_t kpairs, const uint32_t *a, int64_t astride, const uint32_t *b, const tg_tile *t, bool own_csr, \
        tg_line_walk *walk, int64_t per_block) {                                                    \
        __attribute__((aligned(64))) float sums[ROWS * 32];                                         \
        for (int r = 0; r < ROWS; r++)                                                              \
            for (int h = 0; h < 32; h += 16)                                                        \
                _mm512_store_ps(sums + r * 32 + h, t->load ? _mm512_loadu_ps(t->acc + r * t->ldacc + h) \
                                                           : _mm512_setzero_ps());                  \
        unsigned csr = own_csr ? _mm_getcsr() : 0;                                                  \
        if (own_csr) _mm_setcsr(B32_MXCSR);                                                         \
        ROWLIST(DECL)                                                                               \
        for (int64_t p0 = 0; p0 < kpairs; p0 += WORDS) {                                            \
            const uint32_t *ab = a + p0 * astride, *bb = b + p0 * NR;                               \
            if (walk) tg_prefetch_lines(walk, per_block);                                           \
            BLOCK(ROWLIST)                                                                          \
        }                                                                                           \
        if (own_csr) _mm_setcsr(csr);                                                               \
        if (t->out) {                                                                               \
            __mmask32 m = col_mask32(t->cols);                                                      \
            for (int r = 0; r < t->rows; r++)                                                       \
                store_bf16x32(t->out + r * t->ldout, _mm512_load_ps(sums + r * 32),                 \
                              _mm512_load_ps(sums + r * 32 + 16), m, t->stream);                    \
        } else {                                                                                    \
            for (int r = 0; r < ROWS; r++)                                                          \
                for (int h = 0; h < 32; h += 16)                                                    \
                    _mm512_storeu_ps(t->acc + r * t->ldacc + h, _mm512_load_ps(sums + r * 32 + h)); \
        }                                                                                           \
    }                                                                                               \
    static void NAME(int64_t kpairs, const void *a, const void *b, const tg_tile *t) {              \
        NAME##_at(kpairs, a, ROWS, b, t, true, NULL, 0);                                            \
    }
DEFINE_KERNEL(kernel, MR, R12, S_DECL, BLOCK_SPLIT)
DEFINE_KERNEL(kernel_8, 8, R8, S_DECL, BLOCK_SPLIT)
DEFINE_KERNEL(kernel_4, 4, R4, J_DECL, BLOCK_JOINT)
DEFINE_KERNEL(kernel_1, 1, R1, J_DECL, BLOCK_JOINT)

/* ---- the few-row hook (skinny): B read once, in K chunks of a column strip packed into cache ----
 * Few-row products (M <= 16) on the packed route pack all of B into memory and read it back. Here a chunk of 128
 * k by a strip of up to 128 columns is packed into a 32 KiB buffer (L1; B's rows read in runs of
 * 256 bytes) and the micro-kernels run over its panels at once, the fp32 sums of the strip's rows
 * (up to 16) carried between chunks in an 8 KiB tile. (One 32-column panel at a time instead read
 * B in 64-byte pieces, which ran 1.3-3x slower than the pairwise order's streaming kernels;
 * strips of 256 columns, or chunks of 256 k, measured no faster.) A is one panel packed `astride`
 * rows high (16: the frame's skinny panel). One-row products have their own streaming kernel
 * (stream_block32_avx512.c, B in place, no packing). */
enum { ST_COLS = 128, ST_K = 128 };

/* 16 fp32 sums (the lanes in m) to dst, NaN stored as 0x7FC00000, as the frame's store_f32_tile
 * stores the accumulators. */
static inline void store_f32x16(float *dst, __m512 v, __mmask16 m) {
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    _mm512_mask_storeu_ps(dst, m, _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000))));
}

/* A strip's fp32 sums (acc, ST_COLS floats a row) to out32. */
static void store_acc_f32(const float *acc, int32_t rows, int64_t cols, float *out32, int64_t ldout) {
    for (int32_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j += 16)
            store_f32x16(out32 + r * ldout + j, _mm512_load_ps(acc + r * ST_COLS + j),
                         col_mask((int32_t)(cols - j < 16 ? cols - j : 16)));
}

/* out (bf16) or out32 (the fp32 sums), rows [0, rows) x columns [0, cols) of B's columns n0...;
 * B in any layout (pack_b_b32 reads any strides). */
static void stream_panels(int64_t K, const uint32_t *a, int64_t astride, int32_t rows, const tg_operand *B,
                          int64_t n0, int64_t cols, uint16_t *out, float *out32, int64_t ldout) {
    __attribute__((aligned(64))) uint32_t bp[ST_K / 2 * ST_COLS];
    __attribute__((aligned(64))) float acc[16 * ST_COLS];
    unsigned csr = _mm_getcsr(); /* the kernels' MXCSR once for the whole call */
    _mm_setcsr(B32_MXCSR);
    for (int64_t s0 = 0; s0 < cols; s0 += ST_COLS) {
        int64_t sw = cols - s0 < ST_COLS ? cols - s0 : ST_COLS;
        for (int64_t k0 = 0; k0 < K; k0 += ST_K) {
            int64_t kc = K - k0 < ST_K ? K - k0 : ST_K, kp = b32_pairs(kc);
            bool last = k0 + ST_K >= K;
            pack_b_b32(B, k0, kc, n0 + s0, sw, bp);
            /* the next chunk (this strip's next K, or the next strip's first), line by line in
             * runs of B's contiguous axis, a few lines per block the kernels compute (all of them
             * at the start of each kernel call stalled on full miss buffers: 19% of the time) */
            int64_t nk = last ? 0 : k0 + ST_K, ns = last ? s0 + ST_COLS : s0;
            int64_t nkc = K - nk < ST_K ? K - nk : ST_K, nsw = cols - ns < ST_COLS ? cols - ns : ST_COLS;
            tg_line_walk next = { .base = (const char *)(B->base + nk * B->s0 + (n0 + ns) * B->s1) };
            if (ns < cols && B->s1 == 1) next.run_stride = B->s0 * 2, next.runs = nkc, next.lines = (nsw * 2 + 63) / 64;
            else if (ns < cols) next.run_stride = B->s1 * 2, next.runs = nsw, next.lines = (nkc * 2 + 63) / 64;
            int64_t blocks = (sw + NR - 1) / NR * ((rows + MR - 1) / MR) * (kp / WORDS);
            int64_t per_block = (next.runs * next.lines + blocks - 1) / blocks;
            const uint32_t *ak = a + k0 / 2 * astride; /* block k0 / 32 of the panel */
            for (int64_t j0 = 0; j0 < sw; j0 += NR) {
                const uint32_t *bj = bp + j0 * kp;
                for (int32_t r0 = 0; r0 < rows; r0 += MR) {
                    int32_t h = rows - r0 < MR ? rows - r0 : MR;
                    tg_tile t = { .acc = acc + r0 * ST_COLS + j0, .ldacc = ST_COLS, .load = k0 > 0, .rows = h,
                                  .cols = (int32_t)(sw - j0 < NR ? sw - j0 : NR),
                                  .out = last && !out32 ? out + r0 * ldout + s0 + j0 : NULL, .ldout = ldout };
                    const uint32_t *ar = ak + r0 * WORDS;
                    if (h > 8) kernel_at(kp, ar, astride, bj, &t, false, &next, per_block);
                    else if (h > 4) kernel_8_at(kp, ar, astride, bj, &t, false, &next, per_block);
                    else if (h > 1) kernel_4_at(kp, ar, astride, bj, &t, false, &next, per_block);
                    else kernel_1_at(kp, ar, astride, bj, &t, false, &next, per_block);
                }
            }
        }
        if (out32) store_acc_f32(acc, rows, sw, out32 + s0, ldout);
    }
    _mm_setcsr(csr);
}

static void skinny(int64_t K, const uint32_t *a, int32_t rows, const uint16_t *b, int64_t ldb, int32_t cols,
                   uint16_t *out, int64_t ldout) {
    tg_operand B = { b, ldb, 1 };
    stream_panels(K, a, 16, rows, &B, 0, cols, out, NULL, ldout);
}

static void skinny_any(int64_t K, const uint32_t *a, int32_t rows, const tg_operand *B, int64_t n0, int32_t cols,
                       uint16_t *out, float *out32, int64_t ldout) {
    stream_panels(K, a, 16, rows, B, n0, cols, out, out32, ldout);
}

/* ---- the one-row hook (rowvec): B read in place, A's row packed by pack_a_b32 (one row of 16
 * words per block, zero-padded to whole blocks) ----
 * Each block's 16 B words per column are made as packing makes them, in registers: column-major B
 * (x @ W.T, a decoding step's projections): a column's 32 elements are one 64-byte load, put in
 * the block's word order by permute_groups, and 16 columns' words transposed into 16 vectors
 * (word w of each column in one); row-major B: rows k0+4g and k0+4g+2 interleaved into the even
 * chain's words, rows k0+4g+1 and k0+4g+3 into the odd chain's. Then per chain 8 vdpbf16ps from +0
 * and the fold, as the packed kernels do. (The FMA stream kernel, stream_block32_avx512.c, ran
 * 1.2-1.33x the pairwise order's vdpbf16ps time on column-major B: two FMAs and two widenings per
 * pair against one vdpbf16ps, and twice the chain length.) */
/* Column-major B is read 32 columns (a group: 32 rows of W, contiguous) at a time; each load
 * prefetches the same place in the next group, one stream 64 KiB ahead for K = 1024 (measured
 * against 512 bytes ahead in each column: docs/performance.md, "Session 22"), and a row starts
 * with the first group's first COL_HEAD blocks fetched. */
enum { COL_HEAD = 8 };
static inline __m512i col_words(const uint16_t *src, int64_t next_group, int64_t left, bool in) {
    _mm_prefetch((const char *)(src + next_group), TG_PREFETCH_HINT);
    if (!in) return _mm512_setzero_si512();
    return permute_groups(left >= 32 ? _mm512_loadu_si512((const void *)src) : _mm512_maskz_loadu_epi16(elems_mask(left), src));
}

/* 16 columns (cols of them real) of one block into acc. */
static inline __attribute__((always_inline)) __m512 cols_block(const uint32_t *aw, const uint16_t *col, int64_t s1,
                                                                int64_t left, int64_t cols, __m512 acc) {
    __m512i r[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) r[c] = col_words(col + c * s1, 32 * s1, left, c < cols);
    transpose16(r);
    __m512 ev = _mm512_setzero_ps(), od = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        ev = _mm512_dpbf16_ps(ev, (__m512bh)_mm512_set1_epi32((int)aw[2 * g]), (__m512bh)r[2 * g]);
        od = _mm512_dpbf16_ps(od, (__m512bh)_mm512_set1_epi32((int)aw[2 * g + 1]), (__m512bh)r[2 * g + 1]);
    }
    return _mm512_add_ps(acc, _mm512_add_ps(ev, od));
}

/* 16 sums of one row to out (bf16, RNE) or out32 (the fp32 accumulators, NaN canonical as the
 * frame's store_f32_tile stores them). */
static inline void store_sums(uint16_t *out, float *out32, int64_t j, __m512 acc, __mmask16 cols) {
    if (!out32) {
        store_bf16x16(out + j, acc, cols);
        return;
    }
    store_f32x16(out32 + j, acc, cols);
}

static void rowvec_cols(const uint32_t *aw, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out,
                        float *out32) {
    int64_t blocks = (K + 31) / 32;
    const uint16_t *first = B->base + n0 * B->s1;
    for (int64_t c = 0; c < (nb < 32 ? nb : 32); c++)
        for (int64_t blk = 0; blk < (blocks < COL_HEAD ? blocks : COL_HEAD); blk++)
            _mm_prefetch((const char *)(first + c * B->s1 + 32 * blk), TG_PREFETCH_HINT);
    for (int64_t j0 = 0; j0 < nb; j0 += 32) {
        int64_t c0 = nb - j0 < 16 ? nb - j0 : 16, c1 = nb - j0 - 16 < 0 ? 0 : nb - j0 - 16 < 16 ? nb - j0 - 16 : 16;
        const uint16_t *col = B->base + (n0 + j0) * B->s1;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        for (int64_t blk = 0; blk < blocks; blk++) { /* the two 16-column groups' chains overlap */
            acc0 = cols_block(aw + WORDS * blk, col + 32 * blk, B->s1, K - 32 * blk, c0, acc0);
            acc1 = cols_block(aw + WORDS * blk, col + 16 * B->s1 + 32 * blk, B->s1, K - 32 * blk, c1, acc1);
        }
        store_sums(out, out32, j0, acc0, col_mask((int32_t)c0));
        if (c1) store_sums(out, out32, j0 + 16, acc1, col_mask((int32_t)c1));
    }
}

/* Row-major B: 64 columns (two 32-column halves) through all of K. Row k of the block is read
 * only when k < K (the padding is +0 in A and B alike). */
static void rowvec_rows(const uint32_t *aw, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out,
                        float *out32) {
    enum { AHEAD = 8 }; /* rows fetched ahead */
    const uint16_t *b = B->base + n0;
    int64_t ldb = B->s0, blocks = (K + 31) / 32;
    for (int64_t j0 = 0; j0 < nb; j0 += 64) {
        __mmask32 m[2] = { col_mask32((int32_t)(nb - j0)), col_mask32((int32_t)(nb - j0 - 32)) };
        __m512 acc[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
        for (int64_t blk = 0; blk < blocks; blk++) {
            __m512 ev[4], od[4];
            for (int i = 0; i < 4; i++) ev[i] = _mm512_setzero_ps(), od[i] = _mm512_setzero_ps();
            for (int g = 0; g < 8; g++) {
                int64_t k = 32 * blk + 4 * g;
                __m512bh ae = (__m512bh)_mm512_set1_epi32((int)aw[WORDS * blk + 2 * g]);
                __m512bh ao = (__m512bh)_mm512_set1_epi32((int)aw[WORDS * blk + 2 * g + 1]);
                for (int h = 0; h < 2; h++) {
                    if (!m[h]) continue;
                    __m512i x[4];
                    for (int e = 0; e < 4; e++) {
                        const uint16_t *row = b + (k + e) * ldb + j0 + 32 * h;
                        _mm_prefetch((const char *)(row + AHEAD * ldb), TG_PREFETCH_HINT);
                        x[e] = k + e < K ? _mm512_maskz_loadu_epi16(m[h], row) : _mm512_setzero_si512();
                    }
                    __m512i lo, hi; /* the even chain: k (high halves, earlier) and k + 2 (low) */
                    interleave_rows(x[2], x[0], &lo, &hi);
                    ev[2 * h] = _mm512_dpbf16_ps(ev[2 * h], ae, (__m512bh)lo);
                    ev[2 * h + 1] = _mm512_dpbf16_ps(ev[2 * h + 1], ae, (__m512bh)hi);
                    interleave_rows(x[3], x[1], &lo, &hi); /* the odd chain: k + 1, k + 3 */
                    od[2 * h] = _mm512_dpbf16_ps(od[2 * h], ao, (__m512bh)lo);
                    od[2 * h + 1] = _mm512_dpbf16_ps(od[2 * h + 1], ao, (__m512bh)hi);
                }
            }
            for (int i = 0; i < 4; i++) acc[i] = _mm512_add_ps(acc[i], _mm512_add_ps(ev[i], od[i]));
        }
        for (int i = 0; i < 4; i++) {
            int64_t c = nb - j0 - 16 * i;
            if (c > 0) store_sums(out, out32, j0 + 16 * i, acc[i], col_mask((int32_t)(c < 16 ? c : 16)));
        }
    }
}

static bool rowvec_to(const uint32_t *aw, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out,
                      float *out32) {
    if (B->s1 != 1 && B->s0 != 1) return false;
    unsigned csr = _mm_getcsr(); /* the fold's vaddps under the kernels' MXCSR */
    _mm_setcsr(B32_MXCSR);
    if (B->s0 == 1 && B->s1 != 1) rowvec_cols(aw, B, K, n0, nb, out, out32);
    else rowvec_rows(aw, B, K, n0, nb, out, out32);
    _mm_setcsr(csr);
    return true;
}

static bool rowvec(const uint32_t *aw, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    return rowvec_to(aw, B, K, n0, nb, out, NULL);
}

static bool rowvec_f32(const uint32_t *aw, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, float *out) {
    return rowvec_to(aw, B, K, n0, nb, NULL, out);
}

static int available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

/* The main kernel over L1-resident panels of one block: its own instruction stream's rate. */
static double peak(int64_t iters) {
    static uint32_t a[WORDS * MR] __attribute__((aligned(64))), b[WORDS * NR] __attribute__((aligned(64)));
    for (int i = 0; i < WORDS * MR; i++) a[i] = 0x3f803f80u;
    for (int i = 0; i < WORDS * NR; i++) b[i] = 0x00010001u;
    float acc[MR * NR] __attribute__((aligned(64))) = { 0 };
    tg_tile t = { .acc = acc, .ldacc = NR, .load = 1 };
    for (int64_t i = 0; i < iters; i++) kernel(WORDS, a, b, &t);
    volatile float sink = acc[0];
    (void)sink;
    return (double)iters * WORDS * 2 * MR * NR * 2;
}

const tg_ukernel tg_ukernel_avx512bf16_block32 = {
    .name = "avx512bf16_block32", .mr = MR, .nr = NR, .a_entry_bytes = 4, .b_entry_bytes = 4, .kc = KC,
    .pack_a = pack_a_b32, .pack_b = pack_b_b32, .kernel = kernel,
    .short_kernels = { { 8, kernel_8 }, { 4, kernel_4 }, { 1, kernel_1 } }, .skinny = skinny, .skinny_any = skinny_any, .rowvec = rowvec, .rowvec_f32 = rowvec_f32,
    .available = available, .peak = peak,
    .order = TG_UK_ORDER_BLOCK32, .kpair_align = B32_PAIRS };
