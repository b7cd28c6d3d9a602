/* Batched products whose A every batch shares (A's batch strides all 0): a [M, K] block of rows
 * times a stack of B matrices, such as x @ Wp for a weight packed as Wp [N/32, K, 32], 32-column
 * panels stored one after another (docs/kernels.md, "Packed weights"). A is packed once for all
 * the batches, not once a batch, and each task takes a contiguous run of batches: one stream of B
 * a thread. Each output is its own batch's sum in the documented order, the bytes of the batch's
 * 2-D product on any path. boff[i]: batch i's offset in B (elements); out [batch, M, N]. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "frame.h"

typedef struct {
    const tg_ukernel *uk;
    tg_kernels k;      /* route gemm: the kernels for M rows (a short last panel on a short kernel) */
    const void *apack; /* one row's pairs (rowvec), or all of A's K panels (gemm), packed */
    tg_operand B;      /* base: batch 0's */
    const int64_t *boff;
    int64_t M, K, N, batch, tasks;
    uint16_t *out;
    float *out32;
    const tg_chain *ep;
    atomic_int failed;
} shared_job;

/* ---- one row (route rowvec) ----
 * The work is cut in units of (batch, strip of STRIP columns), a batch's strips in a row, and
 * each task takes a contiguous run of units: a panel (32 columns) is one unit, and a few wide
 * batches still spread over every thread. */
enum { STRIP = 128 };

static void rowvec_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    shared_job *J = arg;
    int64_t strips = (J->N + STRIP - 1) / STRIP, units = J->batch * strips;
    for (int64_t u = units * task / J->tasks; u < units * (task + 1) / J->tasks; u++) {
        int64_t i = u / strips, n0 = u % strips * STRIP, nb = J->N - n0 < STRIP ? J->N - n0 : STRIP;
        tg_operand B = { J->B.base + J->boff[i], J->B.s0, J->B.s1 };
        tg_cpu_rowvec_block(J->uk, J->apack, &B, J->K, n0, nb, i, J->N, J->out, J->out32, J->ep); /* out [batch, N] */
    }
}

static int64_t task_count(int32_t threads, int64_t batch) { return threads > 1 ? (batch < threads ? batch : threads) : 1; }

tgrad_status tg_cpu_matmul_rowvec_shared(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B,
                                         const int64_t *boff, int64_t batch, int64_t K, int64_t N, int32_t threads,
                                         uint16_t *out, float *out32, const tg_chain *ep) {
    int64_t rstride = round_up((int64_t)uk->a_entry_bytes * tg_panel_pairs(uk, K + 1), 64);
    workspace *w = tg_cpu_workspace(64, (size_t)rstride, 64);
    if (!w) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate packing buffers");
    uk->pack_a(A, 0, 1, 0, K, 1, (uint32_t *)w->apack);
    shared_job J = { .uk = uk, .apack = w->apack, .B = *B, .boff = boff, .M = 1, .K = K, .N = N, .batch = batch,
                     .tasks = task_count(threads, batch * ((N + STRIP - 1) / STRIP)), .out = out, .out32 = out32,
                     .ep = ep };
    run_tasks(J.tasks, threads, rowvec_task, &J);
    return TGRAD_OK;
}

/* ---- a few rows or more (route gemm): A's K panels packed once, each batch's B panel by panel ---- */

/* The bytes of A's K panel starting at k0 in the packed buffer (every panel before it holds kc
 * elements: uk->kc; M rows packed for the kernels k). */
static size_t a_panel_at(const tg_ukernel *uk, const tg_kernels *k, int64_t M, int64_t k0) {
    return (size_t)(k0 / uk->kc) * (size_t)(tg_packed_rows(k, M) * tg_panel_pairs(uk, uk->kc)) * (size_t)uk->a_entry_bytes;
}

static size_t a_packed_bytes(const tg_ukernel *uk, const tg_kernels *k, int64_t M, int64_t K) {
    int64_t last = (K - 1) / uk->kc * uk->kc;
    return a_panel_at(uk, k, M, last) + (size_t)(tg_packed_rows(k, M) * tg_panel_pairs(uk, K - last)) * (size_t)uk->a_entry_bytes;
}

/* The B block packed after batch i's K panel at k0: the batch's next panel, else the first of
 * batch i + 1 where this task has it (i + 1 < end), prefetched while the panel at k0 computes. */
static void next_panel_prefetch(const shared_job *J, int64_t i, int64_t end, int64_t k0, int64_t calls,
                                tg_b_prefetch *next) {
    int64_t KC = J->uk->kc;
    if (k0 + KC < J->K) {
        tg_operand B = { J->B.base + J->boff[i], J->B.s0, J->B.s1 };
        tg_b_prefetch_init(next, &B, k0 + KC, J->K - k0 - KC < KC ? J->K - k0 - KC : KC, 0, J->N, calls);
    } else {
        tg_operand B = { i + 1 < end ? J->B.base + J->boff[i + 1] : J->B.base, J->B.s0, J->B.s1 };
        tg_b_prefetch_init(next, &B, 0, i + 1 < end ? (J->K < KC ? J->K : KC) : 0, 0, J->N, calls);
    }
}

