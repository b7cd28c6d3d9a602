/* The public tensor API: creation from host data, reading back, properties, views and matmul.
 * Every entry point validates all arguments before it allocates anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "gen/gen.h"

TG_HIDDEN tgrad_status tg_buffer_new_storage(int64_t numel, tg_buffer **out);

#define CHECK_OUT(p, fn)                                                                  \
    do {                                                                                  \
        if (!(p)) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, fn ": output pointer is NULL"); \
    } while (0)

/* ---- creation ---------------------------------------------------------------------------- */
/* Which host types convert to which tensor types (tgrad.h, tgrad_tensor_from_host). */
static bool host_pair_ok(int32_t src, int32_t dtype) {
    bool float_src = src == TGRAD_DTYPE_BF16 || src == TGRAD_DTYPE_F32 || src == TGRAD_DTYPE_F64;
    if (dtype == TGRAD_DTYPE_BF16 || dtype == TGRAD_DTYPE_F32) return float_src;
    return (dtype == TGRAD_DTYPE_I32 || dtype == TGRAD_DTYPE_BOOL) && src == dtype;
}

static void convert_host(const void *data, int32_t src, int64_t numel, int32_t dtype, void *dst) {
    if (dtype == TGRAD_DTYPE_BOOL) { /* bytes: any nonzero one is true, stored as 1 */
        for (int64_t i = 0; i < numel; i++) ((uint8_t *)dst)[i] = ((const uint8_t *)data)[i] != 0;
    } else if (src == dtype) {
        memcpy(dst, data, (size_t)numel * (size_t)tg_dtype_size(dtype));
    } else if (dtype == TGRAD_DTYPE_BF16) {
        uint16_t *d = dst;
        if (src == TGRAD_DTYPE_F32) for (int64_t i = 0; i < numel; i++) d[i] = tg_f32_to_bf16(((const float *)data)[i]);
        else for (int64_t i = 0; i < numel; i++) d[i] = tg_f64_to_bf16(((const double *)data)[i]);
    } else { /* f32 from bf16 (exact) or f64 (the C conversion rounds to nearest even) */
        float *d = dst;
        if (src == TGRAD_DTYPE_BF16) for (int64_t i = 0; i < numel; i++) d[i] = tg_bf16_to_f32(((const uint16_t *)data)[i]);
        else for (int64_t i = 0; i < numel; i++) d[i] = (float)((const double *)data)[i];
    }
}

TG_HIDDEN tgrad_status tg_buffer_new_storage_typed(int64_t numel, int32_t dtype, tg_buffer **out);

static tgrad_status create(const void *data, int32_t src, int32_t ndim, const int64_t *shape, int32_t dtype,
                           tgrad_tensor_t *out, const char *fn) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: output pointer is NULL", fn);
    if (ndim < 0 || ndim > TGRAD_MAX_DIMS)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: ndim %d outside 0..%d", fn, ndim, TGRAD_MAX_DIMS);
    if (ndim > 0 && !shape) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: shape is NULL", fn);
    if (!host_pair_ok(src, dtype))
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: cannot make a %s tensor from %s host data (dtype codes %d, %d)",
                       fn, tg_dtype_name(dtype), tg_dtype_name(src), (int)dtype, (int)src);
    tg_view v;
    tgrad_status s = tg_view_contiguous(ndim, shape, &v);
    if (s) return s;
    int64_t numel;
    tg_view_numel(&v, &numel);
    if ((s = tg_check_bytes(numel, dtype, fn)) || (s = tg_check_bytes(numel, src, fn))) return s;
    if (numel > 0 && !data) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: data is NULL", fn);
    if ((s = tg_memory_admit_typed(numel, tg_dtype_size(dtype), fn))) return s;
    tg_buffer *b = NULL;
    if ((s = tg_buffer_new_storage_typed(numel, dtype, &b))) return s;
    if (numel) convert_host(data, src, numel, dtype, b->data);
    if ((s = tg_handle_new_tensor(b, &v, out))) tg_buffer_release(b);
    return s;
}

