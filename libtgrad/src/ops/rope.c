/* The rope kind: tgrad_rope checks everything and records the node (x, positions, then the
 * optional inv_freq); tg_rope_execute rotates each pair of features by theta = p * f_i, each
 * output the exact value rounded once: a double evaluation with an error bound decides almost
 * every element, binary128 (Ziv) the rest; the exact cases (theta = 0, zero pairs) are exact by
 * construction. docs/numerics.md, "Rotary position embedding". */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kinds.h"
#include "norm_exact.h"

#if defined(TGRAD_HAVE_QUADMATH)
#include <quadmath.h>
typedef __float128 xf;
#define XSIN sinq
#define XCOS cosq
#define XPOW powq
#define XFABS fabsq
#define XEPS 0x1p-109Q
#else
typedef long double xf;
#define XSIN sinl
#define XCOS cosl
#define XPOW powl
#define XFABS fabsl
#define XEPS ((xf)ldexp(1.0, 4 - LDBL_MANT_DIG))
#include <float.h>
#endif

#define U 0x1p-53

/* ---- the node ---- */
static tgrad_status make_rope(tgrad_tensor_t x, tgrad_tensor_t positions, tgrad_tensor_t inv_freq, double base,
                              int32_t rotary_dim, int32_t interleaved, int32_t backward, tgrad_tensor_t *out) {
    const char *fn = backward ? "rope_backward" : "rope";
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    tg_tensor t[3] = { 0 };
    int32_t have = 0;
    tgrad_status s = tg_kind_get_inputs((const tgrad_tensor_t[]){ x, positions, inv_freq }, 3, 2, t, &have);
    if (s && !have) return s;
    tg_node_params P = { .interleaved = interleaved, .eps = base, .rope_backward = backward,
                         .has_weight = inv_freq != 0 };
    const tg_view *xv = &t[0].view;
    if (!s) s = tg_kind_check_device(TG_OP_ROPE, t[0].buf->device, fn);
    if (!s && t[0].buf->dtype != TGRAD_DTYPE_BF16)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: x is %s; it takes bfloat16", fn, tg_dtype_name(t[0].buf->dtype));
    if (!s && xv->ndim < 2)
        s = tg_fail(TGRAD_ERR_RANK_MISMATCH, "%s: x has %d dimensions; it must be [..., L, d]", fn, (int)xv->ndim);
    int64_t L = s ? 0 : xv->shape[xv->ndim - 2], d = s ? 0 : xv->shape[xv->ndim - 1];
    if (!s) P.rotary_dim = rotary_dim ? rotary_dim : (int32_t)(d < INT32_MAX ? d : 0);
    if (!s && (interleaved != 0 && interleaved != 1))
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: interleaved is %d, not 0 or 1", fn, (int)interleaved);
    if (!s && (P.rotary_dim < 2 || P.rotary_dim % 2 || P.rotary_dim > d))
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: rotary_dim %d must be even, at least 2 and at most d = %lld", fn,
                    (int)P.rotary_dim, (long long)d);
    if (!s && !P.has_weight && !(isfinite(base) && base > 0))
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: base %g must be a positive finite number", fn, base);
    if (!s && t[1].buf->dtype != TGRAD_DTYPE_I32)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: positions are %s; they must be int32", fn,
                    tg_dtype_name(t[1].buf->dtype));
    if (!s) {
        const tg_view *pv = &t[1].view;
        bool ok = (pv->ndim == 1 && pv->shape[0] == L) ||
                  (pv->ndim == 2 && xv->ndim >= 3 && pv->shape[1] == L && pv->shape[0] == xv->shape[0]);
        if (!ok) {
            char sp[160], sx[160];
            tg_format_shape(sp, sizeof sp, pv);
            tg_format_shape(sx, sizeof sx, xv);
            s = tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: positions %s must be [L] or [B, L] for x %s ([B, ..., L, d])",
                        fn, sp, sx);
        }
        P.norm_axes = pv->ndim;
    }
    if (!s && P.has_weight) {
        const tg_view *fv = &t[2].view;
        if (t[2].buf->dtype != TGRAD_DTYPE_F32)
            s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: inv_freq is %s; it must be float32", fn,
                        tg_dtype_name(t[2].buf->dtype));
        else if (fv->ndim != 1 || fv->shape[0] != P.rotary_dim / 2)
            s = tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: inv_freq must be [rotary_dim / 2] = [%d]", fn,
                        (int)(P.rotary_dim / 2));
    }
    for (int32_t i = 1; !s && i < have; i++)
        if (t[i].buf->device != t[0].buf->device)
            s = tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "%s: an operand lives on %s, x on %s", fn,
                        tg_device_name(t[i].buf->device), tg_device_name(t[0].buf->device));
    tg_view ov;
    if (!s) s = tg_view_contiguous(xv->ndim, xv->shape, &ov);
    return tg_kind_make(s, TG_OP_ROPE, t, have, &ov, TGRAD_DTYPE_BF16, &P, fn, out);
}

