/* The streaming paths: one-row (rowvec) and few-row (skinny) products read B in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

/* One-row problems on a variant that streams B: column strips as tasks, A's row packed once. A
 * few rows (plan.c's FEW_ROWS, a small column-major B, no AMX: a decode step's attention scores
 * over the KV cache), where no few-row kernel reads that layout (skinny_any, below), run as that
 * many one-row products, each row packed once and every (strip,
 * row) a task, a strip's rows one after another while it is in cache: each output is the one-row
 * kernel's sum, the same bytes as every route's. */
typedef struct {
    const tg_ukernel *uk;
    const uint32_t *apairs; /* row r's pairs at apairs + r * rstride */
    int64_t rstride;
    tg_operand B;
    int64_t K, N, strip, rows;
    uint16_t *out;
    float *out32; /* instead of out: the fp32 accumulators (uk->rowvec_f32) */
    const tg_chain *ep;
} rowvec_job;

void tg_cpu_rowvec_block(const tg_ukernel *uk, const uint32_t *a, const tg_operand *B, int64_t K, int64_t n0, int64_t nb,
                         int64_t r, int64_t N, uint16_t *out, float *out32, const tg_chain *ep) {
    if (out32) {
        uk->rowvec_f32(a, B, K, n0, nb, out32 + r * N + n0);
        return;
    }
    uk->rowvec(a, B, K, n0, nb, out + r * N + n0);
    tg_chain_apply_block(ep, out, N, r, n0, 1, nb);
}

static void run_strip(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    rowvec_job *R = arg;
    int64_t r = task % R->rows, n0 = task / R->rows * R->strip, nb = R->N - n0 < R->strip ? R->N - n0 : R->strip;
    const uint32_t *a = (const uint32_t *)((const char *)R->apairs + r * R->rstride);
    tg_cpu_rowvec_block(R->uk, a, &R->B, R->K, n0, nb, r, R->N, R->out, R->out32, R->ep);
}

tgrad_status tg_cpu_matmul_rowvec(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B, int64_t M, int64_t K,
                                  int64_t N, int32_t threads, uint16_t *out, float *out32, const tg_chain *ep) {
    /* K / 2 + 1 pairs a row, padded to whole blocks for a block32 variant (ukernel.h, kpair_align) */
    int64_t rstride = round_up((int64_t)uk->a_entry_bytes * tg_panel_pairs(uk, K + 1), 64);
    workspace *w = tg_cpu_workspace(64, (size_t)(rstride * M), 64);
    if (!w) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate packing buffers");
    for (int64_t r = 0; r < M; r++) uk->pack_a(A, r, 1, 0, K, 1, (uint32_t *)((char *)w->apack + r * rstride));
    /* strips of 128 columns or more: a 256-column product (a decode step's k and v projections)
     * is shared by 2 threads too (2 threads: the step's products 18.1 -> 18.6 GB/s, median) */
    int64_t strip = round_up((N + 2 * threads - 1) / (2 * threads), 32);
    if (strip < 128) strip = 128;
    rowvec_job R = { uk, w->apack, rstride, *B, K, N, strip, M, out, out32, ep };
    run_tasks(M * ((N + strip - 1) / strip), threads, run_strip, &R);
    return TGRAD_OK;
}

/* Short M on a variant that streams row-major B: column strips as tasks, A packed into one
 * 16-row panel. Up to 16 rows in one pass over B; up to the variant's skinny_rows (when B is not
 * small) in passes of 12, B streamed once per pass, where that is still ahead of packing B for the
 * GEMM frame (AVX512-BF16, C loop, 2 threads: 24x4096x4096 1.79 -> 1.15 ms, 48x4096x4096 2.67 ->
 * 2.27, 24x1024x1024 97 -> 66 us; 32x512x512 24 vs 27 us and 96x4096x4096 4.4 vs 4.7 ms the other
 * way). */
typedef struct {
    const tg_ukernel *uk;
    const uint32_t *apanel;
    tg_operand B;
    int64_t M, K, N, strip;
    uint16_t *out;
    float *out32; /* instead of out: the fp32 accumulators (uk->skinny_any) */
    const tg_chain *ep;
    uint16_t *ep_out; /* the whole output (out is this pass's first row) */
    int64_t row0;
} skinny_job;

static void run_skinny_strip(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    skinny_job *S = arg;
    int64_t n0 = task * S->strip, n1 = n0 + S->strip < S->N ? n0 + S->strip : S->N;
    if (S->out32 || S->B.s1 != 1) { /* plan.c sends these only to a variant with skinny_any */
        S->uk->skinny_any(S->K, S->apanel, (int32_t)S->M, &S->B, n0, (int32_t)(n1 - n0), S->out32 ? NULL : S->out + n0,
                          S->out32 ? S->out32 + n0 : NULL, S->N);
        if (S->out32) return; /* a float32 result has no epilogue */
    } else {
        S->uk->skinny(S->K, S->apanel, (int32_t)S->M, S->B.base + n0, S->B.s0, (int32_t)(n1 - n0), S->out + n0, S->N);
    }
    tg_chain_apply_block(S->ep, S->ep_out, S->N, S->row0, n0, S->M, n1 - n0);
}

/* out (bf16) or out32 (the fp32 sums, through skinny_any); row-major B through skinny, any other
 * layout through skinny_any. */
tgrad_status tg_cpu_matmul_skinny(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B, int64_t M, int64_t K,
                                  int64_t N, int32_t threads, uint16_t *out, float *out32, const tg_chain *ep) {
    /* K / 2 + 1 pairs a row, padded to whole blocks for a block32 variant (ukernel.h, kpair_align) */
    int64_t pairs = tg_panel_pairs(uk, K + 1);
    workspace *w = tg_cpu_workspace(64, (size_t)uk->a_entry_bytes * 16u * (size_t)pairs, 64);
    if (!w) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate packing buffers");
    int64_t strip = round_up((N + 2 * threads - 1) / (2 * threads), uk->nr);
    int64_t pass = M <= 16 ? M : 12; /* more rows: passes of 12 (register rows only), B streamed per pass */
    for (int64_t r0 = 0; r0 < M; r0 += pass) {
        int64_t h = M - r0 < pass ? M - r0 : pass;
        tg_operand Ar = { A->base + r0 * A->s0, A->s0, A->s1 };
        uk->pack_a(&Ar, 0, h, 0, K, 16, w->apack);
        skinny_job S = { uk, w->apack, *B, h, K, N, strip, out ? out + r0 * N : NULL, out32 ? out32 + r0 * N : NULL, ep,
                         out, r0 };
        run_tasks((N + strip - 1) / strip, threads, run_skinny_strip, &S);
    }
    return TGRAD_OK;
}
