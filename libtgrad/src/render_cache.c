/* The render cache (render_cache.h): keys, the table, a step's kernel through them (a hit, its
 * checks), the mode and the counters. Its allocations
 * are plain malloc, not fault-injection sites (internal.h's tg_malloc): one that fails only means
 * a step rendered whole or a text not kept, never an error, so the fault walks over the device
 * path (tests/c/test_opencl.c) still see every allocation a launch needs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kinds.h"
#include "render_cache.h"

enum {
    SLOTS = 256,                        /* kernels kept: a decode step has some 15 distinct ones */
    BUDGET = 16 << 20,                  /* bytes of text kept: an MSL double kernel is about 45 KB */
};

/* ---- the mode ---- */
static atomic_int mode = -1; /* -1: not read yet */

int32_t tg_render_cache_mode(void) {
    int m = atomic_load(&mode);
    if (m >= 0) return m;
    const char *env = getenv("TGRAD_RENDER_CACHE");
    m = !env || !*env ? TG_RENDER_CACHE_ON : !strcmp(env, "0") ? TG_RENDER_CACHE_OFF
                                             : !strcmp(env, "verify") ? TG_RENDER_CACHE_VERIFY : TG_RENDER_CACHE_ON;
    int unset = -1;
    atomic_compare_exchange_strong(&mode, &unset, m); /* a mode set meanwhile by the debug call wins */
    return atomic_load(&mode);
}

/* ---- keys ---- */
/* A step's key: its bytes (NULL when out of memory: then the step is rendered and nothing kept)
 * and their hash. */
typedef struct tg_render_key {
    unsigned char *bytes;
    size_t len, cap;
    bool failed;
    uint64_t hash;
} tg_render_key;

static void put(tg_render_key *k, const void *v, size_t n) {
    if (k->failed) return;
    if (k->len + n > k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 1024;
        while (cap < k->len + n) cap *= 2;
        unsigned char *bigger = realloc(k->bytes, cap);
        if (!bigger) {
            k->failed = true;
            return;
        }
        k->bytes = bigger, k->cap = cap;
    }
    memcpy(k->bytes + k->len, v, n);
    k->len += n;
}

#define PUT(k, v) put((k), &(v), sizeof(v))

/* A view's rank, then its extents and strides up to the rank (the rest may hold anything), its
 * offset. */
static void put_view(tg_render_key *k, const tg_view *v) {
    PUT(k, v->ndim);
    int32_t n = v->ndim < 0 ? 0 : v->ndim > TGRAD_MAX_DIMS ? TGRAD_MAX_DIMS : v->ndim;
    put(k, v->shape, sizeof v->shape[0] * (size_t)n);
    put(k, v->strides, sizeof v->strides[0] * (size_t)n);
    PUT(k, v->offset);
}

static void put_input(tg_render_key *k, const tg_node_input *in) {
    int32_t dtype = in->buf ? in->buf->dtype : -1;
    PUT(k, dtype);
    put_view(k, &in->view);
}

/* A node as a renderer reads it: kind, op, dtype, parameters (bytes of a zeroed struct:
 * tg_node_new), its inputs and its result's view. */
static void put_node(tg_render_key *k, const tg_node *n) {
    PUT(k, n->op);
    PUT(k, n->ew);
    PUT(k, n->dtype);
    PUT(k, n->params);
    PUT(k, n->ninputs);
    for (int32_t i = 0; i < n->ninputs; i++) put_input(k, &n->inputs[i]);
    put_view(k, &n->out);
}

static void put_chain(tg_render_key *k, const tg_fused_op *ops, int32_t n) {
    PUT(k, n);
    for (int32_t i = 0; i < n; i++) {
        PUT(k, ops[i].op);
        PUT(k, ops[i].value_right);
        bool has = ops[i].operand != NULL;
        PUT(k, has);
        if (has) put_input(k, ops[i].operand);
    }
}

static void key_free(tg_render_key *key) {
    free(key->bytes);
    *key = (tg_render_key){ 0 };
}

/* Step st's key: everything its renderer reads (render_cache.h). */
static void key_of(const tg_step *st, const tg_route *route, const tg_lang *l, tg_render_key *key) {
    *key = (tg_render_key){ 0 };
    static const char magic[] = "tgrad render key 1";
    put(key, magic, sizeof magic);
    put(key, l->name, strlen(l->name) + 1);
    int32_t route_id = route ? route->id : -1;
    PUT(key, route_id);
    PUT(key, st->op);
    PUT(key, st->ew);
    PUT(key, st->precision);
    PUT(key, st->buf->dtype);
    PUT(key, st->buf->numel);
    put_view(key, st->out);
    PUT(key, st->ninputs);
    for (int32_t i = 0; i < st->ninputs; i++) put_input(key, &st->inputs[i]);
    put_node(key, st->base);
    put_chain(key, st->epilogue, st->nfused);
    bool pro = st->pro_base != NULL;
    PUT(key, pro);
    if (pro) put_node(key, st->pro_base);
    put_chain(key, st->prologue, st->npro);
    if (key->failed) key_free(key), key->failed = true;
    else key->hash = tg_fnv1a64(key->bytes, key->len);
}