TGRAD_API tgrad_status tgrad_rope(tgrad_tensor_t x, tgrad_tensor_t positions, tgrad_tensor_t inv_freq, double base,
                                  int32_t rotary_dim, int32_t interleaved, tgrad_tensor_t *out) {
    return make_rope(x, positions, inv_freq, base, rotary_dim, interleaved, 0, out);
}

/* hgsoft: the transpose rotation (by -theta_i): theta's frequencies negated, exactly. */
TGRAD_API tgrad_status tgrad_rope_backward(tgrad_tensor_t g, tgrad_tensor_t positions, tgrad_tensor_t inv_freq,
                                           double base, int32_t rotary_dim, int32_t interleaved, tgrad_tensor_t *out) {
    return make_rope(g, positions, inv_freq, base, rotary_dim, interleaved, 1, out);
}

/* ---- the executor ---- */
typedef struct rope_job {
    const uint16_t *x;
    const int32_t *pos;
    const double *fd; /* f_i in double (rd / 2) */
    const xf *fq;     /* f_i in binary128 when inv_freq is given; NULL: freq_q computes it */
    double base;      /* the base of the default frequencies */
    int32_t negate;   /* rope_backward: theta = p (-f_i) */
    int64_t rows, L, d, per_b; /* rows of [L, d]; rows per batch entry of positions */
    int32_t rd, interleaved, batched;
    bool vec; /* the rotate-half pairs through tg_rope_pairs_avx512f first (the CPU variant's choice) */
    uint16_t *out;
} rope_job;

static inline double bf(uint16_t b) {
    union { uint32_t u; float f; } v = { (uint32_t)b << 16 };
    return v.f;
}

static inline uint16_t fast_round(double y, double err) {
    uint64_t u;
    memcpy(&u, &y, sizeof u);
    uint64_t e = (u >> 52) & 0x7FF, low = u & 0x1FFFFFFFFFFFull;
    int64_t dd = (int64_t)low - ((int64_t)1 << 44);
    double dist = (double)(dd < 0 ? -dd : dd);
    if (e < 1023 - 125 || e > 1023 + 126 || !(dist * fabs(y) > err * 0x1p53)) return 0xFFFF;
    uint64_t t = ((u & 0x7FFFFFFFFFFFFFFFull) + 0xFFFFFFFFFFFull + ((u >> 45) & 1)) >> 45;
    return (uint16_t)(((u >> 48) & 0x8000) | (t - ((uint64_t)(1023 - 127) << 7)));
}

/* v rounded once to bf16: through float32, corrected where float32's rounding lands on a bf16
 * midpoint that v is not (softmax_wide.h's round_x): no rounding through double on the way, whose
 * 53 bits would lose a binary128 value's distance to a midpoint. */
static uint16_t bf16_of_x(xf v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0xffffu) == 0x8000u && (xf)f != v) u += ((xf)f < v) == (v > 0) ? 1u : (uint32_t)-1;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The rounding of an approximation yq with |error| <= eq, when that decides it (else 0xFFFF); the
 * ends' own binary128 roundings (2^-113 relative each) are added to the interval. */
static uint16_t round_q(xf yq, xf eq) {
    xf e = eq + XFABS(yq) * (XEPS / 8);
    uint16_t a = bf16_of_x(yq - e), b = bf16_of_x(yq + e);
    return a == b ? a : 0xFFFF;
}

static _Atomic int64_t rope_counts[3];
static _Atomic int64_t rope_device_rows; /* positions a GPU kernel flagged and the host reran */

/* pair()'s double bound for theta = p f_i, E + 4u (E = 3u |theta| + 2^-51, below): with cos and
 * sin of theta, what every row at that position shares; NaN where f_i = 0 (pair() takes theta = 0
 * exactly there, and the vector path leaves such a pair to it). */
