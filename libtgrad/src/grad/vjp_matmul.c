/* MATMUL's rule: out = a @ b over [batch..., M, K] @ [batch..., K, N] (the node's operand views,
 * broadcast batch axes with stride 0). ga = g @ b^T and gb = a^T @ g, the transposes read as
 * zero-copy views (the last two axes swapped), each product accumulated in float32 and rounded
 * once to the chain's dtype, in the forward product's order (tgrad_matmul_ordered); the engine then sums a broadcast batch axis
 * (correctly rounded). The product takes bf16 operands: a float32 cotangent is rounded to bf16
 * first (docs/autograd.md, "Gradient dtype"). */
#include "grad.h"

static tgrad_status transposed(tg_grad_arena *A, tgrad_tensor_t x, int32_t ndim, tgrad_tensor_t *out) {
    return tg_keep_out(A, tgrad_tensor_transpose(x, ndim - 2, ndim - 1, out), out);
}

static tgrad_status matmul_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    tg_grad_arena *A = a->A;
    int32_t nd = a->node->out.ndim;
    tgrad_tensor_t g = a->g, t = 0;
    int32_t gd = 0;
    tgrad_status s = tgrad_tensor_dtype(g, &gd);
    if (!s && gd != TGRAD_DTYPE_BF16) s = tg_g_cast(A, g, TGRAD_DTYPE_BF16, &g);
    if (!s) s = transposed(A, a->x[1 - i], nd, &t);
    if (s) return s;
    int32_t order = a->node->params.matmul_order; /* the forward product's order */
    return tg_keep_out(A, i == 0 ? tgrad_matmul_ordered(g, t, a->cd, order, gi) : tgrad_matmul_ordered(t, g, a->cd, order, gi),
                       gi);
}

const tg_vjp tg_vjp_matmul = { .input = matmul_input };
