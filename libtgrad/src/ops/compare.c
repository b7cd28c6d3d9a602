/* Comparisons and selection: tgrad_compare records a COMPARE node (a bool result) and tgrad_where
 * a WHERE node; both check everything before they allocate and read their operands through views
 * already broadcast to the result's shape (numpy's rule over two or three operands). Their CPU
 * executors walk the compact output in runs along the last axis, threaded over the pool for big
 * outputs (cpu/runs.h); each element is computed alone, so the split cannot change a byte.
 * Comparisons are exact (every bf16, f32, i32 and bool value is exact in double, and double's
 * comparison is IEEE 754's); where copies the chosen operand's bits. docs/numerics.md,
 * "Comparisons and where". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu/runs.h"
#include "../kinds.h"

enum { PASS_ALONE = 1 << 14, TASK_MIN = 1 << 12, MAX_OPERANDS = 3 };

static const char *const compare_names[] = { "compare", "eq", "ne", "lt", "le", "gt", "ge" };

static bool any_dtype(int32_t d) {
    return d == TGRAD_DTYPE_BF16 || d == TGRAD_DTYPE_F32 || d == TGRAD_DTYPE_I32 || d == TGRAD_DTYPE_BOOL;
}

static void unref_all(tg_tensor *t, int32_t n) {
    for (int32_t i = 0; i < n; i++) tg_tensor_unref(&t[i]);
}

/* v read as a view of shape[ndim] (ndim >= v->ndim, broadcastable): leading axes and size-1 axes
 * read with stride 0 (as tgrad_binary's operands). */
static tg_view broadcast_view(const tg_view *v, int32_t ndim, const int64_t *shape) {
    tg_view w = { .ndim = ndim, .offset = v->offset };
    int32_t lead = ndim - v->ndim;
    for (int32_t i = 0; i < ndim; i++) {
        w.shape[i] = shape[i];
        w.strides[i] = i < lead || v->shape[i - lead] == 1 ? 0 : v->strides[i - lead];
    }
    return w;
}

/* numpy's rule over n operands: aligned at the last axis, each extent equal to the others or 1. */
static tgrad_status broadcast_shape(const tg_tensor *t, int32_t n, const char *fn, tg_view *ov) {
    int32_t nd = 0;
    for (int32_t k = 0; k < n; k++)
        if (t[k].view.ndim > nd) nd = t[k].view.ndim;
    int64_t shape[TGRAD_MAX_DIMS];
    for (int32_t i = 0; i < nd; i++) {
        shape[i] = 1;
        for (int32_t k = 0; k < n; k++) {
            int32_t j = i - (nd - t[k].view.ndim);
            int64_t e = j < 0 ? 1 : t[k].view.shape[j];
            if (e == 1 || e == shape[i]) continue;
            if (shape[i] != 1) {
                char text[MAX_OPERANDS][160];
                for (int32_t q = 0; q < MAX_OPERANDS; q++) text[q][0] = 0;
                for (int32_t q = 0; q < n; q++) tg_format_shape(text[q], sizeof text[q], &t[q].view);
                return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: shapes %s %s %s do not broadcast (axis %d: %lld vs %lld)",
                               fn, text[0], text[1], text[2], (int)(i - nd), (long long)shape[i], (long long)e);
            }
            shape[i] = e;
        }
    }
    return tg_view_contiguous(nd, shape, ov);
}

/* The node of kind `op` over t[0 .. n) (checked dtypes), its buffer and handle, after the checks
 * every such node shares: devices, broadcasting, size. Takes t's references in every case. */
static tgrad_status make(tg_op op, tg_tensor *t, int32_t n, int32_t dtype, const tg_node_params *params,
                         const char *fn, tgrad_tensor_t *out) {
    tg_view ov;
    tgrad_status s = TGRAD_OK;
    for (int32_t k = 0; k < n && !s; k++) {
        if (t[k].buf->device != t[0].buf->device)
            s = tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "%s: operands live on different devices (%s and %s)", fn,
                        tg_device_name(t[0].buf->device), tg_device_name(t[k].buf->device));
        else s = tg_kind_check_device(op, t[k].buf->device, fn);
    }
    if (!s) s = broadcast_shape(t, n, fn, &ov);
    for (int32_t k = 0; k < n && !s; k++) t[k].view = broadcast_view(&t[k].view, ov.ndim, ov.shape);
    return tg_kind_make(s, op, t, n, &ov, dtype, params, fn, out);
}

static tgrad_status get_all(const tgrad_tensor_t *h, int32_t n, tg_tensor *t) {
    for (int32_t k = 0; k < n; k++) {
        tgrad_status s = tg_handle_get_tensor(h[k], &t[k]);
        if (s) {
            unref_all(t, k);
            return s;
        }
    }
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_compare(int32_t cmp, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "compare: out is NULL");
    if (cmp < TGRAD_COMPARE_EQ || cmp > TGRAD_COMPARE_GE)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "compare: %d is not a comparison code (TGRAD_COMPARE_EQ %d .. GE %d)",
                       (int)cmp, TGRAD_COMPARE_EQ, TGRAD_COMPARE_GE);
    tg_tensor t[2];
    tgrad_status s = get_all((tgrad_tensor_t[]){ a, b }, 2, t);
    if (s) return s;
    const char *fn = compare_names[cmp];
    for (int32_t k = 0; k < 2 && !s; k++)
        if (!any_dtype(t[k].buf->dtype))
            s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: operand %d is %s", fn, (int)k, tg_dtype_name(t[k].buf->dtype));
    if (s) {
        unref_all(t, 2);
        return s;
    }
    tg_node_params p = { .compare_op = cmp };
    return make(TG_OP_COMPARE, t, 2, TGRAD_DTYPE_BOOL, &p, fn, out);
}