static inline double bound_e4(double th, double f) { return f == 0 ? NAN : 3 * U * fabs(th) + 0x1p-51 + 4 * U; }

/* f_i in binary128 for the slow path: the given inv_freq's, or base^(-2i/rd) computed here (a
 * binary128 pow costs about a microsecond, and most calls never take the slow path: decoding a
 * token used to spend a twentieth of its time on these tables). */
static xf freq_q(const rope_job *J, int32_t i) {
    if (J->fq) return J->fq[i];
    xf f = XPOW((xf)J->base, -(xf)(2 * i) / (xf)J->rd);
    return J->negate ? -f : f;
}

/* One pair: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s) with theta = p f_i, c and s its cosine and
 * sine, e4 its bound_e4. */
static void pair(const rope_job *J, int32_t p, int32_t i, double c, double s, double e4, uint16_t a, uint16_t b,
                 uint16_t *oa, uint16_t *ob, int64_t *slow, int64_t *undecided) {
    double x1 = bf(a), x2 = bf(b);
    double y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
    if (!isfinite(x1) || !isfinite(x2) || p == 0 || J->fd[i] == 0) { /* IEEE double; exact for theta = 0 */
        *oa = (p == 0 || J->fd[i] == 0) && isfinite(x1) && isfinite(x2) ? a : tg_bf16_from_double(y1);
        *ob = (p == 0 || J->fd[i] == 0) && isfinite(x1) && isfinite(x2) ? b : tg_bf16_from_double(y2);
        return;
    }
    /* |theta_d - theta| <= 3u |theta| (f_i within 1 ulp, the product rounded); sin, cos within
     * 1 ulp of 1 on top: E = 3u |theta| + 2^-51, and 4u the rounding of the products and the sum */
    double err = (fabs(x1) + fabs(x2)) * e4 * 1.01;
    uint16_t r1 = fast_round(y1, err), r2 = fast_round(y2, err);
    if (r1 != 0xFFFF && r2 != 0xFFFF) {
        *oa = r1, *ob = r2;
        return;
    }
    (*slow)++;
    xf tq = (xf)p * freq_q(J, i), cq = XCOS(tq), sq = XSIN(tq);
    xf q1 = (xf)x1 * cq - (xf)x2 * sq, q2 = (xf)x2 * cq + (xf)x1 * sq;
    xf eq = ((xf)fabs(x1) + (xf)fabs(x2)) * (XEPS * XFABS(tq) + XEPS);
    if (r1 == 0xFFFF) r1 = round_q(q1, eq);
    if (r2 == 0xFFFF) r2 = round_q(q2, eq);
    if (r1 == 0xFFFF || r2 == 0xFFFF) {
        /* x1 = x2 = 0: y = 0 exactly (sign as IEEE double gives); else not known to happen
         * (a nonzero rational theta makes cos and sin transcendental): rounded and counted */
        (*undecided) += (x1 != 0 || x2 != 0);
        if (r1 == 0xFFFF) r1 = tg_bf16_from_double((double)q1 == 0 ? y1 : (double)q1);
        if (r2 == 0xFFFF) r2 = tg_bf16_from_double((double)q2 == 0 ? y2 : (double)q2);
    }
    *oa = r1, *ob = r2;
}

/* A task: a group of rows sharing positions (all rows, or one batch entry's) over a block of
 * ROPE_BLOCK positions; the angles of a position are computed once for the group. */
