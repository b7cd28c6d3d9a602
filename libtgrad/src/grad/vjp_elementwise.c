/* ELEMENTWISE's rules, one per op code (1-23). Each is composed in float32 from the library's
 * correctly rounded float32 ops (the operands and the cotangent cast to float32, exactly), then
 * rounded to the chain's dtype: a handful of float32 roundings before the last one, so a bf16
 * result is within one bf16 ulp of the exact g * f'(x) (docs/autograd.md has each formula and
 * where it matches torch at its edges). The derivative ops of issue 36 (gelu_backward,
 * silu_backward, ...: one rounding each) replace the composed functions marked "composed" one
 * for one when they land. */
#include "grad.h"

#define F32 TGRAD_DTYPE_F32
typedef tg_grad_arena Ar;

/* small spellings: each makes one float32 handle in the arena */
static tgrad_status mul(Ar *A, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *o) { return tg_g_bin(A, TGRAD_OP_MUL, a, b, o); }
static tgrad_status mulc(Ar *A, tgrad_tensor_t a, double c, tgrad_tensor_t *o) { return tg_g_binc(A, TGRAD_OP_MUL, a, c, o); }
static tgrad_status un(Ar *A, tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t *o) { return tg_g_un(A, op, a, o); }
/* c - a */
static tgrad_status rsubc(Ar *A, double c, tgrad_tensor_t a, tgrad_tensor_t *o) {
    tgrad_tensor_t k = 0;
    tgrad_status s = tg_g_scalar(A, c, F32, &k);
    return s ? s : tg_g_bin(A, TGRAD_OP_SUB, k, a, o);
}
/* cond(a cmp c) ? g : +0 */
static tgrad_status maskc(Ar *A, int32_t cmp, tgrad_tensor_t a, double c, tgrad_tensor_t g, tgrad_tensor_t *o) {
    tgrad_tensor_t m = 0;
    tgrad_status s = tg_g_cmpc(A, cmp, a, c, &m);
    return s ? s : tg_g_mask(A, m, g, o);
}

/* ---- composed derivative ops (each a placeholder for hgew's one-rounding op, codes 24-29) ---- */
/* relu_backward(x, g) = x > 0 ? g : 0 (torch: 0 at x = 0) */
static tgrad_status relu_backward(Ar *A, tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t *o) {
    return maskc(A, TGRAD_COMPARE_GT, x, 0.0, g, o);
}
/* gelu_backward(x, g) = g (Phi(x) + x phi(x)); Phi(x) = gelu(x) / x (1/2 at 0), phi the normal pdf. */
static tgrad_status gelu_backward(Ar *A, tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t *o) {
    tgrad_tensor_t ge = 0, cdf = 0, z = 0, half = 0, pdf = 0, t = 0, x2 = 0;
    tgrad_status s = un(A, TGRAD_OP_GELU, x, &ge);
    if (!s) s = tg_g_bin(A, TGRAD_OP_DIV, ge, x, &cdf);
    if (!s) s = tg_g_cmpc(A, TGRAD_COMPARE_EQ, x, 0.0, &z);
    if (!s) s = tg_g_scalar(A, 0.5, F32, &half);
    if (!s) s = tg_keep_out(A, tgrad_where(z, half, cdf, &cdf), &cdf);
    if (!s) s = un(A, TGRAD_OP_SQUARE, x, &x2);
    if (!s) s = mulc(A, x2, -0.5, &t);
    if (!s) s = un(A, TGRAD_OP_EXP, t, &t);
    if (!s) s = mulc(A, t, 0.3989422804014327, &pdf); /* 1 / sqrt(2 pi) */
    if (!s) s = mul(A, x, pdf, &t);
    if (!s) s = tg_g_bin(A, TGRAD_OP_ADD, cdf, t, &t);
    return s ? s : mul(A, g, t, o);
}
/* gelu_tanh_backward(x, g) = g (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2)), t = tanh(c (x + k x^3)) */
static tgrad_status gelu_tanh_backward(Ar *A, tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t *o) {
    const double c = 0.7978845608028654, k = 0.044715;
    tgrad_tensor_t x2 = 0, u = 0, t = 0, a = 0, b = 0, d = 0;
    tgrad_status s = un(A, TGRAD_OP_SQUARE, x, &x2);
    if (!s) s = mulc(A, x2, k, &u);
    if (!s) s = tg_g_binc(A, TGRAD_OP_ADD, u, 1.0, &u);
    if (!s) s = mul(A, x, u, &u);
    if (!s) s = mulc(A, u, c, &u);
    if (!s) s = un(A, TGRAD_OP_TANH, u, &t);
    if (!s) s = tg_g_binc(A, TGRAD_OP_ADD, t, 1.0, &a);
    if (!s) s = mulc(A, a, 0.5, &a);                  /* 0.5 (1 + t) */
    if (!s) s = un(A, TGRAD_OP_SQUARE, t, &b);
    if (!s) s = rsubc(A, 1.0, b, &b);                 /* 1 - t^2 */
    if (!s) s = mulc(A, x2, 3.0 * k, &d);
    if (!s) s = tg_g_binc(A, TGRAD_OP_ADD, d, 1.0, &d);
    if (!s) s = mul(A, b, d, &b);
    if (!s) s = mul(A, b, x, &b);
    if (!s) s = mulc(A, b, 0.5 * c, &b);
    if (!s) s = tg_g_bin(A, TGRAD_OP_ADD, a, b, &a);
    return s ? s : mul(A, g, a, o);
}
/* silu_backward(x, g) = g s (1 + x (1 - s)), s = sigmoid(x) */
static tgrad_status silu_backward(Ar *A, tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t *o) {
    tgrad_tensor_t sg = 0, t = 0;
    tgrad_status s = un(A, TGRAD_OP_SIGMOID, x, &sg);
    if (!s) s = rsubc(A, 1.0, sg, &t);
    if (!s) s = mul(A, x, t, &t);
    if (!s) s = tg_g_binc(A, TGRAD_OP_ADD, t, 1.0, &t);
    if (!s) s = mul(A, sg, t, &t);
    return s ? s : mul(A, g, t, o);
}
/* sigmoid_backward(y, g) = g y (1 - y) */
static tgrad_status sigmoid_backward(Ar *A, tgrad_tensor_t y, tgrad_tensor_t g, tgrad_tensor_t *o) {
    tgrad_tensor_t t = 0;
    tgrad_status s = rsubc(A, 1.0, y, &t);
    if (!s) s = mul(A, y, t, &t);
    return s ? s : mul(A, g, t, o);
}
/* tanh_backward(y, g) = g (1 - y^2) */
static tgrad_status tanh_backward(Ar *A, tgrad_tensor_t y, tgrad_tensor_t g, tgrad_tensor_t *o) {
    tgrad_tensor_t t = 0;
    tgrad_status s = un(A, TGRAD_OP_SQUARE, y, &t);
    if (!s) s = rsubc(A, 1.0, t, &t);
    return s ? s : mul(A, g, t, o);
}

