/* A schedule's buffer-to-step index (step_index.c): an open-addressing hash map keyed by buffer
 * address, holding for each buffer the schedule names the step that computes it and what the
 * steps read of it. It replaces linear scans over the steps, so that building, planning and
 * explaining a schedule of n steps is O(n) (docs/architecture.md, "The walk and the index"). */
#ifndef TGRAD_STEP_INDEX_H
#define TGRAD_STEP_INDEX_H

#include "internal.h"

typedef struct tg_index_entry {
    const tg_buffer *buf; /* NULL: an empty slot */
    int32_t step;         /* the step computing buf; -1: none (realized, or not yet emitted) */
    int32_t last;         /* the last step reading buf; -1: none yet */
    int64_t readers;      /* the steps' reads of buf, with multiplicity */
} tg_index_entry;

typedef struct tg_step_index {
    tg_index_entry *slots; /* cap slots (a power of two), at most a quarter of them used */
    size_t cap, count;
} tg_step_index;

/* b's entry, or NULL when b has none. */
TG_HIDDEN tg_index_entry *tg_step_index_find(const tg_step_index *x, const tg_buffer *b);
/* b's entry, added (step and last -1, no readers) when it has none; NULL when out of memory (the
 * index is then as it was). */
TG_HIDDEN tg_index_entry *tg_step_index_add(tg_step_index *x, const tg_buffer *b);
TG_HIDDEN void tg_step_index_free(tg_step_index *x);

/* The scheduler's work on this thread since its latest schedule build began (for
 * tgrad_debug_schedule_work: tests show it grows linearly, the benchmark reads build_ns). */
typedef struct tg_schedule_work {
    int64_t steps, reads, probes, release_checks, build_ns;
} tg_schedule_work;
extern TG_HIDDEN _Thread_local tg_schedule_work tg_schedule_work_;

#endif
