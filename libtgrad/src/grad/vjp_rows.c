/* The rules of the row kinds (hwire): SOFTMAX (softmax and log_softmax by their one-rounding
 * backward op, tgrad_softmax_backward; logsumexp as g * softmax(x)), ROPE (tgrad_rope_backward with
 * the node's parameters; none into positions or inv_freq), NORM (rms_norm and layer_norm: dx by their
 * one-rounding backward ops, tgrad_rms_norm_backward and tgrad_layer_norm_backward; dweight and dbias
 * composed in float32 from correctly rounded ops, one final rounding to the chain dtype) and SLICE_SCATTER
 * (d dst = g with the block zeroed, d src = the block of g: exact). The backward nodes themselves
 * (softmax_backward, log_softmax_backward, rope_backward, rms_norm_backward, layer_norm_backward) have none: second order is not supported.
 * docs/autograd.md has each rule and its roundings. */
#include "../kinds.h"
#include "grad.h"

#define F32 TGRAD_DTYPE_F32
typedef tg_grad_arena Ar;

/* ---- SOFTMAX ---- */
static tgrad_status softmax_check(const tg_node *n) {
    if (!tg_softmax_is_backward(n->params.softmax_op)) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_NO_GRADIENT_RULE, "grad: %s has no gradient rule (second order is not supported)",
                   tg_softmax_kind_name(n->params.softmax_op));
}

static tgrad_status softmax_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    (void)i;
    Ar *A = a->A;
    const tg_node *n = a->node;
    int32_t axis = n->params.axes[0], op = n->params.softmax_op;
    if (op != TGRAD_SOFTMAX_LOGSUMEXP) /* one rounding: y (the node's result) and g to the chain dtype */
        return tg_keep_out(A, tgrad_softmax_backward(op, a->y, a->g, axis, a->cd, gi), gi);
    /* logsumexp: g (read with the axis kept, broadcast along it) * softmax(x): softmax rounded
     * once to float32, the product once in float32, then the chain dtype */
    const tg_view *xv = &n->inputs[0].view;
    int64_t kshape[TGRAD_MAX_DIMS];
    for (int32_t d = 0; d < xv->ndim; d++) kshape[d] = d == axis ? 1 : xv->shape[d];
    tgrad_tensor_t sm = 0, G = 0, r = 0;
    tgrad_status s = tg_keep_out(A, tgrad_softmax(TGRAD_SOFTMAX_SOFTMAX, a->x[0], axis, 0, F32, &sm), &sm);
    if (!s) s = tg_g_cast(A, a->g, F32, &G);
    if (!s && xv->ndim) s = tg_g_reshape(A, G, xv->ndim, kshape, &G);
    if (!s && xv->ndim) s = tg_g_expand(A, G, xv->ndim, xv->shape, &G);
    if (!s) s = tg_g_bin(A, TGRAD_OP_MUL, sm, G, &r);
    return s ? s : tg_g_cast(A, r, a->cd, gi);
}

/* ---- ROPE ---- */
static tgrad_status rope_check(const tg_node *n) {
    if (!n->params.rope_backward) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_NO_GRADIENT_RULE, "grad: rope_backward has no gradient rule (second order is not supported)");
}

static tgrad_status rope_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    if (i != 0) return *gi = 0, TGRAD_OK; /* positions and inv_freq: no gradient */
    Ar *A = a->A;
    const tg_node *n = a->node;
    tgrad_tensor_t g = 0, r = 0;
    /* rope_backward takes bf16: a float32 chain is rounded to bf16 first (two roundings) */
    tgrad_status s = tg_g_cast(A, a->g, TGRAD_DTYPE_BF16, &g);
    if (!s)
        s = tg_keep_out(A,
                        tgrad_rope_backward(g, a->x[1], n->params.has_weight ? a->x[2] : 0, n->params.eps,
                                            n->params.rotary_dim, n->params.interleaved, &r),
                        &r);
    return s ? s : tg_g_cast(A, r, a->cd, gi);
}

/* ---- SLICE_SCATTER ---- */
static tgrad_status slice_scatter_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    Ar *A = a->A;
    const tg_node *n = a->node;
    int32_t axis = n->params.axes[0];
    int64_t start = n->params.scatter_start;
    const tg_view *sv = &n->inputs[1].view;
    if (i == 1) return tg_keep_out(A, tgrad_tensor_slice(a->g, axis, start, start + sv->shape[axis], 1, 0, gi), gi);
    tgrad_tensor_t z = 0;
    tgrad_status s = tg_g_scalar(A, 0.0, a->cd, a->g, &z);
    if (!s) s = tg_g_expand(A, z, sv->ndim, sv->shape, &z);
    return s ? s : tg_keep_out(A, tgrad_slice_scatter(a->g, z, axis, start, gi), gi);
}

