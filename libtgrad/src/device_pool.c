/* The device buffer pool (device_pool.h): size classes and a bounded free list. */
#include "device_pool.h"

#include <pthread.h>
#include <stdlib.h>

static size_t limit;
static pthread_once_t limit_once = PTHREAD_ONCE_INIT;

static void read_limit(void) {
    limit = (size_t)256 << 20;
    const char *env = getenv("TGRAD_DEVICE_POOL_BYTES");
    if (env && *env) {
        char *end = NULL;
        unsigned long long v = strtoull(env, &end, 10);
        if (end && *end == 0) limit = (size_t)v;
    }
}

size_t tg_pool_limit(void) {
    pthread_once(&limit_once, read_limit);
    return limit;
}

/* Classes: at least 256 bytes, then four per power of two (256, 320, 384, 448, 512, 640, ...),
 * so a buffer is at most 25% larger than asked for and equal sizes share a class. */
size_t tg_pool_size(size_t bytes) {
    size_t c = bytes < 256 ? 256 : bytes, top = 256;
    while (top <= c / 2) top *= 2; /* the largest power of two <= c */
    size_t step = top / 4;
    size_t rounded = c > SIZE_MAX - step ? c : (c + step - 1) / step * step;
    return rounded <= tg_pool_limit() ? rounded : bytes;
}

void *tg_pool_take(tg_device_pool *pool, size_t size) {
    for (int32_t i = 0; i < pool->count; i++) {
        if (pool->slot[i].bytes != size) continue;
        void *mem = pool->slot[i].mem;
        pool->slot[i] = pool->slot[--pool->count];
        pool->cached -= size;
        return mem;
    }
    return NULL;
}

bool tg_pool_keep(tg_device_pool *pool, void *mem, size_t size) {
    if (!mem || pool->count == TG_POOL_SLOTS || size > tg_pool_limit() - pool->cached) return false;
    pool->slot[pool->count].mem = mem, pool->slot[pool->count].bytes = size;
    pool->count++;
    pool->cached += size;
    return true;
}

void tg_pool_drain(tg_device_pool *pool, void (*free_fn)(void *mem)) {
    for (int32_t i = 0; i < pool->count; i++) free_fn(pool->slot[i].mem);
    pool->count = 0;
    pool->cached = 0;
}
