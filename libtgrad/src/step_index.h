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

/* All zero is an empty index (no table yet). */
typedef struct tg_step_index {
    tg_index_entry *slots; /* cap slots (a power of two), at most a quarter of them used */
    size_t cap, count;
    int64_t probes;        /* slots inspected so far (tgrad_debug_schedule_work) */
} tg_step_index;

/* b's entry, or NULL when b has none (the probes are counted in x->probes). Finding may move
 * entries: a pointer from before is stale. */
TG_HIDDEN tg_index_entry *tg_step_index_find(tg_step_index *x, const tg_buffer *b);
/* b's entry, added (step and last -1, no readers) when it has none; NULL when out of memory (the
 * index is then as it was). Adding may move every entry (pointers from before are stale). */
TG_HIDDEN tg_index_entry *tg_step_index_add(tg_step_index *x, const tg_buffer *b);
TG_HIDDEN void tg_step_index_free(tg_step_index *x);

#endif
