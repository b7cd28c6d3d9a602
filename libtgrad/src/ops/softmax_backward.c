/* The softmax kind's derivatives: softmax_backward(y, g) = y_i (g_i - sum_j g_j y_j) (torch's
 * _softmax_backward_data) and log_softmax_backward(z, g) = g_i - exp(z_i) sum_j g_j (torch's
 * _log_softmax_backward_data) along one axis, each output the exact value of that expression on
 * the inputs, rounded once to the output dtype (docs/numerics.md, "softmax_backward,
 * log_softmax_backward"). tgrad_softmax_backward checks everything and records a two-input node of
 * the softmax kind; tg_softmax_backward_execute runs its rows over the pool. Each element is
 * evaluated in double with a rigorous error bound and written when the bound decides its rounding;
 * the rest (and every zero result, whose sign the bound cannot tell) are decided exactly where the
 * value is rational, in big-integer arithmetic (norm_exact.h's tg_big: every bf16 or float32 value
 * is an integer multiple of 2^-149), else (exp(z_i) G, z_i != 0) in binary128 with the anchor g_i
 * (Ziv's strategy, as the forward softmax). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "../../../kernels/cpu/softmax_round.h"
#include "../cpu/epilogue.h"
#include "../kinds.h"
#include "norm_exact.h"
#include "softmax_kernel.h"
#include "softmax_wide.h"

/* The node's private softmax_op codes (tg_node_params.softmax_op): the forward op's code plus this. */
enum { TG_SM_BACKWARD = 16 };

const char *tg_softmax_kind_name(int32_t op) {
    if (op == TG_SM_BACKWARD + TGRAD_SOFTMAX_SOFTMAX) return "softmax_backward";
    if (op == TG_SM_BACKWARD + TGRAD_SOFTMAX_LOG_SOFTMAX) return "log_softmax_backward";
    return tgrad_softmax_name(op);
}

bool tg_softmax_is_backward(int32_t op) { return op > TG_SM_BACKWARD; }
int32_t tg_softmax_forward_op(int32_t op) { return op > TG_SM_BACKWARD ? op - TG_SM_BACKWARD : op; }

/* ---- the node ---- */
TGRAD_API tgrad_status tgrad_softmax_backward(int32_t op, tgrad_tensor_t y, tgrad_tensor_t g, int32_t axis,
                                              int32_t out_dtype, tgrad_tensor_t *out) {
    const char *fn = op == TGRAD_SOFTMAX_LOG_SOFTMAX ? "log_softmax_backward" : "softmax_backward";
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    if (op != TGRAD_SOFTMAX_SOFTMAX && op != TGRAD_SOFTMAX_LOG_SOFTMAX)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT,
                       "%s: op %d has no backward here (TGRAD_SOFTMAX_SOFTMAX and TGRAD_SOFTMAX_LOG_SOFTMAX have)", fn,
                       (int)op);
    tg_tensor t[2] = { 0 };
    int32_t have = 0;
    tgrad_status s = tg_kind_get_inputs((const tgrad_tensor_t[]){ y, g }, 2, 2, t, &have);
    if (s && !have) return s;
    for (int32_t i = 0; !s && i < 2; i++)
        if (t[i].buf->dtype != TGRAD_DTYPE_BF16 && t[i].buf->dtype != TGRAD_DTYPE_F32)
            s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: %s is %s; it takes bfloat16 or float32", fn,
                        i ? "the gradient" : "the forward output", tg_dtype_name(t[i].buf->dtype));
    if (!s && t[1].buf->device != t[0].buf->device)
        s = tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "%s: the gradient lives on %s, the forward output on %s", fn,
                    tg_device_name(t[1].buf->device), tg_device_name(t[0].buf->device));
    if (!s) s = tg_kind_check_device(TG_OP_SOFTMAX, t[0].buf->device, fn);
    bool same = !s && t[0].view.ndim == t[1].view.ndim;
    for (int32_t d = 0; same && d < t[0].view.ndim; d++) same = t[0].view.shape[d] == t[1].view.shape[d];
    if (!s && !same) {
        char s0[160], s1[160];
        tg_format_shape(s0, sizeof s0, &t[0].view);
        tg_format_shape(s1, sizeof s1, &t[1].view);
        s = tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: the forward output is %s, the gradient %s (they must match)", fn, s0,
                    s1);
    }
    if (!s && out_dtype == 0) out_dtype = t[1].buf->dtype;
    if (!s && out_dtype != TGRAD_DTYPE_BF16 && out_dtype != TGRAD_DTYPE_F32)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: cannot give %s (code %d): bfloat16 or float32", fn,
                    tg_dtype_name(out_dtype), (int)out_dtype);
    int32_t nd = t[0].view.ndim, a = axis < 0 ? axis + (nd ? nd : 1) : axis;
    if (!s && (a < 0 || a >= (nd ? nd : 1)))
        s = tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "%s: axis %d is out of range for a tensor of %d dimensions", fn,
                    (int)axis, (int)nd);
    tg_node_params P = { .softmax_op = TG_SM_BACKWARD + op, .naxes = 1, .axes = { nd ? a : 0 } };
    tg_view ov = { 0 };
    if (!s) s = tg_view_contiguous(nd, t[0].view.shape, &ov);
    return tg_kind_make(s, TG_OP_SOFTMAX, t, have, &ov, out_dtype, &P, fn, out);
}

