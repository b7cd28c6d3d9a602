/* The norms' input gradients as ops: rms_norm_backward(x, g, w) = rinv g w - x rinv^3 sum(g w x) / N
 * and layer_norm_backward(x, g, w) = rinv (g w - mean(g w) - xh mean(g w xh)), xh = (x - mu) rinv,
 * over the last naxes axes (rinv = 1 / sqrt(mean((x - mu)^2) + eps), mu the row's mean, or 0 for
 * rms), each element the exact value rounded once to the output dtype (docs/numerics.md,
 * "rms_norm_backward, layer_norm_backward"). tgrad_rms_norm_backward and tgrad_layer_norm_backward
 * check everything and record a node of the norm kind (norm_op TG_NORM_*_BACKWARD; inputs x, g and
 * the optional weight); tg_norm_backward_execute runs its rows over the pool. Each element is
 * evaluated in double with a rigorous error bound and written when the bound decides its rounding;
 * the rest (and every zero) are decided exactly (norm_backward_exact.c). CPU only. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "../kinds.h"
#include "norm_backward.h"

#define U 0x1p-53

const char *tg_norm_op_name(int32_t op) {
    static const char *const names[] = { "norm", "rms_norm", "layer_norm", "rms_norm_backward", "layer_norm_backward" };
    return names[op >= TG_NORM_RMS && op <= TG_NORM_LAYER_BACKWARD ? op : 0];
}

/* ---- the node ---- */
static tgrad_status check_float(const tg_tensor *t, const char *what, const char *fn) {
    int32_t dt = t->buf->dtype;
    if (dt == TGRAD_DTYPE_BF16 || dt == TGRAD_DTYPE_F32) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: %s is %s; it takes bfloat16 or float32", fn, what,
                   tg_dtype_name(dt));
}

static bool same_shape(const tg_view *a, const tg_view *b, int32_t from) {
    if (a->ndim - from != b->ndim) return false;
    for (int32_t d = 0; d < b->ndim; d++)
        if (a->shape[from + d] != b->shape[d]) return false;
    return true;
}

static tgrad_status shape_error(const tg_view *a, const tg_view *b, const char *what, const char *fn) {
    char sa[160], sb[160];
    tg_format_shape(sa, sizeof sa, a);
    tg_format_shape(sb, sizeof sb, b);
    return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: x is %s, %s %s", fn, sa, what, sb);
}

static tgrad_status check_all(const tg_tensor *t, int32_t have, bool weight, int32_t naxes, double eps,
                              int32_t out_dtype, const char *fn) {
    static const char *const what[3] = { "x", "the gradient g", "the weight" };
    tgrad_status s = TGRAD_OK;
    for (int32_t i = 0; !s && i < have && i < 3; i++) s = check_float(&t[i], what[i], fn);
    for (int32_t i = 1; !s && i < have && i < 3; i++)  /* have <= 3: the bound tells gcc what[i] exists */
        if (t[i].buf->device != t[0].buf->device)
            s = tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "%s: %s lives on %s, x on %s", fn, what[i],
                        tg_device_name(t[i].buf->device), tg_device_name(t[0].buf->device));
    if (!s && (naxes < 1 || naxes > t[0].view.ndim))
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: %d normalized axes for a tensor of %d dimensions", fn, (int)naxes,
                    (int)t[0].view.ndim);
    if (!s) s = tg_norm_check_eps(eps, fn);
    if (!s && !same_shape(&t[0].view, &t[1].view, 0)) s = shape_error(&t[0].view, &t[1].view, "the gradient", fn);
    if (!s && weight && !same_shape(&t[0].view, &t[2].view, t[0].view.ndim - naxes))
        s = shape_error(&t[0].view, &t[2].view, "the weight (the last normalized axes of x)", fn);
    if (!s && out_dtype != TGRAD_DTYPE_BF16 && out_dtype != TGRAD_DTYPE_F32)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: cannot give %s (code %d): bfloat16 or float32", fn,
                    tg_dtype_name(out_dtype), (int)out_dtype);
    return s;
}

