/* Bit-preserving block copies for concat and gather (block_copy.h). */
#include <string.h>

#include "block_copy.h"

/* Outputs below this many bytes are copied on the calling thread (waking the pool costs more). */
enum { THREADED_BYTES = 1 << 18, TASKS_PER_THREAD = 4 };

/* A view whose last axis does not step by one element (a transposed operand): each plane of its
 * last two axes copied in TILE x TILE tiles, so that the reads along a column and the writes along
 * a row both stay within a few cache lines (walking the rows element by element misses the cache
 * on every read: ~15x slower on a [4096, 2048] transpose). */
enum { TILE = 32 };
#define COPY_TILED(fn, T)                                                                          \
    static void fn(const T *src, const tg_view *v, T *dst) {                                        \
        int32_t nd = v->ndim;                                                                       \
        int64_t R = v->shape[nd - 2], C = v->shape[nd - 1], sr = v->strides[nd - 2], sc = v->strides[nd - 1]; \
        int64_t idx[TGRAD_MAX_DIMS] = { 0 }, planes = 1;                                            \
        for (int32_t d = 0; d < nd - 2; d++) planes *= v->shape[d];                                 \
        for (int64_t p = 0; p < planes; p++, dst += R * C) {                                        \
            int64_t off = v->offset;                                                                \
            for (int32_t d = 0; d < nd - 2; d++) off += idx[d] * v->strides[d];                     \
            for (int64_t i0 = 0; i0 < R; i0 += TILE)                                                \
                for (int64_t j0 = 0; j0 < C; j0 += TILE) {                                          \
                    int64_t i1 = i0 + TILE < R ? i0 + TILE : R, j1 = j0 + TILE < C ? j0 + TILE : C; \
                    for (int64_t j = j0; j < j1; j++)                                               \
                        for (int64_t i = i0; i < i1; i++) dst[i * C + j] = src[off + i * sr + j * sc]; \
                }                                                                                   \
            for (int32_t d = nd - 3; d >= 0 && ++idx[d] == v->shape[d]; d--) idx[d] = 0;            \
        }                                                                                           \
    }
COPY_TILED(copy_tiled16, uint16_t)
COPY_TILED(copy_tiled32, uint32_t)

/* Any element size: 2 and 4 bytes through the view copy (tiled for a last axis that does not
 * step by one), others element by element. */
static void copy_view_any(const void *src, const tg_view *v, void *dst, int32_t esize) {
    int32_t nd = v->ndim;
    if ((esize == 2 || esize == 4) && nd >= 2 && v->strides[nd - 1] != 1 && v->shape[nd - 1] >= TILE &&
        v->shape[nd - 2] >= TILE) {
        if (esize == 2) copy_tiled16(src, v, dst);
        else copy_tiled32(src, v, dst);
        return;
    }
    if (esize == 2 || esize == 4) {
        tg_cpu_copy_view_sized(src, v, dst, esize);
        return;
    }
    int64_t idx[TGRAD_MAX_DIMS] = { 0 }, numel = 1;
    for (int32_t d = 0; d < v->ndim; d++) numel *= v->shape[d];
    const char *s = src;
    char *o = dst;
    for (int64_t i = 0; i < numel; i++) {
        int64_t off = v->offset;
        for (int32_t d = 0; d < v->ndim; d++) off += idx[d] * v->strides[d];
        memcpy(o + i * esize, s + off * esize, (size_t)esize);
        for (int32_t d = v->ndim - 1; d >= 0 && ++idx[d] == v->shape[d]; d--) idx[d] = 0;
    }
}

static bool empty(const tg_view *v) {
    for (int32_t d = 0; d < v->ndim; d++)
        if (v->shape[d] == 0) return true;
    return false;
}

/* Part p of `parts` of block b: a slice of its first axis longer than 1 (the compact destination
 * of a slice of that axis is one run); a block with one element is part 0's alone. */
static void copy_part(tg_block b, int32_t esize, int64_t p, int64_t parts) {
    if (empty(&b.view)) return;
    int32_t d = 0;
    while (d < b.view.ndim && b.view.shape[d] == 1) d++;
    if (d == b.view.ndim) {
        if (p == 0) copy_view_any(b.src, &b.view, b.dst, esize);
        return;
    }
    int64_t ext = b.view.shape[d], lo = ext * p / parts, hi = ext * (p + 1) / parts, run = 1;
    if (lo == hi) return;
    for (int32_t k = d + 1; k < b.view.ndim; k++) run *= b.view.shape[k];
    b.view.offset += lo * b.view.strides[d];
    b.view.shape[d] = hi - lo;
    copy_view_any(b.src, &b.view, (char *)b.dst + lo * run * esize, esize);
}

typedef struct job {
    int64_t units, parts, tasks;
    int32_t esize;
    tg_block_fn fn;
    const void *ctx;
} job;

/* Task t: units [t * units / tasks, ...) whole (parts == 1), or part t % parts of unit t / parts. */
static void run_task(int64_t t, int32_t worker, void *arg) {
    (void)worker;
    const job *J = arg;
    tg_block b;
    if (J->parts == 1) {
        for (int64_t u = t * J->units / J->tasks; u < (t + 1) * J->units / J->tasks; u++) {
            J->fn(u, J->ctx, &b);
            copy_part(b, J->esize, 0, 1);
        }
    } else {
        J->fn(t / J->parts, J->ctx, &b);
        copy_part(b, J->esize, t % J->parts, J->parts);
    }
}

void tg_copy_blocks(int64_t units, int32_t esize, int64_t total_bytes, tg_block_fn fn, const void *ctx) {
    if (units <= 0) return;
    int64_t want = total_bytes >= THREADED_BYTES ? (int64_t)tg_pool_threads() * TASKS_PER_THREAD : 1;
    job J = { .units = units, .parts = 1, .tasks = 1, .esize = esize, .fn = fn, .ctx = ctx };
    if (want <= 1) {
        run_task(0, 0, &J);
        return;
    }
    if (units >= want) J.tasks = want;
    else J.parts = (want + units - 1) / units, J.tasks = units * J.parts;
    tg_pool_run(J.tasks, run_task, &J);
}