/* ---- exact arithmetic ---- */
#define int_of tg_exact_int_of

static int32_t bitlen(const tg_big *v) {
    if (!v->n) return 0;
    return 64 * (v->n - 1) + 64 - __builtin_clzll(v->w[v->n - 1]);
}
static int bit_at(const tg_big *v, int32_t i) {
    return i >= 0 && i / 64 < v->n ? (int)((v->w[i / 64] >> (i % 64)) & 1u) : 0;
}
static bool any_below(const tg_big *v, int32_t i) { /* a set bit below position i */
    for (int32_t k = 0; k < v->n && 64 * k < i; k++) {
        uint64_t w = v->w[k];
        if (64 * (k + 1) > i) w &= (i % 64) ? ((uint64_t)1 << (i % 64)) - 1 : 0;
        if (w) return true;
    }
    return false;
}

/* The exact value v 2^-scale (v nonzero) rounded once to dt (RNE, gradual underflow, overflow to inf). */
static uint32_t round_big(const tg_big *v, int32_t scale, int32_t dt) {
    int32_t k = bitlen(v) - 1, E = k - scale, p = dt == TGRAD_DTYPE_BF16 ? 8 : 24;
    int32_t min_lsb = dt == TGRAD_DTYPE_BF16 ? -133 : -149; /* the subnormals' step */
    int32_t lsb = E - (p - 1) > min_lsb ? E - (p - 1) : min_lsb;
    uint32_t sign = v->neg ? 0x80000000u : 0;
    float f;
    if (E > 127) f = INFINITY;
    else {
        int32_t sh = lsb + scale; /* > 0: scale >= 298 */
        uint64_t q = 0;
        for (int32_t i = k; i >= sh; i--) q = q << 1 | (uint64_t)bit_at(v, i);
        if (bit_at(v, sh - 1) && (any_below(v, sh - 1) || (q & 1u))) q++;
        f = (float)ldexp((double)q, lsb); /* exact, or 2^128: inf */
    }
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u |= sign;
    return dt == TGRAD_DTYPE_BF16 ? u >> 16 : u;
}

/* ---- the executor ---- */
typedef struct sb_job {
    int32_t op, out_dtype; /* op: TGRAD_SOFTMAX_SOFTMAX or _LOG_SOFTMAX (the forward's) */
    const tg_sm_variant *v; /* the row loops (exp, loads) of the step's CPU variant: the same doubles */
    const tg_node_input *y, *g;
    const uint16_t *ydata, *gdata; /* the inputs' storage: the buffers', or read back from a device */
    int64_t n, ystride, gstride;
    int32_t nother;
    int64_t oshape[TGRAD_MAX_DIMS], ystr[TGRAD_MAX_DIMS], gstr[TGRAD_MAX_DIMS];
    int64_t inner, rows, rows_per_task;
    char *out;
    const tg_chain *epi;
    atomic_bool oom;
} sb_job;

