/* The buffer-to-step index: see step_index.h. Linear probing over a power-of-two table kept at
 * most a quarter full (short probe runs at every size), hashing the buffer's address with a full
 * 64-bit mixer (heap addresses come in strides and clusters); a buffer found past its first slot
 * moves there (the transposition heuristic), so that the buffers looked up most cost one probe.
 * Every slot inspected counts as a probe. */
#include "step_index.h"

static size_t slot_of(const tg_buffer *b, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)b; /* MurmurHash3's finalizer */
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33, h *= 0xc4ceb9fe1a85ec53ull, h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

/* The slot holding b, or the empty slot where it would go. */
static tg_index_entry *probe(tg_index_entry *slots, size_t cap, const tg_buffer *b, int64_t *probes) {
    for (size_t i = slot_of(b, cap);; i = (i + 1) & (cap - 1)) {
        ++*probes;
        if (slots[i].buf == b || !slots[i].buf) return &slots[i];
    }
}

tg_index_entry *tg_step_index_find(tg_step_index *x, const tg_buffer *b) {
    if (!x->cap) return NULL;
    tg_index_entry *e = probe(x->slots, x->cap, b, &x->probes), *home = &x->slots[slot_of(b, x->cap)];
    if (!e->buf) return NULL;
    if (e != home) { /* found past its first slot: trade places with the entry there, so that a */
        tg_index_entry t = *home; /* buffer looked up again and again (an operand many steps read) */
        *home = *e, *e = t;       /* costs one probe from now on; the other stays reachable, every */
        e = home;                 /* slot from its own first slot to here being taken */
    }
    return e;
}

static bool grow(tg_step_index *x) {
    size_t cap = x->cap ? x->cap * 2 : 64;
    tg_index_entry *slots = tg_calloc(cap, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < x->cap; i++)
        if (x->slots[i].buf) *probe(slots, cap, x->slots[i].buf, &x->probes) = x->slots[i];
    free(x->slots);
    x->slots = slots, x->cap = cap;
    return true;
}

tg_index_entry *tg_step_index_add(tg_step_index *x, const tg_buffer *b) {
    tg_index_entry *e = tg_step_index_find(x, b);
    if (e) return e;
    if (4 * (x->count + 1) > x->cap) {
        if (!grow(x)) return NULL;
    }
    e = probe(x->slots, x->cap, b, &x->probes);
    *e = (tg_index_entry){ .buf = b, .step = -1, .last = -1 };
    x->count++;
    return e;
}

void tg_step_index_free(tg_step_index *x) {
    free(x->slots);
    *x = (tg_step_index){ 0 };
}
