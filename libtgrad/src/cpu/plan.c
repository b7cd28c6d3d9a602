/* A CPU product's plan: the path and variant, decided once (the scheduler keeps it in the step),
 * named for explain and the recorded route, and run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "frame.h"

/* The dispatch decision, made once per step by the scheduler (tg_cpu_matmul_plan_make): the
 * route explain names and realize records is the one tg_cpu_matmul_run executes. */
typedef enum { PATH_EMPTY, PATH_ZEROS, PATH_ROWVEC, PATH_SKINNY, PATH_GEMM, PATH_GEMM_T } cpu_path;

/* The batch axes of a plan: extent-1 axes dropped (they move no operand), so that a product
 * whose batch is 1 runs exactly as the 2-D one. */
static void plan_batch(const tg_view *av, const tg_view *bv, tg_cpu_matmul_plan *P) {
    P->batch = 1;
    for (int32_t i = 0; i + 2 < av->ndim; i++) {
        P->batch *= av->shape[i]; /* the output's extents: their product fits (view.c's size rule) */
        if (av->shape[i] == 1) continue;
        P->bshape[P->bdims] = av->shape[i];
        P->a_bstrides[P->bdims] = av->strides[i], P->b_bstrides[P->bdims] = bv->strides[i];
        P->bdims++;
    }
}

/* A right operand shared by every batch (stride 0 along each batch axis) and a left one whose
 * batch axes step through its rows as one axis: the batch is one product of batch x M rows,
 * which reads B once instead of once per batch. The bytes are the same: each output's sum reads
 * only its row of A and its column of B, in the documented order, on every path. Sets A's row
 * stride for the merged rows. */
static bool merge_rows(tg_cpu_matmul_plan *P) {
    if (P->bdims == 0) return false;
    int64_t s0 = P->M > 1 ? P->a_strides[0] : P->a_bstrides[P->bdims - 1], step;
    if (tg_mul_ovf(s0, P->M, &step)) return false;
    for (int32_t d = P->bdims - 1; d >= 0; d--)
        if (P->b_bstrides[d] != 0 || P->a_bstrides[d] != step || tg_mul_ovf(step, P->bshape[d], &step)) return false;
    P->a_strides[0] = s0;
    return true;
}

/* Every batch reads the same A (a [1, K] row times a stack of B matrices, a packed weight's panels). */
static bool a_shared(const tg_cpu_matmul_plan *P) {
    for (int32_t d = 0; d < P->bdims; d++)
        if (P->a_bstrides[d] != 0) return false;
    return P->bdims > 0;
}

_Static_assert(TG_UK_ORDER_BLOCK32 == TGRAD_MATMUL_ORDER_BLOCK32, "ukernel.h's order numbers are tgrad.h's");

/* A few rows times a column-major B (x @ W.T) on a variant that reads A's rows in place at any
 * stride (AMX): computed as D = B^T A^T, W's rows read in place as the left operand and only x
 * packed, instead of packing all of W for a few rows; out = D^T. Each output is the same sum of
 * the same exact products in the same order (a product's operands commute exactly): the same
 * bytes. Up to T_ROWS rows, where B is big enough for its packing to matter (measured:
 * docs/performance.md, "Session 21: a few rows times W.T"); one row too for a float32 result
 * where no one-row kernel stores the fp32 sums (rowvec_f32, ukernel.h). */
enum { T_ROWS = 128 };
static bool transposed_pays(const tg_cpu_matmul_plan *P) {
    bool f32 = P->out_dtype == TGRAD_DTYPE_F32;
    return P->uk->kernel_direct && P->uk->direct_any_stride && !P->swapped && !tg_cpu_debug_no_gemm_t() &&
           P->M >= (f32 ? 1 : 2) && P->M <= T_ROWS && P->a_strides[1] == 1 && P->b_strides[0] == 1 &&
           (double)P->K * (double)P->N >= 65536.0;
}

/* A one-row product is bound by streaming B, not by its multiply-adds: it is shared across the
 * pool from this many elements of B (below). */
