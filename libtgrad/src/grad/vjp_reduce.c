/* REDUCE's rule. sum: the cotangent broadcast back over the reduced axes (exact). mean: the
 * cotangent divided by the count (one correctly rounded division), broadcast. max and min:
 * torch's amax/amin rule, the cotangent split evenly among the elements equal to the result
 * (g / ties, one rounding; +0 elsewhere). argmax and argmin give int32 results, which carry no
 * gradient. All in the chain's dtype. */
#include "grad.h"

static tgrad_status reduce_check(const tg_node *n) {
    int32_t op = n->params.reduce_op;
    if (op == TGRAD_REDUCE_SUM || op == TGRAD_REDUCE_MEAN || op == TGRAD_REDUCE_MAX || op == TGRAD_REDUCE_MIN)
        return TGRAD_OK;
    return tg_fail(TGRAD_ERR_NO_GRADIENT_RULE, "grad: %s has no gradient (an index, not a value)", tgrad_reduce_name(op));
}

static tgrad_status reduce_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    tg_grad_arena *A = a->A;
    const tg_node *n = a->node;
    const tg_view *in = &n->inputs[i].view;
    int64_t kshape[TGRAD_MAX_DIMS], count = 1;
    for (int32_t d = 0; d < in->ndim; d++) kshape[d] = in->shape[d];
    for (int32_t k = 0; k < n->params.naxes; k++) count *= in->shape[n->params.axes[k]], kshape[n->params.axes[k]] = 1;
    tgrad_tensor_t g = 0, y = 0, m = 0, c = 0, cnt = 0;
    tgrad_status s = tg_g_reshape(A, a->g, in->ndim, kshape, &g);
    if (s) return s;
    switch (n->params.reduce_op) {
    case TGRAD_REDUCE_SUM: break;
    case TGRAD_REDUCE_MEAN: s = tg_g_binc(A, TGRAD_OP_DIV, g, (double)count, &g); break;
    default: /* max, min: ties share the cotangent evenly */
        s = tg_g_reshape(A, a->y, in->ndim, kshape, &y);
        if (!s) s = tg_g_expand(A, y, in->ndim, in->shape, &y);
        if (!s) s = tg_keep_out(A, tgrad_compare(TGRAD_COMPARE_EQ, a->x[0], y, &m), &m);
        if (!s) s = tg_g_cast(A, m, a->cd, &c);
        if (!s) s = tg_keep_out(A, tgrad_reduce(TGRAD_REDUCE_SUM, c, n->params.axes, n->params.naxes, 1, 0, &cnt), &cnt);
        if (!s) s = tg_g_bin(A, TGRAD_OP_DIV, g, cnt, &g);
        if (!s) s = tg_g_expand(A, g, in->ndim, in->shape, &g);
        return s ? s : tg_g_mask(A, m, g, gi);
    }
    return s ? s : tg_g_expand(A, g, in->ndim, in->shape, gi);
}

const tg_vjp tg_vjp_reduce = { .check = reduce_check, .input = reduce_input };