/* ---- the other ops: short compositions of their own ---- */
/* d(a op b) for operand i, in float32: X the operands, Y the result (float32), G the cotangent */
static tgrad_status rule(Ar *A, tgrad_op op, int32_t i, const tgrad_tensor_t *X, tgrad_tensor_t Y, tgrad_tensor_t G,
                         tgrad_tensor_t *o) {
    tgrad_tensor_t t = 0, u = 0;
    tgrad_status s = TGRAD_OK;
    switch (op) {
    case TGRAD_OP_RELU: return relu_backward(A, X[0], G, o);
    case TGRAD_OP_GELU: return gelu_backward(A, X[0], G, o);
    case TGRAD_OP_GELU_TANH: return gelu_tanh_backward(A, X[0], G, o);
    case TGRAD_OP_SILU: return silu_backward(A, X[0], G, o);
    case TGRAD_OP_SIGMOID: return sigmoid_backward(A, Y, G, o);
    case TGRAD_OP_TANH: return tanh_backward(A, Y, G, o);
    case TGRAD_OP_EXP: return mul(A, G, Y, o);
    case TGRAD_OP_NEG: return un(A, TGRAD_OP_NEG, G, o);
    case TGRAD_OP_ABS: /* g sign(x), 0 at 0 (torch) */
        s = maskc(A, TGRAD_COMPARE_GT, X[0], 0.0, G, &t);
        if (!s) s = maskc(A, TGRAD_COMPARE_LT, X[0], 0.0, G, &u);
        return s ? s : tg_g_bin(A, TGRAD_OP_SUB, t, u, o);
    case TGRAD_OP_SQUARE: s = mulc(A, X[0], 2.0, &t); return s ? s : mul(A, G, t, o);
    case TGRAD_OP_RSQRT: /* -0.5 g y^3 */
        s = un(A, TGRAD_OP_SQUARE, Y, &t);
        if (!s) s = mul(A, t, Y, &t);
        if (!s) s = mulc(A, t, -0.5, &t);
        return s ? s : mul(A, G, t, o);
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
    case TGRAD_OP_SQRT: /* g / (2 y) */
        s = mulc(A, Y, 2.0, &t);
        return s ? s : tg_g_bin(A, TGRAD_OP_DIV, G, t, o);
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

static tgrad_status ew_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    Ar *A = a->A;
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
