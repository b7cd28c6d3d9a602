/* The norm kind: tgrad_rms_norm and tgrad_layer_norm check everything and record the node (x,
 * then the optional weight and bias); tg_norm_execute computes each row of the normalized
 * trailing axes, correctly rounded: a double evaluation with a rigorous error bound decides
 * almost every element; the rest are decided exactly (norm_exact.h) by comparing the exact
 * value with bf16 rounding midpoints in big-integer arithmetic. docs/numerics.md, "Norms". */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kinds.h"
#include "norm_backward.h"
#include "norm_exact.h"

#define NORM_FN(name) tg_##name##_portable
#include "../../../kernels/cpu/norm_loops.h"

/* ---- the debug counters (tgrad_debug_norm_slow_path) ---- */
static _Atomic int64_t counters[2];
static _Atomic int64_t device_rows; /* rows a GPU kernel flagged and the host reran */
static void count(int what, int64_t n) {
    if (n) atomic_fetch_add_explicit(&counters[what], n, memory_order_relaxed);
}
void tg_norm_count(int what, int64_t n) { count(what, n); }
void tg_norm_count_device_rows(int64_t n) { atomic_fetch_add_explicit(&device_rows, n, memory_order_relaxed); }

TGRAD_API tgrad_status tgrad_debug_norm_slow_path(int64_t *counts, int32_t count_) {
    if (!counts || count_ < 1 || count_ > TGRAD_DEBUG_NORM_COUNT)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_norm_slow_path: counts is NULL or count %d is not 1 .. %d",
                       (int)count_, TGRAD_DEBUG_NORM_COUNT);
    int64_t rope[4];
    tg_rope_counts(rope);
    for (int32_t i = 0; i < count_; i++)
        counts[i] = i < 2                                ? atomic_load_explicit(&counters[i], memory_order_relaxed)
                    : i == TGRAD_DEBUG_NORM_DEVICE_ROWS ? atomic_load_explicit(&device_rows, memory_order_relaxed)
                    : i == TGRAD_DEBUG_ROPE_DEVICE_ROWS ? rope[3]
                                                        : rope[i - 2];
    return TGRAD_OK;
}

/* ---- the node ---- */
/* A weight or bias: bf16, on x's device, of the shape of x's last naxes axes. */
static tgrad_status check_param(const tg_tensor *x, const tg_tensor *p, int32_t naxes, const char *what, const char *fn) {
    if (p->buf->dtype != TGRAD_DTYPE_BF16)
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: the %s is %s; it must be bfloat16 like the input", fn, what,
                       tg_dtype_name(p->buf->dtype));
    if (p->buf->device != x->buf->device)
        return tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "%s: the %s lives on %s, the input on %s", fn, what,
                       tg_device_name(p->buf->device), tg_device_name(x->buf->device));
    bool same = p->view.ndim == naxes;
    for (int32_t d = 0; same && d < naxes; d++) same = p->view.shape[d] == x->view.shape[x->view.ndim - naxes + d];
    if (!same) {
        char sp[160], sx[160];
        tg_format_shape(sp, sizeof sp, &p->view);
        tg_format_shape(sx, sizeof sx, &x->view);
        return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: the %s is %s; it must be the last %d axes of the input %s", fn,
                       what, sp, (int)naxes, sx);
    }
    return TGRAD_OK;
}

static tgrad_status make_norm(int32_t op, tgrad_tensor_t x, tgrad_tensor_t weight, tgrad_tensor_t bias, int32_t naxes,
                              double eps, tgrad_tensor_t *out, const char *fn) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    tg_tensor t[3] = { 0 };
    int32_t have = 0;
    tgrad_status s = tg_kind_get_inputs((const tgrad_tensor_t[]){ x, weight, bias }, 3, 1, t, &have);
    if (s && !have) return s;
    tg_node_params P = { .norm_op = op, .norm_axes = naxes, .eps = eps, .has_weight = weight != 0,
                         .has_bias = bias != 0 };
    if (!s) s = tg_kind_check_device(TG_OP_NORM, t[0].buf->device, fn);
    if (!s && t[0].buf->dtype != TGRAD_DTYPE_BF16)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: the input is %s; norms take bfloat16", fn,
                    tg_dtype_name(t[0].buf->dtype));
    if (!s && (naxes < 1 || naxes > t[0].view.ndim))
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: %d normalized axes for a tensor of %d dimensions", fn, (int)naxes,
                    (int)t[0].view.ndim);
    if (!s) s = tg_norm_check_eps(eps, fn);
    if (!s && P.has_weight) s = check_param(&t[0], &t[1], naxes, "weight", fn);
    if (!s && P.has_bias) s = check_param(&t[0], &t[have - 1], naxes, "bias", fn);
    int64_t n = 1;
    for (int32_t d = 0; !s && d < naxes; d++) n *= t[0].view.shape[t[0].view.ndim - 1 - d];
    if (!s && n > ((int64_t)1 << 40))
        s = tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "%s: rows of %lld elements (at most 2^40)", fn, (long long)n);
    tg_view ov;
    if (!s) s = tg_view_contiguous(t[0].view.ndim, t[0].view.shape, &ov);
    return tg_kind_make(s, TG_OP_NORM, t, have, &ov, TGRAD_DTYPE_BF16, &P, fn, out);
}

