/* Per-thread scratch for the CPU frame: packing buffers and accumulator tiles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "frame.h"

/* ---- per-thread workspace ----
 * Packing buffers and the fp32 accumulator tile live with the thread (pool workers and callers
 * alike), grow to the largest block seen and are reused: no allocation per call, none
 * proportional to M*N*K. Freed when the thread exits. */
static pthread_key_t ws_key;
static pthread_once_t ws_once = PTHREAD_ONCE_INIT;
static _Atomic int64_t scratch_bytes; /* all threads' buffers, as allocated (tgrad_cpu_scratch_bytes) */

static void ws_free(void *p) {
    workspace *w = p;
    if (!w) return;
    atomic_fetch_sub(&scratch_bytes, (int64_t)(w->acc_cap + w->a_cap + w->b_cap + w->t_cap));
    free(w->acc), free(w->apack), free(w->bpack), free(w->tout), free(w);
}

TGRAD_API int64_t tgrad_cpu_scratch_bytes(void) { return atomic_load(&scratch_bytes); }

static void ws_init(void) { pthread_key_create(&ws_key, ws_free); }

/* *cap is the size *buf was allocated with (0 while it is NULL) */
static bool ensure(void **buf, size_t *cap, size_t want) {
    if (*cap >= want) return true;
    /* big buffers on 2 MiB pages where the OS allows: the kernels walk them in long runs */
    size_t align = want >= ((size_t)2 << 20) ? ((size_t)2 << 20) : 64, size = (want + align - 1) / align * align;
    void *p = tg_aligned_alloc(align, size);
    if (!p) return false;
#ifdef MADV_HUGEPAGE
    if (align > 64) madvise(p, size, MADV_HUGEPAGE);
#endif
    atomic_fetch_add(&scratch_bytes, (int64_t)size - (int64_t)*cap);
    free(*buf);
    *buf = p, *cap = size;
    return true;
}

static workspace *own(void) {
    pthread_once(&ws_once, ws_init);
    workspace *w = pthread_getspecific(ws_key);
    if (!w) {
        if (!(w = tg_calloc(1, sizeof *w))) return NULL;
        if (pthread_setspecific(ws_key, w)) {
            free(w);
            return NULL;
        }
    }
    return w;
}

void *tg_cpu_transpose_scratch(size_t bytes) {
    workspace *w = own();
    return w && ensure(&w->tout, &w->t_cap, bytes) ? w->tout : NULL;
}

workspace *tg_cpu_workspace(size_t acc, size_t a, size_t b) {
    workspace *w = own();
    if (!w) return NULL;
    if (!ensure(&w->acc, &w->acc_cap, acc) || !ensure(&w->apack, &w->a_cap, a) || !ensure(&w->bpack, &w->b_cap, b))
        return NULL;
    return w;
}
