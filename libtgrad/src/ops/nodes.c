/* Elementwise graph nodes: tgrad_unary and tgrad_binary check their operands (op code, arity,
 * devices, numpy broadcasting) before any allocation and record a lazy TG_OP_ELEMENTWISE node
 * whose inputs are read through views already broadcast to the result's shape (stride 0 along a
 * broadcast axis), so the executors only ever see same-shape operands. The node computes in
 * bfloat16 or float32; a bf16 operand meeting a float32 one is first cast to float32 (exact:
 * torch's promotion); on GPU devices float32 nodes are made for the ops the GPU routes render in
 * float32 (tg_gen_f32_renders: every op since 2026-12-06), the others refused. */
#include <stdio.h>
#include <stdlib.h>

#include "../gen/gen.h"
#include "../internal.h"

static tgrad_status check_op(tgrad_op op, int32_t arity, const char *fn) {
    int32_t have = tgrad_op_arity(op);
    if (have == 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: %d is not an op code of the registry", fn, (int)op);
    if (have != arity)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: %s is a %s op", fn, tgrad_op_name(op),
                       have == 1 ? "unary" : "binary");
    return TGRAD_OK;
}

/* v read as a view of shape[ndim] (ndim >= v->ndim, broadcastable): leading axes and size-1
 * axes read with stride 0. */
static tg_view broadcast_view(const tg_view *v, int32_t ndim, const int64_t *shape) {
    tg_view w = { .ndim = ndim, .offset = v->offset };
    int32_t lead = ndim - v->ndim;
    for (int32_t i = 0; i < ndim; i++) {
        w.shape[i] = shape[i];
        w.strides[i] = i < lead || v->shape[i - lead] == 1 ? 0 : v->strides[i - lead];
    }
    return w;
}

/* numpy's rule: aligned at the last axis, each pair equal or one of them 1. */
static tgrad_status broadcast_shape(const tg_view *a, const tg_view *b, const char *fn, int32_t *ndim,
                                    int64_t *shape) {
    int32_t n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int32_t i = 0; i < n; i++) {
        int32_t ia = i - (n - a->ndim), ib = i - (n - b->ndim);
        int64_t ea = ia < 0 ? 1 : a->shape[ia], eb = ib < 0 ? 1 : b->shape[ib];
        if (ea != eb && ea != 1 && eb != 1) {
            char sa[160], sb[160];
            tg_format_shape(sa, sizeof sa, a);
            tg_format_shape(sb, sizeof sb, b);
            return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: shapes %s and %s do not broadcast (axis %d: %lld vs %lld)",
                           fn, sa, sb, (int)(i - n), (long long)ea, (long long)eb);
        }
        shape[i] = ea == 1 ? eb : ea;
    }
    *ndim = n;
    return TGRAD_OK;
}

/* The dtype the op computes in: bf16 or float32 operands, mixed ones promoted to float32 (torch's
 * rule); on a GPU device float32 only for the ops its routes render in float32. */
static tgrad_status check_dtypes(tgrad_op op, const tg_tensor *t, int32_t arity, const char *fn, int32_t *dtype) {
    *dtype = TGRAD_DTYPE_BF16;
    for (int32_t i = 0; i < arity; i++) {
        int32_t d = t[i].buf->dtype;
        if (d != TGRAD_DTYPE_BF16 && d != TGRAD_DTYPE_F32)
            return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: operand %d is %s; the elementwise ops take bfloat16 or float32 (cast first)",
                           fn, (int)i, tg_dtype_name(d));
        if (d == TGRAD_DTYPE_F32) *dtype = d;
    }
    if (*dtype == TGRAD_DTYPE_F32 && t[0].buf->device != TGRAD_DEVICE_CPU && !tg_gen_f32_renders(op))
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED,
                       "%s: float32 %s runs on the CPU only (the tensor lives on %s, whose routes have no "
                       "float32 kernel for it: cast to bfloat16 first)",
                       fn, tgrad_op_name(op), tg_device_name(t[0].buf->device));
    return TGRAD_OK;
}

static void unref_all(tg_tensor *t, int32_t count) {
    for (int32_t i = 0; i < count; i++) tg_tensor_unref(&t[i]);
}

