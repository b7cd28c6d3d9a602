/* Tensor storage. Small blocks come from malloc. Large blocks (>= 1 MiB) are mapped in 2 MiB
 * units with transparent huge pages requested, and freed ones are kept in a small cache for the
 * next tensor of a similar size: a fresh mapping costs a page fault per page touched, which for a
 * 4096x4096 bf16 result is more time than the matmul itself. The cache holds at most
 * TGRAD_CACHE_BYTES (default 512 MiB; 0 disables it) and is reported by tgrad_cached_bytes(). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#define LARGE ((size_t)1 << 20)
#define UNIT ((size_t)2 << 20)
#define SLOTS 16

typedef struct { void *ptr; size_t cap; } cached;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cached cache[SLOTS];
static size_t cache_bytes, cache_limit;
static pthread_once_t limit_once = PTHREAD_ONCE_INIT;

static void read_limit(void) {
    const char *env = getenv("TGRAD_CACHE_BYTES");
    cache_limit = (env && *env) ? (size_t)strtoull(env, NULL, 10) : (size_t)512 << 20;
}

size_t tg_storage_capacity(size_t bytes) { return bytes >= LARGE ? (bytes + UNIT - 1) / UNIT * UNIT : bytes; }

/* ---- guard pages (fault-injection builds, TGRAD_GUARD_PAGES=1): every tensor's storage ends
 * exactly at an inaccessible page, so a kernel that reads or writes past a buffer's end faults
 * at once instead of reading a neighbour's bytes. ---- */
#if defined(TGRAD_FAULT_INJECTION)
#include <unistd.h>
static int guard_pages = -1;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static void read_guard(void) {
    const char *env = getenv("TGRAD_GUARD_PAGES");
    guard_pages = env && *env == '1';
}
static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }
static bool guarded(void) {
    pthread_once(&guard_once, read_guard);
    return guard_pages == 1;
}
static void *guard_alloc(size_t bytes, size_t *cap) {
    size_t page = page_size(), span = (bytes + page - 1) / page * page;
    char *base = mmap(NULL, span + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    mprotect(base, page, PROT_NONE);
    mprotect(base + page + span, page, PROT_NONE);
    *cap = bytes;
    return base + page + span - bytes;
}
static void guard_free(void *p, size_t cap) {
    size_t page = page_size(), span = (cap + page - 1) / page * page;
    char *end = (char *)p + cap; /* the first byte of the trailing guard */
    munmap(end - span - page, span + 2 * page);
}
#else
static bool guarded(void) { return false; }
static void *guard_alloc(size_t bytes, size_t *cap) { (void)bytes, (void)cap; return NULL; }
static void guard_free(void *p, size_t cap) { (void)p, (void)cap; }
#endif

/* ---- poisoning (TGRAD_POISON_STORAGE): a fresh page reads as zeros and a cached block as the
 * last tensor's values, so a kernel that never writes some elements would pass a comparison of
 * two runs. Read once: "1" on, "0" off, unset: on in fault-injection builds. ---- */
static bool poison_on;
static pthread_once_t poison_once = PTHREAD_ONCE_INIT;
static void read_poison(void) {
    const char *env = getenv("TGRAD_POISON_STORAGE");
#if defined(TGRAD_FAULT_INJECTION)
    poison_on = !(env && *env == '0');
#else
    poison_on = env && *env == '1';
#endif
}

bool tg_poison_enabled(void) {
    pthread_once(&poison_once, read_poison);
    return poison_on;
}

void tg_poison_fill(void *p, size_t bytes) {
    uint16_t *w = p;
    for (size_t i = 0; i < bytes / 2; i++) w[i] = TG_POISON_BF16;
}

static void *poisoned(void *p, size_t bytes) {
    if (p && tg_poison_enabled()) tg_poison_fill(p, bytes);
    return p;
}

static void *storage_alloc(size_t bytes, size_t *cap);
void *tg_storage_alloc(size_t bytes, size_t *cap) { return poisoned(storage_alloc(bytes, cap), bytes); }

static void *storage_alloc(size_t bytes, size_t *cap) {
    if (guarded()) return tg_fault() ? NULL : guard_alloc(bytes, cap);
    if (bytes < LARGE) {
        *cap = bytes;
        return tg_malloc(bytes);
    }
    size_t want = tg_storage_capacity(bytes);
    pthread_mutex_lock(&cache_lock);
    int best = -1;
    for (int i = 0; i < SLOTS; i++)
        if (cache[i].ptr && cache[i].cap >= want && cache[i].cap <= 2 * want &&
            (best < 0 || cache[i].cap < cache[best].cap))
            best = i;
    if (best >= 0) {
        void *p = cache[best].ptr;
        *cap = cache[best].cap;
        cache_bytes -= cache[best].cap;
        cache[best].ptr = NULL;
        pthread_mutex_unlock(&cache_lock);
        return p;
    }
    pthread_mutex_unlock(&cache_lock);
    if (tg_fault()) return NULL;
    void *p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, want, MADV_HUGEPAGE);
#endif
    *cap = want;
    return p;
}

