/* The scheduler: what realizing a buffer runs, in which order, on which route. One walk of the
 * pending graph (under tg_graph_lock, so no node detaches meanwhile) emits the steps in post order,
 * each with its route decided here and only here (for a CPU matmul the frame's whole plan), and
 * plans memory: which buffers each step frees, and when the schedule drops its own references.
 * Realize (buffer.c) runs the steps in order; explain (explain.c) prints them. Portable: no
 * backend or ISA code, the executors only execute what a step says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds.h"
#include "ops/elementwise.h"

int32_t tg_schedule_step_of(const tg_schedule *S, const tg_buffer *b) {
    for (int32_t i = 0; i < S->n; i++)
        if (S->steps[i].buf == b) return i;
    return -1;
}

/* ---- fusion ---------------------------------------------------------------------------------- */
static atomic_int fusion = -1; /* -1: not read from the environment yet */

bool tg_fusion_on(void) {
    int f = atomic_load(&fusion);
    if (f < 0) { /* a race only repeats the same answer */
        const char *env = getenv("TGRAD_FUSION");
        f = !(env && strcmp(env, "0") == 0);
        int expected = -1;
        atomic_compare_exchange_strong(&fusion, &expected, f);
        f = atomic_load(&fusion);
    }
    return f == 1;
}