enum { ROWVEC_SHARE = 1 << 17 };

/* A batch of small products is spread over the pool from this many multiply-adds in all (a decode
 * step's attention: 4 KV heads of 4 x 96 x 64 each). */
enum { BATCH_SHARE_MNK = 1 << 16 };

/* Up to FEW_ROWS rows times a column-major B of at most FEW_ROWS_B elements (256 KiB: it stays in
 * L2 while each row reads it) run as one-row products (route rowvec) on a variant without AMX:
 * each row streams B's columns in place, where packing B for the GEMM frame took longer than the
 * products (a decode step's q k^T over a KV cache: 4 query heads a KV head, K = 64, N = the
 * cache's length; measured: docs/performance.md, "Session 26"). A larger B (a weight) is packed
 * once, not read once a row. */
enum { FEW_ROWS = 16, FEW_ROWS_B = 1 << 17 };

/* Batches that share A (a_shared) and are not one merged product: A packed once for all of them
 * (shared_a.c). One row streams each batch's B where the variant can (route rowvec); else the
 * packed frame's kernels run (route gemm) where A packed and one batch's accumulators stay within
 * bounds and there are 4 batches a thread or more (whole batches are the tasks); the rest (route
 * gemm_t, bigger products, fewer batches) keep the per-batch loop. The batches are
 * spread over the pool from ROWVEC_SHARE elements of B (one row) or BATCH_SHARE_MNK multiply-adds
 * (more rows) in all, as the per-batch paths share theirs. */
static void plan_shared(tg_cpu_matmul_plan *P, const tg_ukernel *packed, double mnk) {
    if (P->batch <= 1 || P->rows_merged || P->swapped || !a_shared(P)) return;
    if (P->path == PATH_ROWVEC && P->M == 1) {
        P->a_shared = true;
        P->threads = (double)P->batch * (double)P->K * (double)P->N >= (double)ROWVEC_SHARE ? tg_pool_threads() : 1;
    } else if ((P->path == PATH_GEMM || P->path == PATH_SKINNY) && P->batch >= 4 * (int64_t)tg_pool_threads() &&
               tg_cpu_gemm_shared_fits(packed, P->M, P->K, P->N)) { /* enough batches to keep every thread busy */
        P->a_shared = true, P->path = PATH_GEMM, P->uk = packed;
        P->threads = mnk * (double)P->batch >= (double)BATCH_SHARE_MNK ? tg_pool_threads() : 1;
    }
    if (P->a_shared) P->batch_tasks = 0;
}

