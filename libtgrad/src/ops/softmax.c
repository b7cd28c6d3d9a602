/* The softmax kind: softmax, log_softmax and logsumexp along one axis, each the exact value of its
 * mathematics on the inputs rounded once to the output dtype (docs/numerics.md, "softmax,
 * log_softmax, logsumexp"). tgrad_softmax checks everything and records the node;
 * tg_softmax_execute runs rows over the pool: each row is evaluated in double with an error bound
 * (the variant's row loops, softmax_kernel.h); an element whose bound straddles a rounding boundary
 * is redone in binary128 (Ziv), and the few exact boundaries are decided exactly. Counted for
 * tgrad_debug_softmax_slow_path. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "../../../kernels/cpu/softmax_round.h"
#include "../cpu/epilogue.h"
#include "../kinds.h"
#include "elementwise.h"
#include "softmax_kernel.h"
#include "softmax_wide.h"

#define SM_NAME_(code, NAME, name) [code] = #name,
static const char *const sm_names[] = { TGRAD_SOFTMAX_LIST(SM_NAME_) };
#undef SM_NAME_

TGRAD_API const char *tgrad_softmax_name(int32_t op) {
    return op > 0 && op < TGRAD_SOFTMAX_END_ ? sm_names[op] : "unknown_softmax";
}

/* ---- the counters (tgrad_debug_softmax_slow_path) ---- */
static _Atomic int64_t counters[TGRAD_DEBUG_SOFTMAX_COUNT];
static void count(int32_t what, int64_t n) {
    if (n) atomic_fetch_add_explicit(&counters[what], n, memory_order_relaxed);
}

void tg_softmax_count_device_rows(int64_t n) { count(TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS, n); }

TGRAD_API tgrad_status tgrad_debug_softmax_slow_path(int64_t *counts, int32_t n) {
    if (!counts || n < 1 || n > TGRAD_DEBUG_SOFTMAX_COUNT)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_softmax_slow_path: counts NULL or count %d outside 1..%d",
                       (int)n, TGRAD_DEBUG_SOFTMAX_COUNT);
    for (int32_t i = 0; i < n; i++) counts[i] = atomic_load(&counters[i]);
    return TGRAD_OK;
}

/* ---- the node ---- */
TGRAD_API tgrad_status tgrad_softmax(int32_t op, tgrad_tensor_t x, int32_t axis, int32_t keepdims, int32_t out_dtype,
                                     tgrad_tensor_t *out) {
    const char *fn = tgrad_softmax_name(op);
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "softmax: out is NULL");
    if (op <= 0 || op >= TGRAD_SOFTMAX_END_)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "softmax: %d is not an op of the softmax registry", (int)op);
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(x, &t);
    if (s) return s;
    if (keepdims != 0 && (keepdims != 1 || op != TGRAD_SOFTMAX_LOGSUMEXP))
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: keepdims is %d (logsumexp takes 0 or 1, the others 0)", fn,
                    (int)keepdims);
    int32_t in = t.buf->dtype, nd = t.view.ndim;
    tg_node_params P = { .softmax_op = op, .naxes = 1 };
    tg_view ov = { 0 };
    if (!s) s = tg_kind_check_device(TG_OP_SOFTMAX, t.buf->device, fn);
    if (!s && in != TGRAD_DTYPE_BF16 && in != TGRAD_DTYPE_F32)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: the input is %s; %s takes bfloat16 or float32", fn,
                    tg_dtype_name(in), fn);
    if (!s && out_dtype == 0) out_dtype = in;
    if (!s && out_dtype != TGRAD_DTYPE_BF16 && out_dtype != TGRAD_DTYPE_F32)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: cannot give %s (code %d): bfloat16 or float32", fn,
                    tg_dtype_name(out_dtype), (int)out_dtype);
    int32_t a = axis < 0 ? axis + (nd ? nd : 1) : axis;
    if (!s && (a < 0 || a >= (nd ? nd : 1)))
        s = tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "%s: axis %d is out of range for a tensor of %d dimensions", fn,
                    (int)axis, (int)nd);
    if (!s) {
        P.axes[0] = nd ? a : 0;
        int64_t shape[TGRAD_MAX_DIMS];
        int32_t ond = 0;
        for (int32_t d = 0; d < nd; d++) {
            if (d == a && op == TGRAD_SOFTMAX_LOGSUMEXP) {
                if (keepdims) shape[ond++] = 1;
                continue;
            }
            shape[ond++] = t.view.shape[d];
        }
        s = tg_view_contiguous(ond, shape, &ov);
    }
    return tg_kind_make_unary(s, TG_OP_SOFTMAX, &t, &ov, out_dtype, &P, fn, out);
}