TGRAD_API tgrad_status tgrad_rms_norm(tgrad_tensor_t x, tgrad_tensor_t weight, int32_t naxes, double eps,
                                      tgrad_tensor_t *out) {
    return make_norm(TG_NORM_RMS, x, weight, 0, naxes, eps, out, "rms_norm");
}

TGRAD_API tgrad_status tgrad_layer_norm(tgrad_tensor_t x, tgrad_tensor_t weight, tgrad_tensor_t bias, int32_t naxes,
                                        double eps, tgrad_tensor_t *out) {
    return make_norm(TG_NORM_LAYER, x, weight, bias, naxes, eps, out, "layer_norm");
}

/* ---- the executor ---- */
#define U 0x1p-53

/* The hot loops of the CPU variant selected (tgrad_set_cpu_isa): AVX-512 or portable. */
typedef struct norm_loops {
    void (*sumsq)(const uint16_t *, int64_t, double *);
    void (*sums)(const uint16_t *, int64_t, double *, double *);
    void (*sumdev)(const uint16_t *, int64_t, double, double *);
    int64_t (*rms_out)(const uint16_t *, const uint16_t *, int64_t, double, double, uint16_t *);
    int64_t (*layer_out)(const uint16_t *, const uint16_t *, const uint16_t *, int64_t, double, double, double, double,
                         uint16_t *);
    /* float32 outputs with their own bound (AVX-512 only; NULL otherwise): -1 outside its domain */
    int64_t (*layer_out_f32)(const uint16_t *, const uint16_t *, const uint16_t *, int64_t, double, double, double,
                             double, uint16_t *);
} norm_loops;

static norm_loops loops_for_selection(void) {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    const char *name = tgrad_cpu_isa_forced() ? tgrad_cpu_isa() : "";
    if (tg_norm_avx512f_available() && (!*name || !strcmp(name, "avx512f") || !strcmp(name, "avx512bf16")))
        return (norm_loops){ tg_norm_sumsq_avx512f, tg_norm_sums_avx512f, tg_norm_sumdev_avx512f,
                             tg_norm_rms_out_avx512f, tg_norm_layer_out_avx512f, tg_norm_layer_out_f32_avx512f };
#endif
    return (norm_loops){ tg_norm_sumsq_portable, tg_norm_sums_portable, tg_norm_sumdev_portable,
                         tg_norm_rms_out_portable, tg_norm_layer_out_portable, NULL };
}

typedef struct norm_job {
    int32_t op;
    int64_t rows, n;
    double eps;
    const uint16_t *x; /* rows x n, compact */
    const uint16_t *w, *b; /* n each, compact, or NULL */
    const uint16_t *wv, *bv; /* w and b, or n ones and n zeros when absent (the loops' operands) */
    norm_loops loops;
    uint16_t *out;
} norm_job;

static inline double bf(uint16_t b) {
    union { uint32_t u; float f; } v = { (uint32_t)b << 16 };
    return v.f;
}

/* X = x * 2^134 as sign and (sig, shift): X = sig << shift. */
static inline void bf_int(uint16_t b, uint64_t *sig, int32_t *shift, int32_t *neg) {
    int32_t e = (b >> 7) & 0xFF, f = b & 0x7F;
    *sig = e ? (uint64_t)(128 + f) : (uint64_t)f;
    *shift = e ? e : 1;
    *neg = (b >> 15) & 1;
}

