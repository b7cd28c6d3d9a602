/* The SCATTER_ADD kind (code 14): the transpose of a gather (tgrad_take), which its gradient
 * needs. out has the gathered tensor's shape pre + [n] + post; out[a, j, c] is the sum of g[a, p,
 * c] over the index positions p (row-major over the index tensor) whose index is j (negative ones
 * count from the end), correctly rounded: the exact sum (ops/reduce_exact.h's accumulator) rounded
 * once to g's dtype, whatever the order or the number of repeats; +0 where no index lands (a
 * position one index names takes its value, any NaN canonical: that sum rounded). Both
 * inputs are read compact (the constructor materializes them). CPU only, one thread. */
#include <stdlib.h>
#include <string.h>

#include "../kinds.h"
#include "../ops/reduce_exact.h"
#include "grad.h"

tgrad_status tg_scatter_add(tgrad_tensor_t g, tgrad_tensor_t indices, int32_t axis, const tg_view *xv, tgrad_tensor_t *out) {
    tgrad_tensor_t gc = 0, ic = 0;
    tgrad_status s = tgrad_tensor_contiguous(g, &gc);
    if (!s) s = tgrad_tensor_contiguous(indices, &ic);
    tg_tensor t[2] = { { 0 }, { 0 } };
    if (!s) s = tg_handle_get_pair(gc, ic, &t[0], &t[1]);
    tgrad_tensor_release(gc);
    tgrad_tensor_release(ic);
    if (s) return s;
    tg_view ov;
    tg_node_params p;
    memset(&p, 0, sizeof p);
    p.naxes = 1, p.axes[0] = axis;
    s = tg_kind_check_device(TG_OP_SCATTER_ADD, t[0].buf->device, "grad");
    if (!s) s = tg_view_contiguous(xv->ndim, xv->shape, &ov);
    return tg_kind_make(s, TG_OP_SCATTER_ADD, t, 2, &ov, t[0].buf->dtype, &p, "grad", out);
}

void tg_scatter_add_lists(const int32_t *idx, int64_t Q, int64_t n, int64_t *first, int64_t *pos) {
    memset(first, 0, sizeof *first * (size_t)(n + 1));
    for (int64_t q = 0; q < Q; q++) first[(idx[q] < 0 ? idx[q] + n : idx[q]) + 1]++; /* how many name each j */
    for (int64_t j = 0; j < n; j++) first[j + 1] += first[j];                          /* where j's list starts */
    for (int64_t q = 0; q < Q; q++) pos[first[idx[q] < 0 ? idx[q] + n : idx[q]]++] = q; /* each start moves on */
    for (int64_t j = n; j > 0; j--) first[j] = first[j - 1];                           /* back to the starts */
    first[0] = 0;
}

tgrad_status tg_scatter_add_execute(const tg_step *st) {
    const tg_node_input *gin = &st->inputs[0], *iin = &st->inputs[1];
    const tg_view *ov = st->out;
    int32_t axis = st->base->params.axes[0], dt = st->buf->dtype, esz = tg_dtype_size(dt);
    int64_t P = 1, R = 1, n = ov->shape[axis], Q = 1;
    for (int32_t d = 0; d < axis; d++) P *= ov->shape[d];
    for (int32_t d = axis + 1; d < ov->ndim; d++) R *= ov->shape[d];
    for (int32_t d = 0; d < iin->view.ndim; d++) Q *= iin->view.shape[d];
    const int32_t *idx = (const int32_t *)iin->buf->data + iin->view.offset;
    const char *g = (const char *)gin->buf->data + gin->view.offset * esz;
    /* positions by index (first[j] .. first[j + 1] in pos), in row-major order */
    int64_t *first = tg_malloc(sizeof *first * (size_t)(n + 1)), *pos = tg_malloc(sizeof *pos * (size_t)(Q ? Q : 1));
    tgrad_status s = TGRAD_OK;
    if (!first || !pos) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot allocate a scatter-add's index lists");
    for (int64_t q = 0; q < Q && !s; q++)
        if (idx[q] < -n || idx[q] >= n)
            s = tg_fail(TGRAD_ERR_INDEX_OUT_OF_RANGE, "grad: index %lld is out of range for an axis of extent %lld",
                        (long long)idx[q], (long long)n);
    if (!s) tg_scatter_add_lists(idx, Q, n, first, pos);
    char *dst = (char *)st->buf->data;
    for (int64_t a = 0; a < P && !s; a++)
        for (int64_t j = 0; j < n; j++) {
            int64_t count = first[j + 1] - first[j];
            char *row = dst + (a * n + j) * R * esz;
            if (count == 0) { /* no index lands: +0 (all bits zero in both dtypes) */
                memset(row, 0, (size_t)(R * esz));
                continue;
            }
            if (count == 1) { /* one value: the exact sum of one value is itself, any NaN canonical */
                const char *src = g + (a * Q + pos[first[j]]) * R * esz;
                if (dt == TGRAD_DTYPE_BF16) {
                    const uint16_t *x = (const uint16_t *)src;
                    uint16_t *o = (uint16_t *)row;
                    for (int64_t c = 0; c < R; c++) o[c] = (x[c] & 0x7FFFu) > 0x7F80u ? 0x7FC0u : x[c];
                } else {
                    const uint32_t *x = (const uint32_t *)src;
                    uint32_t *o = (uint32_t *)row;
                    for (int64_t c = 0; c < R; c++) o[c] = (x[c] & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : x[c];
                }
                continue;
            }
            for (int64_t c = 0; c < R; c++) {
                tg_exact_acc acc;
                tg_exact_acc_init(&acc);
                for (int64_t k = first[j]; k < first[j + 1]; k++)
                    tg_exact_acc_add(&acc, g + ((a * Q + pos[k]) * R + c) * esz, dt, 1, 1);
                uint32_t bits = tg_exact_acc_round(&acc, dt);
                if (dt == TGRAD_DTYPE_BF16) {
                    uint16_t h = (uint16_t)bits;
                    memcpy(dst + ((a * n + j) * R + c) * esz, &h, 2);
                } else {
                    memcpy(dst + ((a * n + j) * R + c) * esz, &bits, 4);
                }
            }
        }
    free(first), free(pos);
    return s;
}
