/* The portable GEMM frame (BLIS-style), shared by its files: cache blocking, packing through views,
 * threading. No ISA code here: the micro-kernel comes from the selected variant (ukernel.h).
 * variants.c chooses the variant, workspace.c holds the scratch, plan.c decides a product's path
 * and dispatches it, gemm_packed.c is the packed path, stream.c the one-row and few-row paths,
 * probes.c the peak and read probes, copy_view.c the view copy.
 *
 * Work split: the output is cut into blocks of mc x nc; each block is one pool task and owns an
 * fp32 accumulator tile that is carried across all K panels (so K blocking never changes the
 * order of additions), then rounded to bf16 once. Results do not depend on the split, the thread
 * count or which worker ran which block. */
#ifndef TGRAD_CPU_FRAME_H
#define TGRAD_CPU_FRAME_H

#include <string.h>

#include "../internal.h"
#include "epilogue.h"
#include "ukernel.h"

#define SMALL_MNK (1 << 21) /* below this many multiply-adds the calling thread works alone */
/* Few-row products stream B once per pass of 12 rows past 16 rows while B has at least this many
 * elements (K x N): see stream.c. */
#define SKINNY_PASS_B (1024.0 * 1024.0)

static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The pairs one packed line of a K panel of kc elements holds: (kc + 1) / 2, rounded up to the
 * variant's block for a block32 variant (ukernel.h: its panels are zero-padded to whole blocks). */
static inline int64_t tg_panel_pairs(const tg_ukernel *uk, int64_t kc) {
    int64_t kp = (kc + 1) / 2;
    return uk->kpair_align > 1 ? round_up(kp, uk->kpair_align) : kp;
}

/* The packed kernels of a call: `fn` for panels of mr rows (uk->kernel, or a short kernel when
 * all of M is short), `tail` for M's last panel when it has fewer rows (the shortest kernel that
 * holds them: 127 rows compute 10 x 12 + 8, not 11 x 12). Every block and chunk starts at a
 * multiple of mr, so only the last rows of M form a tail panel (gemm_packed.c chooses them, and
 * packs rows for them). */
typedef struct {
    tg_ukernel_fn fn, tail;
    int32_t mr, tail_mr;
} tg_kernels;

static inline tg_ukernel_fn tg_kernel_pick(const tg_kernels *k, int32_t rows) { return rows < k->mr ? k->tail : k->fn; }
TG_HIDDEN tg_kernels tg_cpu_kernels_for(const tg_ukernel *uk, int64_t M);
/* Rows [r0, r0 + rows) of A packed into panels of k->mr rows, a last panel of k->tail_mr rows:
 * (rows / mr * mr + (rows % mr ? tail_mr : 0)) packed rows. */
TG_HIDDEN void tg_cpu_pack_rows(const tg_ukernel *uk, const tg_kernels *k, const tg_operand *A, int64_t r0,
                                int64_t rows, int64_t k0, int64_t kc, char *dst);
static inline int64_t tg_packed_rows(const tg_kernels *k, int64_t rows) {
    return rows / k->mr * k->mr + (rows % k->mr ? k->tail_mr : 0);
}

/* Software prefetch of the next K panel's B block while this one computes, so its packing reads
 * cache instead of memory and the memory traffic overlaps the arithmetic (without it, packing B
 * from memory was ~23% of 128x4096x4096): the block's runs of the contiguous axis, a few lines
 * per kernel call so the requests spread over the panel. */
typedef struct {
    tg_line_walk walk;
    int64_t per_call;
} tg_b_prefetch;

static inline void tg_b_prefetch_init(tg_b_prefetch *P, const tg_operand *B, int64_t k0, int64_t kc, int64_t n0,
                                      int64_t nb, int64_t calls) {
    *P = (tg_b_prefetch){ .per_call = 0 };
    if (kc <= 0 || calls <= 0) return;
    const uint16_t *first = B->base + k0 * B->s0 + n0 * B->s1;
    int64_t run_elems, runs, stride;
    if (B->s1 == 1) run_elems = nb, runs = kc, stride = B->s0;      /* row-major: rows of B */
    else if (B->s0 == 1) run_elems = kc, runs = nb, stride = B->s1; /* column-major: columns */
    else return;
    uintptr_t start = (uintptr_t)first & ~(uintptr_t)63;
    P->walk = (tg_line_walk){ .base = (const char *)start, .run_stride = stride * 2, .runs = runs,
                              .lines = (int64_t)(((uintptr_t)first - start + (uintptr_t)run_elems * 2u + 63) / 64) };
    P->per_call = (runs * P->walk.lines + calls - 1) / calls;
}

