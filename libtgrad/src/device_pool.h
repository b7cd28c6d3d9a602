/* A small cache of freed device buffers, per device, for every GPU backend (private).
 *
 * Allocating device memory is a driver call that can cost as much as a small kernel (cuMemAlloc
 * synchronizes; clCreateBuffer is cheaper, but not free), and a graph allocates a result per step.
 * device.c rounds each allocation up to a size class (at most 25% more) and keeps freed buffers on
 * a free list until TGRAD_DEVICE_POOL_BYTES (default 256 MiB; 0 turns the pool off) would be
 * exceeded; past that they go back to the driver. A buffer larger than the bound is never pooled
 * and is allocated at its exact size. The pool is not thread-safe: device.c holds the device's
 * lock around every call. */
#ifndef TGRAD_DEVICE_POOL_H
#define TGRAD_DEVICE_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { TG_POOL_SLOTS = 64 };

typedef struct tg_device_pool {
    struct { void *mem; size_t bytes; } slot[TG_POOL_SLOTS];
    int32_t count;
    size_t cached; /* bytes held in slots */
} tg_device_pool;

/* The bound on a pool's cached bytes (TGRAD_DEVICE_POOL_BYTES, read once). */
size_t tg_pool_limit(void);
/* The size an allocation of `bytes` is made at: its class, or `bytes` itself when it is too large
 * to pool (a class above the limit). */
size_t tg_pool_size(size_t bytes);
/* A cached buffer of exactly `size` bytes (a tg_pool_size), taken off the list; NULL if none. */
void *tg_pool_take(tg_device_pool *pool, size_t size);
/* Keep `mem` (of `size` bytes) for reuse: true, or false when the bound or the slots are full and
 * the caller must free it. */
bool tg_pool_keep(tg_device_pool *pool, void *mem, size_t size);
/* Empty the list into free_fn (after a failed allocation, so the memory can be used again). */
void tg_pool_drain(tg_device_pool *pool, void (*free_fn)(void *mem));

#endif
