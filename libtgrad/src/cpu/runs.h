/* The strided walk that the CPU's elementwise-shaped executors share (compare/where, the float32
 * elementwise pass, the optimizer step): the compact output's elements [lin, lin + n) taken in runs
 * along the last axis, each operand read through its view (already broadcast to the output's
 * shape), and the threaded split of [0, numel) into ranges over the pool. Each executor keeps its
 * own per-element loop; elements are computed alone, so neither the runs nor the split can change
 * a byte. */
#ifndef TGRAD_CPU_RUNS_H
#define TGRAD_CPU_RUNS_H

#include "../internal.h"

/* The run that starts at output element lin of shape[ndim]: returns its length (n at most, never
 * past the end of the last axis) and, for each of the nview operands, off[k] the element offset of
 * its first element and step[k] its stride along the last axis (0 for a 0-d output). */
static inline int64_t tg_run_at(int32_t ndim, const int64_t *shape, int32_t nview, const tg_view *const *view,
                                int64_t lin, int64_t n, int64_t *off, int64_t *step) {
    int64_t idx[TGRAD_MAX_DIMS] = { 0 }, rem = lin, run = n;
    for (int32_t i = ndim - 1; i >= 0; i--) idx[i] = rem % shape[i], rem /= shape[i];
    if (ndim && run > shape[ndim - 1] - idx[ndim - 1]) run = shape[ndim - 1] - idx[ndim - 1];
    for (int32_t k = 0; k < nview; k++) {
        const tg_view *v = view[k];
        int64_t o = v->offset;
        for (int32_t i = 0; i < ndim; i++) o += idx[i] * v->strides[i];
        off[k] = o;
        step[k] = ndim ? v->strides[ndim - 1] : 0;
    }
    return run;
}

/* Output elements [lin, lin + n) of job. */
typedef void (*tg_range_fn)(const void *job, int64_t lin, int64_t n);

/* fn over [0, numel): on this thread alone below `alone` elements (or with one pool thread), else
 * a few tasks per pool thread, each at least task_min elements and a multiple of align (whole cache
 * lines, so that threads never share one), the last task shorter. */
TG_HIDDEN void tg_run_ranges(int64_t numel, int64_t alone, int64_t task_min, int64_t align, tg_range_fn fn,
                             const void *job);

#endif