/* ---- the variants ---- */
static const tg_sm_variant *const variants[] = {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    &tg_sm_avx512f,
    &tg_sm_avx2,
#endif
    &tg_sm_portable,
};

/* The loops of the step's elementwise variant's name (the CPU variant forced or the best). */
static const tg_sm_variant *variant_for(const tg_step *st) {
    const char *name = st->ew_variant ? st->ew_variant->name : "portable";
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (strcmp(variants[i]->name, name) == 0 && variants[i]->available()) return variants[i];
    return &tg_sm_portable;
}

const tg_sm_variant *tg_sm_variant_for(const tg_step *st) { return variant_for(st); }

/* ---- the executor ---- */
typedef struct sm_job {
    const tg_sm_variant *v;
    int32_t op, in_dtype, out_dtype;
    const char *base;           /* the input's data (NULL with a prologue) */
    const tg_chain *pro, *epi;  /* fused chains or NULL */
    int64_t n;                  /* row length */
    int64_t stride;             /* the input's element step along the axis */
    int64_t offset;             /* the input view's offset */
    int32_t nother;             /* the other axes, in order */
    int64_t oshape[TGRAD_MAX_DIMS], ostride[TGRAD_MAX_DIMS];
    int64_t inner;              /* elements after the axis (the output's step along it) */
    int64_t rows, rows_per_task;
    char *out;
    struct sm_scratch *ws;      /* one workspace per pool worker */
    int32_t nws;
    atomic_bool oom;
} sm_job;

typedef struct sm_scratch {
    double *x, *e;
    uint8_t *flag;
    uint32_t *obits;
    uint16_t *vals;
} sm_scratch;

static const double U = 0x1p-53;

static uint32_t nan_bits(int32_t dt) { return dt == TGRAD_DTYPE_BF16 ? 0x7fc0u : 0x7fc00000u; }
static uint32_t inf_bits(int32_t dt, bool neg) {
    uint32_t b = dt == TGRAD_DTYPE_BF16 ? 0x7f80u : 0x7f800000u;
    return neg ? b | (dt == TGRAD_DTYPE_BF16 ? 0x8000u : 0x80000000u) : b;
}
static uint32_t zero_bits(int32_t dt, bool neg) { return neg ? (dt == TGRAD_DTYPE_BF16 ? 0x8000u : 0x80000000u) : 0; }

/* What a row holds: its maximum, smallest finite value, finite count, and whether a NaN is there. */
typedef struct row_info { double m, xmin; int64_t nfinite; bool nan; } row_info;
static row_info info_of(tg_sm_scan s) { return (row_info){ s.m, s.xmin, s.nfinite, s.nan != 0 }; }

/* The row's values as doubles (exact), through the prologue when there is one, and what it holds
 * (the variant's scan; fused with the load for a contiguous row). */