/* ---- the table ---- */
typedef struct entry {
    uint64_t hash, used; /* used: the clock at the last hit (0: an empty slot) */
    unsigned char *key;
    size_t key_len;
    char *text;
    size_t text_len;
    struct tgrad_launch launch;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry slots[SLOTS];
static uint64_t clock_now;
static int64_t held_bytes, hits, misses, launch_differences, text_differences, render_ns, renders;

static void drop(entry *e) {
    held_bytes -= (int64_t)(e->key_len + e->text_len);
    free(e->key);
    free(e->text);
    *e = (entry){ 0 };
}

static entry *slot_of(const tg_render_key *key) {
    for (int i = 0; i < SLOTS; i++)
        if (slots[i].used && slots[i].hash == key->hash && slots[i].key_len == key->len &&
            !memcmp(slots[i].key, key->bytes, key->len))
            return &slots[i];
    return NULL;
}

/* The kept text and launch of key: true with a malloc'ed copy of the text in *text and the
 * launch in *launch; false on a miss. */
static bool find(const tg_render_key *key, tg_text *text, struct tgrad_launch *launch) {
    if (!key->bytes) return false;
    pthread_mutex_lock(&lock);
    entry *e = slot_of(key);
    char *copy = e ? malloc(e->text_len + 1) : NULL;
    if (copy) {
        memcpy(copy, e->text, e->text_len + 1);
        *launch = e->launch;
        e->used = ++clock_now;
        *text = (tg_text){ .data = copy, .len = e->text_len, .cap = e->text_len + 1 };
        hits++;
    } else {
        misses++;
    }
    pthread_mutex_unlock(&lock);
    return copy != NULL;
}

/* Keep a copy of text and launch for key (nothing when out of memory). */
static void keep(const tg_render_key *key, const tg_text *text, const struct tgrad_launch *launch) {
    if (!key->bytes || text->failed || !text->data || text->len + key->len > BUDGET / 4) return;
    unsigned char *k = malloc(key->len);
    char *t = malloc(text->len + 1);
    if (!k || !t) {
        free(k), free(t);
        return;
    }
    memcpy(k, key->bytes, key->len);
    memcpy(t, text->data, text->len + 1);
    pthread_mutex_lock(&lock);
    entry *e = slot_of(key); /* another thread kept it meanwhile: replace it */
    if (e) drop(e);
    for (;;) { /* a free slot within the budget, else the least recently used goes */
        entry *free_slot = NULL, *oldest = NULL;
        for (int i = 0; i < SLOTS; i++) {
            if (!slots[i].used) free_slot = free_slot ? free_slot : &slots[i];
            else if (!oldest || slots[i].used < oldest->used) oldest = &slots[i];
        }
        if (free_slot && held_bytes + (int64_t)(key->len + text->len) <= BUDGET) {
            e = free_slot;
            break;
        }
        drop(oldest);
    }
    *e = (entry){ .hash = key->hash, .used = ++clock_now, .key = k, .key_len = key->len, .text = t,
                  .text_len = text->len, .launch = *launch };
    held_bytes += (int64_t)(key->len + text->len);
    pthread_mutex_unlock(&lock);
}

/* A hit that its launch or (verify) its text contradicted: counted, the entry dropped. */
static void contradicted(const tg_render_key *key, bool text) {
    pthread_mutex_lock(&lock);
    entry *e = key->bytes ? slot_of(key) : NULL;
    if (e) drop(e);
    if (text) text_differences++;
    else launch_differences++;
    pthread_mutex_unlock(&lock);
}

/* ---- a step's kernel through the cache ---- */
static bool same_launch(struct tgrad_launch a, struct tgrad_launch b) {
    a.source_hash = b.source_hash = 0; /* of the text: the cached one's is kept */
    return !memcmp(&a, &b, sizeof a);
}

/* Verify mode: k (a hit) against the step rendered whole: the same text, launch and bindings. */
static tgrad_status verify_hit(const tg_step *st, const tg_route *route, const tg_lang *l, const tg_step_kernel *k,
                               const tg_render_key *key) {
    tg_step_kernel whole;
    tgrad_status s = tg_step_kernel_emit(st, route, l, &whole, false);
    if (s) return s;
    bool same = whole.text.len == k->text.len && !memcmp(whole.text.data, k->text.data, k->text.len) &&
                !memcmp(&whole.launch, &k->launch, sizeof k->launch) && !memcmp(whole.bufs, k->bufs, sizeof k->bufs) &&
                !memcmp(whole.table_op, k->table_op, sizeof k->table_op) && whole.words_at == k->words_at &&
                whole.nwords == k->nwords && !memcmp(whole.words, k->words, sizeof k->words) &&
                whole.flags_at == k->flags_at && whole.nflags == k->nflags && whole.host_at == k->host_at &&
                whole.nhost == k->nhost;
    tg_step_kernel_free(&whole);
    if (same) return TGRAD_OK;
    contradicted(key, true);
    return tg_fail(TGRAD_ERR_INTERNAL, "render cache: the kept kernel %s differs from what its step renders (the "
                   "key misses something a renderer reads)", k->launch.kernel_name);
}

/* A hit: the step rendered without its text (bindings, words, flags, launch), then the kept
 * text, if the launch agrees; else false and nothing held (the caller renders it whole). */
static bool use_hit(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k,
                    const tg_render_key *key, tg_text *kept, const struct tgrad_launch *launch, tgrad_status *s) {
    *s = tg_step_kernel_emit(st, route, l, k, true);
    if (*s) return true; /* its own refusal, as a whole render would give it */
    if (!same_launch(k->launch, *launch)) {
        contradicted(key, false);
        tg_step_kernel_free(k);
        return false;
    }
    tg_text_free(&k->text);
    k->text = *kept, *kept = (tg_text){ 0 };
    k->launch.source_hash = launch->source_hash;
    if (tg_render_cache_mode() == TG_RENDER_CACHE_VERIFY) *s = verify_hit(st, route, l, k, key);
    if (*s) tg_step_kernel_free(k);
    return true;
}

static tgrad_status render_cached(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    if (!tg_kind_of(st->op)->gpu_render || tg_render_cache_mode() == TG_RENDER_CACHE_OFF)
        return tg_step_kernel_emit(st, route, l, k, false);
    tg_render_key key;
    key_of(st, route, l, &key);
    tg_text kept = { 0 };
    struct tgrad_launch launch;
    tgrad_status s = TGRAD_OK;
    bool done = find(&key, &kept, &launch) && use_hit(st, route, l, k, &key, &kept, &launch, &s);
    tg_text_free(&kept); /* a hit's text is k's now (kept emptied); a contradicted one's is freed */
    if (!done) {
        s = tg_step_kernel_emit(st, route, l, k, false);
        if (!s) keep(&key, &k->text, &k->launch);
    }
    key_free(&key);
    return s;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

tgrad_status tg_render_cache_render(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    int64_t start = now_ns();
    tgrad_status s = render_cached(st, route, l, k);
    int64_t took = now_ns() - start;
    pthread_mutex_lock(&lock);
    render_ns += took, renders++;
    pthread_mutex_unlock(&lock);
    return s;
}

/* ---- public (experimental) ---- */
TGRAD_API tgrad_status tgrad_debug_render_cache(int32_t new_mode, int64_t *counts, int32_t count) {
    if (new_mode < -1 || new_mode > TG_RENDER_CACHE_VERIFY)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_render_cache: mode %d outside -1..2", (int)new_mode);
    if (count < 0 || count > TGRAD_DEBUG_RENDER_CACHE_COUNT || (count && !counts))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_render_cache: count %d outside 0..%d, or counts NULL",
                       (int)count, (int)TGRAD_DEBUG_RENDER_CACHE_COUNT);
    (void)tg_render_cache_mode(); /* the environment's first, so that it cannot override this call */
    pthread_mutex_lock(&lock);
    int64_t entries = 0;
    for (int i = 0; i < SLOTS; i++) entries += slots[i].used != 0;
    const int64_t now[TGRAD_DEBUG_RENDER_CACHE_COUNT] = { hits, misses, entries, held_bytes, launch_differences,
                                                         text_differences, render_ns, renders };
    for (int32_t i = 0; i < count; i++) counts[i] = now[i];
    if (new_mode >= 0) {
        for (int i = 0; i < SLOTS; i++)
            if (slots[i].used) drop(&slots[i]);
        hits = misses = launch_differences = text_differences = render_ns = renders = 0;
        atomic_store(&mode, new_mode);
    }
    pthread_mutex_unlock(&lock);
    return TGRAD_OK;
}