static tgrad_status make_backward(int32_t op, tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t weight,
                                  int32_t naxes, double eps, int32_t out_dtype, tgrad_tensor_t *out) {
    const char *fn = tg_norm_op_name(op);
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    tg_tensor t[3] = { 0 };
    int32_t have = 0;
    tgrad_status s = tg_kind_get_inputs((const tgrad_tensor_t[]){ x, g, weight }, 3, 2, t, &have);
    if (s && !have) return s;
    if (!s && out_dtype == 0) out_dtype = t[1].buf->dtype;
    if (!s) s = check_all(t, have, weight != 0, naxes, eps, out_dtype, fn);
    tg_node_params P = { .norm_op = op, .norm_axes = naxes, .eps = eps, .has_weight = weight != 0 };
    tg_view ov = { 0 };
    if (!s) s = tg_view_contiguous(t[0].view.ndim, t[0].view.shape, &ov);
    return tg_kind_make(s, TG_OP_NORM, t, have, &ov, out_dtype, &P, fn, out);
}

TGRAD_API tgrad_status tgrad_rms_norm_backward(tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t weight,
                                               int32_t naxes, double eps, int32_t out_dtype, tgrad_tensor_t *out) {
    return make_backward(TG_NORM_RMS_BACKWARD, x, g, weight, naxes, eps, out_dtype, out);
}

TGRAD_API tgrad_status tgrad_layer_norm_backward(tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t weight,
                                                 int32_t naxes, double eps, int32_t out_dtype, tgrad_tensor_t *out) {
    return make_backward(TG_NORM_LAYER_BACKWARD, x, g, weight, naxes, eps, out_dtype, out);
}

/* ---- the rows ---- */
#define NB_FN(name) tg_##name##_portable
#include "../../../kernels/cpu/norm_backward_loops.h"

/* The loops of the selected CPU variant (as the forward norms choose theirs). */
typedef struct nb_loops {
    void (*load_bf16)(const uint16_t *, int64_t, double *);
    void (*load_f32)(const float *, int64_t, double *);
    void (*mul)(const double *, const double *, int64_t, double *);
    void (*rms_sums)(const double *, const double *, int64_t, double *);
    void (*layer_sums)(const double *, const double *, int64_t, double *);
    void (*layer_devs)(const double *, const double *, int64_t, double, double *);
    void (*values)(const tg_nb_consts *, const double *, const double *, int64_t, int32_t, double *, double *,
                   uint32_t *);
} nb_loops;

static nb_loops loops_for_selection(void) {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    const char *name = tgrad_cpu_isa_forced() ? tgrad_cpu_isa() : "";
    if (tg_norm_avx512f_available() && (!*name || !strcmp(name, "avx512f") || !strcmp(name, "avx512bf16")))
        return (nb_loops){ tg_nb_load_bf16_avx512f, tg_nb_load_f32_avx512f, tg_nb_mul_avx512f, tg_nb_rms_sums_avx512f,
                           tg_nb_layer_sums_avx512f, tg_nb_layer_devs_avx512f, tg_nb_values_avx512f };
#endif
    return (nb_loops){ tg_nb_load_bf16_portable, tg_nb_load_f32_portable, tg_nb_mul_portable, tg_nb_rms_sums_portable,
                       tg_nb_layer_sums_portable, tg_nb_layer_devs_portable, tg_nb_values_portable };
}

/* The IEEE double value of the formula (a row holding an infinity or NaN, or a zero denominator). */
static void special_row(const tg_nb_row *R, uint32_t *bits) {
    int64_t n = R->n;
    double dn = (double)n, mu = 0, a = 0, q = 0, m2 = 0;
    for (int64_t j = 0; j < n; j++) mu += R->layer ? R->x[j] : 0, a += R->layer ? R->gw[j] : 0;
    mu /= dn, a /= dn;
    for (int64_t j = 0; j < n; j++) q += (R->x[j] - mu) * (R->x[j] - mu), m2 += R->gw[j] * (R->x[j] - mu);
    double d = q + dn * R->eps, rinv = 1.0 / sqrt(d / dn), c = m2 / d;
    for (int64_t i = 0; i < n; i++) bits[i] = tg_nb_round(rinv * (R->gw[i] - a - (R->x[i] - mu) * c), R->dt);
}

