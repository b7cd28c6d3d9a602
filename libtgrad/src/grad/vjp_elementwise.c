/* ELEMENTWISE's rules, one per op code (1-23). relu, gelu, gelu_tanh, silu, sigmoid, tanh, rsqrt
 * and sqrt are the correctly rounded derivative ops (codes 24-31, one rounding of the exact
 * g * f'), called on the original x (or y) and g when both are the chain's dtype; otherwise both
 * are cast to float32 (exactly) and the float32 op's result is cast to the chain dtype (one
 * rounding into a float32 chain). The others are composed in float32 from the library's correctly
 * rounded float32 ops, then rounded to the chain's dtype: a handful of float32 roundings before
 * the last one (docs/autograd.md has each formula and where it matches torch at its edges). */
#include "grad.h"

#define F32 TGRAD_DTYPE_F32
typedef tg_grad_arena Ar;

/* small spellings: each makes one float32 handle in the arena */
static tgrad_status mul(Ar *A, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *o) { return tg_g_bin(A, TGRAD_OP_MUL, a, b, o); }
static tgrad_status mulc(Ar *A, tgrad_tensor_t a, double c, tgrad_tensor_t *o) { return tg_g_binc(A, TGRAD_OP_MUL, a, c, o); }
static tgrad_status un(Ar *A, tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t *o) { return tg_g_un(A, op, a, o); }
/* cond(a cmp c) ? g : +0 */
static tgrad_status maskc(Ar *A, int32_t cmp, tgrad_tensor_t a, double c, tgrad_tensor_t g, tgrad_tensor_t *o) {
    tgrad_tensor_t m = 0;
    tgrad_status s = tg_g_cmpc(A, cmp, a, c, &m);
    return s ? s : tg_g_mask(A, m, g, o);
}