static void big_of_bf(tg_big *a, uint16_t b) {
    uint64_t sig;
    int32_t sh, neg;
    bf_int(b, &sig, &sh, &neg);
    tg_big_zero(a);
    tg_big_add_small(a, sig, sh, neg ? -1 : 1);
}

/* The exact row statistics, made when the first element of a row needs them: SX = sum X,
 * SXX = sum X^2, and R: rms: SXX 2^400 + n E 2^268; layer: (n SXX - SX^2) 2^132 + n^2 E, with E
 * = eps 2^400 (docs/numerics.md, "Norms: the exact decision"). */
typedef struct exact_row {
    const norm_job *J;
    const uint16_t *x;
    bool ready;
    tg_big sx, r;
    /* the element being decided */
    uint16_t xi, wi, bi;
} exact_row;

static void exact_prepare(exact_row *E) {
    if (E->ready) return;
    const norm_job *J = E->J;
    tg_big sxx, e, nb, t;
    tg_big_zero(&E->sx), tg_big_zero(&sxx);
    for (int64_t i = 0; i < J->n; i++) {
        uint64_t sig;
        int32_t sh, neg;
        bf_int(E->x[i], &sig, &sh, &neg);
        tg_big_add_moments(&E->sx, &sxx, sig, sh, neg);
    }
    tg_big_from_double(&e, J->eps, 400);
    tg_big_zero(&nb);
    tg_big_add_small(&nb, (uint64_t)J->n, 0, 1);
    if (J->op == TG_NORM_RMS) {
        tg_big_shl(&E->r, &sxx, 400);
        tg_big_mul(&t, &nb, &e);
        tg_big_shl(&t, &t, 268);
        tg_big_add(&E->r, &E->r, &t);
    } else {
        tg_big_mul(&E->r, &nb, &sxx);
        tg_big_mul(&t, &E->sx, &E->sx);
        t.neg = !t.neg && t.n;
        tg_big_add(&E->r, &E->r, &t);
        tg_big_shl(&E->r, &E->r, 132);
        tg_big_mul(&t, &nb, &nb);
        tg_big_mul(&t, &t, &e);
        tg_big_add(&E->r, &E->r, &t);
    }
    E->ready = true;
}

static int sgn(const tg_big *a) { return a->n == 0 ? 0 : (a->neg ? -1 : 1); }

/* sign(y - mid) for the element E->xi (weight E->wi, bias E->bi) */
static int exact_cmp(double mid, void *ctx) {
    exact_row *E = ctx;
    const norm_job *J = E->J;
    tg_big m, num, lhs, rhs, t;
    tg_big_from_double(&m, mid, 134);
    big_of_bf(&num, E->wi);
    if (J->op == TG_NORM_RMS) {
        big_of_bf(&t, E->xi);
        tg_big_mul(&num, &num, &t); /* X W: y's numerator, the sign of y */
    } else {
        tg_big nb;
        tg_big_zero(&nb);
        tg_big_add_small(&nb, (uint64_t)J->n, 0, 1);
        big_of_bf(&t, E->xi);
        tg_big_mul(&t, &t, &nb);
        tg_big neg_sx = E->sx;
        neg_sx.neg = !neg_sx.neg && neg_sx.n;
        tg_big_add(&t, &t, &neg_sx);
        tg_big_mul(&num, &num, &t); /* W (n X - SX) */
        big_of_bf(&t, E->bi);
        t.neg = !t.neg && t.n;
        tg_big_add(&m, &m, &t); /* T = M - B: compare z = y - b with it */
    }
    int sy = sgn(&num), sm = sgn(&m);
    if (sy != sm || sy == 0) return sy > sm ? 1 : (sy < sm ? -1 : 0);
    /* same sign: compare squares */
    tg_big_mul(&lhs, &num, &num);
    if (J->op == TG_NORM_RMS) {
        tg_big nb;
        tg_big_zero(&nb);
        tg_big_add_small(&nb, (uint64_t)J->n, 0, 1);
        tg_big_mul(&lhs, &lhs, &nb);
        tg_big_shl(&lhs, &lhs, 400);
    } else {
        tg_big_shl(&lhs, &lhs, 132);
    }
    tg_big_mul(&rhs, &m, &m);
    tg_big_mul(&rhs, &rhs, &E->r);
    int c = tg_big_cmp(&lhs, &rhs);
    return sy > 0 ? c : -c;
}