static double load(const tg_node_input *in, const uint16_t *data, int64_t k) {
    if (in->buf->dtype == TGRAD_DTYPE_BF16) return tg_bf16_to_f32(data[k]);
    return ((const float *)data)[k];
}

static void put(const sb_job *J, int64_t k, uint32_t bits) {
    if (J->out_dtype == TGRAD_DTYPE_BF16) ((uint16_t *)J->out)[k] = (uint16_t)bits;
    else ((uint32_t *)J->out)[k] = bits;
}

static uint32_t nan_bits(int32_t dt) { return dt == TGRAD_DTYPE_BF16 ? 0x7FC0u : 0x7FC00000u; }
static bool is_zero_bits(uint32_t b, int32_t dt) { return (b & (dt == TGRAD_DTYPE_BF16 ? 0x7FFFu : 0x7FFFFFFFu)) == 0; }

/* The row's exact sum S = sum_j G_j Y_j (scale 2^298) and whether every product is -0. */
typedef struct exact_sum { bool ready, negzero; tg_big s; } exact_sum;

static void exact_prepare(exact_sum *X, const double *y, const double *g, int64_t n) {
    tg_big_zero(&X->s);
    X->negzero = n > 0;
    for (int64_t j = 0; j < n; j++) {
        uint64_t sg, sy;
        int32_t hg, hy, ng, ny;
        int_of(g[j], &sg, &hg, &ng);
        int_of(y[j], &sy, &hy, &ny);
        tg_big_add_small(&X->s, sg * sy, hg + hy, ng != ny ? -1 : 1);
        X->negzero = X->negzero && (sg == 0 || sy == 0) && ng != ny;
    }
    X->ready = true;
}

/* Output i decided exactly: y_i (g_i - S), a zero's sign by IEEE's rules for the two operations
 * (g_i - S exactly zero is -0 only for g_i = -0 and S = +0; then the product's sign rule). */
static uint32_t exact_element(exact_sum *X, const double *y, const double *g, int64_t n, int64_t i, int32_t dt) {
    if (!X->ready) exact_prepare(X, y, g, n);
    uint64_t sg, sy;
    int32_t hg, hy, ng, ny;
    int_of(g[i], &sg, &hg, &ng);
    int_of(y[i], &sy, &hy, &ny);
    tg_big d = X->s, yb, v;
    d.neg = d.n ? !d.neg : 0;
    tg_big_add_small(&d, sg, hg + 149, ng ? -1 : 1); /* D = g_i - S at scale 2^298 */
    bool dneg = d.n ? d.neg != 0 : (sg == 0 && ng && !X->negzero);
    if (!d.n || !sy) return (ny != (int)dneg) ? (dt == TGRAD_DTYPE_BF16 ? 0x8000u : 0x80000000u) : 0;
    tg_big_zero(&yb);
    tg_big_add_small(&yb, sy, hy, ny ? -1 : 1);
    tg_big_mul(&v, &yb, &d);
    return round_big(&v, 447, dt);
}

/* ---- log_softmax_backward: g_i - exp(z_i) G, G = sum_j g_j ---- */
static const uint32_t SIGN_BITS[3] = { 0, 0x8000u, 0x80000000u };
static uint32_t inf_bits(int32_t dt, bool neg) {
    return (dt == TGRAD_DTYPE_BF16 ? 0x7F80u : 0x7F800000u) | (neg ? SIGN_BITS[dt] : 0);
}

/* The rounding of a value known to lie within y -+ e, equal to anchor + (a nonzero value of sign
 * side): both ends alike, or the one boundary between them is the anchor (the side decides); else
 * (never seen) rounded from y. */