/* ---- the other ops: short compositions of their own ---- */
/* d(a op b) for operand i, in float32: X the operands, Y the result (float32), G the cotangent */
static tgrad_status rule(Ar *A, tgrad_op op, int32_t i, const tgrad_tensor_t *X, tgrad_tensor_t Y, tgrad_tensor_t G,
                         tgrad_tensor_t *o) {
    tgrad_tensor_t t = 0, u = 0;
    tgrad_status s = TGRAD_OK;
    switch (op) {
    case TGRAD_OP_EXP: return mul(A, G, Y, o);
    case TGRAD_OP_NEG: return un(A, TGRAD_OP_NEG, G, o);
    case TGRAD_OP_ABS: /* g sign(x), 0 at 0 (torch) */
        s = maskc(A, TGRAD_COMPARE_GT, X[0], 0.0, G, &t);
        if (!s) s = maskc(A, TGRAD_COMPARE_LT, X[0], 0.0, G, &u);
        return s ? s : tg_g_bin(A, TGRAD_OP_SUB, t, u, o);
    case TGRAD_OP_SQUARE: s = mulc(A, X[0], 2.0, &t); return s ? s : mul(A, G, t, o);
    case TGRAD_OP_ADD: return *o = G, TGRAD_OK;
    case TGRAD_OP_SUB: return i == 0 ? (*o = G, TGRAD_OK) : un(A, TGRAD_OP_NEG, G, o);
    case TGRAD_OP_MUL: return mul(A, G, X[1 - i], o);
    case TGRAD_OP_DIV: /* g / b; -(g / b) (a / b) */
        s = tg_g_bin(A, TGRAD_OP_DIV, G, X[1], &t);
        if (i == 0 || s) return s ? s : (*o = t, TGRAD_OK);
        if (!s) s = tg_g_bin(A, TGRAD_OP_DIV, X[0], X[1], &u);
        if (!s) s = mul(A, t, u, &t);
        return s ? s : un(A, TGRAD_OP_NEG, t, o);
    case TGRAD_OP_MAXIMUM:
    case TGRAD_OP_MINIMUM: { /* torch: the winner takes g, a tie splits it in halves */
        tgrad_tensor_t m = 0, e = 0, h = 0;
        int32_t win = op == TGRAD_OP_MAXIMUM ? TGRAD_COMPARE_GT : TGRAD_COMPARE_LT;
        s = tg_keep_out(A, tgrad_compare(win, X[i], X[1 - i], &m), &m);
        if (!s) s = tg_keep_out(A, tgrad_compare(TGRAD_COMPARE_EQ, X[0], X[1], &e), &e);
        if (!s) s = tg_g_mask(A, m, G, &t);
        if (!s) s = mulc(A, G, 0.5, &h);
        if (!s) s = tg_g_mask(A, e, h, &u);
        return s ? s : tg_g_bin(A, TGRAD_OP_ADD, t, u, o);
    }
    case TGRAD_OP_LOG: return tg_g_bin(A, TGRAD_OP_DIV, G, X[0], o);
    case TGRAD_OP_LOG1P:
        s = tg_g_binc(A, TGRAD_OP_ADD, X[0], 1.0, &t);
        return s ? s : tg_g_bin(A, TGRAD_OP_DIV, G, t, o);
    case TGRAD_OP_SIN: s = un(A, TGRAD_OP_COS, X[0], &t); return s ? s : mul(A, G, t, o);
    case TGRAD_OP_COS:
        s = un(A, TGRAD_OP_SIN, X[0], &t);
        if (!s) s = mul(A, G, t, &t);
        return s ? s : un(A, TGRAD_OP_NEG, t, o);
    case TGRAD_OP_POW:
        if (i == 0) { /* g b a^(b-1), 0 where b = 0 (torch) */
            s = tg_g_binc(A, TGRAD_OP_SUB, X[1], 1.0, &t);
            if (!s) s = tg_g_bin(A, TGRAD_OP_POW, X[0], t, &t);
            if (!s) s = mul(A, X[1], t, &t);
            if (!s) s = mul(A, G, t, &t);
            return s ? s : maskc(A, TGRAD_COMPARE_NE, X[1], 0.0, t, o);
        } else { /* g y log(a), 0 where a = 0 and b >= 0 (torch) */
            tgrad_tensor_t az = 0, bn = 0;
            s = un(A, TGRAD_OP_LOG, X[0], &t);
            if (!s) s = mul(A, Y, t, &t);
            if (!s) s = mul(A, G, t, &t);
            if (!s) s = tg_g_cmpc(A, TGRAD_COMPARE_NE, X[0], 0.0, &az);
            if (!s) s = tg_g_cmpc(A, TGRAD_COMPARE_LT, X[1], 0.0, &bn);
            if (!s) s = tg_g_mask(A, bn, t, &u); /* b < 0: the value stands (inf or nan, as torch) */
            if (!s) s = tg_keep_out(A, tgrad_where(az, t, u, o), o);
            return s;
        }
    default: return tg_fail(TGRAD_ERR_NO_GRADIENT_RULE, "grad: the elementwise op %s has no gradient rule yet", tgrad_op_name(op));
    }
}

static tgrad_status ew_check(const tg_node *n) {
    if (n->ew >= TGRAD_OP_RELU && n->ew <= TGRAD_OP_POW) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_NO_GRADIENT_RULE, "grad: the elementwise op %s has no gradient rule yet (docs/autograd.md)",
                   tgrad_op_name(n->ew));
}

/* The derivative op of a forward op (0: none), and whether it reads y (else x). */
static tgrad_op derivative_op(tgrad_op op, bool *reads_y) {
    *reads_y = op == TGRAD_OP_SIGMOID || op == TGRAD_OP_TANH || op == TGRAD_OP_RSQRT || op == TGRAD_OP_SQRT;
    switch (op) {
    case TGRAD_OP_RELU: return TGRAD_OP_RELU_BACKWARD;
    case TGRAD_OP_GELU: return TGRAD_OP_GELU_BACKWARD;
    case TGRAD_OP_GELU_TANH: return TGRAD_OP_GELU_TANH_BACKWARD;
    case TGRAD_OP_SILU: return TGRAD_OP_SILU_BACKWARD;
    case TGRAD_OP_SIGMOID: return TGRAD_OP_SIGMOID_BACKWARD;
    case TGRAD_OP_TANH: return TGRAD_OP_TANH_BACKWARD;
    case TGRAD_OP_RSQRT: return TGRAD_OP_RSQRT_BACKWARD;
    case TGRAD_OP_SQRT: return TGRAD_OP_SQRT_BACKWARD;
    default: return (tgrad_op)0;
    }
}

