/* The gather kind (tgrad_take): numpy's take along one axis. x (any dtype) and an int32 index
 * tensor are both read through their views; the result is x.shape[:axis] + indices.shape +
 * x.shape[axis+1:], compact. Indices lie in -n .. n-1 for the axis' extent n (negative ones count
 * from the end). An index outside that is TGRAD_ERR_INDEX_OUT_OF_RANGE before any work: at the
 * call when the index tensor is computed already (host data), else when the gather runs, before
 * it writes anything (the result stays unwritten and pending; realize reports the error). On a
 * GPU device the indices are read back to the host and checked there, at the call when they are
 * computed, else before the kernel's launch (kinds.h, gpu_check). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kinds.h"
#include "block_copy.h"

/* Every index of view v over the int32 words `data`, checked against extent n and stored
 * normalized (0 .. n-1) into out[] in row-major order when out is not NULL. */
static tgrad_status check_indices(const int32_t *data, const tg_view *v, int64_t n, int64_t *out, const char *fn) {
    int64_t numel, idx[TGRAD_MAX_DIMS] = { 0 };
    tg_view_numel(v, &numel);
    for (int64_t i = 0; i < numel; i++) {
        int64_t off = v->offset;
        for (int32_t d = 0; d < v->ndim; d++) off += idx[d] * v->strides[d];
        int64_t k = data[off];
        if (k < -n || k >= n)
            return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE,
                           "%s: index %lld (element %lld of the indices) is out of range for an axis of extent %lld "
                           "(valid: %lld .. %lld)", fn, (long long)k, (long long)i, (long long)n, (long long)-n,
                           (long long)n - 1);
        if (out) out[i] = k < 0 ? k + n : k;
        for (int32_t d = v->ndim - 1; d >= 0 && ++idx[d] == v->shape[d]; d--) idx[d] = 0;
    }
    return TGRAD_OK;
}

/* The int32 words of realized buffer b on the host: its own data, or a copy read back from its
 * device (*copy, which the caller frees). */
static tgrad_status host_indices(const tg_buffer *b, const int32_t **data, int32_t **copy) {
    *copy = NULL, *data = (const int32_t *)b->data;
    if (b->device == TGRAD_DEVICE_CPU || !b->numel) return TGRAD_OK;
    size_t bytes = (size_t)b->numel * sizeof(int32_t);
    if (!(*copy = tg_malloc(bytes)))
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "take: cannot allocate %zu bytes to check the indices", bytes);
    *data = *copy;
    return tg_device_download(b->device, b->dev_mem, *copy, bytes);
}

/* check_indices over a realized buffer, on the host or read back from its device. */
static tgrad_status check_buffer_indices(const tg_buffer *b, const tg_view *v, int64_t n) {
    const int32_t *data;
    int32_t *copy;
    tgrad_status s = host_indices(b, &data, &copy);
    if (!s) s = check_indices(data, v, n, NULL, "take");
    free(copy);
    return s;
}

/* A GPU gather, before its launch: its indices (realized by now, on the device) in range. */
tgrad_status tg_gather_device_check(const tg_step *st) {
    return check_buffer_indices(st->inputs[1].buf, &st->inputs[1].view, st->inputs[0].view.shape[st->base->params.axes[0]]);
}

/* A GPU scatter_add's (take's gradient's) binding pos (render_scatter.c), made before its launch
 * from its indices, read back once: checked against the extent n of the result's axis (the
 * forward take's source), then grouped by the index they name (tg_scatter_add_lists): n + 1 list
 * starts, then the lists. Each output element sums only its own positions, O(n + Q) reads in all
 * instead of every thread reading all Q indices. The index view is compact (the node made it so,
 * and the route requires it). */
tgrad_status tg_scatter_add_positions(const tg_step *st, uint32_t **words, int64_t *count) {
    const tg_node_input *ix = &st->inputs[1];
    int64_t n = st->out->shape[st->base->params.axes[0]], Q = 0;
    tg_view_numel(&ix->view, &Q);
    *words = NULL, *count = n + 1 + Q;
    const int32_t *data = NULL;
    int32_t *copy = NULL;
    int64_t *first = tg_malloc(sizeof *first * (size_t)(n + 1)), *pos = tg_malloc(sizeof *pos * (size_t)(Q ? Q : 1));
    uint32_t *w = tg_malloc(sizeof *w * (size_t)*count);
    tgrad_status s = first && pos && w ? host_indices(ix->buf, &data, &copy)
                                       : tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "scatter_add: cannot allocate %lld position "
                                                 "words", (long long)*count);
    if (!s) s = check_indices(data, &ix->view, n, NULL, "take");
    if (!s) {
        tg_scatter_add_lists(Q ? data + ix->view.offset : NULL, Q, n, first, pos);
        for (int64_t j = 0; j <= n; j++) w[j] = (uint32_t)first[j];
        for (int64_t q = 0; q < Q; q++) w[n + 1 + q] = (uint32_t)pos[q];
    }
    free(copy), free(first), free(pos);
    if (s) free(w);
    else *words = w;
    return s;
}

