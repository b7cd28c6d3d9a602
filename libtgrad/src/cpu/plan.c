/* A CPU product's plan: the path and variant, decided once (the scheduler keeps it in the step),
 * named for explain and the recorded route, and run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

/* The dispatch decision, made once per step by the scheduler (tg_cpu_matmul_plan_make): the
 * route explain names and realize records is the one tg_cpu_matmul_run executes. */
typedef enum { PATH_EMPTY, PATH_ZEROS, PATH_ROWVEC, PATH_SKINNY, PATH_GEMM } cpu_path;

void tg_cpu_matmul_plan_make(const tg_view *av, const tg_view *bv, int32_t out_dtype, tg_cpu_matmul_plan *P) {
    int64_t M = av->shape[0], K = av->shape[1], N = bv->shape[1];
    int sel = tg_cpu_selected(); /* read once: a concurrent tgrad_set_cpu_isa cannot mix two choices */
    *P = (tg_cpu_matmul_plan){ .uk = tg_cpu_gemm_variant(sel), .M = M, .N = N, .K = K,
                               .a_strides = { av->strides[0], av->strides[1] },
                               .b_strides = { bv->strides[0], bv->strides[1] }, .out_dtype = out_dtype };
    if (M == 0 || N == 0) {
        P->path = PATH_EMPTY;
        return;
    }
    if (K == 0) {
        P->path = PATH_ZEROS;
        return;
    }
    if (N == 1 && M > 1) {
        /* Matrix-vector: C^T = B^T A^T computes the same sums (a product's operands commute
         * exactly) with the long side along the kernel's columns, and a [M, 1] result has the
         * same memory layout as a [1, M] one. */
        int64_t a0 = P->a_strides[0], a1 = P->a_strides[1];
        P->a_strides[0] = P->b_strides[1], P->a_strides[1] = P->b_strides[0];
        P->b_strides[0] = a1, P->b_strides[1] = a0;
        P->swapped = true;
        P->N = M, P->M = 1;
    }
    bool small = (double)P->M * (double)P->N * (double)K < (double)SMALL_MNK;
    P->threads = small ? 1 : tg_pool_threads();
    const tg_ukernel *S = tg_cpu_stream_variant(sel);
    int64_t bs0 = P->b_strides[0], bs1 = P->b_strides[1];
    /* A float32 result takes the packed path: its micro-kernels all store their fp32
     * accumulators (ukernel.h), the streaming kernels write bf16 only. */
    if (out_dtype == TGRAD_DTYPE_F32) P->path = PATH_GEMM;
    else if (P->M == 1 && S->rowvec && (bs1 == 1 || bs0 == 1)) P->path = PATH_ROWVEC, P->uk = S;
    else if (S->skinny && bs1 == 1 && (P->M <= 16 || (P->M <= S->skinny_rows && (double)K * P->N >= SKINNY_PASS_B)))
        P->path = PATH_SKINNY, P->uk = S;
    else P->path = PATH_GEMM;
}

void tg_cpu_matmul_plan_name(const tg_cpu_matmul_plan *P, char *dst, size_t cap) {
    static const char *const names[] = { "empty", "zeros", "rowvec", "skinny", "gemm" };
    size_t len = 0;
    if (!cap) return;
    tg_str_append(dst, cap, &len, "cpu.");
    if (P->path != PATH_EMPTY && P->path != PATH_ZEROS) {
        tg_str_append(dst, cap, &len, P->uk->name);
        tg_str_append(dst, cap, &len, ".");
    }
    tg_str_append(dst, cap, &len, names[P->path]);
}

tgrad_status tg_cpu_matmul(const uint16_t *a, const tg_view *av, const uint16_t *b, const tg_view *bv, uint16_t *out) {
    tg_cpu_matmul_plan P;
    tg_cpu_matmul_plan_make(av, bv, TGRAD_DTYPE_BF16, &P);
    return tg_cpu_matmul_run(&P, a, av, b, bv, out, NULL);
}

_Thread_local const tg_ukernel *tg_cpu_matmul_ran;

tgrad_status tg_cpu_matmul_run(const tg_cpu_matmul_plan *P, const uint16_t *a, const tg_view *av, const uint16_t *b,
                               const tg_view *bv, void *out, const tg_chain *ep) {
    tg_cpu_matmul_ran = P->uk;
    bool f32 = P->out_dtype == TGRAD_DTYPE_F32;
    if (P->path == PATH_EMPTY) return TGRAD_OK;
    if (P->path == PATH_ZEROS) {
        memset(out, 0, (size_t)(P->M * P->N) * (f32 ? 4u : 2u));
        if (!f32) tg_chain_apply_block(ep, out, P->N, 0, 0, P->M, P->N);
        return TGRAD_OK;
    }
    /* Both operands have elements now, so their views lie inside their buffers: every address the
     * kernels form, base + i * s0 + k * s1 for i, k inside the shape, is an element of the buffer
     * (and each partial sum of the offset lies between the view's lowest and highest element). An
     * empty operand may carry any offset: it is never addressed. */
    const uint16_t *abase = a + av->offset, *bbase = b + bv->offset;
    tg_operand A = { P->swapped ? bbase : abase, P->a_strides[0], P->a_strides[1] };
    tg_operand B = { P->swapped ? abase : bbase, P->b_strides[0], P->b_strides[1] };
    const tg_ukernel *uk = P->uk;
    if (f32) return tg_cpu_gemm_packed(uk, &A, &B, P->M, P->N, P->K, P->threads, NULL, out, NULL);
    if (P->path == PATH_ROWVEC) return tg_cpu_matmul_rowvec(uk, &A, &B, P->K, P->N, P->threads, out, ep);
    if (P->path == PATH_SKINNY) return tg_cpu_matmul_skinny(uk, &A, &B, P->M, P->K, P->N, P->threads, out, ep);
    return tg_cpu_gemm_packed(uk, &A, &B, P->M, P->N, P->K, P->threads, out, NULL, ep);
}