static uint32_t decide_x(xf y, xf e, int32_t dt, xf anchor, int side) {
    uint32_t lo = round_x(y - e, dt), hi = round_x(y + e, dt);
    if (lo == hi) return lo;
    xf b = (value_x(lo, dt) + value_x(hi, dt)) / 2;
    bool adjacent = round_x(b, dt) == lo || round_x(b, dt) == hi;
    if (adjacent && b == anchor) return side < 0 ? lo : hi;
    return round_x(y, dt);
}

/* The row's exact G 2^149 (a big integer), its sign, whether every g_j is -0, and G in binary128
 * (relative error below 2^-110: at most five 64-bit limbs, each exact). */
typedef struct exact_g { bool ready, negzero; int sign; tg_big s; xf q; } exact_g;

static void g_prepare(exact_g *X, const double *g, int64_t n) {
    tg_big_zero(&X->s);
    X->negzero = n > 0;
    for (int64_t j = 0; j < n; j++) {
        uint64_t sg;
        int32_t hg, ng;
        int_of(g[j], &sg, &hg, &ng);
        tg_big_add_small(&X->s, sg, hg, ng ? -1 : 1);
        X->negzero = X->negzero && sg == 0 && ng;
    }
    xf q = 0;
    for (int32_t k = X->s.n - 1; k >= 0; k--) q += (xf)X->s.w[k] * (xf)ldexp(1.0, 64 * k - 149);
    X->sign = X->s.n ? (X->s.neg ? -1 : 1) : 0;
    X->q = X->sign < 0 ? -q : q;
    X->ready = true;
}

/* A zero output: g_i - P with P = exp(z_i) G a zero of G's sign (-0 only for g_i = -0, P = +0). */
static uint32_t zero_of(const exact_g *X, double gi, int32_t dt) {
    bool pneg = X->sign < 0 || (X->sign == 0 && X->negzero);
    return signbit(gi) && !pneg ? SIGN_BITS[dt] : 0;
}

/* An element the double bound did not decide (or z_i > 0, z_i = 0, G = 0): exactly where the
 * value is rational (G = 0: g_i; z_i = 0: g_i - G), else in binary128 with the anchor g_i. */
static uint32_t log_slow(exact_g *X, const double *g, int64_t n, double zi, double gi, int32_t dt) {
    if (!X->ready) g_prepare(X, g, n);
    if (X->sign == 0) return gi != 0 ? tg_sm_round(gi, dt) : zero_of(X, gi, dt);
    if (zi == 0) { /* exp(0) = 1 */
        uint64_t sg;
        int32_t hg, ng;
        int_of(gi, &sg, &hg, &ng);
        tg_big d = X->s;
        d.neg = !d.neg;
        tg_big_add_small(&d, sg, hg, ng ? -1 : 1);
        return d.n ? round_big(&d, 149, dt) : 0; /* g_i = G != 0: +0 */
    }
    /* |exp(z) G| >= e^200 2^-149 > 2^139: past the overflow threshold whatever g_i (< 2^128) */
    if (zi >= 200) return inf_bits(dt, X->sign > 0);
    xf tiny = (xf)ldexp(1.0, -1000); /* absolute: binary128 underflow, 2^-16000 and less */
    for (int k = 0; k < 4; k++) tiny = tiny * tiny; /* 2^-16000 */
    xf E = XEXP((xf)zi), P = E * X->q, v = (xf)gi - P;
    xf ap = P < 0 ? -P : P, av = v < 0 ? -v : v;
    /* exp within 2^-110, G within 2^-110, the product 2^-113, the difference 2^-113 of |v| */
    xf err = (ap * (xf)0x1p-108 + av * (xf)0x1p-111) * (xf)1.1 + tiny;
    return decide_x(v, err, dt, (xf)gi, -X->sign);
}

/* An element of a row holding an infinity or NaN in g (G, the IEEE sum, is not finite), or with
 * z_i infinite or NaN: IEEE's value, exp(z_i) being 0 for -inf, +inf for +inf and a positive real
 * otherwise (so only its class matters against an infinite G). */
