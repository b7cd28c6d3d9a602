/* The cast kind: tgrad_cast checks and records the node; tg_cast_execute converts each element of
 * the input's view into the compact output (docs/numerics.md, "Casts"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu/runs.h"
#include "../kinds.h"

static bool tensor_dtype(int32_t d) {
    return d == TGRAD_DTYPE_BF16 || d == TGRAD_DTYPE_F32 || d == TGRAD_DTYPE_I32 || d == TGRAD_DTYPE_BOOL;
}
static bool device_dtype(int32_t d) { return d == TGRAD_DTYPE_BF16 || d == TGRAD_DTYPE_F32; }

TGRAD_API tgrad_status tgrad_cast(tgrad_tensor_t x, int32_t dtype, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cast: out is NULL");
    if (!tensor_dtype(dtype))
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "cast: %d is not a tensor dtype (bfloat16 %d, float32 %d, int32 %d, bool %d)",
                       (int)dtype, TGRAD_DTYPE_BF16, TGRAD_DTYPE_F32, TGRAD_DTYPE_I32, TGRAD_DTYPE_BOOL);
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(x, &t);
    if (s) return s;
    if (t.buf->dtype == dtype) { /* nothing to convert: the same view */
        if ((s = tg_handle_new_tensor(t.buf, &t.view, out))) tg_tensor_unref(&t);
        return s;
    }
    tg_view ov;
    s = tg_kind_check_device(TG_OP_CAST, t.buf->device, "cast");
    /* a GPU casts between bfloat16 and float32, int32 to either and either to int32 (route cast:
     * a NaN or an out-of-range value flagged by the kernel fails the cast, tg_cast_flagged); bool
     * tensors live on the CPU only */
    bool from_int = t.buf->dtype == TGRAD_DTYPE_I32, to_int = dtype == TGRAD_DTYPE_I32;
    bool renders = (device_dtype(t.buf->dtype) || from_int) && (device_dtype(dtype) || to_int) && !(from_int && to_int);
    if (!s && t.buf->device != TGRAD_DEVICE_CPU && !renders)
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "cast: %s -> %s runs on the CPU only; the tensor lives on %s (%s)",
                    tg_dtype_name(t.buf->dtype), tg_dtype_name(dtype), tg_device_name(t.buf->device),
                    "bfloat16 <-> float32 and int32 <-> either run on devices");
    if (!s) s = tg_view_contiguous(t.view.ndim, t.view.shape, &ov);
    return tg_kind_make_unary(s, TG_OP_CAST, &t, &ov, dtype, NULL, "cast", out);
}

/* The failure of a cast to int32 at element i (the CPU's loop and a device's flags alike). */
static tgrad_status no_int32(int64_t i) {
    return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "cast: element %lld is NaN or outside the int32 range", (long long)i);
}

/* One element, from its bits in dtype `from` to dtype `to`; false for a float that has no i32. */
static bool convert(const void *src, int32_t from, void *dst, int32_t to) {
    double v;
    if (from == TGRAD_DTYPE_BF16) v = tg_bf16_to_f32(*(const uint16_t *)src);
    else if (from == TGRAD_DTYPE_F32) v = *(const float *)src;
    else if (from == TGRAD_DTYPE_BOOL) v = *(const uint8_t *)src;
    else v = *(const int32_t *)src; /* exact in double */
    if (to == TGRAD_DTYPE_BOOL) {
        *(uint8_t *)dst = v != 0; /* NaN is nonzero: true, as numpy and torch */
    } else if (to == TGRAD_DTYPE_I32) {
        if (!(v > -2147483649.0 && v < 2147483648.0)) return false; /* NaN or out of range */
        *(int32_t *)dst = (int32_t)v;                               /* truncation toward zero */
    } else if (to == TGRAD_DTYPE_F32) {
        *(float *)dst = (float)v; /* RNE for an i32; exact from bf16 and bool; f32 -> f32 never runs */
    } else {
        *(uint16_t *)dst = from == TGRAD_DTYPE_F32 ? tg_acc_to_bf16((float)v) : tg_f64_to_bf16(v);
    }
    return true;
}

/* bfloat16 <-> float32, the casts a training step runs (gradients, master weights, losses): row by
 * row along the last axis, with the per-element conversions convert() makes (widening exact; the
 * narrowing RNE, any NaN the canonical one), so the same bytes. */
static void cast_float_rows(const tg_view *v, int32_t from, const void *src, void *dst, int64_t numel) {
    for (int64_t lin = 0, run, off, step; lin < numel; lin += run) { /* the runs of cpu/runs.h */
        run = tg_run_at(v->ndim, v->shape, 1, &v, lin, numel - lin, &off, &step);
        /* step 1 spelled apart: the compiler vectorizes that loop (the same conversion per element) */
        if (from == TGRAD_DTYPE_BF16) {
            const uint16_t *s = (const uint16_t *)src + off;
            float *o = (float *)dst + lin;
            if (step == 1)
                for (int64_t i = 0; i < run; i++) o[i] = tg_bf16_to_f32(s[i]);
            else
                for (int64_t i = 0; i < run; i++) o[i] = tg_bf16_to_f32(s[i * step]);
        } else {
            const float *s = (const float *)src + off;
            uint16_t *o = (uint16_t *)dst + lin;
            if (step == 1)
                for (int64_t i = 0; i < run; i++) o[i] = tg_acc_to_bf16(s[i]);
            else
                for (int64_t i = 0; i < run; i++) o[i] = tg_acc_to_bf16(s[i * step]);
        }
    }
}

tgrad_status tg_cast_execute(const tg_step *st) {
    const tg_node_input *in = &st->inputs[0];
    const tg_view *v = &in->view;
    int32_t from = in->buf->dtype, to = st->buf->dtype, isz = tg_dtype_size(from), osz = tg_dtype_size(to);
    const char *src = (const char *)in->buf->data;
    char *dst = (char *)st->buf->data;
    int64_t numel = st->buf->numel, idx[TGRAD_MAX_DIMS] = { 0 };
    if ((from == TGRAD_DTYPE_BF16 && to == TGRAD_DTYPE_F32) || (from == TGRAD_DTYPE_F32 && to == TGRAD_DTYPE_BF16)) {
        cast_float_rows(v, from, src, dst, numel);
        return TGRAD_OK;
    }
    for (int64_t i = 0; i < numel; i++) {
        int64_t off = v->offset;
        for (int32_t d = 0; d < v->ndim; d++) off += idx[d] * v->strides[d];
        if (!convert(src + off * isz, from, dst + i * osz, to)) return no_int32(i);
        for (int32_t d = v->ndim - 1; d >= 0 && ++idx[d] == v->shape[d]; d--) idx[d] = 0;
    }
    return TGRAD_OK;
}

/* The cast kind's gpu_finish (kinds.h): a float -> int32 kernel flagged its NaN and out-of-range
 * elements; the cast fails as the CPU's does, naming the first. */
tgrad_status tg_cast_flagged(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged) {
    (void)st, (void)flagged;
    for (int64_t i = 0; i < nflags; i++)
        if (flags[i]) return no_int32(i);
    return TGRAD_OK;
}