/* Tasks [0, ntasks) on the pool, or on this thread alone when one thread (or one task) is all
 * there is. */
static inline void run_tasks(int64_t ntasks, int32_t threads, tg_task_fn fn, void *arg) {
    if (threads == 1 || ntasks == 1) {
        for (int64_t t = 0; t < ntasks; t++) fn(t, 0, arg);
    } else {
        tg_pool_run(ntasks, fn, arg);
    }
}

/* ---- variant selection (variants.c) ---- */
/* The selection in one word (variants.c), read once per plan. */
TG_HIDDEN int tg_cpu_selected(void);
TG_HIDDEN const tg_ukernel *tg_cpu_gemm_variant(int sel);
TG_HIDDEN const tg_ukernel *tg_cpu_stream_variant(int sel);
/* The block32 order's kernels (ukernel_amx.c where the CPU and OS run AMX, else the portable
 * reference; the portable one also where the portable variant is forced). */
TG_HIDDEN const tg_ukernel *tg_cpu_block32_variant(int sel);
/* ... and for its one-row products, which stream B in place (NULL: none, the packed frame). */
TG_HIDDEN const tg_ukernel *tg_cpu_block32_stream_variant(int sel);
/* ... and for its few-row products over row-major B of b_elements (K x N), up to *max_rows rows
 * (NULL: none, the packed frame). */
TG_HIDDEN const tg_ukernel *tg_cpu_block32_skinny_variant(int sel, double b_elements, int64_t *max_rows);
/* The packed products' variant for the calling thread's matmul order now (the probes time it). */
TG_HIDDEN const tg_ukernel *tg_cpu_order_current(void);
TG_HIDDEN const tg_ukernel *tg_cpu_current(void); /* the packed products' variant now */
TG_HIDDEN double tg_cpu_now_s(void);

/* tgrad_debug_cpu_blocking's TGRAD_DEBUG_CPU_NO_GEMM_T (gemm_packed.c): plan.c skips route gemm_t */
TG_HIDDEN bool tg_cpu_debug_no_gemm_t(void);
/* ... its TGRAD_DEBUG_CPU_NO_DIRECT_A: no left operand read in place (gemm_t.c's streaming off too) */
TG_HIDDEN bool tg_cpu_debug_no_direct_a(void);

/* ---- per-thread workspace (workspace.c) ---- */
typedef struct {
    void *acc, *apack, *bpack, *tout;
    size_t acc_cap, a_cap, b_cap, t_cap;
} workspace;
/* The calling thread's workspace with at least these bytes in each buffer; NULL when out of memory. */
TG_HIDDEN workspace *tg_cpu_workspace(size_t acc, size_t a, size_t b);
/* The calling thread's buffer for a product's transposed result (plan.c's PATH_GEMM_T), at least
 * `bytes`, apart from the packing buffers; NULL when out of memory. */
TG_HIDDEN void *tg_cpu_transpose_scratch(size_t bytes);

/* ---- the paths (stream.c, gemm_packed.c) ----
 * Each applies the epilogue ep (NULL: none) to every block of out right after the worker that
 * computed the block rounded it to bf16, while the block is still in cache. */
/* rowvec: M one-row products (out [M, N]); out32 (not NULL: out is unused) takes the fp32
 * accumulators, through uk->rowvec_f32 */
TG_HIDDEN tgrad_status tg_cpu_matmul_rowvec(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B, int64_t M,
                                            int64_t K, int64_t N, int32_t threads, uint16_t *out, float *out32,
                                            const tg_chain *ep);