TGRAD_API tgrad_status tgrad_set_fusion(int32_t enabled) {
    if (enabled != 0 && enabled != 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_fusion: enabled is %d, not 0 or 1", (int)enabled);
    atomic_store(&fusion, enabled);
    return TGRAD_OK;
}

TGRAD_API int32_t tgrad_fusion_enabled(void) { return tg_fusion_on(); }

static bool same_shape(const tg_view *a, const tg_view *b) {
    if (a->ndim != b->ndim) return false;
    for (int32_t i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* Why input i of elementwise node n cannot be computed inside the kernel that reads it (NULL: it
 * can). Its value is then produced by its own step and stored. Caller holds tg_graph_lock. */
static const char *why_not_fused(const tg_node *n, int32_t i, int32_t device) {
    const tg_node_input *in = &n->inputs[i];
    const tg_buffer *p = in->buf;
    if (!p->node) return "realized";
    if (!tg_fusion_on()) return "fusion is off";
    if (p->device != device) return "computed on another device";
    const char *kind_says = tg_kind_of(p->node->op)->unfused;
    if (kind_says) return kind_says;
    /* Only this node holds it: no handle, no other reader (a second read would need it stored). */
    if (atomic_load(&p->refs) != 1) return "its result is also held by a handle or read by another op";
    if (!same_shape(&in->view, &p->node->out) || in->view.offset || !tg_view_is_compact_rowmajor(&in->view))
        return "read through a view other than the whole result";
    return NULL;
}

/* The chain ending at b (an elementwise node): the ops fused into the kernel of its first
 * buffer, innermost first, and that buffer (b itself when nothing fuses). */
static const tg_buffer *collect_chain(tg_step *st, const tg_buffer *b) {
    tg_fused_op rev[TG_MAX_FUSED];
    int32_t k = 0;
    const tg_buffer *cur = b;
    while (cur->node->op == TG_OP_ELEMENTWISE && k < TG_MAX_FUSED) {
        const tg_node *n = cur->node;
        int32_t at = why_not_fused(n, 0, b->device) ? -1 : 0;
        if (at < 0 && n->ninputs == 2 && !why_not_fused(n, 1, b->device)) at = 1;
        if (at < 0) break;
        rev[k++] = (tg_fused_op){ .op = n->ew, .value_right = at == 1,
                                  .operand = n->ninputs == 2 ? &n->inputs[1 - at] : NULL };
        cur = n->inputs[at].buf;
    }
    st->nfused = k;
    for (int32_t i = 0; i < k; i++) st->epilogue[i] = rev[k - 1 - i];
    return cur;
}

/* A reduction's prologue: the pending elementwise chain that only it reads (its input 0, read
 * whole), up to its first elementwise op; not when the chain starts at an anchor (a matmul keeps
 * it as its epilogue and stores the result). */
static void collect_prologue(tg_step *st, const tg_node *n) {
    if (why_not_fused(n, 0, st->device) || n->inputs[0].buf->node->op != TG_OP_ELEMENTWISE) return;
    tg_step chain = { .device = st->device };
    const tg_buffer *first = collect_chain(&chain, n->inputs[0].buf);
    if (first->node->op != TG_OP_ELEMENTWISE) return;
    st->pro_base = first->node;
    st->npro = chain.nfused;
    memcpy(st->prologue, chain.epilogue, sizeof chain.epilogue[0] * (size_t)chain.nfused);
}

static void step_init(tg_step *st, tg_buffer *b) {
    *st = (tg_step){ .buf = b, .device = b->device, .out = &b->node->out };
    const tg_buffer *base = b->node->op == TG_OP_ELEMENTWISE ? collect_chain(st, b) : b;
    const tg_node *n = st->base = base->node;
    st->op = n->op, st->ew = n->ew, st->ninputs = n->ninputs, st->inputs = n->inputs;
    st->ew_variant = tg_ew_for_selection();
    if (tg_kind_of(st->op)->role == TG_ROLE_REDUCTION) collect_prologue(st, n);
    if (st->pro_base) {
        for (int32_t i = 0; i < st->pro_base->ninputs; i++) st->reads[st->nreads++] = &st->pro_base->inputs[i];
        for (int32_t i = 0; i < st->npro; i++)
            if (st->prologue[i].operand) st->reads[st->nreads++] = st->prologue[i].operand;
    } else {
        for (int32_t i = 0; i < st->ninputs; i++) st->reads[st->nreads++] = &st->inputs[i];
    }
    for (int32_t i = 0; i < st->nfused; i++)
        if (st->epilogue[i].operand) st->reads[st->nreads++] = st->epilogue[i].operand;
    tg_kind_of(st->op)->decide(st); /* the route, decided once, by the kind's row */
}

void tg_schedule_route(const tg_buffer *b, char *dst, size_t cap) {
    tg_step st;
    step_init(&st, (tg_buffer *)b);
    snprintf(dst, cap, "%s", st.route);
}

/* Post order from b: every operand's step first, each pending buffer once. Caller holds
 * tg_graph_lock. */
static bool visit(tg_schedule *S, tg_buffer *b) {
    if (!b->node || tg_schedule_step_of(S, b) >= 0) return true;
    tg_step st;
    step_init(&st, b);
    for (int32_t i = 0; i < st.nreads; i++)
        if (!visit(S, st.reads[i]->buf)) return false;
    if (S->n == S->cap) {
        int32_t cap = S->cap ? S->cap * 2 : 16;
        tg_step *q = tg_realloc(S->steps, sizeof *q * (size_t)cap);
        if (!q) return false;
        S->steps = q, S->cap = cap;
    }
    S->steps[S->n++] = st;
    return true;
}

/* Record, on each step whose result the base op of a later elementwise step reads, why it was
 * not fused there (explain prints it). */
static void note_unfused(tg_schedule *S) {
    for (int32_t s = 0; s < S->n; s++) {
        const tg_step *st = &S->steps[s];
        if (st->op != TG_OP_ELEMENTWISE) continue;
        for (int32_t i = 0; i < st->ninputs; i++) {
            int32_t from = tg_schedule_step_of(S, st->inputs[i].buf);
            const char *why = st->nfused == TG_MAX_FUSED ? "the chain is at its longest" : why_not_fused(st->base, i, st->device);
            if (from >= 0 && why && !S->steps[from].unfused) S->steps[from].unfused = why;
        }
    }
}

/* How many steps read b (with multiplicity), and the last one. */
static int32_t readers(const tg_schedule *S, const tg_buffer *b, int32_t *last) {
    int32_t count = 0;
    *last = -1;
    for (int32_t s = 0; s < S->n; s++)
        for (int32_t i = 0; i < S->steps[s].nreads; i++)
            if (S->steps[s].reads[i]->buf == b) count++, *last = s;
    return count;
}

static bool read_before(const tg_step *st, int32_t i) {
    for (int32_t j = 0; j < i; j++)
        if (st->reads[j]->buf == st->reads[i]->buf) return true;
    return false;
}

/* Memory: a buffer is freed after its last reader when all its references are readers in this
 * schedule (no handle holds it); the schedule's own reference goes after that same step. */
static bool plan_memory(tg_schedule *S) {
    int64_t total = 0;
    for (int32_t s = 0; s < S->n; s++) total += S->steps[s].nreads, S->steps[s].release_after = s;
    if (total && !(S->free = tg_malloc(sizeof *S->free * (size_t)total))) return false;
    for (int32_t s = 0; s < S->n; s++) {
        tg_step *st = &S->steps[s];
        st->first_free = S->nfree_total;
        for (int32_t i = 0; i < st->nreads; i++) {
            tg_buffer *in = st->reads[i]->buf;
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
    note_unfused(&S);
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