/* The row's bits from its constants (bounded), else every element exactly; the elements the
 * loop's bound leaves open are retried with tg_nb_round's ends (the bf16 bit test covers normal
 * magnitudes only), then decided exactly. */
static void finish_row(const nb_loops *L, const tg_nb_row *R, const tg_nb_consts *K, bool bounded, uint32_t *bits,
                       int64_t *slow) {
    int64_t n = R->n;
    int32_t dt = R->dt;
    if (bounded) L->values(K, R->x, R->gw, n, dt == TGRAD_DTYPE_BF16, R->v, R->e, bits);
    else for (int64_t i = 0; i < n; i++) bits[i] = TG_NB_UNDECIDED, R->v[i] = 0, R->e[i] = INFINITY;
    tg_nb_exact E; /* its big integers are written by its first exact element (not zeroed per row) */
    E.row = R, E.ready = false;
    uint32_t mag = dt == TGRAD_DTYPE_BF16 ? 0x7FFFu : 0x7FFFFFFFu;
    for (int64_t i = 0; i < n; i++) {
        if (bits[i] != TG_NB_UNDECIDED) continue;
        double lo = R->v[i] - R->e[i], hi = R->v[i] + R->e[i];
        uint32_t bl = tg_nb_round(lo, dt), bh = tg_nb_round(hi, dt);
        if (bounded && bl == bh && (bl & mag)) {
            bits[i] = bl;
            continue;
        }
        (*slow)++;
        bits[i] = tg_nb_exact_element(&E, i, lo, hi);
    }
}

/* rms_norm_backward's row (docs/numerics.md has each term of the bound): q = sum x^2 and d = q +
 * N eps within delta_d (relative), c = S / d with S = sum gw x within eS, rinv within rho. */
static void rms_row(const nb_loops *L, const tg_nb_row *R, uint32_t *bits, int64_t *slow) {
    double dn = (double)R->n, s[3];
    L->rms_sums(R->x, R->gw, R->n, s);
    double q = s[0], S = s[1], A = s[2], d = q + dn * R->eps;
    if (!isfinite(q) || !isfinite(A) || !(d > 0)) return special_row(R, bits);
    double dd = (dn + 1) * U * 1.01, eS = dn * U * A * 1.01;
    tg_nb_consts K = { .c = S / d, .rinv = 1.0 / sqrt(d / dn), .rho = (dn + 6) * U * 0.5 * 1.02 };
    K.ec = (eS / d + fabs(K.c) * (dd + U)) * 1.01;
    finish_row(L, R, &K, K.rho <= 0x1p-10, bits, slow);
}

/* layer_norm_backward's row: mu within delta (as the forward's), the variance's bounds [rlo, rhi]
 * (the forward's) give rho; a = mean(gw) within ea, M = sum gw (x - mu) within eM, c = M / d
 * within ec. */
static void layer_row(const nb_loops *L, const tg_nb_row *R, uint32_t *bits, int64_t *slow) {
    double dn = (double)R->n, s[4], t[3];
    L->layer_sums(R->x, R->gw, R->n, s);
    double mu = s[0] / dn, sa = s[1], ag = s[3];
    L->layer_devs(R->x, R->gw, R->n, mu, t);
    double q = t[0], M = t[1], B = t[2];
    if (!isfinite(sa) || !isfinite(ag) || !isfinite(q) || !isfinite(B)) return special_row(R, bits);
    double delta = (dn + 4) * U * (sa / dn) * 1.01, gq = (dn + 4) * U * 1.01;
    double rlo = ((q / (1 + gq) - dn * delta * delta) / dn + R->eps) * (1 - 4 * U);
    double rhi = ((q / (1 - gq)) / dn + R->eps) * (1 + 4 * U);
    double rho = rlo > 0 && rhi < INFINITY ? 0.5 * ((rhi - rlo) / rlo) * 1.01 + 4 * U : INFINITY;
    double d = q + dn * R->eps, eM = (delta * ag + (dn + 1) * U * B) * 1.02;
    tg_nb_consts K = { .mu = mu, .a = s[2] / dn, .c = M / d, .rinv = 1.0 / sqrt(d / dn), .rho = rho,
                       .ea = (dn + 1) * U * (ag / dn) * 1.01, .delta = delta };
    K.ec = (eM / d + fabs(K.c) * (2 * rho + U)) * 1.01;
    finish_row(L, R, &K, rho <= 0x1p-10 && d > 0, bits, slow);
}