TGRAD_API tgrad_status tgrad_tensor_from_f32(const float *data, int32_t ndim, const int64_t *shape,
                                             tgrad_tensor_t *out) {
    return create(data, TGRAD_DTYPE_F32, ndim, shape, TGRAD_DTYPE_BF16, out, "tensor_from_f32");
}
TGRAD_API tgrad_status tgrad_tensor_from_f64(const double *data, int32_t ndim, const int64_t *shape,
                                             tgrad_tensor_t *out) {
    return create(data, TGRAD_DTYPE_F64, ndim, shape, TGRAD_DTYPE_BF16, out, "tensor_from_f64");
}
TGRAD_API tgrad_status tgrad_tensor_from_bf16(const uint16_t *bits, int32_t ndim, const int64_t *shape,
                                              tgrad_tensor_t *out) {
    return create(bits, TGRAD_DTYPE_BF16, ndim, shape, TGRAD_DTYPE_BF16, out, "tensor_from_bf16");
}
TGRAD_API tgrad_status tgrad_tensor_from_host(const void *data, int32_t src_dtype, int32_t ndim, const int64_t *shape,
                                              int32_t dtype, tgrad_tensor_t *out) {
    return create(data, src_dtype, ndim, shape, dtype, out, "tensor_from_host");
}

TGRAD_API int32_t tgrad_dtype_size(int32_t dtype) { return tg_dtype_size(dtype); }

TGRAD_API tgrad_status tgrad_tensor_release(tgrad_tensor_t tensor) { return tg_handle_release(tensor); }

/* ---- realize and read ---------------------------------------------------------------------- */
TGRAD_API tgrad_status tgrad_tensor_realize(tgrad_tensor_t tensor) {
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    s = tg_buffer_realize(t.buf);
    tg_tensor_unref(&t);
    return s;
}

/* How a read converts: the tensor's dtype to the destination's (as, in bytes per element). */
static tgrad_status read_view(tgrad_tensor_t tensor, void *dst, size_t capacity, int32_t as, bool bytes, const char *fn) {
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    int32_t have = t.buf->dtype;
    if (!as) as = have;
    int64_t numel;
    tg_view_numel(&t.view, &numel);
    size_t esize = (size_t)tg_dtype_size(as), room = bytes ? capacity / esize : capacity;
    if (!(have == as || (have == TGRAD_DTYPE_BF16 && as == TGRAD_DTYPE_F32)))
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: the tensor holds %s; read it with tgrad_tensor_read or cast it first",
                    fn, tg_dtype_name(have));
    else if (numel > 0 && !dst) s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: destination is NULL", fn);
    else if ((uint64_t)numel > room)
        s = tg_fail(TGRAD_ERR_BUFFER_TOO_SMALL, "%s: tensor has %lld elements, destination holds %zu", fn,
                    (long long)numel, room);
    if (!s) s = tg_buffer_realize(t.buf);
    const uint16_t *host = t.buf->data;
    uint16_t *staged = NULL;
    if (!s && numel > 0 && t.buf->device != TGRAD_DEVICE_CPU) { /* bring the whole buffer over */
        size_t whole = tg_buffer_bytes(t.buf);
        staged = tg_malloc(whole);
        if (!staged) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot stage %zu bytes", fn, whole);
        else s = tg_device_download(t.buf->device, t.buf->dev_mem, staged, whole);
        host = staged;
    }
    if (!s && numel > 0) {
        if (have == as) {
            tg_cpu_copy_view_sized(host, &t.view, dst, tg_dtype_size(have));
        } else {
            /* widen in place from the back: the bf16 gather fills the first half of dst */
            uint16_t *bits = (uint16_t *)dst;
            tg_cpu_copy_view(host, &t.view, bits);
            float *f = dst;
            for (int64_t i = numel - 1; i >= 0; i--) f[i] = tg_bf16_to_f32(bits[i]);
        }
    }
    free(staged);
    tg_tensor_unref(&t);
    return s;
}

TGRAD_API tgrad_status tgrad_tensor_read_bf16(tgrad_tensor_t tensor, uint16_t *dst, size_t capacity) {
    return read_view(tensor, dst, capacity, TGRAD_DTYPE_BF16, false, "tensor_read_bf16");
}
TGRAD_API tgrad_status tgrad_tensor_read_f32(tgrad_tensor_t tensor, float *dst, size_t capacity) {
    return read_view(tensor, dst, capacity, TGRAD_DTYPE_F32, false, "tensor_read_f32");
}
TGRAD_API tgrad_status tgrad_tensor_read(tgrad_tensor_t tensor, void *dst, size_t capacity) {
    return read_view(tensor, dst, capacity, 0, true, "tensor_read");
}

