/* The slice_scatter kind (hmodel, issue 35): out = dst with out[..., start:start+n, ...] = src
 * along one axis (n: src's extent there), lazily and immutably as every node: a reader of dst
 * (made before or after) sees dst's own values. The write runs in place when it can: if, when
 * the step runs, dst's buffer is realized, on the CPU, owned by libtgrad and held by this node
 * alone (no handle, no other pending reader: refs == 1), and this node reads it whole (offset 0,
 * compact row-major, every element), then nobody can ever read dst again, so the result adopts
 * dst's storage (donation) and only src's block is written: O(src), not O(dst). Otherwise dst is
 * copied first (a new buffer, as concat would). Either way the bytes are the same: dst's, with
 * src's block copied over them bit for bit (any element size). A KV cache preallocated once and
 * written one position per decode step (tgrad.models) is the use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kinds.h"
#include "block_copy.h"

static tgrad_status check_operands(const tg_tensor *d, const tg_tensor *s, int32_t axis, int64_t start, int32_t *a) {
    const tg_view *dv = &d->view, *sv = &s->view;
    int32_t nd = dv->ndim;
    if (nd == 0) return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "slice_scatter: a 0-d tensor has no axis to write along");
    *a = axis < 0 ? axis + nd : axis;
    if (*a < 0 || *a >= nd)
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "slice_scatter: axis %d is out of range for tensors of %d dimensions",
                       (int)axis, (int)nd);
    if (sv->ndim != nd)
        return tg_fail(TGRAD_ERR_RANK_MISMATCH, "slice_scatter: src has %d dimensions, dst %d", (int)sv->ndim, (int)nd);
    if (s->buf->dtype != d->buf->dtype)
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "slice_scatter: src is %s, dst is %s (cast src first)",
                       tg_dtype_name(s->buf->dtype), tg_dtype_name(d->buf->dtype));
    if (s->buf->device != d->buf->device)
        return tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "slice_scatter: src lives on %s, dst on %s",
                       tg_device_name(s->buf->device), tg_device_name(d->buf->device));
    char ds[160], ss[160];
    for (int32_t k = 0; k < nd; k++) {
        if (k == *a || sv->shape[k] == dv->shape[k]) continue;
        tg_format_shape(ds, sizeof ds, dv), tg_format_shape(ss, sizeof ss, sv);
        return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "slice_scatter: src has shape %s, dst %s: they may differ only along axis %d",
                       ss, ds, (int)*a);
    }
    if (start < 0 || start > dv->shape[*a] || sv->shape[*a] > dv->shape[*a] - start)
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE,
                       "slice_scatter: src's %lld positions from %lld do not fit in dst's %lld along axis %d",
                       (long long)sv->shape[*a], (long long)start, (long long)dv->shape[*a], (int)*a);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_slice_scatter(tgrad_tensor_t dst, tgrad_tensor_t src, int32_t axis, int64_t start,
                                           tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "slice_scatter: out is NULL");
    tg_tensor ts[2] = { 0 };
    int32_t got = 0;
    tgrad_status s = tg_handle_get_tensor(dst, &ts[0]);
    if (!s) got = 1, s = tg_handle_get_tensor(src, &ts[1]);
    if (!s) got = 2;
    tg_node_params P = { .naxes = 1, .scatter_start = start };
    tg_view ov;
    if (!s) s = check_operands(&ts[0], &ts[1], axis, start, &P.axes[0]);
    if (!s) s = tg_kind_check_device(TG_OP_SLICE_SCATTER, ts[0].buf->device, "slice_scatter");
    if (!s) s = tg_view_contiguous(ts[0].view.ndim, ts[0].view.shape, &ov);
    return tg_kind_make(s, TG_OP_SLICE_SCATTER, ts, got, &ov, got ? ts[0].buf->dtype : 0, &P, "slice_scatter", out);
}

/* The value of a one-element int32 view over a realized buffer, on the host or read back from its
 * device. */
