/* The reduce kind: tgrad_reduce checks everything and records the node; tg_reduce_execute folds
 * the reduced axes of the input's view for each output element with the exact engine
 * (reduce_exact.h): sums are exact integers until the one rounding, so any split over threads
 * gives the same bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "../cpu/epilogue.h"
#include "../kinds.h"
#include "reduce_exact.h"

#define REDUCE_NAME_(code, NAME, name) [code] = #name,
static const char *const reduce_names[] = { TGRAD_REDUCE_LIST(REDUCE_NAME_) };
#undef REDUCE_NAME_

TGRAD_API const char *tgrad_reduce_name(int32_t op) {
    return op > 0 && op < TGRAD_REDUCE_END_ ? reduce_names[op] : "unknown_reduce";
}

static bool is_arg(int32_t op) { return op == TGRAD_REDUCE_ARGMAX || op == TGRAD_REDUCE_ARGMIN; }
static bool is_extremum(int32_t op) { return op >= TGRAD_REDUCE_MAX; }
static bool is_sum(int32_t op) { return op == TGRAD_REDUCE_SUM || op == TGRAD_REDUCE_MEAN; }
static bool wants_max(int32_t op) { return op == TGRAD_REDUCE_MAX || op == TGRAD_REDUCE_ARGMAX; }

/* ---- the node ---- */
/* axes (naxes, or every axis when naxes < 0) normalized into P (ascending) and the mask. */
static tgrad_status normalize_axes(const tg_view *v, const int32_t *axes, int32_t naxes, const char *fn,
                                   tg_node_params *P, bool *mask) {
    if (naxes < 0) {
        for (int32_t d = 0; d < v->ndim; d++) mask[d] = true;
    } else {
        if (naxes > 0 && !axes) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: axes is NULL", fn);
        if (naxes > v->ndim)
            return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: %d axes for a tensor of %d dimensions", fn, (int)naxes, (int)v->ndim);
        for (int32_t i = 0; i < naxes; i++) {
            int32_t a = axes[i] < 0 ? axes[i] + v->ndim : axes[i];
            if (a < 0 || a >= v->ndim)
                return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "%s: axis %d is out of range for a tensor of %d dimensions",
                               fn, (int)axes[i], (int)v->ndim);
            if (mask[a]) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: axis %d is given twice", fn, (int)axes[i]);
            mask[a] = true;
        }
    }
    P->naxes = 0;
    for (int32_t d = 0; d < v->ndim; d++)
        if (mask[d]) P->axes[P->naxes++] = d;
    return TGRAD_OK;
}

static tgrad_status check_dtypes(int32_t op, int32_t in, int32_t *out_dtype, const char *fn) {
    if (in != TGRAD_DTYPE_BF16 && in != TGRAD_DTYPE_F32)
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: the input is %s; reductions take bfloat16 or float32", fn,
                       tg_dtype_name(in));
    if (*out_dtype == 0) *out_dtype = is_arg(op) ? TGRAD_DTYPE_I32 : in;
    bool ok = is_arg(op) ? *out_dtype == TGRAD_DTYPE_I32
                         : (*out_dtype == TGRAD_DTYPE_F32 || (*out_dtype == TGRAD_DTYPE_BF16 &&
                                                              (in == TGRAD_DTYPE_BF16 || !is_extremum(op))));
    if (!ok)
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: cannot give %s (code %d) from %s input", fn,
                       tg_dtype_name(*out_dtype), (int)*out_dtype, tg_dtype_name(in));
    return TGRAD_OK;
}

/* The output view and the number of elements folded into each output. */
static tgrad_status out_view(const tg_view *v, const bool *mask, bool keepdims, tg_view *ov, int64_t *count) {
    int64_t shape[TGRAD_MAX_DIMS];
    int32_t nd = 0;
    *count = 1;
    for (int32_t d = 0; d < v->ndim; d++) {
        if (mask[d]) *count *= v->shape[d]; /* a factor of the input's element count (or 0) */
        if (!mask[d]) shape[nd++] = v->shape[d];
        else if (keepdims) shape[nd++] = 1;
    }
    return tg_view_contiguous(nd, shape, ov);
}