/* Batch i's [M, N] product: per K panel, B's panel packed, then every (column, row) tile, the
 * accumulators carried between panels in acc (as the packed frame's blocks carry theirs). The
 * next B block (this batch's or batch i + 1's, i + 1 < end) is prefetched across the tiles: the
 * packing of a weight's panels (x @ Wp) read memory with nothing else to do, 12% of a 64-token
 * prefill. */
static void gemm_batch(const shared_job *J, int64_t i, int64_t end, float *acc, int64_t ldacc, char *bp) {
    const tg_ukernel *uk = J->uk;
    int64_t M = J->M, N = J->N, K = J->K, KC = uk->kc, mr = J->k.mr;
    float scratch[TILE_MAX]; /* one tile's accumulators of a float32 result over its only K panel */
    tg_operand B = { J->B.base + J->boff[i], J->B.s0, J->B.s1 };
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kc = K - k0 < KC ? K - k0 : KC, kp = tg_panel_pairs(uk, kc);
        bool last = k0 + KC >= K;
        uk->pack_b(&B, k0, kc, 0, N, bp);
        const char *ap = (const char *)J->apack + a_panel_at(uk, &J->k, M, k0);
        tg_b_prefetch next;
        next_panel_prefetch(J, i, end, k0, ((M + mr - 1) / mr) * ((N + uk->nr - 1) / uk->nr), &next);
        for (int64_t j0 = 0; j0 < N; j0 += uk->nr) {
            const char *bj = bp + (size_t)(j0 * kp) * (size_t)uk->b_entry_bytes;
            for (int64_t i0 = 0; i0 < M; i0 += mr) {
                tg_tile t = { .acc = acc + i0 * ldacc + j0, .ldacc = ldacc, .load = k0 > 0,
                              .out = last && J->out ? J->out + (i * M + i0) * N + j0 : NULL, .ldout = N,
                              .rows = (int32_t)(M - i0 < mr ? M - i0 : mr),
                              .cols = (int32_t)(N - j0 < uk->nr ? N - j0 : uk->nr) };
                if (J->out32 && K <= KC) t.acc = scratch, t.ldacc = uk->nr;
                tg_prefetch_lines(&next.walk, next.per_call);
                tg_kernel_pick(&J->k, t.rows)(kp, ap + (size_t)(i0 * kp) * (size_t)uk->a_entry_bytes, bj, &t);
                if (last && J->out32) store_f32_tile(t.acc, t.ldacc, J->out32 + (i * M + i0) * N + j0, N, t.rows, t.cols);
            }
        }
    }
    if (J->out) tg_chain_apply_block(J->ep, J->out, N, i * M, 0, M, N); /* out as [batch * M, N]; none on fp32 sums */
}

static void gemm_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    shared_job *J = arg;
    const tg_ukernel *uk = J->uk;
    int64_t ldacc = round_up(J->N, uk->nr), kc_max = J->K < uk->kc ? round_up(J->K, 2) : uk->kc;
    workspace *w = tg_cpu_workspace(sizeof(float) * (size_t)(round_up(J->M, uk->mr) * ldacc), 64,
                                    (size_t)uk->b_entry_bytes * (size_t)(ldacc * tg_panel_pairs(uk, kc_max)));
    if (!w) {
        atomic_store(&J->failed, 1);
        return;
    }
    if (uk->begin) uk->begin();
    int64_t b0 = J->batch * task / J->tasks, b1 = J->batch * (task + 1) / J->tasks;
    for (int64_t i = b0; i < b1; i++) gemm_batch(J, i, b1, w->acc, ldacc, w->bpack);
    if (uk->end) uk->end();
}

bool tg_cpu_gemm_shared_fits(const tg_ukernel *uk, int64_t M, int64_t K, int64_t N) {
    tg_kernels k = tg_cpu_kernels_for(uk, M);
    return N <= TG_SHARED_A_MAX_N && a_packed_bytes(uk, &k, M, K) <= (size_t)TG_SHARED_A_MAX_BYTES &&
           (double)round_up(M, uk->mr) * (double)round_up(N, uk->nr) * 4.0 <= (double)TG_SHARED_A_MAX_BYTES;
}

tgrad_status tg_cpu_matmul_gemm_shared(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B,
                                       const int64_t *boff, int64_t batch, int64_t M, int64_t K, int64_t N,
                                       int32_t threads, uint16_t *out, float *out32, const tg_chain *ep) {
    tg_kernels k = tg_cpu_kernels_for(uk, M);
    workspace *w = tg_cpu_workspace(64, a_packed_bytes(uk, &k, M, K), 64);
    if (!w) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate packing buffers");
    for (int64_t k0 = 0; k0 < K; k0 += uk->kc)
        tg_cpu_pack_rows(uk, &k, A, 0, M, k0, K - k0 < uk->kc ? K - k0 : uk->kc, (char *)w->apack + a_panel_at(uk, &k, M, k0));
    shared_job J = { .uk = uk, .k = k, .apack = w->apack, .B = *B, .boff = boff, .M = M, .K = K, .N = N, .batch = batch,
                     .tasks = task_count(threads, batch), .out = out, .out32 = out32, .ep = ep };
    atomic_init(&J.failed, 0);
    run_tasks(J.tasks, threads, gemm_task, &J);
    return atomic_load(&J.failed) ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate a worker's packing buffers")
                                  : TGRAD_OK;
}
