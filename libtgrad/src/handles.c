/* Handle table. A handle is kind(8) | generation(24) | slot+1 (32). Slots are reused; the
 * generation counter makes every earlier handle of a reused slot stale. A slot whose generation
 * reaches 2^24 - 1 is retired when released (never put back on the free list): a generation that
 * wrapped would make a handle released 2^24 - 1 cycles ago name a live tensor again. That costs
 * one slot per 16.7 million releases of it. One mutex guards the
 * table; lookups copy the tensor out with a buffer reference, so a concurrent release cannot pull
 * the buffer from under a caller. */
#include <stdlib.h>

#include "internal.h"

typedef struct {
    uint32_t generation; /* generation of the live (or next) occupant; 0 is never issued */
    int32_t next_free;   /* free-list link, -1 at the end */
    bool used;
    tg_tensor tensor;
} slot;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static slot *slots;
static int32_t nslots, first_free = -1;

atomic_int_fast64_t tg_live_tensors_, tg_live_buffers_, tg_live_bytes_;

#define GEN_MASK 0xffffffu
#define MAX_SLOTS (INT32_MAX / 2)

static tgrad_tensor_t encode(uint32_t kind, uint32_t gen, int32_t index) {
    return ((uint64_t)kind << 56) | ((uint64_t)(gen & GEN_MASK) << 32) | (uint64_t)(uint32_t)(index + 1);
}

tgrad_status tg_handle_new_tensor(tg_buffer *buf, const tg_view *view, tgrad_tensor_t *out) {
    pthread_mutex_lock(&table_lock);
    if (first_free < 0) {
        int32_t grow = nslots ? nslots : 64;
        if (nslots > MAX_SLOTS - grow) {
            pthread_mutex_unlock(&table_lock);
            return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "handle table is full");
        }
        slot *bigger = tg_realloc(slots, sizeof(slot) * (size_t)(nslots + grow));
        if (!bigger) {
            pthread_mutex_unlock(&table_lock);
            return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot grow the handle table");
        }
        slots = bigger;
        for (int32_t i = nslots; i < nslots + grow; i++)
            slots[i] = (slot){ .generation = 1, .next_free = i + 1 < nslots + grow ? i + 1 : -1 };
        first_free = nslots;
        nslots += grow;
    }
    int32_t i = first_free;
    slot *s = &slots[i];
    first_free = s->next_free;
    s->used = true;
    s->tensor.buf = buf;
    s->tensor.view = *view;
    *out = encode(TG_KIND_TENSOR, s->generation, i);
    pthread_mutex_unlock(&table_lock);
    atomic_fetch_add(&tg_live_tensors_, 1);
    return TGRAD_OK;
}

/* Caller holds table_lock. */
static tgrad_status find(tgrad_tensor_t h, slot **out) {
    if (h == 0) return tg_fail(TGRAD_ERR_INVALID_HANDLE, "the null handle (0) names no tensor");
    uint32_t kind = (uint32_t)(h >> 56);
    uint32_t gen = (uint32_t)(h >> 32) & GEN_MASK;
    int64_t index = (int64_t)(uint32_t)h - 1;
    if (kind != TG_KIND_TENSOR) {
        if (kind == 0 || kind > 16)
            return tg_fail(TGRAD_ERR_INVALID_HANDLE, "0x%016llx is not a tgrad handle", (unsigned long long)h);
        return tg_fail(TGRAD_ERR_WRONG_HANDLE_KIND, "handle 0x%016llx is of kind %u, a tensor was expected",
                       (unsigned long long)h, kind);
    }
    if (index < 0 || index >= nslots || !slots[index].used || slots[index].generation != gen)
        return tg_fail(TGRAD_ERR_INVALID_HANDLE, "tensor handle 0x%016llx is released or stale",
                       (unsigned long long)h);
    *out = &slots[index];
    return TGRAD_OK;
}

tgrad_status tg_handle_get_tensor(tgrad_tensor_t h, tg_tensor *out) {
    pthread_mutex_lock(&table_lock);
    slot *s = NULL;
    tgrad_status st = find(h, &s);
    if (!st) {
        *out = s->tensor;
        tg_buffer_retain(out->buf);
    }
    pthread_mutex_unlock(&table_lock);
    return st;
}

tgrad_status tg_handle_get_pair(tgrad_tensor_t a, tgrad_tensor_t b, tg_tensor *ta, tg_tensor *tb) {
    tgrad_status s = tg_handle_get_tensor(a, ta);
    if (s) return s;
    if ((s = tg_handle_get_tensor(b, tb))) tg_tensor_unref(ta);
    return s;
}

tgrad_status tg_handle_release(tgrad_tensor_t h) {
    if (h == 0) return TGRAD_OK;
    pthread_mutex_lock(&table_lock);
    slot *s = NULL;
    tgrad_status st = find(h, &s);
    tg_buffer *buf = NULL;
    if (!st) {
        buf = s->tensor.buf;
        s->used = false;
        s->tensor.buf = NULL;
        if (s->generation < GEN_MASK) { /* else retired: its handles stay stale forever */
            s->generation++;
            s->next_free = first_free;
            first_free = (int32_t)(s - slots);
        }
    }
    pthread_mutex_unlock(&table_lock);
    if (buf) {
        atomic_fetch_sub(&tg_live_tensors_, 1);
        tg_buffer_release(buf); /* outside the table lock: may free a graph */
    }
    return st;
}

/* The arguments are checked in every build (a bad handle gets its own status, as from every
 * call); only a -Dfault_injection=true build then moves the slot. */
TGRAD_API tgrad_status tgrad_debug_handle_generation(tgrad_tensor_t tensor, uint32_t generation, tgrad_tensor_t *out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_handle_generation: output pointer is NULL");
    if (generation == 0 || generation > GEN_MASK)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_handle_generation: generation %u outside 1..%u", generation,
                       GEN_MASK);
    pthread_mutex_lock(&table_lock);
    slot *s = NULL;
    tgrad_status st = find(tensor, &s);
#if defined(TGRAD_FAULT_INJECTION)
    if (!st) {
        s->generation = generation;
        *out = encode(TG_KIND_TENSOR, generation, (int32_t)(s - slots));
    }
#else
    if (!st) st = tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "debug_handle_generation: built without -Dfault_injection=true");
#endif
    pthread_mutex_unlock(&table_lock);
    return st;
}

TGRAD_API int64_t tgrad_live_tensors(void) { return atomic_load(&tg_live_tensors_); }
TGRAD_API int64_t tgrad_live_buffers(void) { return atomic_load(&tg_live_buffers_); }
TGRAD_API int64_t tgrad_live_bytes(void) { return atomic_load(&tg_live_bytes_); }