/* ---- the executor ---- */
typedef struct nb_job {
    const tg_step *st;
    int64_t rows, n, rows_per_task;
    const void *in[3]; /* x, g, w: compact */
    int32_t dt[3];
    bool layer;
    double eps;
    int32_t out_dtype;
    void *out;
    nb_loops loops;
    atomic_bool oom;
} nb_job;

static void load(const nb_loops *L, const void *src, int32_t dt, int64_t at, int64_t n, double *to) {
    if (dt == TGRAD_DTYPE_BF16) L->load_bf16((const uint16_t *)src + at, n, to);
    else L->load_f32((const float *)src + at, n, to);
}

/* A row's workspace: x, g, w, gw, v, e (n doubles each) and its bits; w loaded once. */
typedef struct nb_ws {
    double *d;
    uint32_t *bits;
    tg_nb_row R;
} nb_ws;

static bool ws_new(const nb_job *J, nb_ws *W) {
    int64_t n = J->n;
    W->d = malloc(sizeof(double) * (size_t)n * 6);
    W->bits = malloc(sizeof(uint32_t) * (size_t)n);
    if (!W->d || !W->bits) {
        free(W->d), free(W->bits);
        return false;
    }
    double *w = W->d + 2 * n;
    if (J->in[2]) load(&J->loops, J->in[2], J->dt[2], 0, n, w);
    else for (int64_t j = 0; j < n; j++) w[j] = 1.0;
    W->R = (tg_nb_row){ .x = W->d, .g = W->d + n, .w = w, .gw = W->d + 3 * n, .v = W->d + 4 * n, .e = W->d + 5 * n,
                        .n = n, .layer = J->layer, .eps = J->eps, .dt = J->out_dtype };
    return true;
}

/* Row r into the output (the caller holds the IEEE environment). */
static void run_row(const nb_job *J, nb_ws *W, int64_t r, int64_t *slow) {
    int64_t n = J->n;
    const nb_loops *L = &J->loops;
    load(L, J->in[0], J->dt[0], r * n, n, (double *)W->R.x);
    load(L, J->in[1], J->dt[1], r * n, n, (double *)W->R.g);
    L->mul(W->R.g, W->R.w, n, (double *)W->R.gw);
    if (J->layer) layer_row(L, &W->R, W->bits, slow);
    else rms_row(L, &W->R, W->bits, slow);
    if (J->out_dtype == TGRAD_DTYPE_BF16)
        for (int64_t j = 0; j < n; j++) ((uint16_t *)J->out)[r * n + j] = (uint16_t)W->bits[j];
    else memcpy((uint32_t *)J->out + r * n, W->bits, sizeof(uint32_t) * (size_t)n);
}

static void task_rows(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    nb_job *J = arg;
    nb_ws W;
    if (!ws_new(J, &W)) {
        atomic_store(&J->oom, true);
        return;
    }
    tg_fp_env env = tg_fp_env_ieee();
    int64_t lo = task * J->rows_per_task, hi = lo + J->rows_per_task < J->rows ? lo + J->rows_per_task : J->rows;
    int64_t slow = 0;
    for (int64_t r = lo; r < hi; r++) run_row(J, &W, r, &slow);
    tg_fp_env_restore(env);
    tg_norm_count(TGRAD_DEBUG_NORM_EVALUATED, (hi - lo) * J->n);
    tg_norm_count(TGRAD_DEBUG_NORM_SLOW, slow);
    free(W.d), free(W.bits);
}

/* The job of step st over its inputs' storage data[i] (compacted into owned[i] where a view is not
 * compact) and the output's `out`; false when a compact copy cannot be allocated. */