static row_info gather_scan(const sm_job *J, int64_t off, sm_scratch *S) {
    int64_t n = J->n, s = J->stride;
    if (J->pro) {
        if (s == 1) tg_chain_eval(J->pro, S->vals, off, n);
        else for (int64_t j = 0; j < n; j++) tg_chain_eval(J->pro, &S->vals[j], off + j * s, 1);
        return info_of(J->v->load_scan_bf16(S->vals, n, S->x));
    } else if (J->in_dtype == TGRAD_DTYPE_BF16) {
        const uint16_t *p = (const uint16_t *)J->base + off;
        if (s == 1) return info_of(J->v->load_scan_bf16(p, n, S->x));
        for (int64_t j = 0; j < n; j++) S->x[j] = tg_bf16_to_f32(p[j * s]);
    } else {
        const float *p = (const float *)J->base + off;
        if (s == 1) return info_of(J->v->load_scan_f32(p, n, S->x));
        for (int64_t j = 0; j < n; j++) S->x[j] = p[j * s];
    }
    return info_of(J->v->scan(S->x, n));
}

/* ---- the slow path: binary128 (softmax_wide.h) ---- */

/* The rounding of the exact value, known to lie within y -+ e: decided when both ends round alike.
 * Else, when the exact value is anchor + (a value of sign `side`) and anchor is the one boundary in
 * between (anchor_exact), the side decides; else undecided (counted), rounded from y. */
static uint32_t decide_x(xf y, xf e, int32_t dt, bool anchor_exact, xf anchor, int side) {
    uint32_t lo = round_x(y - e, dt), hi = round_x(y + e, dt);
    if (lo == hi) return lo;
    if (anchor_exact && side) {
        xf b = (value_x(lo, dt) + value_x(hi, dt)) / 2;
        bool adjacent = round_x(b, dt) == lo || round_x(b, dt) == hi;
        if (adjacent && b == anchor) return side < 0 ? lo : hi;
    }
    count(TGRAD_DEBUG_SOFTMAX_UNDECIDED, 1);
    return round_x(y, dt);
}

/* The row in binary128: T = S - 1 = the sum of exp(x_j - m) over x_j < m, plus the maxima's count
less one (each of their terms is 1), and its relative bound. */
typedef struct slow_row { bool ready; xf m, T, w; } slow_row;
static void slow_prepare(slow_row *R, const double *x, int64_t n, const row_info *ri) {
    xf m = ri->m, T = 0;
    int64_t ties = 0;
    for (int64_t j = 0; j < n; j++) {
        if (x[j] == ri->m) ties++;
        else if (x[j] > -INFINITY) T += XEXP((xf)x[j] - m);
    }
    T += (xf)(ties - 1); /* exact */
    double spread = fmin(ri->m - ri->xmin, 11400.0); /* beyond it exp underflows binary128: < 2^-16000 */
    /* n roundings of the sum, each exp within 2^-110, each difference within spread 2^-113 */
    R->w = (xf)(((double)n + spread + 64.0) * 0x1p-112);
    R->m = m, R->T = T, R->ready = true;
}

/* d = x - m in binary128 and whether it is exact (the two-sum error is zero). */
static xf diff_x(double x, xf m, bool *exact) {
    xf a = x, s = a - m, bb = s - a, err = (a - (s - bb)) + (-m - bb);
    *exact = err == 0;
    return s;
}