void tg_cpu_matmul_plan_make(const tg_view *av, const tg_view *bv, int32_t out_dtype, int32_t order,
                             tg_cpu_matmul_plan *P) {
    int32_t r = av->ndim - 2; /* the matrix axes are the last two; any before them are batch axes */
    int64_t M = av->shape[r], K = av->shape[r + 1], N = bv->shape[r + 1];
    int sel = tg_cpu_selected(); /* read once: a concurrent tgrad_set_cpu_isa cannot mix two choices */
    bool block32 = order == TGRAD_MATMUL_ORDER_BLOCK32;
    const tg_ukernel *packed = block32 ? tg_cpu_block32_variant(sel) : tg_cpu_gemm_variant(sel);
    *P = (tg_cpu_matmul_plan){ .uk = packed, .M = M, .N = N,
                               .K = K, .a_strides = { av->strides[r], av->strides[r + 1] },
                               .b_strides = { bv->strides[r], bv->strides[r + 1] }, .out_dtype = out_dtype,
                               .order = order };
    plan_batch(av, bv, P);
    if (M == 0 || N == 0 || P->batch == 0) {
        P->path = PATH_EMPTY;
        return;
    }
    if (K == 0) {
        P->path = PATH_ZEROS;
        return;
    }
    if ((P->rows_merged = merge_rows(P))) P->M *= P->batch; /* the output's extents: fits */
    if (N == 1 && P->M > 1) {
        /* Matrix-vector: C^T = B^T A^T computes the same sums (a product's operands commute
         * exactly) with the long side along the kernel's columns, and a [M, 1] result has the
         * same memory layout as a [1, M] one. */
        int64_t a0 = P->a_strides[0], a1 = P->a_strides[1];
        P->a_strides[0] = P->b_strides[1], P->a_strides[1] = P->b_strides[0];
        P->b_strides[0] = a1, P->b_strides[1] = a0;
        P->swapped = true;
        P->N = P->M, P->M = 1;
    }
    double mnk = (double)P->M * (double)P->N * (double)K;
    bool small = mnk < (double)SMALL_MNK;
    P->threads = small ? 1 : tg_pool_threads();
    /* Small products of a batch big enough to share: whole products as pool tasks (a few per
     * thread, each task's batches in a row), each on one thread; the bytes are each product's
     * own either way. */
    int32_t pool = tg_pool_threads();
    if (small && P->batch > 1 && !P->rows_merged && pool > 1 && mnk * (double)P->batch >= (double)BATCH_SHARE_MNK) {
        int64_t want = 4 * (int64_t)pool;
        P->batch_tasks = P->batch < want ? P->batch : want;
    }
    /* block32 streams one-row products where a variant can (tg_cpu_block32_stream_variant), and
     * packs everything else (its few-row products on AMX's packed tiles) */
    const tg_ukernel *S = block32 ? tg_cpu_block32_stream_variant(sel) : tg_cpu_stream_variant(sel);
    int64_t bs0 = P->b_strides[0], bs1 = P->b_strides[1];
    /* One row streams B where the variant has the one-row kernel of the result's dtype (a float32
     * result: rowvec_f32, which stores the fp32 sums). Else a float32 result takes the packed
     * path, or its transpose (gemm_t): their micro-kernels all store the fp32 accumulators
     * (ukernel.h). */
    bool f32 = out_dtype == TGRAD_DTYPE_F32, one_row = S && P->M == 1 && (bs1 == 1 || bs0 == 1);
    /* a few rows times a column-major B, where no AMX reads W's rows in place (transposed_pays):
     * instead of packing B (FEW_ROWS), B read once for all the rows where the block32 few-row
     * kernel reads any layout (skinny_any: vdpbf16ps, bf16 or the fp32 sums), else one-row
     * products, row by row */
    bool few_cols = S && P->M <= FEW_ROWS && bs0 == 1 && bs1 != 1 && (double)K * (double)P->N <= FEW_ROWS_B &&
                    !transposed_pays(P);
    const tg_ukernel *F = NULL;
    int64_t most = 0;
    if (block32 && few_cols && P->M > 1) F = tg_cpu_block32_skinny_variant(sel, (double)K * (double)P->N, &most);
    one_row = one_row || few_cols;
    if (F && F->skinny_any && P->M <= most) P->path = PATH_SKINNY, P->uk = F;
    else if (one_row && (f32 ? S->rowvec_f32 != NULL : S->rowvec != NULL)) {
        P->path = PATH_ROWVEC, P->uk = S;
        /* shared from ROWVEC_SHARE elements of B, not SMALL_MNK multiply-adds (a decode step's
         * 1024x1024 and 256x1024 projections, alone, ran at 13 and 10 GB/s on one Xeon thread) */
        if (P->batch == 1 && (double)K * (double)P->N >= (double)ROWVEC_SHARE) P->threads = pool;
    } else if (f32) P->path = transposed_pays(P) ? PATH_GEMM_T : PATH_GEMM;
    else if (block32) { /* a few rows stream row-major B where a block32 kernel can */
        F = bs1 == 1 ? tg_cpu_block32_skinny_variant(sel, (double)K * (double)P->N, &most) : NULL;
        if (F && P->M <= most) P->path = PATH_SKINNY, P->uk = F;
        else P->path = transposed_pays(P) ? PATH_GEMM_T : PATH_GEMM;
    }
    else if (transposed_pays(P)) P->path = PATH_GEMM_T;
    else if (S && S->skinny && bs1 == 1 && (P->M <= 16 || (P->M <= S->skinny_rows && (double)K * P->N >= SKINNY_PASS_B)))
        P->path = PATH_SKINNY, P->uk = S;
    else P->path = PATH_GEMM;
    plan_shared(P, packed, mnk);
}

