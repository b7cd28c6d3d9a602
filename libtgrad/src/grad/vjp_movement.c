/* The rules of the kinds that move or select elements without arithmetic: COPY (a
 * materialized view: the cotangent read back in the input view's shape), CAST (the cotangent
 * itself; the engine casts it to the input's chain dtype), WHERE (the cotangent where the
 * condition picked the operand, +0 elsewhere; none into the condition), CONCAT (each operand's
 * slice of the cotangent, a zero-copy view), PLACE (the cotangent read through the placed view)
 * RANDOM (no inputs: nothing flows), GATHER (a scatter-add of the cotangent, correctly rounded
 * where indices repeat; none into the indices) and SCATTER_ADD (its transpose: a gather). Every
 * one but the scatter-add is exact: no rounding. */
#include <string.h>

#include "grad.h"

static tgrad_status copy_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    const tg_view *v = &a->node->inputs[i].view;
    return tg_g_reshape(a->A, a->g, v->ndim, v->shape, gi);
}

static tgrad_status cast_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    (void)i;
    *gi = a->g;
    return TGRAD_OK;
}

static tgrad_status where_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    if (i == 0) return *gi = 0, TGRAD_OK; /* a condition has no gradient */
    if (i == 1) return tg_g_mask(a->A, a->x[0], a->g, gi);
    tgrad_tensor_t zero = 0;
    tgrad_status s = tg_g_scalar(a->A, 0.0, a->cd, a->g, &zero);
    return s ? s : tg_keep_out(a->A, tgrad_where(a->x[0], zero, a->g, gi), gi);
}

static tgrad_status concat_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    int32_t axis = a->node->params.axes[0];
    int64_t start = 0;
    for (int32_t k = 0; k < i; k++) start += a->node->inputs[k].view.shape[axis];
    int64_t stop = start + a->node->inputs[i].view.shape[axis];
    return tg_keep_out(a->A, tgrad_tensor_slice(a->g, axis, start, stop, 1, 0, gi), gi);
}

static tgrad_status place_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    tgrad_tensor_t c = 0;
    tgrad_status s = tg_keep_out(a->A, tgrad_tensor_contiguous(a->g, &c), &c);
    if (s) return s;
    tg_tensor t;
    if ((s = tg_handle_get_tensor(c, &t))) return s;
    tg_view v = a->node->inputs[i].view;
    for (int32_t d = 0; d < v.ndim; d++) v.strides[d] = a->node->params.place.strides[d];
    v.offset = t.view.offset + a->node->params.place.offset;
    s = tg_g_handle(a->A, t.buf, &v, gi);
    tg_tensor_unref(&t);
    return s;
}

static tgrad_status random_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    (void)a, (void)i;
    return *gi = 0, TGRAD_OK; /* a draw has no inputs, and no gradient */
}

static tgrad_status gather_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    if (i == 1) return *gi = 0, TGRAD_OK; /* indices have no gradient */
    return tg_keep_out(a->A, tg_scatter_add(a->g, a->x[1], a->node->params.axes[0], &a->node->inputs[0].view, gi), gi);
}

static tgrad_status scatter_add_input(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi) {
    if (i == 1) return *gi = 0, TGRAD_OK;
    return tg_keep_out(a->A, tgrad_take(a->g, a->x[1], a->node->params.axes[0], gi), gi);
}

const tg_vjp tg_vjp_gather = { .input = gather_input };
const tg_vjp tg_vjp_scatter_add = { .input = scatter_add_input };
const tg_vjp tg_vjp_copy = { .input = copy_input };
const tg_vjp tg_vjp_cast = { .input = cast_input };
const tg_vjp tg_vjp_where = { .input = where_input };
const tg_vjp tg_vjp_concat = { .input = concat_input };
const tg_vjp tg_vjp_place = { .input = place_input };
const tg_vjp tg_vjp_random = { .input = random_input };