static uint32_t slow_element(const sm_job *J, slow_row *R, const double *x, const row_info *ri, int64_t j) {
    count(TGRAD_DEBUG_SOFTMAX_SLOW, 1);
    if (!R->ready) slow_prepare(R, x, J->n, ri);
    int32_t dt = J->out_dtype;
    xf tiny = (xf)ldexp(1.0, -1000); /* absolute: terms below binary128's range, 2^-16000 and less */
    tiny = tiny * tiny * tiny * tiny * tiny * tiny * tiny * tiny * tiny * tiny * tiny * tiny * tiny * tiny * tiny;
    if (J->op == TGRAD_SOFTMAX_LOGSUMEXP) {
        xf L = XLOG1P(R->T), y = R->m + L;
        xf e = (L * (R->w + (xf)0x1p-110) + (y < 0 ? -y : y) * (xf)0x1p-112) * (xf)1.1 + tiny;
        return decide_x(y, e, dt, true, R->m, 1); /* L > 0: two finite elements at least */
    }
    bool exact;
    xf d = diff_x(x[j], R->m, &exact);
    if (J->op == TGRAD_SOFTMAX_SOFTMAX) {
        xf q = XEXP(d) / (1 + R->T); /* exp(0) = 1 exactly for a maximum */
        xf w = (R->w + (d < 0 ? -d : d) * (xf)0x1p-113 + (xf)0x1p-109) * (xf)1.1;
        return decide_x(q, q * w + tiny, dt, false, 0, 0);
    }
    xf L = XLOG1P(R->T), y = d - L;
    xf w = (R->w + (xf)0x1p-109) * (xf)1.1, ay = y < 0 ? -y : y;
    return decide_x(y, ay * w + tiny, dt, exact, d, -1);
}

/* ---- one row ---- */
/* The loops' window in double ulps of the value's binade for a relative bound w (w < 2^-30). */
static int64_t thr_of(double w) { return (int64_t)(w * 0x1p53) + 2; }

static void put(const sm_job *J, char *dst, int64_t k, uint32_t bits) {
    if (J->out_dtype == TGRAD_DTYPE_BF16) ((uint16_t *)dst)[k] = (uint16_t)bits;
    else ((uint32_t *)dst)[k] = bits;
}

static uint32_t get(const sm_job *J, const void *src, int64_t k) {
    return J->out_dtype == TGRAD_DTYPE_BF16 ? ((const uint16_t *)src)[k] : ((const uint32_t *)src)[k];
}

/* The outputs of a special row into o: NaN, or the one finite element's rule. */
static void fill_special(const sm_job *J, const double *x, const row_info *ri, void *o) {
    int32_t dt = J->out_dtype;
    for (int64_t j = 0; j < J->n; j++) {
        uint32_t b;
        if (ri->nan || ri->m == INFINITY || ri->m == -INFINITY) b = nan_bits(dt);
        else if (J->op == TGRAD_SOFTMAX_SOFTMAX) /* one finite element: 1 there, 0 at the -inf */
            b = x[j] > -INFINITY ? tg_sm_round(1.0, dt) : 0;
        else b = x[j] > -INFINITY ? 0 : inf_bits(dt, true); /* log_softmax: +0 and -inf */
        put(J, o, j, b);
    }
}

/* The row at input offset off into the output row itself when it is contiguous (`direct`), else
 * into S->obits (out_dtype's elements, compact); logsumexp's one value is returned. */