static bool job_init(nb_job *J, const tg_step *st, void *const data[3], void *out, void *owned[3]) {
    const tg_node_params *P = &st->base->params;
    *J = (nb_job){ .st = st, .n = 1, .layer = P->norm_op == TG_NORM_LAYER_BACKWARD, .eps = P->eps,
                   .out_dtype = st->base->dtype, .out = out, .loops = loops_for_selection() };
    const tg_view *xv = &st->inputs[0].view;
    for (int32_t d = 0; d < P->norm_axes; d++) J->n *= xv->shape[xv->ndim - 1 - d];
    J->rows = J->n ? st->buf->numel / J->n : 0;
    bool oom = false;
    for (int32_t i = 0; i < 3; i++) owned[i] = NULL;
    for (int32_t i = 0; i < st->ninputs && i < 3; i++) {
        J->dt[i] = st->inputs[i].buf->dtype;
        J->in[i] = tg_kind_input_compact(&st->inputs[i], data[i], tg_dtype_size(J->dt[i]), &owned[i]);
        oom = oom || !J->in[i];
    }
    atomic_init(&J->oom, oom);
    return !oom;
}

tgrad_status tg_norm_backward_execute(const tg_step *st) {
    const tg_node_params *P = &st->base->params;
    nb_job J;
    void *owned[3], *data[3] = { NULL, NULL, NULL };
    for (int32_t i = 0; i < st->ninputs && i < 3; i++) data[i] = st->inputs[i].buf->data;
    if (st->buf->numel == 0) return TGRAD_OK;
    bool oom = !job_init(&J, st, data, st->buf->data, owned);
    if (J.n == 0) {
        for (int32_t i = 0; i < 3; i++) free(owned[i]);
        return TGRAD_OK;
    }
    J.rows_per_task = (1 << 14) / J.n > 0 ? (1 << 14) / J.n : 1;
    int64_t tasks = (J.rows + J.rows_per_task - 1) / J.rows_per_task;
    if (!oom && tasks == 1) task_rows(0, 0, &J);
    else if (!oom) tg_pool_run(tasks, task_rows, &J);
    for (int32_t i = 0; i < 3; i++) free(owned[i]);
    if (atomic_load(&J.oom))
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate a row's workspace (%lld elements)",
                       tg_norm_op_name(P->norm_op), (long long)J.n);
    return TGRAD_OK;
}

/* ---- the GPU route's slow path ---- */
/* After a GPU launch of a backward step (gen/render_norm_backward.c): the flagged rows (an element
 * the kernel's bound leaves open, a sum that is not finite, a bound that does not hold) are
 * recomputed here by the CPU's own row code (run_row: the same function, so the same bytes), from
 * the inputs' storage read back, into the output's read back and written again. */
tgrad_status tg_norm_backward_rows_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags,
                                           int64_t flagged) {
    const char *fn = tg_norm_op_name(st->base->params.norm_op);
    void *host[4];
    size_t bytes[4];
    tgrad_status s = tg_device_stage_step(st, host, bytes, "norm backward: cannot stage the flagged rows on the host");
    if (s) return s;
    nb_job J;
    nb_ws W = { 0 };
    void *owned[3];
    if (!job_init(&J, st, host, host[3], owned) || !ws_new(&J, &W))
        s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate the host's rows (%lld elements)", fn, (long long)J.n);
    if (!s) {
        int64_t slow = 0;
        tg_fp_env env = tg_fp_env_ieee();
        for (int64_t r = 0; r < nflags && r < J.rows; r++)
            if (flags[r]) run_row(&J, &W, r, &slow);
        tg_fp_env_restore(env);
        tg_norm_count(TGRAD_DEBUG_NORM_SLOW, slow);
        tg_norm_count_device_rows(flagged);
        s = tg_device_upload(st->device, st->buf->dev_mem, host[3], bytes[3]);
    }
    free(W.d), free(W.bits);
    for (int32_t i = 0; i < 3; i++) free(owned[i]);
    tg_device_staged_free(host);
    return s;
}