enum { ROPE_BLOCK = 8 };
static void task_rows(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    const rope_job *J = arg;
    int64_t lblocks = (J->L + ROPE_BLOCK - 1) / ROPE_BLOCK, g = task / lblocks, l0 = (task % lblocks) * ROPE_BLOCK;
    int64_t l1 = l0 + ROPE_BLOCK < J->L ? l0 + ROPE_BLOCK : J->L, rows = J->batched ? J->per_b : J->rows;
    int32_t half = J->rd / 2;
    int64_t slow = 0, undecided = 0;
    double cs[256], sn[256], e4[256]; /* a position's cos, sin and bound_e4 of each pair index */
#if defined(TGRAD_HAVE_X86_VARIANTS)
    int32_t miss[256];
#endif
    for (int64_t l = l0; l < l1; l++) {
        int32_t p = J->pos[(J->batched ? g * J->L : 0) + l];
        bool vec = J->vec && !J->interleaved && p != 0;
        for (int32_t i0 = 0; i0 < half; i0 += 256) {
            int32_t i1 = i0 + 256 < half ? i0 + 256 : half;
            for (int32_t i = i0; i < i1; i++) {
                double th = (double)p * J->fd[i];
                cs[i - i0] = cos(th), sn[i - i0] = sin(th), e4[i - i0] = bound_e4(th, J->fd[i]);
            }
            for (int64_t r = g * rows; r < (g + 1) * rows; r++) {
                const uint16_t *x = J->x + (r * J->L + l) * J->d;
                uint16_t *o = J->out + (r * J->L + l) * J->d;
#if defined(TGRAD_HAVE_X86_VARIANTS)
                if (vec) { /* 8 pairs a vector; pair() takes what the bound left */
                    int32_t left = tg_rope_pairs_avx512f(x + i0, x + i0 + half, cs, sn, e4, i1 - i0, o + i0,
                                                         o + i0 + half, miss);
                    for (int32_t k = 0; k < left; k++) {
                        int32_t i = i0 + miss[k], j = miss[k];
                        pair(J, p, i, cs[j], sn[j], e4[j], x[i], x[i + half], &o[i], &o[i + half], &slow, &undecided);
                    }
                } else
#else
                (void)vec;
#endif
                for (int32_t i = i0; i < i1; i++) {
                    int64_t ia = J->interleaved ? 2 * i : i, ib = J->interleaved ? 2 * i + 1 : i + half;
                    pair(J, p, i, cs[i - i0], sn[i - i0], e4[i - i0], x[ia], x[ib], &o[ia], &o[ib], &slow,
                         &undecided);
                }
                if (i1 == half)
                    for (int64_t k = J->rd; k < J->d; k++) o[k] = x[k];
            }
        }
    }
    atomic_fetch_add_explicit(&rope_counts[0], (l1 - l0) * rows * J->rd, memory_order_relaxed);
    if (slow) atomic_fetch_add_explicit(&rope_counts[1], slow, memory_order_relaxed);
    if (undecided) atomic_fetch_add_explicit(&rope_counts[2], undecided, memory_order_relaxed);
}

void tg_rope_counts(int64_t c[4]) {
    for (int i = 0; i < 3; i++) c[i] = atomic_load_explicit(&rope_counts[i], memory_order_relaxed);
    c[3] = atomic_load_explicit(&rope_device_rows, memory_order_relaxed);
}

double tg_rope_freq(double base, int32_t i, int32_t rd) { return pow(base, -2.0 * i / rd); /* within 1 ulp (glibc) */ }

/* The job of step st over its inputs' storage data[] into out; own[], *fd and *fq hold what it
 * allocated (freed by the caller). */
static tgrad_status job_init(rope_job *J, const tg_step *st, const void *const *data, uint16_t *out, void *own[3],
                             double **fdp, xf **fqp) {
    const tg_node_params *P = &st->base->params;
    const tg_view *xv = &st->inputs[0].view;
    *J = (rope_job){ .out = out, .rd = P->rotary_dim, .interleaved = P->interleaved, .batched = P->norm_axes == 2,
                     .L = xv->shape[xv->ndim - 2], .d = xv->shape[xv->ndim - 1] };
    J->rows = (J->L > 0 && J->d > 0) ? st->buf->numel / (J->L * J->d) : 0;
    J->per_b = J->rows / (xv->shape[0] ? xv->shape[0] : 1);
    int32_t half = J->rd / 2;
    J->x = tg_kind_input_compact(&st->inputs[0], data[0], 2, &own[0]);
    J->pos = tg_kind_input_compact(&st->inputs[1], data[1], 4, &own[1]);
    const float *given = P->has_weight ? tg_kind_input_compact(&st->inputs[2], data[2], 4, &own[2]) : NULL;
    double *fd = *fdp = tg_malloc(sizeof *fd * (size_t)half);
    xf *fq = *fqp = given ? tg_malloc(sizeof *fq * (size_t)half) : NULL;
    if (!J->x || !J->pos || (P->has_weight && !given) || !fd || (given && !fq))
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate its tables or a compact copy of an input",
                       P->rope_backward ? "rope_backward" : "rope");
    for (int32_t i = 0; i < half; i++) {
        if (given) fd[i] = given[i], fq[i] = (xf)given[i];
        else fd[i] = tg_rope_freq(P->eps, i, J->rd);
        if (P->rope_backward) { /* theta = p (-f_i): exact negation */
            fd[i] = -fd[i];
            if (fq) fq[i] = -fq[i];
        }
    }
    J->fd = fd, J->fq = fq, J->base = P->eps, J->negate = P->rope_backward;