/* The sign of an exactly zero result: IEEE's for the formula evaluated exactly: rms: x * w;
 * layer: w * (x - mean), x - mean being +0 when equal, then + b (-0 only when b is absent or -0). */
static bool zero_negative(exact_row *E) {
    bool wneg = (E->wi >> 15) & 1;
    if (E->J->op == TG_NORM_RMS) return ((E->xi >> 15) & 1) != wneg;
    tg_big t, nb, neg_sx = E->sx;
    tg_big_zero(&nb);
    tg_big_add_small(&nb, (uint64_t)E->J->n, 0, 1);
    big_of_bf(&t, E->xi);
    tg_big_mul(&t, &t, &nb);
    neg_sx.neg = !neg_sx.neg && neg_sx.n;
    tg_big_add(&t, &t, &neg_sx);
    bool pneg = wneg != (sgn(&t) < 0);
    return pneg && (!E->J->b || E->bi == 0x8000);
}

/* One element the bound could not decide: its key among [round(lo), round(hi)] by exact
 * bisection; a zero result takes the exact value's sign (zero_negative when it is exactly 0). */
static uint16_t decide(exact_row *E, double lo, double hi) {
    exact_prepare(E);
    if (E->r.n == 0) return 0x7FC0; /* 0 / 0: eps = 0 and a row of zeros (rms) or of equal values (layer) */
    int32_t k = tg_bf16_round_exact(tg_bf16_key(tg_bf16_from_double(lo)), tg_bf16_key(tg_bf16_from_double(hi)),
                                    exact_cmp, E);
    if (k != 0) return tg_bf16_of_key(k);
    int c = exact_cmp(0.0, E);
    if (c) return c < 0 ? 0x8000 : 0;
    return zero_negative(E) ? 0x8000 : 0;
}

/* The first index >= i whose output is the undecided flag 0xFFFF, or n; 4 outputs a step. */
static int64_t next_undecided(const uint16_t *out, int64_t i, int64_t n) {
    for (; i + 4 <= n; i += 4) {
        uint64_t v;
        memcpy(&v, out + i, sizeof v);
        uint64_t t = ~v; /* a 0xFFFF lane is a zero lane of t */
        if ((t - 0x0001000100010001ull) & ~t & 0x8000800080008000ull) break;
    }
    for (; i < n && out[i] != 0xFFFF; i++) {}
    return i;
}

static void rms_row(const norm_job *J, const uint16_t *x, uint16_t *out, int64_t *slow) {
    int64_t n = J->n;
    double s;
    J->loops.sumsq(x, n, &s);
    double r = s / (double)n + J->eps, inv = 1.0 / sqrt(r);
    bool exact_ok = isfinite(s) && r > 0;
    double rel = ((double)n + 16) * U;
    if (exact_ok && J->loops.rms_out(x, J->wv, n, inv, rel, out) == 0) return; /* all decided */
    exact_row E = { .J = J, .x = x };
    for (int64_t i = 0; i < n; i++) {
        if (exact_ok && (i = next_undecided(out, i, n)) == n) break;
        double w = bf(J->wv[i]), y = bf(x[i]) * w * inv;
        if (!exact_ok || !isfinite(y) || y == 0) { /* IEEE double of the formula (exact for 0) */
            out[i] = tg_bf16_from_double(y);
            continue;
        }
        double err = fabs(y) * rel, lo = y - err, hi = y + err;
        uint16_t rl = tg_bf16_from_double(lo), rh = tg_bf16_from_double(hi);
        if (rl == rh) {
            out[i] = rl;
            continue;
        }
        (*slow)++;
        E.xi = x[i], E.wi = J->wv[i];
        out[i] = decide(&E, lo, hi);
    }
}

