/* Buffers (reference-counted storage of one element type) and realization of the lazy graph. A pending buffer
 * holds the node that computes it; realizing runs the scheduler's steps (schedule.c) in order, each
 * computing one buffer and then dropping its node and with it the references to its inputs, so
 * intermediates die as soon as nothing needs them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds.h"

pthread_mutex_t tg_graph_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t next_id = 1;

tgrad_status tg_buffer_new(int64_t numel, tg_node *node, tg_buffer **out) {
    return tg_buffer_new_typed(numel, TGRAD_DTYPE_BF16, node, out);
}

tgrad_status tg_buffer_new_typed(int64_t numel, int32_t dtype, tg_node *node, tg_buffer **out) {
    tg_buffer *b = tg_calloc(1, sizeof *b);
    if (!b) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate a buffer header");
    if (pthread_mutex_init(&b->lock, NULL)) {
        free(b);
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot create a buffer lock");
    }
    atomic_init(&b->refs, 1);
    atomic_init(&b->realized, node ? 0 : 1);
    b->numel = numel;
    b->dtype = dtype;
    b->node = node;
    if (node && tg_grad_enabled() && (dtype == TGRAD_DTYPE_BF16 || dtype == TGRAD_DTYPE_F32))
        for (int32_t i = 0; i < node->ninputs && !b->requires_grad; i++)
            b->requires_grad = node->inputs[i].buf && node->inputs[i].buf->requires_grad;
    b->id = atomic_fetch_add(&next_id, 1);
    if (!node) snprintf(b->route, sizeof b->route, "host");
    atomic_fetch_add(&tg_live_buffers_, 1);
    *out = b;
    return TGRAD_OK;
}

/* Fill new device memory with the poison (internal.h): staged through a plain malloc, so that
 * fault injection's count of allocations is the same with and without it (no staging memory:
 * the memory stays as the driver gave it). */
static tgrad_status poison_device(tg_buffer *b, size_t bytes) {
    void *host = malloc(bytes);
    if (!host) return TGRAD_OK;
    tg_poison_fill(host, bytes);
    tgrad_status s = tg_device_upload(b->device, b->dev_mem, host, bytes);
    free(host);
    if (s) {
        tg_device_free(b->device, b->dev_mem, bytes);
        b->dev_mem = NULL;
    }
    return s;
}

/* Allocate storage for numel elements (counted in tgrad_live_bytes). */
static tgrad_status storage_alloc(tg_buffer *b) {
    if (b->numel == 0) return TGRAD_OK;
    size_t bytes = tg_buffer_bytes(b);
    if (b->device != TGRAD_DEVICE_CPU) {
        tgrad_status s = tg_device_alloc(b->device, bytes, &b->dev_mem);
        if (!s && tg_poison_enabled()) s = poison_device(b, bytes);
        if (!s) atomic_fetch_add(&tg_live_bytes_, (int64_t)bytes);
        return s;
    }
    b->data = tg_storage_alloc(bytes, &b->capacity);
    if (!b->data)
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes for a tensor", bytes);
    atomic_fetch_add(&tg_live_bytes_, (int64_t)bytes);
    return TGRAD_OK;
}

tgrad_status tg_buffer_storage(tg_buffer *b) { return storage_alloc(b); }

tg_node *tg_node_new(tg_op op, int32_t ninputs) {
    tg_node *n = tg_calloc(1, sizeof *n + sizeof n->inputs[0] * (size_t)ninputs);
    if (n) n->op = op, n->ninputs = ninputs;
    return n;
}

/* Release each input of a node, then the node. */
static void node_free(tg_node *n) {
    if (!n) return;
    for (int32_t i = 0; i < n->ninputs; i++) tg_buffer_release(n->inputs[i].buf);
    free(n);
}

void tg_buffer_retain(tg_buffer *b) { atomic_fetch_add(&b->refs, 1); }

/* The memory of a buffer whose last reference is gone (its header and node go later). */
static void storage_drop(tg_buffer *b) {
    if (b->data || b->dev_mem) atomic_fetch_sub(&tg_live_bytes_, (int64_t)tg_buffer_bytes(b));
    if (b->external) {
        if (b->deleter) b->deleter(b->deleter_context); /* external memory: its owner frees it */
    } else {
        tg_storage_free(b->data, b->capacity);
    }
    tg_device_free(b->device, b->dev_mem, tg_buffer_bytes(b));
}

