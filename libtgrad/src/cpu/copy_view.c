/* The bit-preserving view copy (materializing a view into compact row-major storage). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

/* ---- bit-preserving view copy ---- */
/* The view has an element (callers skip empty ones) and so lies inside src's buffer: each offset
 * summed here is an element's, or a partial sum between the lowest and highest element's. */
#define COPY_VIEW(fn, T)                                                                      \
    void fn(const T *src, const tg_view *v, T *dst) {                                          \
        int64_t idx[TGRAD_MAX_DIMS] = { 0 };                                                   \
        int32_t nd = v->ndim;                                                                  \
        if (nd == 0) {                                                                         \
            dst[0] = src[v->offset];                                                           \
            return;                                                                            \
        }                                                                                      \
        for (int32_t d = 0; d < nd; d++)                                                       \
            if (v->shape[d] == 0) return;                                                      \
        int64_t inner = v->shape[nd - 1], inner_stride = v->strides[nd - 1];                   \
        for (;;) {                                                                             \
            int64_t off = v->offset;                                                           \
            for (int32_t d = 0; d < nd - 1; d++) off += idx[d] * v->strides[d];                \
            const T *s = src + off;                                                            \
            if (inner_stride == 1) {                                                           \
                memcpy(dst, s, (size_t)inner * sizeof(T));                                     \
            } else {                                                                           \
                for (int64_t i = 0; i < inner; i++) dst[i] = s[i * inner_stride];              \
            }                                                                                  \
            dst += inner;                                                                      \
            int32_t d = nd - 2;                                                                \
            while (d >= 0 && ++idx[d] == v->shape[d]) idx[d--] = 0;                            \
            if (d < 0) return;                                                                 \
        }                                                                                      \
    }

/* bf16 (2-byte), f32/i32 (4-byte) and bool (1-byte) elements: one body. */
COPY_VIEW(tg_cpu_copy_view, uint16_t)
COPY_VIEW(tg_cpu_copy_view32, uint32_t)
COPY_VIEW(tg_cpu_copy_view8, uint8_t)