static uint32_t log_special(exact_g *X, const double *g, int64_t n, double zi, double gi, double G, int32_t dt) {
    if (zi != zi) return nan_bits(dt);
    if (!isfinite(G)) {
        double E = isinf(zi) ? (zi > 0 ? INFINITY : 0.0) : 1.0, v = gi - E * G;
        return v != v ? nan_bits(dt) : tg_sm_round(v, dt);
    }
    if (!X->ready) g_prepare(X, g, n);
    if (zi < 0) return gi != 0 ? tg_sm_round(gi, dt) : zero_of(X, gi, dt); /* E = 0 */
    return X->sign == 0 ? nan_bits(dt) : inf_bits(dt, X->sign > 0);      /* E = +inf: inf 0 is NaN */
}

static void log_row(const sb_job *J, const double *z, const double *g, double *e, int64_t pos) {
    const double U = 0x1p-53;
    int64_t n = J->n;
    int32_t dt = J->out_dtype;
    double G = 0, A = 0;
    for (int64_t j = 0; j < n; j++) {
        G += g[j];
        A += fabs(g[j]);
        e[j] = z[j] <= 0 ? z[j] : 0.0; /* exp_rows' domain; the others are not read below */
    }
    double eG = A * ((double)n * U) * 1.01; /* the sequential sum's bound, as softmax_backward's */
    /* exp's absolute error (below 2^-1021) times |G| + eG, bounded once per row: 2^-1020 (|G| + eG),
     * or 2^-1000 where that product would be subnormal (a subnormal term in every element's bound
     * cost a microcode assist each). A larger bound is as rigorous: it can only send an element the
     * old one decided to log_slow, which rounds it correctly too, so the same bytes. */
    double eU = fabs(G) + eG < 0x1p20 ? 0x1p-1000 : 0x1p-1020 * (fabs(G) + eG);
    J->v->exp_rows(e, 0.0, e, n);  /* exp(z_j) within TG_SM_EXP_REL; 0 below -708 (< 2^-1021) */
    exact_g X = { .ready = false };
    for (int64_t i = 0; i < n; i++) {
        double zi = z[i], gi = g[i];
        uint32_t b;
        if (!isfinite(G) || !isfinite(zi)) b = log_special(&X, g, n, zi, gi, G, dt);
        else if (zi >= 0) b = log_slow(&X, g, n, zi, gi, dt);
        else {
            double Eh = e[i], P = Eh * G, v = gi - P;
            double err = (Eh * eG * 1.01 + (TG_SM_EXP_REL + 2 * U) * 1.01 * fabs(P) + eU + 4 * U * fabs(v)) * 1.1;
            uint32_t blo = tg_sm_round(v - err, dt), bhi = tg_sm_round(v + err, dt);
            b = blo == bhi && !is_zero_bits(blo, dt) ? blo : log_slow(&X, g, n, zi, gi, dt);
        }
        put(J, pos + i * J->inner, b);
    }
}