/* ---- properties ---------------------------------------------------------------------------- */
#define PROPERTY(fn_name, type, out_name, expr)                                             \
    TGRAD_API tgrad_status fn_name(tgrad_tensor_t tensor, type *out_name) {                 \
        CHECK_OUT(out_name, #fn_name);                                                      \
        tg_tensor t;                                                                        \
        tgrad_status s = tg_handle_get_tensor(tensor, &t);                                  \
        if (s) return s;                                                                    \
        expr;                                                                               \
        tg_tensor_unref(&t);                                                                \
        return TGRAD_OK;                                                                    \
    }

PROPERTY(tgrad_tensor_ndim, int32_t, ndim, *ndim = t.view.ndim)
PROPERTY(tgrad_tensor_shape, int64_t, shape, memcpy(shape, t.view.shape, sizeof(int64_t) * (size_t)t.view.ndim))
PROPERTY(tgrad_tensor_strides, int64_t, strides, memcpy(strides, t.view.strides, sizeof(int64_t) * (size_t)t.view.ndim))
PROPERTY(tgrad_tensor_offset, int64_t, offset, *offset = t.view.offset)
PROPERTY(tgrad_tensor_numel, int64_t, numel, tg_view_numel(&t.view, numel))
PROPERTY(tgrad_tensor_dtype, int32_t, dtype, *dtype = t.buf->dtype)
PROPERTY(tgrad_tensor_is_realized, int32_t, realized, *realized = atomic_load(&t.buf->realized))

TGRAD_API tgrad_status tgrad_tensor_same_buffer(tgrad_tensor_t a, tgrad_tensor_t b, int32_t *same) {
    CHECK_OUT(same, "tensor_same_buffer");
    tg_tensor ta, tb;
    tgrad_status s = tg_handle_get_pair(a, b, &ta, &tb);
    if (s) return s;
    *same = ta.buf == tb.buf;
    tg_tensor_unref(&ta);
    tg_tensor_unref(&tb);
    return TGRAD_OK;
}

/* ---- views --------------------------------------------------------------------------------- */
/* Look up `tensor`, compute a view with `expr` (which sets status s and view nv), and register a
 * new handle over the same buffer. */
#define VIEW_OP(fn, expr)                                                                   \
    do {                                                                                    \
        CHECK_OUT(out, fn);                                                                 \
        tg_tensor t;                                                                        \
        tgrad_status s = tg_handle_get_tensor(tensor, &t);                                  \
        if (s) return s;                                                                    \
        tg_view nv;                                                                         \
        s = (expr);                                                                         \
        if (!s) s = tg_handle_new_tensor(t.buf, &nv, out);                                  \
        if (s) tg_tensor_unref(&t); /* on success the handle owns the reference */         \
        return s;                                                                           \
    } while (0)

TGRAD_API tgrad_status tgrad_tensor_transpose(tgrad_tensor_t tensor, int32_t axis0, int32_t axis1,
                                              tgrad_tensor_t *out) {
    VIEW_OP("tensor_transpose", tg_view_transpose(&t.view, axis0, axis1, &nv));
}

TGRAD_API tgrad_status tgrad_tensor_permute(tgrad_tensor_t tensor, const int32_t *axes, int32_t naxes,
                                            tgrad_tensor_t *out) {
    if (naxes > 0 && !axes) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_permute: axes is NULL");
    VIEW_OP("tensor_permute", tg_view_permute(&t.view, axes, naxes, &nv));
}

TGRAD_API tgrad_status tgrad_tensor_expand(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                                           tgrad_tensor_t *out) {
    if (ndim > 0 && !shape) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_expand: shape is NULL");
    VIEW_OP("tensor_expand", tg_view_expand(&t.view, shape, ndim, &nv));
}

TGRAD_API tgrad_status tgrad_tensor_slice(tgrad_tensor_t tensor, int32_t axis, int64_t start, int64_t stop,
                                          int64_t step, uint32_t flags, tgrad_tensor_t *out) {
    VIEW_OP("tensor_slice", tg_view_slice(&t.view, axis, start, stop, step, flags, &nv));
}

TGRAD_API tgrad_status tgrad_tensor_select(tgrad_tensor_t tensor, int32_t axis, int64_t index,
                                           tgrad_tensor_t *out) {
    VIEW_OP("tensor_select", tg_view_select(&t.view, axis, index, &nv));
}

static tgrad_status view_nocopy(const tg_view *v, const int64_t *shape, int32_t ndim, tg_view *nv) {
    int64_t resolved[TGRAD_MAX_DIMS];
    tgrad_status s = tg_view_resolve_shape(v, shape, ndim, resolved);
    if (s) return s;
    if (tg_view_reshape_nocopy(v, resolved, ndim, nv)) {
        char from[160];
        tg_format_shape(from, sizeof from, v);
        return tg_fail(TGRAD_ERR_VIEW_NOT_EXPRESSIBLE,
                       "view: a %s tensor with these strides cannot be viewed with the new shape without a copy (use reshape)",
                       from);
    }
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_tensor_view(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                                         tgrad_tensor_t *out) {
    if (ndim > 0 && !shape) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_view: shape is NULL");
    VIEW_OP("tensor_view", view_nocopy(&t.view, shape, ndim, &nv));
}

/* A lazy bit-preserving copy of view `src` into a compact buffer shaped like `shape`. Consumes
 * the caller's reference to t's buffer. */
static tgrad_status materialize(tg_tensor *t, int32_t ndim, const int64_t *shape, tgrad_tensor_t *out) {
    tg_view dst;
    tgrad_status s = tg_view_contiguous(ndim, shape, &dst);
    int64_t numel = 0;
    if (!s) tg_view_numel(&dst, &numel);
    if (!s) s = tg_memory_admit_typed(numel, tg_dtype_size(t->buf->dtype), "tensor_reshape");
    /* the device copy kernel moves 2- and 4-byte elements (route copy: bf16 as ushort, float32 and
     * int32 as uint); a bool view on a device is copied on the CPU only */
    if (!s && t->buf->device != TGRAD_DEVICE_CPU && tg_dtype_size(t->buf->dtype) != 2 &&
        tg_dtype_size(t->buf->dtype) != 4)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "materializing a %s view runs on the CPU only; the tensor lives on %s",
                    tg_dtype_name(t->buf->dtype), tg_device_name(t->buf->device));
    tg_node *n = s ? NULL : tg_node_new(TG_OP_COPY, 1);
    if (!s && !n) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate a graph node");
    if (s) {
        tg_tensor_unref(t);
        return s;
    }
    n->inputs[0] = (tg_node_input){ t->buf, t->view };
    n->out = dst;
    n->dtype = t->buf->dtype;
    tg_buffer *b = NULL;
    if ((s = tg_buffer_new_typed(numel, n->dtype, n, &b))) {
        free(n);
        tg_tensor_unref(t);
        return s;
    }
    b->device = t->buf->device;
    t->buf = NULL; /* the node owns it now */
    if ((s = tg_handle_new_tensor(b, &dst, out))) tg_buffer_release(b);
    return s;
}

TGRAD_API tgrad_status tgrad_tensor_reshape(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                                            tgrad_tensor_t *out) {
    CHECK_OUT(out, "tensor_reshape");
    if (ndim > 0 && !shape) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_reshape: shape is NULL");
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    int64_t resolved[TGRAD_MAX_DIMS];
    if ((s = tg_view_resolve_shape(&t.view, shape, ndim, resolved))) {
        tg_tensor_unref(&t);
        return s;
    }
    tg_view nv;
    if (tg_view_reshape_nocopy(&t.view, resolved, ndim, &nv) == TGRAD_OK) {
        if ((s = tg_handle_new_tensor(t.buf, &nv, out))) tg_tensor_unref(&t);
        return s;
    }
    return materialize(&t, ndim, resolved, out);
}

TGRAD_API tgrad_status tgrad_tensor_contiguous(tgrad_tensor_t tensor, tgrad_tensor_t *out) {
    CHECK_OUT(out, "tensor_contiguous");
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    int64_t numel;
    tg_view_numel(&t.view, &numel);
    if (tg_view_is_compact_rowmajor(&t.view) && t.view.offset == 0 && numel == t.buf->numel) {
        if ((s = tg_handle_new_tensor(t.buf, &t.view, out))) tg_tensor_unref(&t);
        return s;
    }
    return materialize(&t, t.view.ndim, t.view.shape, out);
}

/* ---- matmul -------------------------------------------------------------------------------- */
TGRAD_API tgrad_status tgrad_matmul(tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out) {
    return tgrad_matmul_ex(a, b, TGRAD_DTYPE_BF16, out);
}

static _Thread_local int32_t matmul_order = TGRAD_MATMUL_ORDER_BLOCK32; /* the default since 0.2 */

TGRAD_API tgrad_status tgrad_set_matmul_order(int32_t order) {
    if (order != TGRAD_MATMUL_ORDER_PAIRWISE && order != TGRAD_MATMUL_ORDER_BLOCK32)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_matmul_order: order %d is not PAIRWISE (0) or BLOCK32 (1)",
                       (int)order);
    matmul_order = order;
    return TGRAD_OK;
}