static uint32_t run_row(const sm_job *J, int64_t off, sm_scratch *S, void *direct) {
    int64_t n = J->n;
    int32_t dt = J->out_dtype;
    row_info ri = gather_scan(J, off, S);
    count(TGRAD_DEBUG_SOFTMAX_ROWS, 1);
    count(TGRAD_DEBUG_SOFTMAX_ELEMENTS, J->op == TGRAD_SOFTMAX_LOGSUMEXP ? 1 : n);
    bool special = n == 0 || ri.nan || ri.m == INFINITY || ri.m == -INFINITY || ri.nfinite == 1;
    if (J->op == TGRAD_SOFTMAX_LOGSUMEXP && special) {
        if (ri.nan) return nan_bits(dt);
        if (n == 0 || ri.m == -INFINITY) return inf_bits(dt, true);
        if (ri.m == INFINITY) return inf_bits(dt, false);
        return tg_sm_round(ri.m, dt); /* one finite element: itself */
    }
    void *o = direct ? direct : (void *)S->obits;
    if (special) {
        fill_special(J, S->x, &ri, o);
        return 0;
    }
    /* T = S - 1: the terms below the maximum, and the maxima's count less one (their terms are 1) */
    int64_t ties = 0;
    double T = J->v->exp_sum(S->x, ri.m, S->e, n, &ties) + (double)(ties - 1);
    double spread = fmin(ri.m - ri.xmin, 746.0);
    double h = (double)((n + 7) / 8 + 3);
    /* T's relative bound: the sum's roundings, each difference's rounding through exp, exp's own */
    double eT = ((h + spread + 2) * U) * 1.02 + TG_SM_EXP_REL * 1.02 + 0x1p-800;
    bool tinyT = T < 0x1p-200; /* the other terms are below 2^-200 (or underflowed): L = log1p(T) ~ T */
    slow_row R = { .ready = false };
    int64_t bad;
    double inv = 0, L = 0, w;
    if (J->op == TGRAD_SOFTMAX_SOFTMAX) {
        inv = 1.0 / (1.0 + T);
        w = (eT + spread * U * 1.02 + TG_SM_EXP_REL + 3 * U) * 1.05 + (double)n * 0x1p-1000;
        bad = J->v->out_softmax(S->e, n, inv, thr_of(w), dt, o, S->flag);
    } else {
        L = log1p(T);
        if (J->op == TGRAD_SOFTMAX_LOGSUMEXP) {
            double y = ri.m + L, ay = fabs(y);
            double e = (L * (eT + 0x1p-50) * 1.05 + ay * U) * 1.05 + (tinyT ? 0x1p-190 : 0x1p-800);
            uint32_t lo = tg_sm_round(y - e, dt), hi = tg_sm_round(y + e, dt);
            if (lo == hi) return lo;
            return slow_element(J, &R, S->x, &ri, 0);
        }
        /* log_softmax: y = (x_j - m) - L, both parts <= 0: relative bounds add */
        w = tinyT ? 0x1p-49 : ((eT + 0x1p-50) * 1.02 + 2 * U) * 1.05;
        bad = J->v->out_log_softmax(S->x, n, ri.m, L, thr_of(w), dt, o, S->flag);
        for (int64_t j = 0; tinyT && j < n; j++) /* the one maximum: -L in (-2^-199, 0): -0 */
            if (S->x[j] == ri.m) {
                bad -= S->flag[j];
                S->flag[j] = 0;
                put(J, o, j, zero_bits(dt, true));
            }
    }
    /* flagged: the double value's own decision (outside the loops' fast range), else binary128 */
    for (int64_t j = 0; bad > 0 && j < n; j++) {
        if (!S->flag[j]) continue;
        bad--;
        double q = J->op == TGRAD_SOFTMAX_SOFTMAX ? S->e[j] * inv : (S->x[j] - ri.m) - L, aq = fabs(q);
        double e = aq < INFINITY ? aq * w : 0.0;
        uint32_t lo = tg_sm_round(q - e, dt), hi = tg_sm_round(q + e, dt);
        put(J, o, j, lo == hi ? lo : slow_element(J, &R, S->x, &ri, j));
    }
    return 0;
}

/* The input offset and output position of row r (the other axes' index, row-major). */
static void row_place(const sm_job *J, int64_t r, int64_t *in_off, int64_t *out_pos) {
    int64_t off = J->offset, q = r;
    for (int32_t d = J->nother - 1; d >= 0; d--) {
        off += (q % J->oshape[d]) * J->ostride[d];
        q /= J->oshape[d];
    }
    *in_off = off;
    /* r = a * inner + b: softmax's row starts at a * n * inner + b, logsumexp's output is r */
    int64_t a = r / J->inner, b = r % J->inner;
    *out_pos = J->op == TGRAD_SOFTMAX_LOGSUMEXP ? r : a * J->n * J->inner + b;
}

static bool scratch_new(sm_scratch *S, int64_t n, bool prologue) {
    size_t m = (size_t)(n ? n : 1);
    *S = (sm_scratch){ malloc(sizeof(double) * m), malloc(sizeof(double) * m), malloc(m), malloc(sizeof(uint32_t) * m),
                       prologue ? malloc(sizeof(uint16_t) * m) : NULL };
    return S->x && S->e && S->flag && S->obits && (!prologue || S->vals);
}
static void scratch_free(sm_scratch *S) { free(S->x), free(S->e), free(S->flag), free(S->obits), free(S->vals); }