/* The node for op over operands t[0 .. arity), its buffer and the result's handle. Takes the
 * operands' references in every case: to the node on success, released on failure. */
static tgrad_status make(tgrad_op op, int32_t arity, int32_t dtype, tg_tensor *t, const tg_view *out_view,
                         const char *fn, tgrad_tensor_t *out) {
    int64_t numel = 0;
    tg_view_numel(out_view, &numel); /* out_view passed the size rule (tg_view_contiguous) */
    tgrad_status s = tg_memory_admit_typed(numel, tg_dtype_size(dtype), fn);
    if (s) {
        unref_all(t, arity);
        return s;
    }
    tg_node *n = tg_node_new(TG_OP_ELEMENTWISE, arity);
    if (!n) {
        unref_all(t, arity);
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate a graph node", fn);
    }
    n->ew = op;
    n->dtype = dtype;
    n->out = *out_view;
    for (int32_t i = 0; i < arity; i++)
        n->inputs[i] = (tg_node_input){ t[i].buf, broadcast_view(&t[i].view, out_view->ndim, out_view->shape) };
    tg_buffer *buf;
    s = tg_buffer_new_typed(numel, dtype, n, &buf);
    if (s) {
        free(n);
        unref_all(t, arity);
        return s;
    }
    buf->device = t[0].buf->device;
    /* the node owns the operand references now */
    if ((s = tg_handle_new_tensor(buf, out_view, out))) tg_buffer_release(buf);
    return s;
}

/* Mixed bf16 and float32 operands (checked): the bf16 one cast to float32 (exact), then the op on
 * two float32 tensors. Takes t's references. */
static tgrad_status promoted(tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t b, tg_tensor *t, tgrad_tensor_t *out) {
    int32_t widen = t[0].buf->dtype == TGRAD_DTYPE_BF16 ? 0 : 1;
    unref_all(t, 2);
    tgrad_tensor_t wide = 0;
    tgrad_status s = tgrad_cast(widen == 0 ? a : b, TGRAD_DTYPE_F32, &wide);
    if (s) return s;
    s = tgrad_binary(op, widen == 0 ? wide : a, widen == 0 ? b : wide, out);
    tgrad_tensor_release(wide); /* the op's node holds the cast's buffer now */
    return s;
}

TGRAD_API tgrad_status tgrad_unary(tgrad_op op, tgrad_tensor_t x, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "unary: out is NULL");
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(x, &t);
    if (s) return s;
    tg_view ov;
    int32_t dtype;
    if ((s = check_op(op, 1, "unary")) || (s = check_dtypes(op, &t, 1, tgrad_op_name(op), &dtype)) ||
        (s = tg_view_contiguous(t.view.ndim, t.view.shape, &ov))) {
        tg_tensor_unref(&t);
        return s;
    }
    return make(op, 1, dtype, &t, &ov, tgrad_op_name(op), out);
}

TGRAD_API tgrad_status tgrad_binary(tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "binary: out is NULL");
    tg_tensor t[2];
    tgrad_status s = tg_handle_get_pair(a, b, &t[0], &t[1]);
    if (s) return s;
    const char *fn = tgrad_op_name(op);
    int32_t ndim = 0;
    int64_t shape[TGRAD_MAX_DIMS];
    tg_view ov;
    int32_t dtype = TGRAD_DTYPE_BF16;
    s = check_op(op, 2, "binary");
    if (!s) s = check_dtypes(op, t, 2, fn, &dtype);
    if (!s) s = broadcast_shape(&t[0].view, &t[1].view, fn, &ndim, shape);
    if (!s && t[0].buf->device != t[1].buf->device)
        s = tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "%s: operands live on different devices (%s and %s)", fn,
                    tg_device_name(t[0].buf->device), tg_device_name(t[1].buf->device));
    if (!s) s = tg_view_contiguous(ndim, shape, &ov);
    if (s) {
        unref_all(t, 2);
        return s;
    }
    if (t[0].buf->dtype != t[1].buf->dtype) return promoted(op, a, b, t, out);
    return make(op, 2, dtype, t, &ov, fn, out);
}
