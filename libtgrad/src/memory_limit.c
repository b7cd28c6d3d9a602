/* The memory limit: the most bytes one tensor's buffer may hold. A tensor over it is refused with
 * TGRAD_ERR_OUT_OF_MEMORY when it is made (host data copied in, a graph node, a copy to another
 * device), before anything is allocated, instead of at realize time after trying to allocate it.
 * Default: the machine's physical memory (sysconf). TGRAD_MEMORY_LIMIT=<bytes> at start-up or
 * tgrad_set_memory_limit() change it; 0 restores the default. Process-wide; an atomic, so any
 * thread may read or set it. */
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

static _Atomic int64_t limit_set; /* 0: the default */
static int64_t physical;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int64_t parse_bytes(const char *text) {
    if (!text || !*text) return 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    return (end && *end == '\0' && v > 0) ? (int64_t)v : 0; /* anything else: the default */
}

static void init(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    physical = (pages > 0 && page > 0 && pages <= INT64_MAX / page) ? (int64_t)pages * page : INT64_MAX;
    atomic_store(&limit_set, parse_bytes(getenv("TGRAD_MEMORY_LIMIT")));
}

TGRAD_API int64_t tgrad_memory_limit(void) {
    pthread_once(&once, init);
    int64_t v = atomic_load(&limit_set);
    return v ? v : physical;
}

TGRAD_API tgrad_status tgrad_set_memory_limit(int64_t bytes) {
    pthread_once(&once, init);
    if (bytes < 0)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_memory_limit: %lld bytes is negative (0 restores the default)",
                       (long long)bytes);
    atomic_store(&limit_set, bytes);
    return TGRAD_OK;
}

tgrad_status tg_memory_admit(int64_t numel, const char *fn) { return tg_memory_admit_typed(numel, 2, fn); }

tgrad_status tg_memory_admit_typed(int64_t numel, int32_t esize, const char *fn) {
    int64_t limit = tgrad_memory_limit();
    if (numel <= limit / esize) return TGRAD_OK; /* then numel * esize <= limit: no overflow */
    return tg_fail(TGRAD_ERR_OUT_OF_MEMORY,
                   "%s: a tensor of %lld elements of %d bytes, over the memory limit of %lld bytes "
                   "(tgrad_set_memory_limit, TGRAD_MEMORY_LIMIT; default: the machine's memory)",
                   fn, (long long)numel, (int)esize, (long long)limit);
}