#if defined(TGRAD_HAVE_X86_VARIANTS)
    const char *isa = tgrad_cpu_isa_forced() ? tgrad_cpu_isa() : ""; /* as the norms' loops choose */
    J->vec = tg_rope_avx512f_available() && (!*isa || !strcmp(isa, "avx512f") || !strcmp(isa, "avx512bf16"));
#endif
    return TGRAD_OK;
}

tgrad_status tg_rope_execute(const tg_step *st) {
    if (st->buf->numel == 0) return TGRAD_OK;
    const void *data[3] = { NULL, NULL, NULL };
    for (int32_t i = 0; i < st->ninputs && i < 3; i++) data[i] = st->inputs[i].buf->data;
    rope_job J;
    void *own[3] = { NULL, NULL, NULL };
    double *fd = NULL;
    xf *fq = NULL;
    tgrad_status s = job_init(&J, st, data, st->buf->data, own, &fd, &fq);
    if (!s) {
        int64_t groups = J.batched ? J.rows / J.per_b : 1;
        int64_t tasks = groups * ((J.L + ROPE_BLOCK - 1) / ROPE_BLOCK);
        if (tasks == 1) task_rows(0, 0, &J);
        else tg_pool_run(tasks, task_rows, &J);
    }
    for (int i = 0; i < 3; i++) free(own[i]);
    free(fd), free(fq);
    return s;
}

/* ---- the GPU route's slow path ---- */
/* After a GPU launch of st (gen/render_rope.c): each flagged position q = r L + l (row r of
 * [L, d], position l) is recomputed here by the CPU's own pair function (binary128 included), its
 * angles as task_rows computes them, from the inputs' storage read back, into the output's storage
 * read back and written again. */
tgrad_status tg_rope_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged) {
    void *host[4];
    size_t bytes[4];
    char what[96];
    snprintf(what, sizeof what, "rope: cannot stage %lld flagged positions on the host", (long long)flagged);
    tgrad_status s = tg_device_stage_step(st, host, bytes, what);
    rope_job J;
    void *own[3] = { NULL, NULL, NULL };
    double *fd = NULL;
    xf *fq = NULL;
    const void *data[3] = { host[0], host[1], host[2] };
    if (!s) s = job_init(&J, st, data, host[3], own, &fd, &fq);
    if (!s) {
        int64_t slow = 0, undecided = 0;
        int32_t half = J.rd / 2;
        for (int64_t q = 0; q < nflags && q < J.rows * J.L; q++) {
            if (!flags[q]) continue;
            int64_t r = q / J.L, l = q % J.L, g = J.batched ? r / J.per_b : 0;
            int32_t p = J.pos[(J.batched ? g * J.L : 0) + l];
            const uint16_t *x = J.x + q * J.d;
            uint16_t *o = J.out + q * J.d;
            for (int32_t i = 0; i < half; i++) {
                double th = (double)p * J.fd[i];
                int64_t ia = J.interleaved ? 2 * i : i, ib = J.interleaved ? 2 * i + 1 : i + half;
                pair(&J, p, i, cos(th), sin(th), bound_e4(th, J.fd[i]), x[ia], x[ib], &o[ia], &o[ib], &slow,
                     &undecided);
            }
            for (int64_t k = J.rd; k < J.d; k++) o[k] = x[k];
        }
        atomic_fetch_add_explicit(&rope_counts[0], flagged * J.rd, memory_order_relaxed);
        atomic_fetch_add_explicit(&rope_counts[1], slow, memory_order_relaxed);
        atomic_fetch_add_explicit(&rope_counts[2], undecided, memory_order_relaxed);
        atomic_fetch_add_explicit(&rope_device_rows, flagged, memory_order_relaxed);
        s = tg_device_upload(st->device, st->buf->dev_mem, host[3], bytes[3]);
    }
    for (int i = 0; i < 3; i++) free(own[i]);
    free(fd), free(fq);
    tg_device_staged_free(host);
    return s;
}
