/* The scheduler: what realizing a buffer runs, in which order, on which route. One walk of the
 * pending graph (under tg_graph_lock, so no node detaches meanwhile) emits the steps in post order,
 * each with its route decided here and only here (for a CPU matmul the frame's whole plan), and
 * plans memory: which buffers each step frees, and when the schedule drops its own references.
 * Realize (buffer.c) runs the steps in order; explain (explain.c) prints them. Portable: no
 * backend or ISA code, the executors only execute what a step says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

int32_t tg_schedule_step_of(const tg_schedule *S, const tg_buffer *b) {
    for (int32_t i = 0; i < S->n; i++)
        if (S->steps[i].buf == b) return i;
    return -1;
}

/* The one switch on op and device: how a step runs, named as realize records it. */
static void decide(tg_step *st) {
    const char *dev = tg_device_name(st->device);
    switch (st->op) {
    case TG_OP_COPY:
        snprintf(st->route, sizeof st->route, "%s.copy", dev);
        return;
    case TG_OP_MATMUL:
        if (st->device == TGRAD_DEVICE_CPU) {
            tg_cpu_matmul_plan_make(&st->inputs[0].view, &st->inputs[1].view, &st->cpu);
            tg_cpu_matmul_plan_name(&st->cpu, st->route, sizeof st->route);
        } else {
            st->dev_route = tg_device_matmul_route(&st->inputs[0].view, &st->inputs[1].view, st->device);
            snprintf(st->route, sizeof st->route, "%s.%s", dev, st->dev_route ? st->dev_route->name : "unknown");
        }
        return;
    default:
        snprintf(st->route, sizeof st->route, "%s.unknown", dev);
    }
}

static void step_init(tg_step *st, tg_buffer *b) {
    const tg_node *n = b->node;
    *st = (tg_step){ .buf = b, .op = n->op, .device = b->device, .ninputs = n->ninputs, .inputs = n->inputs };
    decide(st);
}

void tg_schedule_route(const tg_buffer *b, char *dst, size_t cap) {
    tg_step st;
    step_init(&st, (tg_buffer *)b);
    snprintf(dst, cap, "%s", st.route);
}

/* Post order from b: inputs first, each pending buffer once. Caller holds tg_graph_lock. */
static bool visit(tg_schedule *S, tg_buffer *b) {
    if (!b->node || tg_schedule_step_of(S, b) >= 0) return true;
    for (int32_t i = 0; i < b->node->ninputs; i++)
        if (!visit(S, b->node->inputs[i].buf)) return false;
    if (S->n == S->cap) {
        int32_t cap = S->cap ? S->cap * 2 : 16;
        tg_step *q = tg_realloc(S->steps, sizeof *q * (size_t)cap);
        if (!q) return false;
        S->steps = q, S->cap = cap;
    }
    step_init(&S->steps[S->n++], b);
    return true;
}

/* How many steps read b (with multiplicity), and the last one. */
static int32_t readers(const tg_schedule *S, const tg_buffer *b, int32_t *last) {
    int32_t count = 0;
    *last = -1;
    for (int32_t s = 0; s < S->n; s++)
        for (int32_t i = 0; i < S->steps[s].ninputs; i++)
            if (S->steps[s].inputs[i].buf == b) count++, *last = s;
    return count;
}

static bool read_before(const tg_step *st, int32_t i) {
    for (int32_t j = 0; j < i; j++)
        if (st->inputs[j].buf == st->inputs[i].buf) return true;
    return false;
}

/* Memory: a buffer is freed after its last reader when all its references are readers in this
 * schedule (no handle holds it); the schedule's own reference goes after that same step. */
static bool plan_memory(tg_schedule *S) {
    int64_t total = 0;
    for (int32_t s = 0; s < S->n; s++) total += S->steps[s].ninputs, S->steps[s].release_after = s;
    if (total && !(S->free = tg_malloc(sizeof *S->free * (size_t)total))) return false;
    for (int32_t s = 0; s < S->n; s++) {
        tg_step *st = &S->steps[s];
        st->first_free = S->nfree_total;
        for (int32_t i = 0; i < st->ninputs; i++) {
            tg_buffer *in = st->inputs[i].buf;
            if (read_before(st, i)) continue;
            int32_t last, count = readers(S, in, &last), from = tg_schedule_step_of(S, in);
            if (from >= 0) S->steps[from].release_after = last;
            if (last == s && (int64_t)count == (int64_t)atomic_load(&in->refs)) S->free[S->nfree_total++] = in;
        }
        st->nfree = S->nfree_total - st->first_free;
    }
    return true;
}

tgrad_status tg_schedule_build_locked(tg_buffer *b, tg_schedule *out) {
    tg_schedule S = { 0 };
    if (!visit(&S, b) || !plan_memory(&S)) {
        free(S.steps);
        free(S.free);
        *out = (tg_schedule){ 0 };
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate the schedule of a pending tensor");
    }
    for (int32_t s = 0; s < S.n; s++) S.steps[s].released = true; /* holds no references */
    *out = S;
    return TGRAD_OK;
}

tgrad_status tg_schedule_build(tg_buffer *b, tg_schedule *out) {
    pthread_mutex_lock(&tg_graph_lock);
    tgrad_status s = tg_schedule_build_locked(b, out);
    /* Held until release_after: a step's buffer may otherwise be freed by another thread
     * realizing the buffer that reads it while this schedule still names it. */
    for (int32_t i = 0; !s && i < out->n; i++) {
        tg_buffer_retain(out->steps[i].buf);
        out->steps[i].released = false;
    }
    pthread_mutex_unlock(&tg_graph_lock);
    return s;
}

void tg_schedule_release_through(tg_schedule *S, int32_t step) {
    for (int32_t s = 0; s < S->n; s++) {
        tg_step *st = &S->steps[s];
        if (st->released || st->release_after > step) continue;
        st->released = true;
        tg_buffer_release(st->buf);
    }
}

void tg_schedule_free(tg_schedule *S) {
    tg_schedule_release_through(S, INT32_MAX);
    free(S->steps);
    free(S->free);
    *S = (tg_schedule){ 0 };
}