/* softmax_backward's row (y, g read) into the output at pos, pos + inner, ... */
static void softmax_row(const sb_job *J, const double *y, const double *g, int64_t pos) {
    const double U = 0x1p-53;
    int64_t n = J->n;
    int32_t dt = J->out_dtype;
    double S = 0, A = 0;
    for (int64_t j = 0; j < n; j++) {
        double p = g[j] * y[j]; /* exact: 48 significant bits at most, above 2^-300 */
        S += p;
        A += fabs(p);
    }
    exact_sum X = { .ready = false };
    /* |S - exact| <= (n - 1) u sum|p_j| (the sequential sum); A's own roundings in the 1.01 */
    double eS = A * ((double)n * U) * 1.01;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        if (!isfinite(S)) { /* a NaN or infinity in the row: IEEE's value of the expression */
            double v = y[i] * (g[i] - S);
            b = v != v ? nan_bits(dt) : tg_sm_round(v, dt);
        } else {
            double D = g[i] - S;
            if (y[i] == 0) {
                /* a masked position: the value is a zero whose sign is y_i's times D's, decided here
                 * when the bound on D (eS, and D's own rounding) keeps D from zero, as exact_element
                 * decides it from the exact D (g_i is finite: g_i y_i entered the finite S) */
                double eD = (eS * 1.01 + 2 * U * fabs(D)) * 1.1;
                b = fabs(D) > eD ? ((signbit(y[i]) != 0) != (D < 0) ? SIGN_BITS[dt] : 0) : exact_element(&X, y, g, n, i, dt);
            } else {
                double v = y[i] * D;
                /* D's error: eS, and its rounding u|D|; v's rounding u|v|; the ends' roundings u|v| */
                double e = (fabs(y[i]) * eS * 1.01 + 4 * U * fabs(v)) * 1.1;
                uint32_t blo = tg_sm_round(v - e, dt), bhi = tg_sm_round(v + e, dt);
                b = blo == bhi && !is_zero_bits(blo, dt) ? blo : exact_element(&X, y, g, n, i, dt);
            }
        }
        put(J, pos + i * J->inner, b);
    }
}

/* Row r (y, g, e: n doubles of workspace each; e for log_softmax only) into the output. */
static void run_row(const sb_job *J, int64_t r, double *y, double *g, double *e) {
    int64_t n = J->n;
    int64_t yo = J->y->view.offset, go = J->g->view.offset, q = r;
    for (int32_t d = J->nother - 1; d >= 0; d--) {
        yo += (q % J->oshape[d]) * J->ystr[d];
        go += (q % J->oshape[d]) * J->gstr[d];
        q /= J->oshape[d];
    }
    int64_t pos = (r / J->inner) * n * J->inner + r % J->inner;
    if (J->ystride == 1 && J->gstride == 1) { /* the variant's loads: the same exact doubles */
        const tg_node_input *in[2] = { J->y, J->g };
        const uint16_t *data[2] = { J->ydata, J->gdata };
        double *to[2] = { y, g };
        int64_t at[2] = { yo, go };
        for (int k = 0; k < 2; k++) {
            if (in[k]->buf->dtype == TGRAD_DTYPE_BF16) J->v->load_bf16(data[k] + at[k], n, to[k]);
            else J->v->load_f32((const float *)data[k] + at[k], n, to[k]);
        }
    } else {
        for (int64_t j = 0; j < n; j++)
            y[j] = load(J->y, J->ydata, yo + j * J->ystride), g[j] = load(J->g, J->gdata, go + j * J->gstride);
    }
    if (J->op == TGRAD_SOFTMAX_LOG_SOFTMAX) log_row(J, y, g, e, pos);
    else softmax_row(J, y, g, pos);
    if (J->epi) {
        if (J->inner == 1) tg_chain_apply(J->epi, (uint16_t *)J->out, pos, n);
        else for (int64_t i = 0; i < n; i++) tg_chain_apply(J->epi, (uint16_t *)J->out, pos + i * J->inner, 1);
    }
}

static void task_rows(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    sb_job *J = arg;
    int64_t n = J->n, m = n ? n : 1;
    bool log = J->op == TGRAD_SOFTMAX_LOG_SOFTMAX;
    double *y = malloc(sizeof(double) * (size_t)m), *g = malloc(sizeof(double) * (size_t)m);
    double *e = log ? malloc(sizeof(double) * (size_t)m) : NULL;
    if (!y || !g || (log && !e)) {
        free(y), free(g), free(e);
        atomic_store(&J->oom, true);
        return;
    }
    tg_fp_env env = tg_fp_env_ieee();
    int64_t lo = task * J->rows_per_task, hi = lo + J->rows_per_task < J->rows ? lo + J->rows_per_task : J->rows;
    for (int64_t r = lo; r < hi; r++) run_row(J, r, y, g, e);
    tg_fp_env_restore(env);
    free(y), free(g), free(e);
}

