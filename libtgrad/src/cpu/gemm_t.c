/* Route gemm_t's streaming form: a few rows x times a column-major B (x @ W.T, a prefill's
 * projections) on a variant that reads its left operand's rows in place (AMX's kernel_direct).
 * D = W x^T: W's rows (the output's columns) are the left operand, read in place; x^T is packed
 * once, by the caller, as the right operand (panels of 32 of x's rows over all of K). Each task
 * owns a strip of W's rows; each 32-row tile of the strip goes through all of K against each
 * 32-row panel of x (W read from memory once, in long runs, then from L2), and its D tile is
 * written into out transposed, then the strip's epilogue runs while it is in cache.
 *
 * The same sums in the same order as the packed frame's (each output's blocks in ascending K, its
 * accumulators carried in the tile registers instead of stored and reloaded between K panels,
 * which is exact): the same bytes. The packed frame cut K into 256-element panels across all of a
 * block's rows, which read each of W's rows in short bursts far apart (9.8 GB/s of W for a
 * 64-row prefill's products on the Xeon, 2 threads, against 24 for the one-row stream). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

/* The packed x^T (all of K, every 32-row panel of x) must sit in L2 beside the W tile being
 * streamed: at most this many bytes, else the packed frame runs (its K panels bound them). */
#define XPACK_MAX_BYTES ((int64_t)1 << 20)

enum { TR = 32 }; /* W rows a tile, x rows a panel: the 32 x 32 tile of kernel_direct */

bool tg_cpu_gemm_t_streams(const tg_ukernel *uk, int64_t M, int64_t K) {
    if (!uk->kernel_direct || uk->mr != TR || uk->nr != TR || uk->b_entry_bytes != 4 || tg_cpu_debug_no_direct_a())
        return false;
    return (int64_t)uk->b_entry_bytes * tg_panel_pairs(uk, K) * round_up(M, TR) <= XPACK_MAX_BYTES;
}

typedef struct {
    const tg_ukernel *uk;
    tg_operand W;      /* W's rows: row n of W is column n of B (base, s0 = B's column stride, s1 = 1) */
    const char *xpack; /* x^T packed: ceil(M / 32) panels of kp pairs x 32 */
    int64_t M, N, K, kp, strip;
    uint16_t *out;
    float *out32; /* instead of out: the fp32 accumulators (frame.h) */
    const tg_chain *ep;
    atomic_int failed;
} gemm_t_job;

/* The tile's D [rows x cols] (features x rows of x) into out at (t0, f0), transposed: bf16 bits
 * in 8 x 8 blocks (a whole tile's loops have constant bounds, which the compiler unrolls), or the
 * fp32 accumulators by store_f32_canonical. */
static void transpose_bits(const uint16_t *bits, uint16_t *dst, int64_t ld, int32_t rows, int32_t cols) {
    if (rows == TR && cols == TR) {
        for (int32_t c0 = 0; c0 < TR; c0 += 8)
            for (int32_t r0 = 0; r0 < TR; r0 += 8)
                for (int32_t c = c0; c < c0 + 8; c++)
                    for (int32_t r = r0; r < r0 + 8; r++) dst[c * ld + r] = bits[r * TR + c];
        return;
    }
    for (int32_t c = 0; c < cols; c++)
        for (int32_t r = 0; r < rows; r++) dst[c * ld + r] = bits[r * TR + c];
}

static void store_transposed(const gemm_t_job *J, const float *acc, const uint16_t *bits, int64_t f0, int64_t t0,
                             int32_t rows, int32_t cols) {
    if (!J->out32) {
        transpose_bits(bits, J->out + t0 * J->N + f0, J->N, rows, cols);
        return;
    }
    for (int32_t c = 0; c < cols; c++)
        for (int32_t r = 0; r < rows; r++) store_f32_canonical(acc + r * TR + c, J->out32 + (t0 + c) * J->N + f0 + r);
}

/* W rows [f0, f0 + rows) against every panel of x: in place when the tile is whole, else from
 * `apack` (the rows packed, zero rows after them). */
static void tile_rows(const gemm_t_job *J, int64_t f0, int32_t rows, const char *apack) {
    const tg_ukernel *uk = J->uk;
    float acc[TR * TR] __attribute__((aligned(64)));
    uint16_t bits[TR * TR] __attribute__((aligned(64)));
    for (int64_t t0 = 0; t0 < J->M; t0 += TR) {
        int32_t cols = (int32_t)(J->M - t0 < TR ? J->M - t0 : TR);
        tg_tile t = { .acc = acc, .ldacc = TR, .load = 0, .out = J->out32 ? NULL : bits, .ldout = TR, .rows = rows,
                      .cols = cols };
        const char *bp = J->xpack + (size_t)(t0 * J->kp) * (size_t)uk->b_entry_bytes;
        if (apack) uk->kernel(J->kp, apack, bp, &t);
        else uk->kernel_direct(J->K, J->W.base + f0 * J->W.s0, J->W.s0, bp, &t);
        store_transposed(J, acc, bits, f0, t0, rows, cols);
    }
}

static void run_strip(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    gemm_t_job *J = arg;
    const tg_ukernel *uk = J->uk;
    int64_t n0 = task * J->strip, nb = J->N - n0 < J->strip ? J->N - n0 : J->strip;
    int64_t whole = nb / TR * TR;
    char *apack = NULL;
    if (whole < nb) { /* the strip's last rows: packed (nothing past W's last row is read) */
        workspace *w = tg_cpu_workspace(64, (size_t)uk->a_entry_bytes * (size_t)(TR * J->kp), 64);
        if (!w) {
            atomic_store(&J->failed, 1);
            return;
        }
        apack = w->apack;
    }
    if (uk->begin) uk->begin();
    for (int64_t f0 = n0; f0 < n0 + whole; f0 += TR) tile_rows(J, f0, TR, NULL);
    if (apack) {
        uk->pack_a(&J->W, n0 + whole, nb - whole, 0, J->K, TR, apack);
        tile_rows(J, n0 + whole, (int32_t)(nb - whole), apack);
    }
    if (uk->end) uk->end();
    if (!J->out32) tg_chain_apply_block(J->ep, J->out, J->N, 0, n0, J->M, nb);
}

tgrad_status tg_cpu_gemm_t_stream(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B, int64_t M,
                                  int64_t N, int64_t K, int32_t threads, uint16_t *out, float *out32,
                                  const tg_chain *ep) {
    int64_t kp = tg_panel_pairs(uk, K);
    char *xpack = tg_cpu_transpose_scratch((size_t)uk->b_entry_bytes * (size_t)(kp * round_up(M, TR)));
    if (!xpack) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate the packed rows' buffer");
    tg_operand xt = { A->base, A->s1, A->s0 }; /* x^T: element (k, m) of x */
    uk->pack_b(&xt, 0, K, 0, M, xpack);
    /* strips of whole tiles, two or more per thread, at least 128 rows of W */
    int64_t strip = round_up((N + 2 * threads - 1) / (2 * threads), TR);
    if (strip < 4 * TR) strip = 4 * TR;
    gemm_t_job J = { .uk = uk, .W = { B->base, B->s1, B->s0 }, .xpack = xpack, .M = M, .N = N, .K = K, .kp = kp,
                     .strip = strip, .out = out, .out32 = out32, .ep = ep };
    atomic_init(&J.failed, 0);
    run_tasks((N + strip - 1) / strip, threads, run_strip, &J);
    if (atomic_load(&J.failed)) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate packing buffers");
    return TGRAD_OK;
}