/* Row r of the job: computed (run_row), placed in the output, the epilogue run on it. */
static void place_row(const sm_job *J, sm_scratch *S, int64_t r) {
    int64_t n = J->n, off, pos;
    size_t es = J->out_dtype == TGRAD_DTYPE_BF16 ? 2 : 4;
    row_place(J, r, &off, &pos);
    if (J->op == TGRAD_SOFTMAX_LOGSUMEXP) {
        put(J, J->out, pos, run_row(J, off, S, NULL));
        if (J->epi) tg_chain_apply(J->epi, (uint16_t *)J->out, pos, 1);
        return;
    }
    bool contiguous = J->inner == 1;
    run_row(J, off, S, contiguous ? J->out + (size_t)pos * es : NULL);
    if (!contiguous)
        for (int64_t j = 0; j < n; j++) put(J, J->out, pos + j * J->inner, get(J, S->obits, j));
    if (J->epi) {
        if (contiguous) tg_chain_apply(J->epi, (uint16_t *)J->out, pos, n);
        else for (int64_t j = 0; j < n; j++) tg_chain_apply(J->epi, (uint16_t *)J->out, pos + j * J->inner, 1);
    }
}

static void task_rows(int64_t task, int32_t worker, void *arg) {
    sm_job *J = arg;
    int64_t n = J->n;
    sm_scratch own, *S = worker >= 0 && worker < J->nws ? &J->ws[worker] : &own;
    if (S == &own && !scratch_new(&own, n, J->pro != NULL)) { /* a worker beyond those planned */
        scratch_free(&own);
        atomic_store(&J->oom, true);
        return;
    }
    tg_fp_env env = tg_fp_env_ieee();
    int64_t lo = task * J->rows_per_task, hi = lo + J->rows_per_task < J->rows ? lo + J->rows_per_task : J->rows;
    for (int64_t r = lo; r < hi; r++) place_row(J, S, r);
    tg_fp_env_restore(env);
    if (S == &own) scratch_free(&own);
}

/* Rows are shared from this many elements a task: a correctly rounded row costs some 15 ns an
 * element (AVX2, Zen 2), so a decode step's attention softmax (16 rows of 96 or more) is split
 * across the pool rather than left to the calling thread. */
enum { TASK_ELEMENTS = 1 << 9 };

/* The job of step st over input storage `in_data` and output storage `out_data` (the step's
 * fused chains with it when chains is true). */
static void job_init(sm_job *J, const tg_step *st, const void *in_data, void *out_data, tg_chain *pro, tg_chain *epi) {
    const tg_node_input *in = &st->inputs[0];
    const tg_view *v = &in->view;
    int32_t axis = st->base->params.axes[0];
    *J = (sm_job){ .v = variant_for(st), .op = st->base->params.softmax_op,
                   .in_dtype = st->pro_base ? TGRAD_DTYPE_BF16 : in->buf->dtype, .out_dtype = st->base->dtype,
                   .base = st->pro_base ? NULL : (const char *)in_data, .out = (char *)out_data,
                   .offset = v->offset, .inner = 1, .rows = 1 };
    if (st->pro_base && pro) tg_chain_prologue(st, pro), J->pro = pro;
    if (st->nfused && epi) tg_chain_from_step(st, epi), J->epi = epi;
    J->n = v->ndim ? v->shape[axis] : 1;
    J->stride = v->ndim ? v->strides[axis] : 0;
    for (int32_t d = 0; d < v->ndim; d++) {
        if (d == axis) continue;
        J->oshape[J->nother] = v->shape[d], J->ostride[J->nother++] = v->strides[d];
        J->rows *= v->shape[d];
        if (d > axis) J->inner *= v->shape[d];
    }
    atomic_init(&J->oom, false);
}

