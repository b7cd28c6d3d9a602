/* MATMUL's rule: out = a @ b over [batch..., M, K] @ [batch..., K, N] (the node's operand views,
 * broadcast batch axes with stride 0). ga = g @ b^T and gb = a^T @ g, the transposes read as
 * zero-copy views (the last two axes swapped), each product accumulated in float32 and rounded
 * once to the chain's dtype, in the forward product's order (tgrad_matmul_ordered); the engine then sums a broadcast batch axis
 * (correctly rounded). The product takes bf16 operands: a float32 cotangent is rounded to bf16
 * first (docs/autograd.md, "Gradient dtype").
 *
 * An operand read as the transpose of its compact buffer (F.linear's weight, `x @ w.T`) gets its
 * cotangent in the buffer's own layout: gb^T = g^T @ a (ga^T = b @ g^T) computed and read back
 * through a transposed view, so the engine needs no PLACE copy to lay it out (grad/engine.c's
 * tg_g_unview sees a view that lands every element where it already is). Same bytes: an output
 * element's order depends only on its k index (every route, every blocking: docs/numerics.md),
 * the k index is the same in both products, and a bf16 product is exact in float32 whichever
 * operand comes first. */
#include "grad.h"

static tgrad_status transposed(tg_grad_arena *A, tgrad_tensor_t x, int32_t ndim, tgrad_tensor_t *out) {
    return tg_keep_out(A, tgrad_tensor_transpose(x, ndim - 2, ndim - 1, out), out);
}

/* v reads its whole buffer (numel elements) as the transpose of a compact row-major array: the last
 * two axes swapped, every batch axis compact, offset 0. */
static bool transposed_compact(const tg_view *v, int64_t numel) {
    int32_t nd = v->ndim;
    if (nd < 2 || v->offset != 0 || v->shape[nd - 1] < 2 || v->shape[nd - 2] < 2) return false;
    if (v->strides[nd - 2] != 1 || v->strides[nd - 1] != v->shape[nd - 2]) return false;
    int64_t step = v->shape[nd - 2] * v->shape[nd - 1];
    for (int32_t d = nd - 3; d >= 0; d--) {
        if (v->shape[d] > 1 && v->strides[d] != step) return false;
        step *= v->shape[d];
    }
    return step == numel;
}

static tgrad_status matmul_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    tg_grad_arena *A = a->A;
    int32_t nd = a->node->out.ndim;
    tgrad_tensor_t g = a->g, t = 0;
    int32_t gd = 0;
    tgrad_status s = tgrad_tensor_dtype(g, &gd);
    if (!s && gd != TGRAD_DTYPE_BF16) s = tg_g_cast(A, g, TGRAD_DTYPE_BF16, &g);
    if (s) return s;
    int32_t order = a->node->params.matmul_order; /* the forward product's order */
    const tg_node_input *in = &a->node->inputs[i];
    if (in->view.ndim == nd && transposed_compact(&in->view, in->buf->numel)) {
        tgrad_tensor_t gt = 0, r = 0; /* the cotangent's transpose, computed in the buffer's layout */
        s = transposed(A, g, nd, &gt);
        if (!s) s = tg_keep_out(A, i == 0 ? tgrad_matmul_ordered(a->x[1], gt, a->cd, order, &r)
                                          : tgrad_matmul_ordered(gt, a->x[0], a->cd, order, &r), &r);
        return s ? s : transposed(A, r, nd, gi);
    }
    s = transposed(A, a->x[1 - i], nd, &t);
    if (s) return s;
    return tg_keep_out(A, i == 0 ? tgrad_matmul_ordered(g, t, a->cd, order, gi) : tgrad_matmul_ordered(t, g, a->cd, order, gi),
                       gi);
}

const tg_vjp tg_vjp_matmul = { .input = matmul_input };
