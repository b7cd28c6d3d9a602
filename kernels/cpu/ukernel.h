/* The one interface every CPU variant implements (BLIS-style): two packing routines and a
 * micro-kernel over packed panels.
 *
 * Packing reads an operand block through its view (any strides) and writes panels in the
 * variant's own format; subnormal inputs become signed zeros (DAZ) and K is padded to even with
 * +0 in both operands. A k-pair is the unit along K.
 *
 * The micro-kernel computes one MR x NR tile over kpairs pairs, for each output:
 *     acc = (tile->load ? tile->acc : +0); for each pair: acc = step(acc, A_odd * B_odd);
 *                                                            acc = step(acc, A_even * B_even)
 * step() is the numerics contract (docs/numerics.md): the exact sum rounded to nearest-even fp32,
 * then flushed to a signed zero when its magnitude is below 2^-126 (tininess after rounding, as
 * x86 does). When tile->out is set (the last K panel) it writes the rows x cols valid outputs as
 * bf16 (RNE, NaN made 0x7FC0) there; otherwise it stores the fp32 accumulators to tile->acc. */
#ifndef TGRAD_CPU_UKERNEL_H
#define TGRAD_CPU_UKERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { TG_UK_ORDER_PAIRWISE = 0, TG_UK_ORDER_BLOCK32 = 1 }; /* tgrad.h's TGRAD_MATMUL_ORDER_* */

typedef struct tg_operand {
    const uint16_t *base; /* buffer start + view offset */
    int64_t s0, s1;       /* strides of the two axes, in elements */
} tg_operand;

typedef struct tg_tile {
    float *acc;       /* fp32 accumulators carried between K panels, row stride ldacc */
    int64_t ldacc;
    int load;         /* start from acc (a later K panel) instead of +0 */
    uint16_t *out;    /* last K panel: bf16 results here, row stride ldout */
    int64_t ldout;
    int32_t rows, cols; /* valid part of the tile (for out) */
    int stream;       /* a hint: out is big and not read soon, so whole lines may bypass the caches
                       * (non-temporal stores; the frame fences them before the job ends) */
} tg_tile;

/* Pack A rows [m0, m0+mb) x k [k0, k0+kc) into ceil(mb/mr) panels of kpairs x mr entries. */
typedef void (*tg_pack_a_fn)(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr,
                             void *dst);
/* Pack B k [k0, k0+kc) x columns [n0, n0+nb) into ceil(nb/NR) panels of kpairs x NR entries. */
typedef void (*tg_pack_b_fn)(const tg_operand *B, int64_t k0, int64_t kc, int64_t n0, int64_t nb, void *dst);
typedef void (*tg_ukernel_fn)(int64_t kpairs, const void *a, const void *b, const tg_tile *tile);

typedef struct tg_ukernel {
    const char *name;       /* variant name; its file is ukernel_<name>.c */
    int32_t mr, nr;
    int32_t a_entry_bytes;  /* bytes of one packed (pair, row) entry of A */
    int32_t b_entry_bytes;  /* bytes of one packed (pair, column) entry of B */
    int32_t kc;             /* K panel depth (even): a B micro-panel of kc/2 x nr entries stays in L1 */
    tg_pack_a_fn pack_a;
    tg_pack_b_fn pack_b;
    tg_ukernel_fn kernel;
    /* optional: the same contract for shorter tiles, so a short M computes no padded rows */
    struct { int32_t rows; tg_ukernel_fn fn; } short_kernels[3];
    /* optional: out[0, n0 .. n0+nb) of a one-row problem over all K, streaming B once. A's row
     * arrives packed as k-pair words (one panel of height 1); false when B's layout is not one
     * the variant streams (the frame then packs as usual). */
    bool (*rowvec)(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out);
    /* optional: rowvec's fp32 accumulators instead of their bf16 rounding (NaN stored as
     * 0x7FC00000, as the frame's store_f32_tile does): a float32 result of one row */
    bool (*rowvec_f32)(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, float *out);
    /* optional: out rows [0, rows) (rows <= 16), columns [0, cols) of a short-M
     * problem over all of K, reading row-major B in place at b (row stride ldb) and A from one
     * pack_a panel of 16 rows (a, zero-padded). B is streamed once for all the rows. Same results
     * as the packed kernels (only for a variant whose hardware treats subnormal inputs as zero). */
    void (*skinny)(int64_t K, const uint32_t *a, int32_t rows, const uint16_t *b, int64_t ldb, int32_t cols,
                   uint16_t *out, int64_t ldout);
    /* with skinny: the most rows the frame sends it where B is not small, past 16 in passes of 12
     * rows (B streamed once per pass), as far as that measured faster than the packed frame */
    int32_t skinny_rows;
    /* optional, with skinny: the same over B in any layout, columns [n0, n0 + cols) of B, storing
     * bf16 to out or the fp32 accumulators to out32 (NaN as 0x7FC00000, as the frame's
     * store_f32_tile stores them), out and out32 at the first of those columns: a few rows times
     * a small column-major B (a decode step's attention scores over the KV cache), B read once
     * for all the rows */
    void (*skinny_any)(int64_t K, const uint32_t *a, int32_t rows, const tg_operand *B, int64_t n0, int32_t cols,
                       uint16_t *out, float *out32, int64_t ldout);
    /* optional: the main kernel (mr rows) reading row-major A in place instead of packed, over
     * kc elements of each row ((kc + 1) / 2 pairs of the packed B panel): row r's pair p is the
     * 32-bit word at a + r * lda + 2p (lda in elements); for an odd kc the last pair is element
     * kc - 1 with +0 as its odd half, as packing makes it (nothing past the row is read). Only
     * for a variant whose hardware treats subnormal inputs as zero, so the result is the packed
     * kernel's. Spares packing A: B is then packed once per call. */
    void (*kernel_direct)(int64_t kc, const uint16_t *a, int64_t lda, const void *b, const tg_tile *tile);
    int (*available)(void); /* does this CPU (and OS) run it */
    /* The order the kernels compute (TGRAD_MATMUL_ORDER_*; 0 = pairwise, the packed layouts
     * above). A block32 variant (docs/numerics.md, "The block32 order") packs each K panel in
     * blocks of kpair_align pairs (16: 32 elements), zero-padded, and its kernels take a kpairs
     * that is a multiple of it; the frame sizes and offsets panels with that padding. */
    int32_t order, kpair_align;
    /* optional: called on the worker thread before (after) it runs a task's kernels, e.g. to load
     * (release) AMX's tile configuration, which is per-thread state other code may change */
    void (*begin)(void), (*end)(void);
    /* optional (block32 variants): in the shared-chunk path, run each K panel in sub-panels of
     * ksub elements (a multiple of 2 * kpair_align), a column micro-panel at a time, so that its
     * B sub-panel stays in L1 while the rows' A sub-panels stream from L2 (the chunk's panels can
     * be 4096 deep; the per-block path's panels are kc deep already). 0: whole panels. */
    int32_t ksub;
    /* with kernel_direct: read A in place whatever its row stride (a tile load reads each row's
     * block once, so rows sharing an L1 set cost nothing; see gemm_packed.c) */
    bool direct_any_stride;
    /* Peak probe: run the variant's core instruction stream for `iters` iterations on this
     * thread; returns the floating-point operations done (2 per multiply-add). */
    double (*peak)(int64_t iters);
} tg_ukernel;