static tgrad_status read_start(const tg_buffer *b, const tg_view *v, int64_t *start) {
    if (b->device == TGRAD_DEVICE_CPU) {
        *start = ((const int32_t *)(const void *)b->data)[v->offset];
        return TGRAD_OK;
    }
    size_t bytes = (size_t)(v->offset + 1) * sizeof(int32_t);
    int32_t *host = tg_malloc(bytes);
    if (!host) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "slice_scatter: cannot allocate %zu bytes to read the start", bytes);
    tgrad_status s = tg_device_download(b->device, b->dev_mem, host, bytes);
    if (!s) *start = host[v->offset];
    free(host);
    return s;
}

/* The start read from a one-element int32 tensor (tgrad_slice_scatter_at): the node's third
 * input, on dst's device; params.scatter_start is -1 and the step reads the start when it runs. */
static tgrad_status check_start_tensor(const tg_tensor *d, const tg_tensor *s, const tg_tensor *at, int32_t axis,
                                       int32_t *a) {
    int64_t n = 0;
    tg_view_numel(&at->view, &n);
    if (at->buf->dtype != TGRAD_DTYPE_I32 || n != 1)
        return tg_fail(at->buf->dtype != TGRAD_DTYPE_I32 ? TGRAD_ERR_DTYPE_UNSUPPORTED : TGRAD_ERR_SHAPE_MISMATCH,
                       "slice_scatter: start must be an int32 tensor of one element, got %s with %lld",
                       tg_dtype_name(at->buf->dtype), (long long)n);
    if (at->buf->device != d->buf->device)
        return tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "slice_scatter: the start tensor lives on %s, dst on %s",
                       tg_device_name(at->buf->device), tg_device_name(d->buf->device));
    if (tg_grad_enabled() && (d->buf->requires_grad || s->buf->requires_grad))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "slice_scatter: a start tensor has no gradient rule yet: give an "
                       "integer start, or make it under no_grad");
    int64_t start = 0; /* a start computed already is checked now, another when the step runs (src fits at 0) */
    tgrad_status st = TGRAD_OK;
    if (atomic_load(&at->buf->realized) && (at->buf->data || at->buf->dev_mem)) st = read_start(at->buf, &at->view, &start);
    return st ? st : check_operands(d, s, axis, start, a);
}

TGRAD_API tgrad_status tgrad_slice_scatter_at(tgrad_tensor_t dst, tgrad_tensor_t src, int32_t axis,
                                              tgrad_tensor_t start, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "slice_scatter: out is NULL");
    tgrad_tensor_t h[3] = { dst, src, start };
    tg_tensor ts[3] = { 0 };
    int32_t got = 0;
    tgrad_status s = tg_kind_get_inputs(h, 3, 3, ts, &got);
    tg_node_params P = { .naxes = 1, .scatter_start = -1 };
    tg_view ov;
    if (!s) s = check_start_tensor(&ts[0], &ts[1], &ts[2], axis, &P.axes[0]);
    if (!s) s = tg_kind_check_device(TG_OP_SLICE_SCATTER, ts[0].buf->device, "slice_scatter");
    if (!s) s = tg_view_contiguous(ts[0].view.ndim, ts[0].view.shape, &ov);
    return tg_kind_make(s, TG_OP_SLICE_SCATTER, ts, got, &ov, got ? ts[0].buf->dtype : 0, &P, "slice_scatter", out);
}

/* ---- the executor ---- */
typedef struct scatter_job {
    const tg_step *st;
    int32_t axis;
    int64_t run, row, start; /* src's run per outer index; one output row; where src begins (elements) */
} scatter_job;

