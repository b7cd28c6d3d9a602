/* The bit-preserving view copy (materializing a view into compact row-major storage). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

/* ---- bit-preserving view copy ---- */
/* The view has an element (callers skip empty ones) and so lies inside src's buffer: each offset
 * summed here is an element's, or a partial sum between the lowest and highest element's. The
 * runs of the last axis are copied along the axis before it in one loop, the offset stepped by
 * its stride (a permuted [P, M, 32] read back as [M, P, 32]: 64-byte runs, one per step). */
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
        int64_t runs = nd >= 2 ? v->shape[nd - 2] : 1, run_stride = nd >= 2 ? v->strides[nd - 2] : 0; \
        for (;;) {                                                                             \
            int64_t off = v->offset;                                                           \
            for (int32_t d = 0; d < nd - 2; d++) off += idx[d] * v->strides[d];                \
            for (int64_t r = 0; r < runs; r++, off += run_stride, dst += inner) {              \
                const T *s = src + off;                                                        \
                if (inner_stride == 1) memcpy(dst, s, (size_t)inner * sizeof(T));              \
                else for (int64_t i = 0; i < inner; i++) dst[i] = s[i * inner_stride];         \
            }                                                                                  \
            int32_t d = nd - 3;                                                                \
            while (d >= 0 && ++idx[d] == v->shape[d]) idx[d--] = 0;                            \
            if (d < 0) return;                                                                 \
        }                                                                                      \
    }

/* bf16 (2-byte), f32/i32 (4-byte) and bool (1-byte) elements: one body. */
COPY_VIEW(tg_cpu_copy_view, uint16_t)
COPY_VIEW(tg_cpu_copy_view32, uint32_t)
COPY_VIEW(tg_cpu_copy_view8, uint8_t)

/* ---- the copy kind's executor: large copies over the pool ---- */
/* From this many bytes a copy is split over the threads (one thread reads and writes some
 * 10 GB/s in 64-byte runs; a prefill of 512 tokens copies 9 MB a layer back from the packed
 * products' panels). */
enum { COPY_SHARE_BYTES = 1 << 20 };

typedef struct {
    const char *src;
    tg_view v; /* coalesced (tg_views_coalesce): the tasks split its first axis */
    char *dst;
    int32_t size;
    int64_t per_row, tasks; /* elements below the first axis */
} copy_job;

static void copy_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    const copy_job *J = arg;
    int64_t rows = J->v.shape[0], r0 = rows * task / J->tasks, r1 = rows * (task + 1) / J->tasks;
    if (r0 == r1) return;
    tg_view part = J->v;
    part.offset += r0 * part.strides[0], part.shape[0] = r1 - r0;
    tg_cpu_copy_view_sized(J->src, &part, J->dst + (size_t)(r0 * J->per_row) * (size_t)J->size, J->size);
}

void tg_cpu_copy_view_pool(const void *src, const tg_view *v, void *dst, int32_t size) {
    int64_t numel = 1;
    for (int32_t d = 0; d < v->ndim; d++) numel *= v->shape[d];
    if (numel == 0) return;
    copy_job J = { .src = src, .v = *v, .dst = dst, .size = size };
    tg_view *walk = &J.v;
    tg_views_coalesce(&walk, 1);
    int32_t threads = (double)numel * size >= COPY_SHARE_BYTES ? tg_pool_threads() : 1;
    if (J.v.ndim < 2 || threads == 1) { /* one run (a plain memcpy), or too small to share */
        tg_cpu_copy_view_sized(src, &J.v, dst, size);
        return;
    }
    J.per_row = numel / J.v.shape[0];
    J.tasks = J.v.shape[0] < threads ? J.v.shape[0] : threads;
    run_tasks(J.tasks, threads, copy_task, &J);
}
