/* The PLACE kind (code 15): the transpose of an injective view, which the backward pass of every
 * view needs (a slice's cotangent lands in the sliced positions of a zero buffer). out is a
 * compact 1-D tensor of the viewed buffer's element count; the input's element at index i is
 * copied, bit for bit, to offset + sum(i[d] * strides[d]) (params.place) and every other element
 * is +0. Injective: no two indices land on one element (broadcast axes were summed first, by the
 * REDUCE kind, grad/engine.c). CPU only. */
#include <string.h>

#include "../cpu/runs.h"
#include "../kinds.h"
#include "grad.h"

tgrad_status tg_place(tgrad_tensor_t g, const tg_view *v, int64_t numel, tgrad_tensor_t *out) {
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(g, &t);
    if (s) return s;
    tg_view ov;
    tg_node_params p;
    memset(&p, 0, sizeof p);
    for (int32_t d = 0; d < v->ndim; d++) p.place.strides[d] = v->strides[d];
    p.place.offset = v->offset;
    s = tg_kind_check_device(TG_OP_PLACE, t.buf->device, "grad");
    if (!s) s = tg_view_contiguous(1, &numel, &ov);
    return tg_kind_make_unary(s, TG_OP_PLACE, &t, &ov, t.buf->dtype, &p, "grad", out);
}

tgrad_status tg_place_execute(const tg_step *st) {
    const tg_node_input *in = &st->inputs[0];
    const tg_view *v = &in->view;
    const int64_t *to = st->base->params.place.strides;
    int32_t esz = tg_dtype_size(st->buf->dtype);
    const char *src = (const char *)in->buf->data;
    char *dst = (char *)st->buf->data;
    if (st->buf->numel) memset(dst, 0, (size_t)st->buf->numel * (size_t)esz); /* +0 in bf16 and f32 */
    int64_t n = 1;
    for (int32_t d = 0; d < v->ndim; d++) n *= v->shape[d];
    /* the runs along the last axis (cpu/runs.h), the elements in the same order as one by one; the
     * second view is where they land */
    tg_view at_view = *v;
    for (int32_t d = 0; d < v->ndim; d++) at_view.strides[d] = to[d];
    at_view.offset = st->base->params.place.offset;
    const tg_view *views[2] = { v, &at_view };
    for (int64_t lin = 0, inner; lin < n; lin += inner) {
        int64_t off[2], step[2];
        inner = tg_run_at(v->ndim, v->shape, 2, views, lin, n - lin, off, step);
        int64_t from = off[0], at = off[1], ss = step[0], ts = step[1];
        if (esz == 2) {
            const uint16_t *a = (const uint16_t *)src + from;
            uint16_t *b = (uint16_t *)dst + at;
            for (int64_t i = 0; i < inner; i++) b[i * ts] = a[i * ss];
        } else if (esz == 4) {
            const uint32_t *a = (const uint32_t *)src + from;
            uint32_t *b = (uint32_t *)dst + at;
            for (int64_t i = 0; i < inner; i++) b[i * ts] = a[i * ss];
        } else {
            for (int64_t i = 0; i < inner; i++)
                memcpy(dst + (at + i * ts) * esz, src + (from + i * ss) * esz, (size_t)esz);
        }
    }
    return TGRAD_OK;
}