/* Unit o: src's part of output row o (the outer axes' index o), a compact run of the output. */
static void scatter_block(int64_t o, const void *ctx, tg_block *blk) {
    const scatter_job *J = ctx;
    const tg_view *v = &J->st->inputs[1].view;
    tg_view sub = { .ndim = v->ndim - J->axis, .offset = v->offset };
    int64_t rest = o;
    for (int32_t d = J->axis - 1; d >= 0; d--) {
        sub.offset += (rest % v->shape[d]) * v->strides[d];
        rest /= v->shape[d];
    }
    memcpy(sub.shape, v->shape + J->axis, sizeof sub.shape[0] * (size_t)sub.ndim);
    memcpy(sub.strides, v->strides + J->axis, sizeof sub.strides[0] * (size_t)sub.ndim);
    blk->src = J->st->inputs[1].buf->data;
    blk->view = sub;
    blk->dst = (char *)J->st->buf->data + (o * J->row + J->start) * tg_dtype_size(J->st->buf->dtype);
}

/* dst's storage may become the result's: this node holds dst's only reference and reads all of it. */
static bool donatable(const tg_node_input *d, const tg_buffer *b) {
    const tg_buffer *p = d->buf;
    return p->device == TGRAD_DEVICE_CPU && !p->external && p->data && !p->node &&
           atomic_load(&p->realized) && atomic_load(&p->refs) == 1 && p->numel == b->numel && p->dtype == b->dtype &&
           d->view.offset == 0 && tg_view_is_compact_rowmajor(&d->view);
}

/* Where src's block begins: the node's number, or its start tensor's value (computed by now: it is
 * an input of this step), checked before anything is written. */
static tgrad_status block_start(const tg_step *st, int64_t *start) {
    *start = st->base->params.scatter_start;
    if (st->ninputs < 3) return TGRAD_OK;
    const tg_node_input *at = &st->inputs[2];
    tgrad_status s = read_start(at->buf, &at->view, start);
    if (s) return s;
    int32_t axis = st->base->params.axes[0];
    int64_t n = st->inputs[1].view.shape[axis], extent = st->out->shape[axis];
    if (*start < 0 || *start > extent || n > extent - *start)
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE,
                       "slice_scatter: src's %lld positions from %lld (the start tensor) do not fit in dst's %lld along "
                       "axis %d", (long long)n, (long long)*start, (long long)extent, (int)axis);
    return TGRAD_OK;
}

/* A GPU slice_scatter at a start tensor, before its launch: the start read back and checked. */
tgrad_status tg_slice_scatter_device_check(const tg_step *st) {
    int64_t start;
    return block_start(st, &start);
}

tgrad_status tg_slice_scatter_execute(const tg_step *st) {
    tg_buffer *b = st->buf;
    if (!b->numel) return TGRAD_OK;
    const tg_node_input *d = &st->inputs[0];
    int32_t esize = tg_dtype_size(b->dtype);
    int64_t start;
    tgrad_status bad = block_start(st, &start);
    if (bad) return bad;
    if (!b->data) { /* the kind allocates its own storage (kinds.h, cpu_allocates) */
        if (donatable(d, b)) {
            tg_buffer *p = d->buf;
            b->data = p->data, b->capacity = p->capacity; /* the bytes move: tgrad_live_bytes is unchanged */
            p->data = NULL, p->capacity = 0;
        } else {
            tgrad_status s = tg_buffer_storage(b);
            if (s) return s;
            tg_cpu_copy_view_sized(d->buf->data, &d->view, b->data, esize);
        }
    }
    const tg_view *ov = st->out, *sv = &st->inputs[1].view;
    int32_t axis = st->base->params.axes[0];
    scatter_job J = { .st = st, .axis = axis, .run = 1, .row = 1 };
    for (int32_t k = axis + 1; k < ov->ndim; k++) J.run *= ov->shape[k];
    J.row = ov->shape[axis] * J.run;
    J.start = start * J.run;
    J.run *= sv->shape[axis];
    int64_t outer = 1;
    for (int32_t k = 0; k < axis; k++) outer *= ov->shape[k];
    if (J.run) tg_copy_blocks(outer, esize, outer * J.run * esize, scatter_block, &J);
    return TGRAD_OK;
}