static void layer_row(const norm_job *J, const uint16_t *x, uint16_t *out, int64_t *slow) {
    int64_t n = J->n;
    double dn = (double)n, sx, sa, q;
    J->loops.sums(x, n, &sx, &sa);
    double mu = sx / dn;
    /* |mu - exact mean| <= delta */
    double delta = (dn + 4) * U * (sa / dn) * 1.01;
    J->loops.sumdev(x, n, mu, &q);
    double rmid = q / dn + J->eps, inv = 1.0 / sqrt(rmid);
    double g = (dn + 4) * U * 1.01;
    double rlo = ((q / (1 + g) - dn * delta * delta) / dn + J->eps) * (1 - 4 * U);
    double rhi = ((q / (1 - g)) / dn + J->eps) * (1 + 4 * U);
    bool finite = isfinite(sa) && isfinite(q);
    bool bounded = finite && rlo > 0 && rhi < INFINITY;
    /* relative error of inv against 1 / sqrt(exact v + eps); the bound below neglects rho^2 next
     * to its 1% inflation, so a row with rho > 2^-10 takes the exact path */
    double rho = bounded ? 0.5 * ((rhi - rlo) / rlo) * 1.01 + 4 * U : INFINITY;
    bounded = bounded && rho <= 0x1p-10;
    double c1 = (rho + 5 * U) * 1.01, c2 = delta * (1 + rho + U) * 1.01;
    if (bounded) {
        int64_t undecided = J->loops.layer_out_f32 ? J->loops.layer_out_f32(x, J->wv, J->bv, n, mu, inv, delta, rho, out)
                                                   : -1;
        if (undecided < 0) undecided = J->loops.layer_out(x, J->wv, J->bv, n, mu, inv, c1, c2, out);
        if (undecided == 0) return; /* all decided */
    }
    exact_row E = { .J = J, .x = x };
    for (int64_t i = 0; i < n; i++) {
        if (bounded && (i = next_undecided(out, i, n)) == n) break;
        double w = bf(J->wv[i]), bb = bf(J->bv[i]);
        double dx = bf(x[i]) - mu, z = w * dx * inv, y = J->b ? z + bb : z;
        if (!finite || !isfinite(y)) { /* IEEE double of the formula */
            out[i] = tg_bf16_from_double(y);
            continue;
        }
        double lo = -INFINITY, hi = INFINITY;
        if (bounded) {
            double err = fabs(w) * inv * (fabs(dx) * c1 + c2) + fabs(y) * 2 * U;
            lo = y - err, hi = y + err;
            uint16_t rl = tg_bf16_from_double(lo), rh = tg_bf16_from_double(hi);
            if (rl == rh && (rl & 0x7FFF) != 0) {
                out[i] = rl;
                continue;
            }
        }
        (*slow)++;
        E.xi = x[i], E.wi = J->wv[i], E.bi = J->bv[i];
        out[i] = decide(&E, lo, hi);
    }
}

enum { ROW_BLOCK_ELEMS = 16384 };
static void task_rows(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    const norm_job *J = arg;
    int64_t per = J->n >= ROW_BLOCK_ELEMS ? 1 : ROW_BLOCK_ELEMS / J->n;
    int64_t lo = task * per, hi = lo + per < J->rows ? lo + per : J->rows, slow = 0;
    for (int64_t r = lo; r < hi; r++) {
        if (J->op == TG_NORM_RMS) rms_row(J, J->x + r * J->n, J->out + r * J->n, &slow);
        else layer_row(J, J->x + r * J->n, J->out + r * J->n, &slow);
    }
    count(TGRAD_DEBUG_NORM_EVALUATED, (hi - lo) * J->n);
    count(TGRAD_DEBUG_NORM_SLOW, slow);
}

/* n zeros (bias absent and weight absent: fill holds ones), owned by *owned; NULL when out of
 * memory or fill is. */
static const uint16_t *zeros_or(const uint16_t *fill, int64_t n, uint16_t **owned) {
    if (!fill) return NULL;
    *owned = tg_malloc((size_t)n * 2);
    if (*owned) memset(*owned, 0, (size_t)n * 2);
    return *owned;
}

/* A compact copy of an input (its storage at `data`) when its view is not compact (NULL data: out
 * of memory). */
static const uint16_t *compact(const tg_node_input *in, const uint16_t *data, uint16_t **owned) {
    void *copy = NULL;
    const uint16_t *elements = tg_kind_input_compact(in, data, 2, &copy);
    *owned = copy;
    return elements;
}

/* The job of step st over its inputs' storage data[0 .. ninputs) into out; own[] and *fill hold
 * what it allocated (freed by the caller). TGRAD_OK, or out of memory. */