/* A walk over the whole 64-byte lines of `runs` runs (rows or columns) `run_stride` bytes apart,
 * `lines` lines each from `base`, in run order (one run's lines back to back: the order memory
 * streams best): software prefetch for blocks the hardware prefetcher would not follow.
 * tg_prefetch_lines issues the next n. Prefetching never faults, so a run's edges may overshoot.
 *
 * Software prefetches from memory go to L2 (TG_PREFETCH_HINT, prefetcht1), not L1: a prefetch
 * into L1 holds one of its few miss buffers until the line arrives, so fewer lines are in flight
 * (AMD Zen 4, 2 threads, paired in one process against prefetcht0: 1x4096x4096 0.87 -> 0.50 ms
 * with B partly in L3, 1x8192x8192 6.19 -> 5.56 ms, 4096x4096x1 -20%, 16x4096x4096 -12%,
 * 128x4096x4096 -3.5%; 2048^3 and 4096^3 unchanged). */
#define TG_PREFETCH_HINT _MM_HINT_T1
#define TG_PREFETCH_LOCALITY 2 /* __builtin_prefetch's spelling of prefetcht1 */
typedef struct {
    const char *base;
    int64_t run_stride, lines, runs, run, line;
} tg_line_walk;

static inline void tg_prefetch_lines(tg_line_walk *w, int64_t n) {
    for (int64_t i = 0; i < n && w->run < w->runs; i++) {
        __builtin_prefetch(w->base + w->run * w->run_stride + 64 * w->line, 0, TG_PREFETCH_LOCALITY);
        if (++w->line == w->lines) w->line = 0, w->run++;
    }
}

/* Packing helpers live in headers that a variant's file includes (compiled with its target
 * flags); a variant uses some of them. */
#define TG_PACK_FN static __attribute__((unused))

extern const tg_ukernel tg_ukernel_portable, tg_ukernel_portable_block32;
#if defined(TGRAD_HAVE_X86_VARIANTS)
extern const tg_ukernel tg_ukernel_avx512f_block32_stream, tg_ukernel_avx512f_block32;
double tg_avx512f_fma_peak(int64_t iters); /* ukernel_avx512f.c: both avx512f kernels' probe */
extern const tg_ukernel tg_ukernel_avx2_block32, tg_ukernel_avx2_block32_stream;
double tg_avx2_fma_peak(int64_t iters); /* ukernel_avx2.c: both avx2 kernels' probe */
#endif
#if defined(TGRAD_HAVE_AMX_VARIANT)
extern const tg_ukernel tg_ukernel_amx;
const char *tg_amx_unavailable(void); /* why AMX does not run here, or NULL */
#endif
#if defined(TGRAD_HAVE_X86_VARIANTS)
extern const tg_ukernel tg_ukernel_avx512bf16, tg_ukernel_avx512f, tg_ukernel_avx2;
extern const tg_ukernel tg_ukernel_avx512bf16_block32; /* the block32 order with vdpbf16ps */
#endif
#if defined(TGRAD_HAVE_NEON_VARIANT)
extern const tg_ukernel tg_ukernel_neon, tg_ukernel_neon_block32;
#endif
double tg_neon_fma_peak(int64_t iters); /* ukernel_neon.c (aarch64): both neon kernels' probe */

#endif