/* Dropping the last reference to a pending buffer drops its node's references to its inputs,
 * which may be their last too, down a chain of any length. Without recursion: the dead buffers
 * whose inputs are still being released form a stack threaded through their headers
 * (dying_next, dying_input: the next input to release), so it takes no C stack and no allocation.
 * The order is the recursive one: a buffer's storage, then each input's whole release in turn,
 * then its node and header. */
void tg_buffer_release(tg_buffer *b) {
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
    storage_drop(b);
    b->dying_next = NULL, b->dying_input = 0;
    for (tg_buffer *top = b; top;) {
        tg_node *n = top->node ? top->node : top->history;
        if (n && top->dying_input < n->ninputs) {
            tg_buffer *in = n->inputs[top->dying_input++].buf;
            if (in && atomic_fetch_sub(&in->refs, 1) == 1) {
                storage_drop(in);
                in->dying_next = top, in->dying_input = 0;
                top = in;
            }
            continue;
        }
        tg_buffer *below = top->dying_next;
        free(n);
        pthread_mutex_destroy(&top->lock);
        free(top);
        atomic_fetch_sub(&tg_live_buffers_, 1);
        top = below;
    }
}

/* Creating a realized buffer for host data: storage comes with it. */
TG_HIDDEN tgrad_status tg_buffer_new_storage(int64_t numel, tg_buffer **out);
TG_HIDDEN tgrad_status tg_buffer_new_storage_typed(int64_t numel, int32_t dtype, tg_buffer **out);
tgrad_status tg_buffer_new_storage(int64_t numel, tg_buffer **out) {
    return tg_buffer_new_storage_typed(numel, TGRAD_DTYPE_BF16, out);
}
tgrad_status tg_buffer_new_storage_typed(int64_t numel, int32_t dtype, tg_buffer **out) {
    tg_buffer *b = NULL;
    tgrad_status s = tg_buffer_new_typed(numel, dtype, NULL, &b);
    if (s) return s;
    if ((s = storage_alloc(b))) {
        tg_buffer_release(b);
        return s;
    }
    *out = b;
    return TGRAD_OK;
}

/* One step under its buffer's lock: skipped when another thread realized the buffer meanwhile
 * (its inputs were realized by the earlier steps, or by whoever realized them first). */
static tgrad_status run_step(const tg_step *st) {
    tg_buffer *b = st->buf;
    if (atomic_load_explicit(&b->realized, memory_order_acquire)) return TGRAD_OK;
    pthread_mutex_lock(&b->lock);
    tgrad_status s = TGRAD_OK;
    if (!atomic_load(&b->realized)) {
        tg_node *n = b->node;
        bool own = st->device == TGRAD_DEVICE_CPU && tg_kind_of(st->op)->cpu_allocates; /* its executor allocates */
        if (!b->data && !b->dev_mem && !own) s = storage_alloc(b);
        if (!s) s = st->device == TGRAD_DEVICE_CPU ? tg_kind_of(st->op)->cpu_execute(st) : tg_device_execute(st);
        if (!s) {
            size_t len = 0;
            tg_str_append(b->route, sizeof b->route, &len, st->route); /* what ran */
            pthread_mutex_lock(&tg_graph_lock);
            b->node = NULL;
            if (b->requires_grad) b->history = n; /* kept for the backward pass (grad/engine.c) */
            atomic_store_explicit(&b->realized, 1, memory_order_release);
            pthread_mutex_unlock(&tg_graph_lock);
            if (!b->history) node_free(n);
        }
    }
    pthread_mutex_unlock(&b->lock);
    return s;
}

tgrad_status tg_schedule_run(tg_schedule *S) {
    tgrad_status s = TGRAD_OK;
    for (int32_t i = 0; i < S->n && !s; i++) {
        s = run_step(&S->steps[i]);
        tg_schedule_release_through(S, i);
    }
    return s;
}

tgrad_status tg_buffer_realize(tg_buffer *b) {
    if (atomic_load_explicit(&b->realized, memory_order_acquire)) return TGRAD_OK;
    tg_schedule S;
    tgrad_status s = tg_schedule_build(b, &S);
    if (!s) s = tg_schedule_run(&S);
    tg_schedule_free(&S);
    return s;
}