/* The job of step st over the inputs' storage ydata, gdata and the output's (out). */
static void job_init(sb_job *J, const tg_step *st, const void *ydata, const void *gdata, void *out) {
    const tg_node_input *yi = &st->inputs[0], *gi = &st->inputs[1];
    int32_t axis = st->base->params.axes[0], nd = yi->view.ndim;
    *J = (sb_job){ .op = st->base->params.softmax_op - TG_SM_BACKWARD, .out_dtype = st->base->dtype, .y = yi, .g = gi,
                   .ydata = ydata, .gdata = gdata, .out = out, .inner = 1, .rows = 1, .v = tg_sm_variant_for(st) };
    J->n = nd ? yi->view.shape[axis] : 1;
    J->ystride = nd ? yi->view.strides[axis] : 0;
    J->gstride = nd ? gi->view.strides[axis] : 0;
    for (int32_t d = 0; d < nd; d++) {
        if (d == axis) continue;
        J->oshape[J->nother] = yi->view.shape[d];
        J->ystr[J->nother] = yi->view.strides[d], J->gstr[J->nother++] = gi->view.strides[d];
        J->rows *= yi->view.shape[d];
        if (d > axis) J->inner *= yi->view.shape[d];
    }
    atomic_init(&J->oom, false);
}

tgrad_status tg_softmax_backward_execute(const tg_step *st) {
    sb_job J;
    job_init(&J, st, st->inputs[0].buf->data, st->inputs[1].buf->data, st->buf->data);
    tg_chain epi;
    if (st->nfused) tg_chain_from_step(st, &epi), J.epi = &epi;
    if (J.rows == 0 || J.n == 0) return TGRAD_OK;
    J.rows_per_task = (1 << 14) / J.n > 0 ? (1 << 14) / J.n : 1;
    int64_t tasks = (J.rows + J.rows_per_task - 1) / J.rows_per_task;
    if (tasks == 1) task_rows(0, 0, &J);
    else tg_pool_run(tasks, task_rows, &J);
    if (atomic_load(&J.oom))
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate a row's workspace (%lld elements)",
                       tg_softmax_kind_name(J.op + TG_SM_BACKWARD), (long long)J.n);
    return TGRAD_OK;
}

/* ---- the GPU route's slow path ---- */
/* After a GPU launch of a backward step (gen/render_softmax_backward.c): the flagged rows (an
 * element the kernel's bound leaves undecided, a sum that is not finite, an input z_i not below 0)
 * are recomputed here by the CPU's own row code (run_row: the same function, so the same bytes),
 * from the inputs' storage read back, into the output's read back and written again. */
tgrad_status tg_softmax_backward_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags,
                                              int64_t flagged) {
    const char *fn = tg_softmax_kind_name(st->base->params.softmax_op);
    if (st->pro_base || st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "%s: a GPU step with fused chains (the scheduler keeps them apart)", fn);
    void *host[4];
    size_t bytes[4];
    tgrad_status s = tg_device_stage_step(st, host, bytes, "softmax_backward: cannot stage the flagged rows on the host");
    if (s) return s;
    sb_job J;
    job_init(&J, st, host[0], host[1], host[3]);
    int64_t m = J.n ? J.n : 1;
    double *y = malloc(sizeof(double) * (size_t)m), *g = malloc(sizeof(double) * (size_t)m);
    double *e = malloc(sizeof(double) * (size_t)m);
    if (!y || !g || !e) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate a row's workspace", fn);
    if (!s) {
        tg_softmax_count_device_rows(flagged);
        tg_fp_env env = tg_fp_env_ieee();
        for (int64_t r = 0; r < nflags && r < J.rows; r++)
            if (flags[r]) run_row(&J, r, y, g, e);
        tg_fp_env_restore(env);
        s = tg_device_upload(st->device, st->buf->dev_mem, host[3], bytes[3]);
    }
    free(y), free(g), free(e);
    tg_device_staged_free(host);
    return s;
}
