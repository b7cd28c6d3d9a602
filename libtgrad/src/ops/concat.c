/* The concat kind: tgrad_concat checks every operand (handles, ranks, dtypes, devices, shapes,
 * the result's size) before it allocates, then records one node with n inputs, each read
 * through its own view; tg_concat_execute copies them, bit for bit, into one compact output
 * (block_copy.h). Any element size: nothing is read as a number. On a GPU device the concat
 * kernel (gen/render_select.c) binds one buffer per operand: at most 15 operands there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kinds.h"
#include "block_copy.h"

/* Every operand against the first: rank, dtype, device and the extents off the axis. */
static tgrad_status check_operands(const tg_tensor *ts, int32_t n, int32_t axis, int32_t *a, tg_view *ov) {
    const tg_view *v0 = &ts[0].view;
    int32_t nd = v0->ndim;
    if (nd == 0) return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "concat: a 0-d tensor has no axis to concatenate along");
    *a = axis < 0 ? axis + nd : axis;
    if (*a < 0 || *a >= nd)
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "concat: axis %d is out of range for tensors of %d dimensions",
                       (int)axis, (int)nd);
    int64_t shape[TGRAD_MAX_DIMS];
    memcpy(shape, v0->shape, sizeof shape);
    shape[*a] = 0;
    for (int32_t i = 0; i < n; i++) {
        const tg_tensor *t = &ts[i];
        char s0[160], si[160];
        if (t->view.ndim != nd)
            return tg_fail(TGRAD_ERR_RANK_MISMATCH, "concat: tensor %d has %d dimensions, tensor 0 has %d", (int)i,
                           (int)t->view.ndim, (int)nd);
        if (t->buf->dtype != ts[0].buf->dtype)
            return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED,
                           "concat: tensor %d is %s, tensor 0 is %s (cast them to one dtype first)", (int)i, tg_dtype_name(t->buf->dtype), tg_dtype_name(ts[0].buf->dtype));
        if (t->buf->device != ts[0].buf->device)
            return tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "concat: tensor %d lives on %s, tensor 0 on %s", (int)i,
                           tg_device_name(t->buf->device), tg_device_name(ts[0].buf->device));
        for (int32_t d = 0; d < nd; d++) {
            if (d == *a || t->view.shape[d] == v0->shape[d]) continue;
            tg_format_shape(s0, sizeof s0, v0), tg_format_shape(si, sizeof si, &t->view);
            return tg_fail(TGRAD_ERR_SHAPE_MISMATCH,
                           "concat: tensor %d has shape %s, tensor 0 %s: they may differ only along axis %d", (int)i,
                           si, s0, (int)*a);
        }
        if (tg_add_ovf(shape[*a], t->view.shape[*a], &shape[*a]))
            return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "concat: the extents along axis %d overflow 64 bits", (int)*a);
    }
    return tg_view_contiguous(nd, shape, ov);
}

TGRAD_API tgrad_status tgrad_concat(int32_t n, const tgrad_tensor_t *tensors, int32_t axis, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "concat: out is NULL");
    if (n < 1) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "concat: n is %d; give at least one tensor", (int)n);
    if (!tensors) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "concat: tensors is NULL");
    tg_tensor *ts = tg_malloc(sizeof *ts * (size_t)n);
    if (!ts) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "concat: cannot allocate the list of %d operands", (int)n);
    tgrad_status s = TGRAD_OK;
    int32_t got = 0;
    while (got < n && !(s = tg_handle_get_tensor(tensors[got], &ts[got]))) got++;
    tg_node_params P = { .naxes = 1 };
    tg_view ov;
    if (!s) s = check_operands(ts, n, axis, &P.axes[0], &ov);
    if (!s) s = tg_kind_check_device(TG_OP_CONCAT, ts[0].buf->device, "concat");
    if (!s && ts[0].buf->device != TGRAD_DEVICE_CPU && n > TGRAD_LAUNCH_MAX_BUFFERS - 1) /* one kernel's buffers */
        s = tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "concat: %d operands on %s; a GPU concat takes at most %d (join them in groups)",
                    (int)n, tg_device_name(ts[0].buf->device), TGRAD_LAUNCH_MAX_BUFFERS - 1);
    /* got == n unless a handle failed: tg_kind_make takes (or releases) the references it has */
    s = tg_kind_make(s, TG_OP_CONCAT, ts, got, &ov, got ? ts[0].buf->dtype : 0, &P, "concat", out);
    free(ts);
    return s;
}

/* ---- the executor ---- */
typedef struct concat_job {
    const tg_step *st;
    int32_t n, axis;
    int64_t inner, row; /* elements after the axis; one output row (all of the axis) */
    const int64_t *start; /* where each input begins along the axis */
} concat_job;

/* Unit u = (outer index o, input i), outer-major: input i's part of output row o. */
static void concat_block(int64_t u, const void *ctx, tg_block *blk) {
    const concat_job *J = ctx;
    int64_t o = u / J->n;
    int32_t i = (int32_t)(u % J->n);
    const tg_node_input *in = &J->st->inputs[i];
    const tg_view *v = &in->view;
    tg_view sub = { .ndim = v->ndim - J->axis, .offset = v->offset };
    for (int32_t d = J->axis - 1; d >= 0; d--) { /* o's coordinates over the outer axes */
        sub.offset += (o % v->shape[d]) * v->strides[d];
        o /= v->shape[d];
    }
    memcpy(sub.shape, v->shape + J->axis, sizeof sub.shape[0] * (size_t)sub.ndim);
    memcpy(sub.strides, v->strides + J->axis, sizeof sub.strides[0] * (size_t)sub.ndim);
    int32_t esize = tg_dtype_size(J->st->buf->dtype);
    blk->src = in->buf->data;
    blk->view = sub;
    blk->dst = (char *)J->st->buf->data + ((u / J->n) * J->row + J->start[i] * J->inner) * esize;
}

tgrad_status tg_concat_execute(const tg_step *st) {
    if (!st->buf->numel) return TGRAD_OK;
    const tg_view *ov = st->out;
    int32_t n = st->ninputs, axis = st->base->params.axes[0];
    int64_t *start = tg_malloc(sizeof *start * (size_t)n);
    if (!start) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "concat: cannot allocate %d offsets", (int)n);
    concat_job J = { .st = st, .n = n, .axis = axis, .inner = 1, .start = start };
    for (int32_t d = axis + 1; d < ov->ndim; d++) J.inner *= ov->shape[d];
    J.row = ov->shape[axis] * J.inner;
    int64_t outer = 1;
    for (int32_t d = 0; d < axis; d++) outer *= ov->shape[d];
    for (int32_t i = 0; i < n; i++) start[i] = i ? start[i - 1] + st->inputs[i - 1].view.shape[axis] : 0;
    int32_t esize = tg_dtype_size(st->buf->dtype);
    tg_copy_blocks(outer * n, esize, st->buf->numel * esize, concat_block, &J);
    free(start);
    return TGRAD_OK;
}