/* g f' by the one-rounding derivative op d on v (x or y) and g */
static tgrad_status derivative(const tg_vjp_args *a, tgrad_op d, tgrad_tensor_t v, tgrad_tensor_t *gi) {
    Ar *A = a->A;
    int32_t vt = 0;
    tgrad_status s = tgrad_tensor_dtype(v, &vt);
    if (s) return s;
    if (vt == a->cd) return tg_g_bin(A, d, v, a->g, gi); /* one rounding, to the chain dtype */
    tgrad_tensor_t V = 0, G = 0, r = 0;
    s = tg_g_cast(A, v, F32, &V);
    if (!s) s = tg_g_cast(A, a->g, F32, &G);
    if (!s) s = tg_g_bin(A, d, V, G, &r);
    return s ? s : tg_g_cast(A, r, a->cd, gi);
}

/* g's values are their own round trip through float32 (widening exact, narrowing RNE, any NaN the
 * canonical 0x7fc0): a chain in float32, or a pending CPU result of a kind whose bfloat16 NaN is
 * always 0x7fc0 (matmul, docs/numerics.md; every elementwise op, and the cast from float32). A
 * cotangent the caller gave (a seed) may hold another NaN, which the round trip makes canonical. */
static bool own_round_trip(const tg_vjp_args *a) {
    tg_tensor t;
    if (tg_handle_get_tensor(a->g, &t)) return false;
    const tg_node *n = t.buf->node;
    bool yes = t.buf->dtype == a->cd &&
               (a->cd == F32 || (t.buf->device == TGRAD_DEVICE_CPU && n &&
                                 (n->op == TG_OP_MATMUL || n->op == TG_OP_ELEMENTWISE ||
                                  (n->op == TG_OP_CAST && n->ninputs == 1 && n->inputs[0].buf &&
                                   n->inputs[0].buf->dtype == F32))));
    tg_tensor_unref(&t);
    return yes;
}

static tgrad_status ew_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    Ar *A = a->A;
    bool reads_y = false;
    tgrad_op d = derivative_op(a->node->ew, &reads_y);
    if (d) return derivative(a, d, reads_y ? a->y : a->x[0], gi);
    /* add's (and sub's first) cotangent is g rounded through float32 back to the chain's dtype:
     * g itself where that round trip changes no bit (two casts fewer per bias and residual add) */
    if ((a->node->ew == TGRAD_OP_ADD || (a->node->ew == TGRAD_OP_SUB && i == 0)) && own_round_trip(a))
        return tg_g_reshape(A, a->g, a->node->out.ndim, a->node->out.shape, gi);
    tgrad_tensor_t X[2] = { 0, 0 }, Y = 0, G = 0, r = 0;
    tgrad_status s = TGRAD_OK;
    for (int32_t k = 0; k < a->node->ninputs && !s; k++) s = tg_g_cast(A, a->x[k], F32, &X[k]);
    if (!s) s = tg_g_cast(A, a->y, F32, &Y);
    if (!s && a->node->ew == TGRAD_OP_POW) s = tg_g_bin(A, TGRAD_OP_POW, X[0], X[1], &Y); /* y unrounded to bf16 */
    if (!s) s = tg_g_cast(A, a->g, F32, &G);
    if (!s) s = rule(A, a->node->ew, i, X, Y, G, &r);
    return s ? s : tg_g_cast(A, r, a->cd, gi);
}

const tg_vjp tg_vjp_elementwise = { .check = ew_check, .input = ew_input };
