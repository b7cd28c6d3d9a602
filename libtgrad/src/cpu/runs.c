/* The threaded split of an output into ranges (runs.h). */
#include "runs.h"

typedef struct {
    tg_range_fn fn;
    const void *job;
    int64_t numel, per_task;
} ranges_job;

static void range_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    const ranges_job *R = arg;
    int64_t lin = task * R->per_task;
    R->fn(R->job, lin, R->numel - lin < R->per_task ? R->numel - lin : R->per_task);
}

void tg_run_ranges(int64_t numel, int64_t alone, int64_t task_min, int64_t align, tg_range_fn fn, const void *job) {
    int32_t threads = numel < alone ? 1 : tg_pool_threads();
    if (threads == 1) {
        fn(job, 0, numel);
        return;
    }
    int64_t per_task = (numel + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
    if (per_task < task_min) per_task = task_min;
    ranges_job R = { fn, job, numel, (per_task + align - 1) / align * align };
    tg_pool_run((numel + R.per_task - 1) / R.per_task, range_task, &R);
}