TGRAD_API tgrad_status tgrad_reduce(int32_t op, tgrad_tensor_t x, const int32_t *axes, int32_t naxes, int32_t keepdims,
                                    int32_t out_dtype, tgrad_tensor_t *out) {
    const char *fn = tgrad_reduce_name(op);
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "reduce: out is NULL");
    if (op <= 0 || op >= TGRAD_REDUCE_END_)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "reduce: %d is not a reduction of the registry", (int)op);
    if (keepdims != 0 && keepdims != 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: keepdims is %d, not 0 or 1", fn, (int)keepdims);
    if (is_arg(op) && naxes > 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: takes one axis or every axis, not %d", fn, (int)naxes);
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(x, &t);
    if (s) return s;
    tg_node_params P = { .reduce_op = op };
    bool mask[TGRAD_MAX_DIMS] = { false };
    tg_view ov;
    int64_t count = 0, numel = 0;
    s = tg_kind_check_device(TG_OP_REDUCE, t.buf->device, fn);
    if (!s) s = check_dtypes(op, t.buf->dtype, &out_dtype, fn);
    if (!s) s = normalize_axes(&t.view, axes, naxes, fn, &P, mask);
    if (!s) s = out_view(&t.view, mask, keepdims == 1, &ov, &count);
    if (!s) tg_view_numel(&ov, &numel);
    if (!s && is_extremum(op) && count == 0 && numel > 0)
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: the reduced axes hold no element (%s of an empty set)", fn, fn);
    if (!s && is_arg(op) && count > INT32_MAX)
        s = tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "%s: %lld reduced elements do not fit an int32 index", fn, (long long)count);
    return tg_kind_make_unary(s, TG_OP_REDUCE, &t, &ov, out_dtype, &P, fn, out);
}

/* ---- the executor ---- */
/* The input's view split into the kept axes (outer, in order: the output is compact over them)
 * and the reduced ones (inner, in order, neighbours merged where they step as one, so the last
 * inner axis is the longest run a single engine call can take). Linear positions over the inner
 * axes are row-major: argmax's index. */
typedef struct reduce_job {
    const char *base;
    int32_t rdt, esize, op, out_dtype;
    int32_t no, ni;
    int64_t oshape[TGRAD_MAX_DIMS], ostride[TGRAD_MAX_DIMS];
    int64_t ishape[TGRAD_MAX_DIMS], istride[TGRAD_MAX_DIMS];
    int64_t count, offset, nout;
    char *out;
    const tg_chain *pro, *epi; /* fused chains (NULL: none): the prologue makes the input's values */
    /* split mode: one output, its elements over tasks */
    int64_t chunk;
    tg_exact_acc *accs;
    uint32_t *bits;
    int64_t *idx;
    bool *found;
} reduce_job;

static void split_axes(const tg_view *v, const tg_node_params *P, reduce_job *J) {
    bool mask[TGRAD_MAX_DIMS] = { false };
    for (int32_t i = 0; i < P->naxes; i++) mask[P->axes[i]] = true;
    J->no = J->ni = 0;
    J->count = 1;
    for (int32_t d = 0; d < v->ndim; d++) {
        if (!mask[d]) {
            J->oshape[J->no] = v->shape[d], J->ostride[J->no++] = v->strides[d];
            continue;
        }
        J->count *= v->shape[d];
        if (v->shape[d] == 1) continue;
        if (J->ni && J->istride[J->ni - 1] == v->strides[d] * v->shape[d]) { /* steps as one with the previous */
            J->ishape[J->ni - 1] *= v->shape[d], J->istride[J->ni - 1] = v->strides[d];
            continue;
        }
        J->ishape[J->ni] = v->shape[d], J->istride[J->ni++] = v->strides[d];
    }
    if (J->ni == 0) J->ishape[0] = 1, J->istride[0] = 0, J->ni = 1; /* one element (or none) */
    J->offset = v->offset;
}

static int64_t outer_offset(const reduce_job *J, int64_t o) {
    int64_t off = J->offset;
    for (int32_t d = J->no - 1; d >= 0; d--) {
        off += (o % J->oshape[d]) * J->ostride[d];
        o /= J->oshape[d];
    }
    return off;
}

/* Elements [lo, hi) of the inner positions of the output at element offset `off`, as pieces of
 * runs: fn(piece start offset, length, stride, linear position of its first element). */
typedef void (*piece_fn)(const reduce_job *J, int64_t off, int64_t n, int64_t stride, int64_t pos, void *state);
static void for_pieces(const reduce_job *J, int64_t off, int64_t lo, int64_t hi, piece_fn fn, void *state) {
    int64_t L = J->ishape[J->ni - 1], s = J->istride[J->ni - 1];
    while (lo < hi) {
        int64_t r = lo / L, j = lo % L, n = L - j < hi - lo ? L - j : hi - lo, roff = off, q = r;
        for (int32_t d = J->ni - 2; d >= 0; d--) {
            roff += (q % J->ishape[d]) * J->istride[d];
            q /= J->ishape[d];
        }
        fn(J, roff + j * s, n, s, lo, state);
        lo += n;
    }
}