TGRAD_API int32_t tgrad_matmul_order(void) { return matmul_order; }

TGRAD_API tgrad_status tgrad_matmul_ex(tgrad_tensor_t a, tgrad_tensor_t b, int32_t out_dtype, tgrad_tensor_t *out) {
    return tgrad_matmul_ordered(a, b, out_dtype, matmul_order, out);
}

TGRAD_API tgrad_status tgrad_matmul_ordered(tgrad_tensor_t a, tgrad_tensor_t b, int32_t out_dtype, int32_t order,
                                            tgrad_tensor_t *out) {
    CHECK_OUT(out, "matmul");
    if (order != TGRAD_MATMUL_ORDER_PAIRWISE && order != TGRAD_MATMUL_ORDER_BLOCK32)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "matmul: order %d is not PAIRWISE (0) or BLOCK32 (1)", (int)order);
    tg_tensor ta, tb;
    tgrad_status s = tg_handle_get_pair(a, b, &ta, &tb);
    if (s) return s;
    int64_t numel = 0;
    tg_matmul_views mv;
    s = tg_view_matmul_batched(&ta.view, &tb.view, "matmul", &mv);
    const tg_view ov = s ? ta.view : mv.out;
    if (!s && (ta.buf->dtype != TGRAD_DTYPE_BF16 || tb.buf->dtype != TGRAD_DTYPE_BF16))
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "matmul: operands are %s and %s; matmul takes bfloat16 (cast first)",
                    tg_dtype_name(ta.buf->dtype), tg_dtype_name(tb.buf->dtype));
    if (!s && out_dtype != TGRAD_DTYPE_BF16 && out_dtype != TGRAD_DTYPE_F32)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "matmul: out_dtype %d is not bfloat16 (%d) or float32 (%d)",
                    (int)out_dtype, TGRAD_DTYPE_BF16, TGRAD_DTYPE_F32);
    if (!s && ta.buf->device != tb.buf->device) {
        char sa[160], sb[160];
        tg_format_shape(sa, sizeof sa, &ta.view);
        tg_format_shape(sb, sizeof sb, &tb.view);
        s = tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "matmul: %s on %s @ %s on %s: operands live on different devices", sa,
                    tg_device_name(ta.buf->device), sb, tg_device_name(tb.buf->device));
    }
    /* On a GPU device a float32 result (the accumulators) renders on the naive and tiled routes
     * (gen/render.c; decide_matmul keeps it off tc). */
    /* Batched products run on the GPU routes too, one product per threadgroup z (docs/kernels.md):
     * a batch of more than TG_GEN_MAX_GRID_Z products is refused there before anything is allocated. */
    if (!s && ov.ndim > 2 && ta.buf->device != TGRAD_DEVICE_CPU) {
        int64_t batches = 1;
        for (int32_t d = 0; d < ov.ndim - 2; d++)
            if (tg_mul_ovf(batches, ov.shape[d], &batches)) batches = INT64_MAX;
        if (batches > TG_GEN_MAX_GRID_Z)
            s = tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE,
                        "matmul: a batch of %lld products on %s (the GPU routes run at most %d, one per threadgroup z)",
                        (long long)batches, tg_device_name(ta.buf->device), (int)TG_GEN_MAX_GRID_Z);
    }
    if (!s) tg_view_numel(&ov, &numel);
    if (!s && numel > INT64_MAX / tg_dtype_size(out_dtype))
        s = tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "matmul: %lld float32 results do not fit in int64 bytes", (long long)numel);
    if (!s) s = tg_memory_admit_typed(numel, tg_dtype_size(out_dtype), "matmul");
    tg_node *n = s ? NULL : tg_node_new(TG_OP_MATMUL, 2);
    if (!s && !n) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate a graph node");
    tg_buffer *buf = NULL;
    if (!s) {
        n->inputs[0] = (tg_node_input){ ta.buf, mv.a };
        n->inputs[1] = (tg_node_input){ tb.buf, mv.b };
        n->out = ov;
        n->dtype = out_dtype;
        n->params.matmul_order = order;
        if ((s = tg_buffer_new_typed(numel, out_dtype, n, &buf))) free(n);
        else buf->device = ta.buf->device;
    }
    if (s) {
        tg_tensor_unref(&ta);
        tg_tensor_unref(&tb);
        return s;
    }
    /* the node owns both input references now; the handle sees the result without the axes
     * 1-D operands added */
    if ((s = tg_handle_new_tensor(buf, &mv.result, out))) tg_buffer_release(buf);
    return s;
}