/* ---- NORM ---- */
static tgrad_status bin(Ar *A, tgrad_op op, tgrad_tensor_t x, tgrad_tensor_t y, tgrad_tensor_t *o) {
    return tg_g_bin(A, op, x, y, o);
}
static tgrad_status red(Ar *A, int32_t op, tgrad_tensor_t x, int32_t first, int32_t last, int32_t keep, tgrad_tensor_t *o) {
    int32_t axes[TGRAD_MAX_DIMS], k = 0;
    for (int32_t d = first; d < last; d++) axes[k++] = d;
    if (!k) return *o = x, TGRAD_OK;
    return tg_keep_out(A, tgrad_reduce(op, x, axes, k, keep, F32, o), o);
}

static tgrad_status norm_check(const tg_node *n) {
    if (n->params.norm_op <= TG_NORM_LAYER) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_NO_GRADIENT_RULE, "grad: %s has no gradient rule (second order is not supported)",
                   tg_norm_op_name(n->params.norm_op));
}

/* dx: the one-rounding derivative op (tgrad_rms_norm_backward, tgrad_layer_norm_backward) on x, g
 * and the weight, in the chain dtype. */
static tgrad_status norm_dx(const tg_vjp_args *a, tgrad_tensor_t *gi) {
    const tg_node *n = a->node;
    tgrad_tensor_t w = n->params.has_weight ? a->x[1] : 0;
    int32_t k = n->params.norm_axes;
    double eps = n->params.eps;
    tgrad_status s = n->params.norm_op == TG_NORM_LAYER
                         ? tgrad_layer_norm_backward(a->x[0], a->g, w, k, eps, a->cd, gi)
                         : tgrad_rms_norm_backward(a->x[0], a->g, w, k, eps, a->cd, gi);
    return tg_keep_out(a->A, s, gi);
}

/* dweight and dbias, composed in float32: x and g in float32 (exact); rinv = rsqrt(mean over the
 * row of (x - mu)^2 + eps) with mu the row's mean (layer_norm) or 0 (rms_norm); xh = (x - mu) rinv;
 * dweight = sum over the leading axes of g xh, dbias = that of g. Each op rounds once in float32,
 * then once to the chain dtype (dbias: one correctly rounded sum). */
static tgrad_status norm_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    if (i == 0) return norm_dx(a, gi);
    Ar *A = a->A;
    const tg_node *n = a->node;
    const tg_view *xv = &n->inputs[0].view;
    int32_t nd = xv->ndim, lead = nd - n->params.norm_axes;
    bool layer = n->params.norm_op == TG_NORM_LAYER;
    int32_t wi = n->params.has_weight ? 1 : 0, bi = n->params.has_bias ? 1 + wi : 0;
    tgrad_tensor_t X = 0, G = 0, D = 0, t = 0, rinv = 0, xh = 0, r = 0;
    tgrad_status s = TGRAD_OK;
    bool memo = A->memo.node == n && A->memo.key == a->g; /* the same nodes the previous input built */
    if (memo) X = A->memo.h[0], G = A->memo.h[1];
    else s = tg_g_cast(A, a->x[0], F32, &X);
    if (!s && !memo) s = tg_g_cast(A, a->g, F32, &G);
    if (!s) A->memo.node = n, A->memo.key = a->g, A->memo.h[0] = X, A->memo.h[1] = G;
    if (!s && bi && i == bi) { /* dbias */
        s = red(A, TGRAD_REDUCE_SUM, G, 0, lead, 0, &r);
        return s ? s : tg_g_cast(A, r, a->cd, gi);
    }
    D = X; /* dweight */
    if (!s && layer) s = red(A, TGRAD_REDUCE_MEAN, X, lead, nd, 1, &t);
    if (!s && layer) s = bin(A, TGRAD_OP_SUB, X, t, &D);
    if (!s) s = bin(A, TGRAD_OP_MUL, D, D, &t);
    if (!s) s = red(A, TGRAD_REDUCE_MEAN, t, lead, nd, 1, &t);
    if (!s) s = tg_g_binc(A, TGRAD_OP_ADD, t, n->params.eps, &t);
    if (!s) s = tg_g_un(A, TGRAD_OP_RSQRT, t, &rinv);
    if (!s) s = bin(A, TGRAD_OP_MUL, D, rinv, &xh);
    if (!s) s = bin(A, TGRAD_OP_MUL, G, xh, &t);
    if (!s) s = red(A, TGRAD_REDUCE_SUM, t, 0, lead, 0, &r);
    return s ? s : tg_g_cast(A, r, a->cd, gi);
}

const tg_vjp tg_vjp_softmax = { .check = softmax_check, .input = softmax_input };
const tg_vjp tg_vjp_rope = { .check = rope_check, .input = rope_input };
const tg_vjp tg_vjp_slice_scatter = { .input = slice_scatter_input };
const tg_vjp tg_vjp_norm = { .check = norm_check, .input = norm_input };