void tg_cpu_matmul_plan_name(const tg_cpu_matmul_plan *P, char *dst, size_t cap) {
    static const char *const names[] = { "empty", "zeros", "rowvec", "skinny", "gemm", "gemm_t" };
    size_t len = 0;
    if (!cap) return;
    tg_str_append(dst, cap, &len, "cpu.");
    if (P->path != PATH_EMPTY && P->path != PATH_ZEROS) {
        tg_str_append(dst, cap, &len, P->uk->name);
        tg_str_append(dst, cap, &len, ".");
    }
    tg_str_append(dst, cap, &len, names[P->path]);
}

/* ---- running ---- */

/* PATH_GEMM_T: D = B^T A^T, B^T's rows (B's columns) read in place, A^T packed as the right
 * operand. Where A^T packed fits in L2 beside them, gemm_t.c streams each row of B^T through all
 * of K (a prefill's projections: 1.6x the packed frame's rate). Else the packed path, T_COLS
 * columns of out at a time (a bounded buffer, at most
 * T_COLS x T_ROWS elements: 2 MiB of float32, however wide N is, e.g. a vocabulary's logits),
 * each chunk then written into out transposed, in 32 x 32 blocks, and its epilogue applied while
 * it is in cache. Elements of 2 (bf16) or 4 bytes (float32 accumulators), moved as bits. */
enum { T_COLS = 4096 };
#define TRANSPOSE_CHUNK(T)                                                                          \
    for (int64_t n0 = 0; n0 < nb; n0 += 32)                                                          \
        for (int64_t m0 = 0; m0 < M; m0 += 32) {                                                     \
            int64_t n1 = n0 + 32 < nb ? n0 + 32 : nb, m1 = m0 + 32 < M ? m0 + 32 : M;                \
            for (int64_t m = m0; m < m1; m++)                                                        \
                for (int64_t n = n0; n < n1; n++) ((T *)out)[m * N + c0 + n] = ((const T *)d)[n * M + m]; \
        }
static tgrad_status run_transposed(const tg_cpu_matmul_plan *P, const tg_operand *A, const tg_operand *B, void *out,
                                   const tg_chain *ep, int32_t threads) {
    int64_t M = P->M, N = P->N, cols = N < T_COLS ? N : T_COLS;
    bool f32 = P->out_dtype == TGRAD_DTYPE_F32;
    if (tg_cpu_gemm_t_streams(P->uk, M, P->K)) /* W streamed in long runs (gemm_t.c) */
        return tg_cpu_gemm_t_stream(P->uk, A, B, M, N, P->K, threads, f32 ? NULL : out, f32 ? out : NULL, f32 ? NULL : ep);
    void *d = tg_cpu_transpose_scratch((size_t)(M * cols) * (f32 ? 4u : 2u));
    if (!d) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate the transposed result's buffer");
    tg_operand Bt = { A->base, A->s1, A->s0 };
    for (int64_t c0 = 0; c0 < N; c0 += cols) {
        int64_t nb = N - c0 < cols ? N - c0 : cols;
        tg_operand At = { B->base + c0 * B->s1, B->s1, B->s0 };
        tgrad_status s = tg_cpu_gemm_packed(P->uk, &At, &Bt, nb, M, P->K, threads, f32 ? NULL : d, f32 ? d : NULL, NULL);
        if (s) return s;
        if (f32) {
            TRANSPOSE_CHUNK(uint32_t)
        } else {
            TRANSPOSE_CHUNK(uint16_t)
            tg_chain_apply_block(ep, out, N, 0, c0, M, nb);
        }
    }
    return TGRAD_OK;
}
#undef TRANSPOSE_CHUNK

/* One 2-D product of the plan: A and B at these element addresses (the batch's), out its
 * [M, N] block; ep's positions start at lin0 of the whole output. */