/* ---- devices --------------------------------------------------------------------------------- */
PROPERTY(tgrad_tensor_device, int32_t, device, *device = t.buf->device)

TGRAD_API tgrad_status tgrad_tensor_to(tgrad_tensor_t tensor, int32_t device, tgrad_tensor_t *out) {
    CHECK_OUT(out, "tensor_to");
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    /* bf16 runs everywhere; float32 and int32 live on a device as the reductions' inputs and
     * results, and every one of them (bool too) as gather and concat operands (every other kind
     * refuses them when a node is made) */
    int32_t dt = t.buf->dtype;
    if (!(s = tg_device_ready(device)) && device != TGRAD_DEVICE_CPU && dt != TGRAD_DTYPE_BF16 &&
        dt != TGRAD_DTYPE_F32 && dt != TGRAD_DTYPE_I32 && dt != TGRAD_DTYPE_BOOL)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "tensor_to: %s tensors stay on the CPU (bfloat16, float32, int32 and bool move to %s)",
                    tg_dtype_name(dt), tg_device_name(device));
    if (s) {
        tg_tensor_unref(&t);
        return s;
    }
    if (t.buf->device == device) { /* already there: the same view */
        if ((s = tg_handle_new_tensor(t.buf, &t.view, out))) tg_tensor_unref(&t);
        return s;
    }
    /* The view's shape obeys the size rule (view.c), so its contiguous layout exists and its byte
     * count fits in int64. */
    int64_t numel;
    tg_view_numel(&t.view, &numel);
    const size_t es = (size_t)tg_dtype_size(dt);
    tg_view dst;
    tg_view_contiguous(t.view.ndim, t.view.shape, &dst);
    char *compact = NULL;
    tg_buffer *b = NULL;
    s = tg_memory_admit(numel, "tensor_to");
    if (!s) s = tg_buffer_realize(t.buf);
    if (!s && numel > 0) { /* the view, compact, on the host */
        compact = tg_malloc((size_t)numel * es);
        if (!compact) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "tensor_to: cannot stage %lld bytes", (long long)numel * (long long)es);
    }
    if (!s && numel > 0) {
        if (t.buf->device == TGRAD_DEVICE_CPU) {
            tg_cpu_copy_view_sized(t.buf->data, &t.view, compact, (int32_t)es);
        } else {
            size_t whole_bytes = tg_buffer_bytes(t.buf);
            char *whole = tg_malloc(whole_bytes);
            if (!whole) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "tensor_to: cannot stage %zu bytes", whole_bytes);
            if (!s) s = tg_device_download(t.buf->device, t.buf->dev_mem, whole, whole_bytes);
            if (!s) tg_cpu_copy_view_sized(whole, &t.view, compact, (int32_t)es);
            free(whole);
        }
    }
    if (!s) s = tg_buffer_new_typed(numel, dt, NULL, &b);
    if (!s) {
        b->device = device;
        s = tg_buffer_storage(b);
        if (!s && numel > 0) {
            if (device == TGRAD_DEVICE_CPU) memcpy(b->data, compact, (size_t)numel * es);
            else s = tg_device_upload(device, b->dev_mem, compact, (size_t)numel * es);
        }
        if (!s) s = tg_handle_new_tensor(b, &dst, out);
        if (s) tg_buffer_release(b);
    }
    free(compact);
    tg_tensor_unref(&t);
    return s;
}