TGRAD_API tgrad_status tgrad_where(tgrad_tensor_t cond, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "where: out is NULL");
    tg_tensor t[3];
    tgrad_status s = get_all((tgrad_tensor_t[]){ cond, a, b }, 3, t);
    if (s) return s;
    int32_t dc = t[0].buf->dtype, da = t[1].buf->dtype, db = t[2].buf->dtype;
    if (dc != TGRAD_DTYPE_BOOL)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "where: the condition is %s; it must be bool (compare it, e.g. x != 0)",
                    tg_dtype_name(dc));
    else if (da != db || !any_dtype(da))
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "where: the values are %s and %s; they must have one dtype (cast first)",
                    tg_dtype_name(da), tg_dtype_name(db));
    if (s) {
        unref_all(t, 3);
        return s;
    }
    return make(TG_OP_WHERE, t, 3, da, NULL, "where", out);
}

/* ---- CPU executors ---- */
typedef struct pass_job {
    int32_t ndim, n, cmp, osize;
    const int64_t *shape;
    const char *data[MAX_OPERANDS];
    const tg_view *view[MAX_OPERANDS];
    int32_t dtype[MAX_OPERANDS], esize[MAX_OPERANDS];
    char *out;
} pass_job;

static inline double load(const char *p, int32_t dtype) {
    if (dtype == TGRAD_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, p, 2);
        return tg_bf16_to_f32(h);
    }
    if (dtype == TGRAD_DTYPE_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (dtype == TGRAD_DTYPE_I32) {
        int32_t i;
        memcpy(&i, p, 4);
        return i;
    }
    return *(const uint8_t *)p;
}

/* IEEE 754's comparisons, as C's on double: NaN unordered (only != holds), -0 == +0. */
static inline bool holds(int32_t cmp, double a, double b) {
    switch (cmp) {
    case TGRAD_COMPARE_EQ: return a == b;
    case TGRAD_COMPARE_NE: return a != b;
    case TGRAD_COMPARE_LT: return a < b;
    case TGRAD_COMPARE_LE: return a <= b;
    case TGRAD_COMPARE_GT: return a > b;
    default: return a >= b;
    }
}

static inline void copy_elem(char *dst, const char *src, int32_t size) {
    if (size == 2) memcpy(dst, src, 2);
    else if (size == 4) memcpy(dst, src, 4);
    else *dst = *src;
}

/* Output elements [lin, lin + n): one run along the last axis at a time. Where (n == 3): operand
 * 0 is the bool condition. */
static void run_range(const void *job, int64_t lin, int64_t n) {
    const pass_job *J = job;
    while (n > 0) {
        int64_t off[MAX_OPERANDS], step[MAX_OPERANDS], run = tg_run_at(J->ndim, J->shape, J->n, J->view, lin, n, off, step);
        const char *p[MAX_OPERANDS];
        for (int32_t k = 0; k < J->n; k++) {
            p[k] = J->data[k] + off[k] * J->esize[k];
            step[k] *= J->esize[k];
        }
        char *o = J->out + lin * J->osize;
        if (J->n == 2) {
            uint8_t *ob = (uint8_t *)o;
            for (int64_t i = 0; i < run; i++)
                ob[i] = holds(J->cmp, load(p[0] + i * step[0], J->dtype[0]), load(p[1] + i * step[1], J->dtype[1]));
        } else {
            for (int64_t i = 0; i < run; i++) {
                const char *src = p[0][i * step[0]] ? p[1] + i * step[1] : p[2] + i * step[2];
                copy_elem(o + i * J->osize, src, J->osize);
            }
        }
        lin += run, n -= run;
    }
}

static tgrad_status pass(const tg_step *st) {
    pass_job J = { .ndim = st->out->ndim, .n = st->ninputs, .cmp = st->base->params.compare_op,
                   .osize = tg_dtype_size(st->buf->dtype), .shape = st->out->shape, .out = (char *)st->buf->data };
    if (J.n > MAX_OPERANDS || st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "%s: a step with %d operands and %d fused ops", tg_kind_of(st->op)->name,
                       (int)J.n, (int)st->nfused);
    for (int32_t k = 0; k < J.n; k++) {
        J.data[k] = (const char *)st->inputs[k].buf->data;
        J.view[k] = &st->inputs[k].view;
        J.dtype[k] = st->inputs[k].buf->dtype;
        J.esize[k] = tg_dtype_size(J.dtype[k]);
    }
    tg_run_ranges(st->buf->numel, PASS_ALONE, TASK_MIN, 64, run_range, &J);
    return TGRAD_OK;
}

tgrad_status tg_compare_execute(const tg_step *st) { return pass(st); }
tgrad_status tg_where_execute(const tg_step *st) { return pass(st); }