static tgrad_status run_one(const tg_cpu_matmul_plan *P, const uint16_t *abase, const uint16_t *bbase, void *out,
                            const tg_chain *ep, int32_t threads) {
    tg_operand A = { P->swapped ? bbase : abase, P->a_strides[0], P->a_strides[1] };
    tg_operand B = { P->swapped ? abase : bbase, P->b_strides[0], P->b_strides[1] };
    const tg_ukernel *uk = P->uk;
    bool f32 = P->out_dtype == TGRAD_DTYPE_F32;
    if (P->path == PATH_GEMM_T) return run_transposed(P, &A, &B, out, ep, threads);
    if (P->path == PATH_ROWVEC) return tg_cpu_matmul_rowvec(uk, &A, &B, P->M, P->K, P->N, threads, f32 ? NULL : out, f32 ? out : NULL, ep);
    if (P->path == PATH_SKINNY) /* a float32 result: only through skinny_any (the plan's few_cols) */
        return tg_cpu_matmul_skinny(uk, &A, &B, P->M, P->K, P->N, threads, f32 ? NULL : out, f32 ? out : NULL, f32 ? NULL : ep);
    if (f32) return tg_cpu_gemm_packed(uk, &A, &B, P->M, P->N, P->K, threads, NULL, out, NULL);
    return tg_cpu_gemm_packed(uk, &A, &B, P->M, P->N, P->K, threads, out, NULL, ep);
}

typedef struct {
    const tg_cpu_matmul_plan *P;
    const uint16_t *a, *b; /* the operands' bases (their views' offsets added) */
    char *out;
    const tg_chain *ep;
    int32_t threads;
    atomic_int failed; /* the first failing status */
} batch_job;

/* Batches [b0, b1) one after another. */
/* Batch bi's offset along an operand's batch strides (a_bstrides or b_bstrides), in elements. */
static int64_t batch_offset(const tg_cpu_matmul_plan *P, const int64_t *bstrides, int64_t bi) {
    int64_t off = 0;
    for (int32_t d = P->bdims - 1; d >= 0; d--) off += bi % P->bshape[d] * bstrides[d], bi /= P->bshape[d];
    return off;
}

static void run_batches(batch_job *J, int64_t b0, int64_t b1) {
    const tg_cpu_matmul_plan *P = J->P;
    int64_t mn = P->M * P->N; /* each product's outputs (the swap keeps their count) */
    size_t es = P->out_dtype == TGRAD_DTYPE_F32 ? 4u : 2u;
    tg_chain ep;
    if (J->ep) ep = *J->ep;
    for (int64_t bi = b0; bi < b1 && !atomic_load(&J->failed); bi++) {
        if (J->ep) ep.lin0 = J->ep->lin0 + bi * mn;
        tgrad_status s = run_one(P, J->a + batch_offset(P, P->a_bstrides, bi), J->b + batch_offset(P, P->b_bstrides, bi),
                                 J->out + (size_t)(bi * mn) * es, J->ep ? &ep : NULL, J->threads);
        if (s) {
            int expected = 0;
            atomic_compare_exchange_strong(&J->failed, &expected, (int)s);
        }
    }
}

/* a_shared: each batch's B offset from the batch axes, then one call. */
static tgrad_status run_shared(const tg_cpu_matmul_plan *P, const uint16_t *abase, const uint16_t *bbase, void *out,
                               const tg_chain *ep) {
    int64_t *boff = tg_fault() ? NULL : malloc(sizeof *boff * (size_t)P->batch);
    if (!boff) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate %lld batch offsets", (long long)P->batch);
    for (int64_t bi = 0; bi < P->batch; bi++) boff[bi] = batch_offset(P, P->b_bstrides, bi);
    tg_operand A = { abase, P->a_strides[0], P->a_strides[1] }, B = { bbase, P->b_strides[0], P->b_strides[1] };
    bool f32 = P->out_dtype == TGRAD_DTYPE_F32;
    uint16_t *o16 = f32 ? NULL : out;
    float *o32 = f32 ? (float *)out : NULL;
    tgrad_status s = P->path == PATH_ROWVEC
                         ? tg_cpu_matmul_rowvec_shared(P->uk, &A, &B, boff, P->batch, P->K, P->N, P->threads, o16, o32, ep)
                         : tg_cpu_matmul_gemm_shared(P->uk, &A, &B, boff, P->batch, P->M, P->K, P->N, P->threads, o16,
                                                     o32, ep);
    free(boff);
    return s;
}