typedef struct { uint32_t bits; int64_t index; bool found; } extremum;

static float as_float(uint32_t bits, int32_t rdt) {
    union { uint32_t u; float f; } x = { rdt == TG_RDT_BF16 ? bits << 16 : bits };
    return x.f;
}

/* Keep the first NaN, else the larger (max) or smaller (min); equal values keep the earlier. */
static void extremum_take(extremum *e, uint32_t bits, int64_t index, bool want_max, int32_t rdt) {
    if (e->found) {
        float cur = as_float(e->bits, rdt), nv = as_float(bits, rdt);
        if (cur != cur) return;
        if (!(nv != nv || (want_max ? nv > cur : nv < cur))) return;
    }
    *e = (extremum){ bits, index, true };
}

/* A piece's values through the prologue: the chain's bf16 results at its positions (the input is
 * the chain's compact output, so an element offset is a position), in blocks of PRO_BLOCK. */
enum { PRO_BLOCK = 2048 };
typedef void (*block_fn)(const reduce_job *J, const void *data, int64_t n, int64_t stride, int64_t pos, void *state);
static void through_prologue(const reduce_job *J, int64_t off, int64_t n, int64_t stride, int64_t pos, void *state,
                             block_fn fn) {
    uint16_t vals[PRO_BLOCK];
    for (int64_t done = 0; done < n;) {
        int64_t m = n - done < PRO_BLOCK ? n - done : PRO_BLOCK;
        if (stride == 1) tg_chain_eval(J->pro, vals, off + done, m);
        else for (int64_t k = 0; k < m; k++) tg_chain_eval(J->pro, &vals[k], off + (done + k) * stride, 1);
        fn(J, vals, m, 1, pos + done, state);
        done += m;
    }
}

static void block_sum(const reduce_job *J, const void *data, int64_t n, int64_t stride, int64_t pos, void *state) {
    (void)pos;
    tg_exact_acc_add(state, data, J->rdt, n, stride);
}

static void block_extremum(const reduce_job *J, const void *data, int64_t n, int64_t stride, int64_t pos, void *state) {
    uint32_t bits;
    int64_t index;
    if (tg_extrema(data, J->rdt, n, stride, wants_max(J->op), &bits, &index) == 0)
        extremum_take(state, bits, pos + index, wants_max(J->op), J->rdt);
}

static void piece_sum(const reduce_job *J, int64_t off, int64_t n, int64_t stride, int64_t pos, void *state) {
    if (J->pro) through_prologue(J, off, n, stride, pos, state, block_sum);
    else block_sum(J, J->base + off * J->esize, n, stride, pos, state);
}

static void piece_extremum(const reduce_job *J, int64_t off, int64_t n, int64_t stride, int64_t pos, void *state) {
    if (J->pro) through_prologue(J, off, n, stride, pos, state, block_extremum);
    else block_extremum(J, J->base + off * J->esize, n, stride, pos, state);
}

static void store(const reduce_job *J, int64_t o, const tg_exact_acc *acc, const extremum *e) {
    int32_t rout = J->out_dtype; /* bf16 or f32 here: the engine's codes are tgrad.h's */
    uint32_t bits;
    if (is_arg(J->op)) {
        ((int32_t *)J->out)[o] = (int32_t)e->index;
        return;
    }
    if (acc) {
        bits = J->op == TGRAD_REDUCE_MEAN ? tg_exact_acc_round_div(acc, J->count, rout) : tg_exact_acc_round(acc, rout);
    } else {
        float f = as_float(e->bits, J->rdt);
        if (f != f) bits = rout == TG_RDT_BF16 ? 0x7fc0u : 0x7fc00000u; /* NaN canonical */
        else if (J->rdt == TG_RDT_BF16 && rout == TG_RDT_F32) bits = e->bits << 16; /* exact widening */
        else bits = e->bits;
    }
    if (rout == TG_RDT_BF16) ((uint16_t *)J->out)[o] = (uint16_t)bits;
    else ((uint32_t *)J->out)[o] = bits;
}