/* ---- sharing memory ------------------------------------------------------------------------- */
/* The lowest and highest element offsets of a view with elements, relative to element [0, ...],
 * in checked arithmetic: the strides are the caller's, any int64. False when a span, their sums
 * or the distance between the two ends overflows int64. */
static bool external_span(int32_t ndim, const int64_t *shape, const int64_t *strides, int64_t *lo, int64_t *total) {
    int64_t l = 0, h = 0, span;
    for (int32_t i = 0; i < ndim; i++) {
        if (tg_mul_ovf(strides[i], shape[i] - 1, &span)) return false;
        if (tg_add_ovf(span < 0 ? l : h, span, span < 0 ? &l : &h)) return false;
    }
    *lo = l;
    return !tg_sub_ovf(h, l, total);
}

TGRAD_API tgrad_status tgrad_tensor_from_external(const uint16_t *data, int64_t extent, int32_t ndim,
                                                  const int64_t *shape, const int64_t *strides,
                                                  tgrad_deleter deleter, void *context, tgrad_tensor_t *out) {
    CHECK_OUT(out, "tensor_from_external");
    if (ndim < 0 || ndim > TGRAD_MAX_DIMS)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_from_external: ndim %d outside 0..%d", ndim, TGRAD_MAX_DIMS);
    if (ndim > 0 && !shape) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_from_external: shape is NULL");
    if (extent < 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_from_external: extent is negative");
    if (extent > 0 && !data) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_from_external: data is NULL");
    if (extent > INT64_MAX / 2) /* a buffer's byte count fits in int64, as for every other buffer */
        return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "tensor_from_external: the byte count of %lld elements overflows 64 bits",
                       (long long)extent);
    tg_view v;
    tgrad_status s = tg_view_contiguous(ndim, shape, &v);
    if (s) return s;
    int64_t numel;
    tg_view_numel(&v, &numel);
    if (strides) {
        /* Every element's offset must lie in [0, extent). A view with no element reaches nothing,
         * whatever its strides; otherwise data[0] is its lowest element. */
        for (int32_t i = 0; i < ndim; i++) v.strides[i] = strides[i];
        int64_t lo = 0, total = 0;
        if (numel > 0 && !external_span(ndim, shape, strides, &lo, &total))
            return tg_fail(TGRAD_ERR_SIZE_OVERFLOW, "tensor_from_external: stride arithmetic overflows 64 bits");
        if (numel > 0 && total >= extent)
            return tg_fail(TGRAD_ERR_VIEW_NOT_EXPRESSIBLE,
                           "tensor_from_external: the view reaches element %lld of a %lld-element buffer",
                           (long long)total, (long long)extent);
        v.offset = -lo; /* lo >= -total: fits */
        /* An axis of extent 1 never moves along its stride, so the caller may pass any value; one
         * reaching outside the buffer is recorded as 0, so that no kernel forms an address with it
         * (a view with elements then has every stride inside its buffer). */
        for (int32_t i = 0; i < ndim && numel > 0; i++)
            if (shape[i] == 1 && (strides[i] >= extent || strides[i] <= -extent)) v.strides[i] = 0;
    } else if (numel > extent) {
        return tg_fail(TGRAD_ERR_BUFFER_TOO_SMALL, "tensor_from_external: %lld elements in a %lld-element buffer",
                       (long long)numel, (long long)extent);
    }
    tg_buffer *b = NULL;
    if ((s = tg_buffer_new(extent, NULL, &b))) return s;
    b->data = (uint16_t *)data; /* libtgrad never writes through it */
    b->external = true, b->deleter = deleter, b->deleter_context = context;
    if (data) atomic_fetch_add(&tg_live_bytes_, extent * 2);
    snprintf(b->route, sizeof b->route, "external");
    if ((s = tg_handle_new_tensor(b, &v, out))) {
        b->deleter = NULL; /* refused: the caller keeps ownership */
        tg_buffer_release(b);
    }
    return s;
}

TGRAD_API tgrad_status tgrad_tensor_data(tgrad_tensor_t tensor, const uint16_t **data) {
    CHECK_OUT(data, "tensor_data");
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    if (t.buf->device != TGRAD_DEVICE_CPU)
        s = tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "tensor_data: the tensor lives on %s; move it with tgrad_tensor_to",
                    tg_device_name(t.buf->device));
    else if (t.buf->dtype != TGRAD_DTYPE_BF16)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "tensor_data: the tensor holds %s, not bfloat16 bits",
                    tg_dtype_name(t.buf->dtype));
    if (!s) s = tg_buffer_realize(t.buf);
    /* A view with elements lies inside its buffer; an empty one may carry any offset (nothing is
     * read through it), so its address is the buffer's. */
    int64_t numel;
    tg_view_numel(&t.view, &numel);
    if (!s) *data = t.buf->data && numel > 0 ? t.buf->data + t.view.offset : t.buf->data;
    tg_tensor_unref(&t);
    return s;
}