/* One row's columns [n0, n0 + nb) of a one-row product (A's packed pairs a, B in place) into row
 * r of out [., N] with ep applied, or its fp32 sums into out32 (stream.c; the strips of rowvec and
 * of the shared-A batches) */
TG_HIDDEN void tg_cpu_rowvec_block(const tg_ukernel *uk, const uint32_t *a, const tg_operand *B, int64_t K, int64_t n0,
                                   int64_t nb, int64_t r, int64_t N, uint16_t *out, float *out32, const tg_chain *ep);
/* ---- products whose A every batch shares (shared_a.c): batch i's B at B->base + boff[i], out
 * [batch, M, N]; A packed once ---- */
/* one row: rowvec per batch */
TG_HIDDEN tgrad_status tg_cpu_matmul_rowvec_shared(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B,
                                                   const int64_t *boff, int64_t batch, int64_t K, int64_t N,
                                                   int32_t threads, uint16_t *out, float *out32, const tg_chain *ep);
/* M rows: all of A's K panels packed, each batch's B packed panel by panel; only where
 * tg_cpu_gemm_shared_fits (the packed A and one batch's accumulators bounded) */
enum { TG_SHARED_A_MAX_N = 512, TG_SHARED_A_MAX_BYTES = 8 << 20 };
TG_HIDDEN bool tg_cpu_gemm_shared_fits(const tg_ukernel *uk, int64_t M, int64_t K, int64_t N);
TG_HIDDEN tgrad_status tg_cpu_matmul_gemm_shared(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B,
                                                 const int64_t *boff, int64_t batch, int64_t M, int64_t K, int64_t N,
                                                 int32_t threads, uint16_t *out, float *out32, const tg_chain *ep);
TG_HIDDEN tgrad_status tg_cpu_matmul_skinny(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B, int64_t M,
                                            int64_t K, int64_t N, int32_t threads, uint16_t *out, float *out32, const tg_chain *ep);
/* The packed path writes bf16 to out or, when out32 is set instead (out NULL, ep NULL), the fp32
 * accumulators: the micro-kernels store them to acc (no bf16 out) and the frame copies each
 * finished tile (store_f32_tile), so every variant's kernels serve both without a change to
 * their bf16 store. */
TG_HIDDEN tgrad_status tg_cpu_gemm_packed(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B, int64_t M,
                                          int64_t N, int64_t K, int32_t threads, uint16_t *out, float *out32,
                                          const tg_chain *ep);

/* Route gemm_t's streaming form (gemm_t.c): out [M, N] = x @ B for a column-major B, W = B's
 * columns read in place as kernel_direct's left operand, x^T packed once; out32 instead of out
 * takes the fp32 accumulators (ep NULL). Taken where tg_cpu_gemm_t_streams says the packed x^T
 * fits beside the streamed rows in L2. */
TG_HIDDEN bool tg_cpu_gemm_t_streams(const tg_ukernel *uk, int64_t M, int64_t K);
TG_HIDDEN tgrad_status tg_cpu_gemm_t_stream(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B, int64_t M,
                                            int64_t N, int64_t K, int32_t threads, uint16_t *out, float *out32,
                                            const tg_chain *ep);
/* The most accumulators one micro-kernel tile holds (mr x nr of every variant: 12 x 32 at most). */
enum { TILE_MAX = 1024 };

/* One fp32 accumulator into a float32 result: the value unrounded, NaN made the canonical
 * 0x7FC00000 (which NaN an instruction gives differs between CPUs; the bf16 store canonicalizes
 * the same way). */
static inline void store_f32_canonical(const float *from, float *to) {
    uint32_t u;
    memcpy(&u, from, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u;
    memcpy(to, &u, 4);
}

/* rows x cols fp32 accumulators of a finished tile (row stride ldacc) into a float32 result (row
 * stride ld), each by store_f32_canonical. */
static inline void store_f32_tile(const float *acc, int64_t ldacc, float *dst, int64_t ld, int32_t rows, int32_t cols) {
    for (int32_t r = 0; r < rows; r++)
        for (int32_t j = 0; j < cols; j++) store_f32_canonical(acc + r * ldacc + j, dst + r * ld + j);
}

#endif
