/* The rules of the row kinds (hwire): SOFTMAX (softmax and log_softmax by their one-rounding
 * backward op, tgrad_softmax_backward; logsumexp as g * softmax(x)), ROPE (tgrad_rope_backward with
 * the node's parameters; none into positions or inv_freq), NORM (rms_norm and layer_norm composed
 * in float32 from correctly rounded ops, one final rounding to the chain dtype) and SLICE_SCATTER
 * (d dst = g with the block zeroed, d src = the block of g: exact). The backward nodes themselves
 * (softmax_backward, log_softmax_backward, rope_backward) have none: second order is not supported.
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
    tgrad_status s = tg_g_scalar(A, 0.0, a->cd, &z);
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

/* x, g and the weight in float32 (exact); rinv = rsqrt(mean over the row of (x - mu)^2 + eps) with
 * mu the row's mean (layer_norm) or 0 (rms_norm); xh = (x - mu) rinv; gw = g w. dx:
 *   rms_norm:   rinv gw - x (rinv^3 sum(gw x) / N)
 *   layer_norm: rinv (gw - mean(gw) - xh mean(gw xh))
 * dweight = sum over the leading axes of g xh, dbias = that of g. Each op rounds once in float32. */
static tgrad_status norm_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    Ar *A = a->A;
    const tg_node *n = a->node;
    const tg_view *xv = &n->inputs[0].view;
    int32_t nd = xv->ndim, lead = nd - n->params.norm_axes;
    bool layer = n->params.norm_op == TG_NORM_LAYER;
    int32_t wi = n->params.has_weight ? 1 : 0, bi = n->params.has_bias ? 1 + wi : 0;
    tgrad_tensor_t X = 0, G = 0, W = 0, D = 0, t = 0, rinv = 0, xh = 0, gw = 0, r = 0;
    tgrad_status s = TGRAD_OK;
    bool memo = A->memo.node == n && A->memo.key == a->g; /* the same nodes the previous input built */
    if (memo) X = A->memo.h[0], G = A->memo.h[1];
    else s = tg_g_cast(A, a->x[0], F32, &X);
    if (!s && !memo) s = tg_g_cast(A, a->g, F32, &G);
    if (!s && bi && i == bi) { /* dbias */
        s = red(A, TGRAD_REDUCE_SUM, G, 0, lead, 0, &r);
        return s ? s : tg_g_cast(A, r, a->cd, gi);
    }
    if (memo && A->memo.h[4]) {
        D = A->memo.h[2], rinv = A->memo.h[3], xh = A->memo.h[4];
    } else {
        D = X;
        if (!s && layer) s = red(A, TGRAD_REDUCE_MEAN, X, lead, nd, 1, &t);
        if (!s && layer) s = bin(A, TGRAD_OP_SUB, X, t, &D);
        if (!s) s = bin(A, TGRAD_OP_MUL, D, D, &t);
        if (!s) s = red(A, TGRAD_REDUCE_MEAN, t, lead, nd, 1, &t);
        if (!s) s = tg_g_binc(A, TGRAD_OP_ADD, t, n->params.eps, &t);
        if (!s) s = tg_g_un(A, TGRAD_OP_RSQRT, t, &rinv);
        if (!s) s = bin(A, TGRAD_OP_MUL, D, rinv, &xh);
    }
    if (s) return s;
    A->memo.node = n, A->memo.key = a->g; /* handles of the arena: alive until tgrad_grad returns */
    A->memo.h[0] = X, A->memo.h[1] = G, A->memo.h[2] = D, A->memo.h[3] = rinv, A->memo.h[4] = xh;
    if (!s && wi && i == wi) { /* dweight */
        s = bin(A, TGRAD_OP_MUL, G, xh, &t);
        if (!s) s = red(A, TGRAD_REDUCE_SUM, t, 0, lead, 0, &r);
        return s ? s : tg_g_cast(A, r, a->cd, gi);
    }
    gw = G;
    if (!s && wi) s = tg_g_cast(A, a->x[wi], F32, &W);
    if (!s && wi) s = bin(A, TGRAD_OP_MUL, G, W, &gw);
    if (s) return s;
    if (layer) {
        tgrad_tensor_t m1 = 0, m2 = 0;
        s = red(A, TGRAD_REDUCE_MEAN, gw, lead, nd, 1, &m1);
        if (!s) s = bin(A, TGRAD_OP_MUL, gw, xh, &t);
        if (!s) s = red(A, TGRAD_REDUCE_MEAN, t, lead, nd, 1, &m2);
        if (!s) s = bin(A, TGRAD_OP_SUB, gw, m1, &r);
        if (!s) s = bin(A, TGRAD_OP_MUL, xh, m2, &t);
        if (!s) s = bin(A, TGRAD_OP_SUB, r, t, &r);
        if (!s) s = bin(A, TGRAD_OP_MUL, rinv, r, &r);
    } else {
        int64_t N = 1;
        for (int32_t d = lead; d < nd; d++) N *= xv->shape[d];
        tgrad_tensor_t c = 0;
        s = bin(A, TGRAD_OP_MUL, gw, X, &t);
        if (!s) s = red(A, TGRAD_REDUCE_SUM, t, lead, nd, 1, &c);  /* sum(gw x) */
        if (!s) s = bin(A, TGRAD_OP_MUL, rinv, rinv, &t);
        if (!s) s = bin(A, TGRAD_OP_MUL, t, rinv, &t);
        if (!s) s = bin(A, TGRAD_OP_MUL, t, c, &t);
        if (!s) s = tg_g_binc(A, TGRAD_OP_DIV, t, (double)N, &c);   /* rinv^3 sum(gw x) / N */
        if (!s) s = bin(A, TGRAD_OP_MUL, X, c, &t);
        if (!s) s = bin(A, TGRAD_OP_MUL, rinv, gw, &r);
        if (!s) s = bin(A, TGRAD_OP_SUB, r, t, &r);
    }
    return s ? s : tg_g_cast(A, r, a->cd, gi);
}

const tg_vjp tg_vjp_softmax = { .check = softmax_check, .input = softmax_input };
const tg_vjp tg_vjp_rope = { .check = rope_check, .input = rope_input };
const tg_vjp tg_vjp_slice_scatter = { .input = slice_scatter_input };
const tg_vjp tg_vjp_norm = { .input = norm_input };