tgrad_status tg_softmax_execute(const tg_step *st) {
    if (tg_softmax_is_backward(st->base->params.softmax_op)) return tg_softmax_backward_execute(st);
    sm_job J;
    tg_chain pro, epi;
    job_init(&J, st, st->pro_base ? NULL : st->inputs[0].buf->data, st->buf->data, &pro, &epi);
    if (J.rows == 0 || (J.n == 0 && J.op != TGRAD_SOFTMAX_LOGSUMEXP)) return TGRAD_OK;
    int64_t per = J.n ? J.n : 1;
    J.rows_per_task = TASK_ELEMENTS / per > 0 ? TASK_ELEMENTS / per : 1;
    int64_t tasks = (J.rows + J.rows_per_task - 1) / J.rows_per_task;
    int32_t threads = tasks == 1 ? 1 : tg_pool_threads();
    sm_scratch ws[64];
    J.ws = ws;
    for (J.nws = 0; J.nws < threads && J.nws < 64; J.nws++)
        if (!scratch_new(&ws[J.nws], J.n, J.pro != NULL)) {
            scratch_free(&ws[J.nws]);
            atomic_store(&J.oom, true);
            break;
        }
    if (!atomic_load(&J.oom)) {
        if (tasks == 1) task_rows(0, 0, &J);
        else tg_pool_run(tasks, task_rows, &J);
    }
    for (int32_t i = 0; i < J.nws; i++) scratch_free(&ws[i]);
    if (atomic_load(&J.oom))
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate a row's workspace (%lld elements)",
                       tgrad_softmax_name(J.op), (long long)J.n);
    return TGRAD_OK;
}

/* ---- the GPU route's slow path ---- */
/* After a GPU launch of st (gen/render_softmax.c): the rows whose flag is set (an element the
 * kernel's bound leaves undecided, or a special row) are recomputed here by the CPU's own row code
 * (place_row: the same function, so the same bytes), from the input's storage read back, into the
 * output's storage read back and written again (device.c calls it only when a flag is set). Fused chains never
 * reach a GPU softmax step (the scheduler keeps them apart: its row's gpu_unfused). */
tgrad_status tg_softmax_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged) {
    if (tg_softmax_is_backward(st->base->params.softmax_op))
        return tg_softmax_backward_rows_on_host(st, flags, nflags, flagged);
    const tg_buffer *ib = st->inputs[0].buf, *ob = st->buf;
    if (st->pro_base || st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "softmax: a GPU step with fused chains (the scheduler keeps them apart)");
    size_t ibytes = (size_t)ib->numel * tg_dtype_size(ib->dtype), obytes = (size_t)ob->numel * tg_dtype_size(ob->dtype);
    void *in = tg_calloc(ibytes ? ibytes : 1, 1), *out = tg_calloc(obytes ? obytes : 1, 1);
    sm_job J;
    job_init(&J, st, in, out, NULL, NULL);
    sm_scratch S = { 0 };
    tgrad_status s = TGRAD_OK;
    if (!in || !out || !scratch_new(&S, J.n, false))
        s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot stage %lld flagged rows on the host", tgrad_softmax_name(J.op),
                    (long long)flagged);
    if (!s && ibytes) s = tg_device_download(st->device, ib->dev_mem, in, ibytes);
    if (!s) s = tg_device_download(st->device, ob->dev_mem, out, obytes);
    if (!s) {
        count(TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS, flagged);
        tg_fp_env env = tg_fp_env_ieee();
        for (int64_t r = 0; r < nflags && r < J.rows; r++)
            if (flags[r]) place_row(&J, &S, r);
        tg_fp_env_restore(env);
        s = tg_device_upload(st->device, ob->dev_mem, out, obytes);
    }
    scratch_free(&S);
    free(in), free(out);
    return s;
}