static void fold_one(const reduce_job *J, int64_t o) {
    int64_t off = outer_offset(J, o);
    if (is_sum(J->op)) {
        tg_exact_acc acc;
        tg_exact_acc_init(&acc);
        if (J->count) for_pieces(J, off, 0, J->count, piece_sum, &acc);
        store(J, o, &acc, NULL);
    } else {
        extremum e = { 0 };
        for_pieces(J, off, 0, J->count, piece_extremum, &e);
        store(J, o, NULL, &e);
    }
}

/* Outputs in blocks of 16 per task. */
enum { OUT_BLOCK = 16, SPLIT_MIN = 1 << 16 };
static void task_outputs(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    const reduce_job *J = arg;
    int64_t hi = (task + 1) * OUT_BLOCK < J->nout ? (task + 1) * OUT_BLOCK : J->nout;
    for (int64_t o = task * OUT_BLOCK; o < hi; o++) fold_one(J, o);
    if (J->epi) tg_chain_apply(J->epi, (uint16_t *)J->out, task * OUT_BLOCK, hi - task * OUT_BLOCK);
}

/* One output's elements split over tasks: each task's partial result, combined in task order. */
static void task_split(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    reduce_job *J = arg;
    int64_t lo = task * J->chunk, hi = lo + J->chunk < J->count ? lo + J->chunk : J->count, off = J->offset;
    if (is_sum(J->op)) {
        tg_exact_acc_init(&J->accs[task]);
        for_pieces(J, off, lo, hi, piece_sum, &J->accs[task]);
    } else {
        extremum e = { 0 };
        for_pieces(J, off, lo, hi, piece_extremum, &e);
        J->bits[task] = e.bits, J->idx[task] = e.index, J->found[task] = e.found;
    }
}

static tgrad_status run_split(reduce_job *J, int32_t tasks) {
    J->chunk = (J->count + tasks - 1) / tasks;
    bool sum = is_sum(J->op);
    J->accs = sum ? tg_malloc(sizeof *J->accs * (size_t)tasks) : NULL;
    J->bits = sum ? NULL : tg_malloc(sizeof *J->bits * (size_t)tasks);
    J->idx = sum ? NULL : tg_malloc(sizeof *J->idx * (size_t)tasks);
    J->found = sum ? NULL : tg_malloc(sizeof *J->found * (size_t)tasks);
    tgrad_status s = TGRAD_OK;
    if (sum ? !J->accs : (!J->bits || !J->idx || !J->found)) {
        s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate %d partial results", tgrad_reduce_name(J->op), (int)tasks);
    } else {
        tg_pool_run(tasks, task_split, J);
        if (sum) {
            for (int32_t i = 1; i < tasks; i++) tg_exact_acc_merge(&J->accs[0], &J->accs[i]);
            store(J, 0, &J->accs[0], NULL);
        } else {
            extremum e = { 0 };
            for (int32_t i = 0; i < tasks; i++)
                if (J->found[i]) extremum_take(&e, J->bits[i], J->idx[i], wants_max(J->op), J->rdt);
            store(J, 0, NULL, &e);
        }
        if (J->epi) tg_chain_apply(J->epi, (uint16_t *)J->out, 0, 1);
    }
    free(J->accs), free(J->bits), free(J->idx), free(J->found);
    return s;
}

/* Sums over one strided axis whose outputs lie side by side in the input (a bias's gradient: a
 * [rows, cols] tensor summed over its rows): tg_exact_cols reads whole rows, a panel of columns at
 * a time, instead of each column alone down the stride. The same exact sums, rounded once: the
 * same bytes. A task is one panel of TG_EXACT_COLS_PANEL outputs of one row of outputs. */
static bool by_columns(const reduce_job *J) {
    return is_sum(J->op) && !J->pro && J->ni == 1 && J->istride[0] > 1 && J->ishape[0] > 1 && J->no >= 1 &&
           J->ostride[J->no - 1] == 1 && J->oshape[J->no - 1] > 1;
}

/* A sum of a few values (the engine's sum of three or more cotangents, a stack of h rows) whose
 * every partial sum is exact in double (TwoSum's error term zero at each step, under IEEE
 * arithmetic) is the exact sum; rounded once (tg_f64_to_bf16, or to float32) it is the correctly
 * rounded sum tg_exact_cols gives, -0 only when every value is -0 (the sum starts at -0, as the
 * exact engine's sign rule). false: a value not finite or a partial sum inexact somewhere in the
 * panel (the exact engine takes it). */