static void batch_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    batch_job *J = arg;
    int64_t per = J->P->batch / J->P->batch_tasks, extra = J->P->batch % J->P->batch_tasks;
    int64_t b0 = task * per + (task < extra ? task : extra);
    run_batches(J, b0, b0 + per + (task < extra));
}

tgrad_status tg_cpu_matmul(const uint16_t *a, const tg_view *av, const uint16_t *b, const tg_view *bv, uint16_t *out) {
    tg_cpu_matmul_plan P;
    tg_cpu_matmul_plan_make(av, bv, TGRAD_DTYPE_BF16, tgrad_matmul_order(), &P);
    return tg_cpu_matmul_run(&P, a, av, b, bv, out, NULL);
}

_Thread_local const tg_ukernel *tg_cpu_matmul_ran;

static tgrad_status run_plan(const tg_cpu_matmul_plan *P, const uint16_t *a, const tg_view *av, const uint16_t *b,
                             const tg_view *bv, void *out, const tg_chain *ep) {
    bool f32 = P->out_dtype == TGRAD_DTYPE_F32;
    if (P->path == PATH_EMPTY) return TGRAD_OK;
    if (P->path == PATH_ZEROS) { /* every batch: [batch * M, N] zeros */
        memset(out, 0, (size_t)(P->batch * P->M * P->N) * (f32 ? 4u : 2u));
        if (!f32) tg_chain_apply_block(ep, out, P->N, 0, 0, P->batch * P->M, P->N);
        return TGRAD_OK;
    }
    /* Both operands have elements now, so their views lie inside their buffers: every address the
     * kernels form, base + i * s0 + k * s1 (+ the batch's offset) for indices inside the shape, is
     * an element of the buffer (and each partial sum of the offset lies between the view's lowest
     * and highest element). An empty operand may carry any offset: it is never addressed. */
    const uint16_t *abase = a + av->offset, *bbase = b + bv->offset;
    if (P->batch == 1 || P->rows_merged) return run_one(P, abase, bbase, out, ep, P->threads);
    if (P->a_shared) return run_shared(P, abase, bbase, out, ep);
    batch_job J = { .P = P, .a = abase, .b = bbase, .out = out, .ep = ep, .threads = P->threads };
    atomic_init(&J.failed, 0);
    if (P->batch_tasks > 1) {
        J.threads = 1;
        run_tasks(P->batch_tasks, tg_pool_threads(), batch_task, &J);
    } else {
        run_batches(&J, 0, P->batch);
    }
    tgrad_status s = (tgrad_status)atomic_load(&J.failed);
    if (s && P->batch_tasks > 1) /* a worker's detail message is its own thread's: say it here */
        return tg_fail(s, "matmul: a product of the batch failed on a worker (%s)", tgrad_status_name(s));
    return s;
}

/* The product runs under the IEEE environment (round to nearest even, no flush: fp_env.h) whatever
 * the caller's: the portable kernels' steps round in C, and the SIMD kernels add only their flush
 * bits to it. The pool's workers start in it too (pool.c). */
tgrad_status tg_cpu_matmul_run(const tg_cpu_matmul_plan *P, const uint16_t *a, const tg_view *av, const uint16_t *b,
                               const tg_view *bv, void *out, const tg_chain *ep) {
    tg_cpu_matmul_ran = P->uk;
    tg_fp_env env = tg_fp_env_ieee();
    tgrad_status s = run_plan(P, a, av, b, bv, out, ep);
    tg_fp_env_restore(env);
    return s;
}