void tg_storage_free(void *p, size_t cap) {
    if (!p) return;
    if (guarded()) {
        guard_free(p, cap);
        return;
    }
    if (cap < LARGE) {
        free(p);
        return;
    }
    pthread_once(&limit_once, read_limit);
    pthread_mutex_lock(&cache_lock);
    if (cap <= cache_limit) {
        /* evict the largest blocks until this one fits, then keep it */
        while (cache_bytes + cap > cache_limit) {
            int big = -1;
            for (int i = 0; i < SLOTS; i++)
                if (cache[i].ptr && (big < 0 || cache[i].cap > cache[big].cap)) big = i;
            munmap(cache[big].ptr, cache[big].cap);
            cache_bytes -= cache[big].cap;
            cache[big].ptr = NULL;
        }
        for (int i = 0; i < SLOTS; i++)
            if (!cache[i].ptr) {
                cache[i] = (cached){ p, cap };
                cache_bytes += cap;
                p = NULL;
                break;
            }
    }
    pthread_mutex_unlock(&cache_lock);
    if (p) munmap(p, cap);
}

/* ---- fault injection ---- */
#if defined(TGRAD_FAULT_INJECTION)
static atomic_int_fast64_t countdown, fired;

bool tg_fault(void) {
    int_fast64_t left = atomic_load(&countdown);
    while (left > 0) {
        if (atomic_compare_exchange_weak(&countdown, &left, left - 1)) {
            if (left == 1) {
                atomic_fetch_add(&fired, 1);
                return true;
            }
            return false;
        }
    }
    return false;
}

TGRAD_API tgrad_status tgrad_debug_fail_allocation(int64_t n, int64_t *failures) {
    if (n < 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_fail_allocation: n %lld is negative", (long long)n);
    atomic_store(&countdown, n);
    if (failures) *failures = atomic_load(&fired);
    return TGRAD_OK;
}
#else
TGRAD_API tgrad_status tgrad_debug_fail_allocation(int64_t n, int64_t *failures) {
    (void)n, (void)failures;
    return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "debug_fail_allocation: built without -Dfault_injection=true");
}
#endif

TGRAD_API int64_t tgrad_cached_bytes(void) {
    pthread_mutex_lock(&cache_lock);
    int64_t n = (int64_t)cache_bytes;
    pthread_mutex_unlock(&cache_lock);
    return n;
}

TGRAD_API void tgrad_release_cached(void) {
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < SLOTS; i++)
        if (cache[i].ptr) munmap(cache[i].ptr, cache[i].cap), cache[i].ptr = NULL;
    cache_bytes = 0;
    pthread_mutex_unlock(&cache_lock);
}