static tgrad_status check_and_shape(const tg_tensor *x, const tg_tensor *ix, int32_t axis, int32_t *a, tg_view *ov) {
    const tg_view *xv = &x->view, *iv = &ix->view;
    if (ix->buf->dtype != TGRAD_DTYPE_I32)
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "take: the indices are %s; they must be int32",
                       tg_dtype_name(ix->buf->dtype));
    if (x->buf->device != ix->buf->device)
        return tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "take: x lives on %s, the indices on %s",
                       tg_device_name(x->buf->device), tg_device_name(ix->buf->device));
    *a = axis < 0 ? axis + xv->ndim : axis;
    if (*a < 0 || *a >= xv->ndim)
        return tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "take: axis %d is out of range for a tensor of %d dimensions",
                       (int)axis, (int)xv->ndim);
    int32_t nd = xv->ndim - 1 + iv->ndim;
    if (nd > TGRAD_MAX_DIMS)
        return tg_fail(TGRAD_ERR_RANK_MISMATCH, "take: the result would have %d dimensions (at most %d)", (int)nd,
                       TGRAD_MAX_DIMS);
    int64_t shape[TGRAD_MAX_DIMS];
    int32_t k = 0;
    for (int32_t d = 0; d < *a; d++) shape[k++] = xv->shape[d];
    for (int32_t d = 0; d < iv->ndim; d++) shape[k++] = iv->shape[d];
    for (int32_t d = *a + 1; d < xv->ndim; d++) shape[k++] = xv->shape[d];
    tgrad_status s = tg_view_contiguous(nd, shape, ov);
    if (s) return s;
    /* indices computed already: checked now (read back from a device); pending ones when the
     * gather runs */
    if (atomic_load(&ix->buf->realized)) s = check_buffer_indices(ix->buf, iv, xv->shape[*a]);
    return s;
}

TGRAD_API tgrad_status tgrad_take(tgrad_tensor_t x, tgrad_tensor_t indices, int32_t axis, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "take: out is NULL");
    tg_tensor t[2]; /* x, the indices */
    tgrad_status s = tg_handle_get_pair(x, indices, &t[0], &t[1]);
    if (s) return s;
    tg_node_params P = { .naxes = 1 };
    tg_view ov;
    s = check_and_shape(&t[0], &t[1], axis, &P.axes[0], &ov);
    if (!s) s = tg_kind_check_device(TG_OP_GATHER, t[0].buf->device, "take");
    return tg_kind_make(s, TG_OP_GATHER, t, 2, &ov, t[0].buf->dtype, &P, "take", out);
}

/* ---- the executor ---- */
typedef struct gather_job {
    const tg_step *st;
    const int64_t *index; /* normalized, row-major over the index view */
    int64_t count, inner; /* indices; elements after the axis */
    int32_t axis, esize;
} gather_job;

/* Unit u = (outer index o, index j): the slice x[o..., index[j], ...] to output run u. */
static void gather_block(int64_t u, const void *ctx, tg_block *blk) {
    const gather_job *J = ctx;
    const tg_view *v = &J->st->inputs[0].view;
    int64_t o = u / J->count;
    tg_view sub = { .ndim = v->ndim - J->axis - 1, .offset = v->offset + J->index[u % J->count] * v->strides[J->axis] };
    for (int32_t d = J->axis - 1; d >= 0; d--) {
        sub.offset += (o % v->shape[d]) * v->strides[d];
        o /= v->shape[d];
    }
    memcpy(sub.shape, v->shape + J->axis + 1, sizeof sub.shape[0] * (size_t)sub.ndim);
    memcpy(sub.strides, v->strides + J->axis + 1, sizeof sub.strides[0] * (size_t)sub.ndim);
    blk->src = J->st->inputs[0].buf->data;
    blk->view = sub;
    blk->dst = (char *)J->st->buf->data + u * J->inner * J->esize;
}

tgrad_status tg_gather_execute(const tg_step *st) {
    const tg_node_input *x = &st->inputs[0], *ix = &st->inputs[1];
    int32_t axis = st->base->params.axes[0];
    int64_t count;
    tg_view_numel(&ix->view, &count);
    int64_t *index = tg_malloc(sizeof *index * (size_t)(count ? count : 1));
    if (!index) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "take: cannot allocate %lld indices", (long long)count);
    /* every index is checked before anything is written */
    tgrad_status s = check_indices((const int32_t *)ix->buf->data, &ix->view, x->view.shape[axis], index, "take");
    if (!s && st->buf->numel) {
        gather_job J = { .st = st, .index = index, .count = count, .inner = 1, .axis = axis,
                         .esize = tg_dtype_size(st->buf->dtype) };
        for (int32_t d = axis + 1; d < x->view.ndim; d++) J.inner *= x->view.shape[d];
        int64_t outer = st->buf->numel / (count * J.inner);
        tg_copy_blocks(outer * count, J.esize, st->buf->numel * J.esize, gather_block, &J);
    }
    free(index);
    return s;
}