enum { FEW_ROWS = 16 };
static bool columns_few(const reduce_job *J, const char *base, int64_t h, int64_t rs, int64_t w, uint32_t *bits) {
    for (int64_t c = 0; c < w; c++) {
        double sum = -0.0;
        for (int64_t r = 0; r < h; r++) {
            const char *at = base + (r * rs + c) * J->esize;
            double x = J->rdt == TG_RDT_BF16 ? (double)tg_bf16_to_f32(*(const uint16_t *)at) : (double)*(const float *)at;
            double t = sum + x, bv = t - sum;
            if (!isfinite(x) || (sum - (t - bv)) + (x - bv) != 0) return false;
            sum = t;
        }
        if (J->out_dtype == TG_RDT_BF16) bits[c] = tg_f64_to_bf16(sum);
        else {
            float f = (float)sum;
            memcpy(&bits[c], &f, sizeof f);
        }
    }
    return true;
}

static void task_columns(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    const reduce_job *J = arg;
    int64_t L = J->oshape[J->no - 1], panels = (L + TG_EXACT_COLS_PANEL - 1) / TG_EXACT_COLS_PANEL;
    int64_t c0 = task % panels * TG_EXACT_COLS_PANEL, o = task / panels * L + c0;
    int64_t w = L - c0 < TG_EXACT_COLS_PANEL ? L - c0 : TG_EXACT_COLS_PANEL;
    uint32_t bits[TG_EXACT_COLS_PANEL];
    const char *base = J->base + outer_offset(J, o) * J->esize;
    bool few = false;
    if (J->op == TGRAD_REDUCE_SUM && J->ishape[0] <= FEW_ROWS) {
        tg_fp_env env = tg_fp_env_ieee(); /* no flush of a subnormal sum or result */
        few = columns_few(J, base, J->ishape[0], J->istride[0], w, bits);
        tg_fp_env_restore(env);
    }
    if (!few)
        tg_exact_cols(base, J->rdt, J->ishape[0], J->istride[0], w, 1, J->op == TGRAD_REDUCE_MEAN, J->out_dtype, bits);
    for (int64_t c = 0; c < w; c++) {
        if (J->out_dtype == TG_RDT_BF16) ((uint16_t *)J->out)[o + c] = (uint16_t)bits[c];
        else ((uint32_t *)J->out)[o + c] = bits[c];
    }
    if (J->epi) tg_chain_apply(J->epi, (uint16_t *)J->out, o, w);
}

tgrad_status tg_reduce_execute(const tg_step *st) {
    const tg_node_input *in = &st->inputs[0];
    /* With a prologue the input buffer is never stored: its values come from the chain (bf16). */
    int32_t in_dtype = st->pro_base ? TGRAD_DTYPE_BF16 : in->buf->dtype;
    reduce_job J = { .base = st->pro_base ? NULL : (const char *)in->buf->data, .op = st->base->params.reduce_op,
                     .out_dtype = st->base->dtype, .out = (char *)st->buf->data, .nout = st->buf->numel };
    J.rdt = in_dtype; /* the engine's dtype codes are tgrad.h's (reduce_exact.h asserts it) */
    J.esize = tg_dtype_size(in_dtype);
    tg_chain pro, epi;
    if (st->pro_base) tg_chain_prologue(st, &pro), J.pro = &pro;
    if (st->nfused) tg_chain_from_step(st, &epi), J.epi = &epi;
    split_axes(&in->view, &st->base->params, &J);
    if (J.nout == 0) return TGRAD_OK;
    int32_t threads = tg_pool_threads();
    if (J.nout == 1 && threads > 1 && J.count >= SPLIT_MIN) return run_split(&J, threads * 4);
    if (by_columns(&J)) {
        int64_t L = J.oshape[J.no - 1];
        int64_t panels = (L + TG_EXACT_COLS_PANEL - 1) / TG_EXACT_COLS_PANEL, ctasks = J.nout / L * panels;
        if (ctasks == 1 || (double)J.nout * (double)J.count < (double)SPLIT_MIN)
            for (int64_t t = 0; t < ctasks; t++) task_columns(t, 0, &J);
        else
            tg_pool_run(ctasks, task_columns, &J);
        return TGRAD_OK;
    }
    int64_t tasks = (J.nout + OUT_BLOCK - 1) / OUT_BLOCK;
    if (tasks == 1 || (double)J.nout * (double)J.count < (double)SPLIT_MIN)
        for (int64_t t = 0; t < tasks; t++) task_outputs(t, 0, &J);
    else
        tg_pool_run(tasks, task_outputs, &J);
    return TGRAD_OK;
}