static tgrad_status job_init(norm_job *J, const tg_step *st, const uint16_t *const *data, uint16_t *out,
                             uint16_t *own[3], uint16_t **fill) {
    const tg_node_params *P = &st->base->params;
    *J = (norm_job){ .op = P->norm_op, .eps = P->eps, .out = out, .n = 1 };
    const tg_view *xv = &st->inputs[0].view;
    for (int32_t d = 0; d < P->norm_axes; d++) J->n *= xv->shape[xv->ndim - 1 - d];
    J->rows = J->n ? st->buf->numel / J->n : 0;
    J->x = compact(&st->inputs[0], data[0], &own[0]);
    int32_t k = 1;
    if (P->has_weight) J->w = compact(&st->inputs[k], data[k], &own[k]), k++;
    if (P->has_bias) J->b = compact(&st->inputs[k], data[k], &own[k]), k++;
    uint16_t *f = *fill = (!P->has_weight || !P->has_bias) ? tg_malloc((size_t)(J->n ? J->n : 1) * 2) : NULL;
    if (f) {
        for (int64_t i = 0; i < J->n; i++) f[i] = P->has_weight ? 0 : 0x3F80; /* ones for w, else zeros for b */
    }
    J->wv = P->has_weight ? J->w : f;
    J->bv = P->has_bias ? J->b : (P->has_weight ? f : zeros_or(f, J->n, &own[2]));
    J->loops = loops_for_selection();
    if (!J->x || (P->has_weight && !J->w) || (P->has_bias && !J->b) || !J->wv || !J->bv)
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate a compact copy of an input",
                       P->norm_op == TG_NORM_RMS ? "rms_norm" : "layer_norm");
    return TGRAD_OK;
}

tgrad_status tg_norm_execute(const tg_step *st) {
    if (st->base->params.norm_op > TG_NORM_LAYER) return tg_norm_backward_execute(st);
    if (st->buf->numel == 0) return TGRAD_OK;
    const uint16_t *data[3] = { NULL, NULL, NULL };
    for (int32_t i = 0; i < st->ninputs && i < 3; i++) data[i] = st->inputs[i].buf->data;
    norm_job J;
    uint16_t *own[3] = { NULL, NULL, NULL }, *fill = NULL;
    tgrad_status s = job_init(&J, st, data, st->buf->data, own, &fill);
    if (!s && J.n > 0) {
        int64_t per = J.n >= ROW_BLOCK_ELEMS ? 1 : ROW_BLOCK_ELEMS / J.n;
        int64_t tasks = (J.rows + per - 1) / per;
        if (tasks == 1) task_rows(0, 0, &J);
        else tg_pool_run(tasks, task_rows, &J);
    }
    for (int32_t i = 0; i < 3; i++) free(own[i]);
    free(fill);
    return s;
}

/* ---- the GPU route's slow path ---- */
/* After a GPU launch of st (gen/render_norm.c): the rows whose flag is set are recomputed here by
 * the CPU's own row functions (rms_row, layer_row: the exact path included), from the inputs'
 * storage read back, into the output's storage read back and written again. */
tgrad_status tg_norm_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged) {
    if (st->base->params.norm_op > TG_NORM_LAYER) return tg_norm_backward_rows_on_host(st, flags, nflags, flagged);
    void *host[4];
    size_t bytes[4];
    char what[96];
    snprintf(what, sizeof what, "norm: cannot stage %lld flagged rows on the host", (long long)flagged);
    tgrad_status s = tg_device_stage_step(st, host, bytes, what);
    norm_job J;
    uint16_t *own[3] = { NULL, NULL, NULL }, *fill = NULL;
    const uint16_t *data[3] = { host[0], host[1], host[2] };
    if (!s) s = job_init(&J, st, data, host[3], own, &fill);
    if (!s) {
        int64_t slow = 0;
        for (int64_t r = 0; r < nflags && r < J.rows; r++) {
            if (!flags[r]) continue;
            if (J.op == TG_NORM_RMS) rms_row(&J, J.x + r * J.n, J.out + r * J.n, &slow);
            else layer_row(&J, J.x + r * J.n, J.out + r * J.n, &slow);
        }
        count(TGRAD_DEBUG_NORM_SLOW, slow);
        atomic_fetch_add_explicit(&device_rows, flagged, memory_order_relaxed);
        s = tg_device_upload(st->device, st->buf->dev_mem, host[3], bytes[3]);
    }
    for (int32_t i = 0; i < 3; i++) free(own[i]);
    free(fill);
    tg_device_staged_free(host);
    return s;
}
