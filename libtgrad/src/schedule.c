/* The scheduler: what realizing a buffer runs, in which order, on which route. One walk of the
 * pending graph (under tg_graph_lock, so no node detaches meanwhile) emits the steps in post order,
 * each with its route decided here and only here (for a CPU matmul the frame's whole plan), and
 * plans memory: which buffers each step frees, and when the schedule drops its own references.
 * Realize (buffer.c) runs the steps in order; explain (explain.c) prints them. Portable: no
 * backend or ISA code, the executors only execute what a step says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen/gen.h"
#include "kinds.h"
#include "ops/elementwise.h"
#include "ops/elementwise_grad.h"

/* A schedule of up to SCAN_STEPS steps (a product, a short chain: most realizes) finds a buffer's
 * step and readers by scanning its steps, which costs no more than hashing there and allocates
 * nothing; past that the index takes over (built from the steps so far), so that the work stays
 * linear (docs/architecture.md, "The walk and the index"). */
enum { SCAN_STEPS = 4 };

static bool indexed(const tg_schedule *S) { return S->index.cap != 0; }

int32_t tg_schedule_step_of(const tg_schedule *S, const tg_buffer *b) {
    if (!indexed(S)) {
        for (int32_t i = 0; i < S->n; i++)
            if (S->steps[i].buf == b) return i;
        return -1;
    }
    /* the index counts its probes: the one field a look-up writes */
    const tg_index_entry *e = tg_step_index_find((tg_step_index *)&S->index, b);
    return e ? e->step : -1;
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

/* The work of this thread's latest schedule, published when it is freed (it counts in its own
 * fields meanwhile: no thread-local access in the loops). */
typedef struct work_record {
    int64_t steps, reads, probes, release_checks, build_ns;
} work_record;
static _Thread_local work_record last_work;
static atomic_bool timed; /* set by tgrad_debug_schedule_work: only then do builds read the clock */

static void publish_work(const tg_schedule *S) {
    last_work = (work_record){ S->n, S->reads, S->index.probes, S->release_checks, S->build_ns };
}

TGRAD_API tgrad_status tgrad_debug_schedule_work(int64_t *work, int32_t count) {
    if (!work || count < 1 || count > TGRAD_DEBUG_WORK_COUNT)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_schedule_work: work is NULL or count %d is not 1 .. %d",
                       (int)count, TGRAD_DEBUG_WORK_COUNT);
    atomic_store_explicit(&timed, true, memory_order_relaxed);
    const work_record *w = &last_work;
    const int64_t all[TGRAD_DEBUG_WORK_COUNT] = { w->steps, w->reads, w->probes, w->release_checks, w->build_ns };
    memcpy(work, all, sizeof *work * (size_t)count);
    return TGRAD_OK;
}

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
    if (p->dtype != TGRAD_DTYPE_BF16) return "a float32 value is not fused (the fused chains compute on bfloat16)";
    const char *kind_says = tg_kind_of(p->node->op)->unfused;
    if (kind_says) return kind_says;
    if (device != TGRAD_DEVICE_CPU && tg_kind_of(p->node->op)->gpu_unfused) return tg_kind_of(p->node->op)->gpu_unfused;
    if (p->node->op == TG_OP_ELEMENTWISE && tg_gen_ew_runs_alone(p->node->ew, p->dtype))
        return "it runs as its own kernel (on a GPU device it evaluates in binary64 and its undecided elements rerun "
               "on the host)";
    /* An anchor's epilogue runs on its finished bf16 blocks (cpu/epilogue.h, the GPU store step) */
    if (tg_kind_of(p->node->op)->role == TG_ROLE_ANCHOR && p->dtype != TGRAD_DTYPE_BF16)
        return "its result is float32 (epilogues run on bf16 results only)";
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
        if (tg_gen_ew_runs_alone(n->ew, cur->dtype)) break; /* its own kernel on every device: the same steps */
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

/* The buffers a GPU kernel binds for fused ops (an upper bound: a binary op's operand, a table
 * op's table, a derivative op's table of f'(x) besides its operand, each counted). */
static int32_t op_buffers(tgrad_op op, bool operand) {
    return (operand || tg_ew_from_table(op)) + tg_ew_grad_from_table(op);
}

static int32_t chain_buffers(const tg_fused_op *ops, int32_t n) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) k += op_buffers(ops[i].op, ops[i].operand != NULL);
    return k;
}

/* A one-input reduction's prologue (a two-input node of the kind, softmax_backward, takes none):
 * the pending elementwise chain that only it reads (its input 0, read whole), up to its first
 * elementwise op; not when the chain starts at an anchor (a matmul keeps
 * it as its epilogue and stores the result). On a GPU device, not when the kernel would bind more
 * than TGRAD_LAUNCH_MAX_BUFFERS buffers with it (the reduction's input and output, the
 * epilogue's and the prologue's): the chain is then its own step, stored, and the bytes are the
 * same (docs/kernels.md, "The reduce route"). */
static void collect_prologue(tg_step *st, const tg_node *n) {
    if (st->device != TGRAD_DEVICE_CPU && tg_kind_of(n->op)->gpu_unfused) return;
    if (why_not_fused(n, 0, st->device) || n->inputs[0].buf->node->op != TG_OP_ELEMENTWISE) return;
    tg_step chain = { .device = st->device };
    const tg_buffer *first = collect_chain(&chain, n->inputs[0].buf);
    if (first->node->op != TG_OP_ELEMENTWISE) return;
    int32_t binds = 2 + chain_buffers(st->epilogue, st->nfused) + chain_buffers(chain.epilogue, chain.nfused) +
                    op_buffers(first->node->ew, first->node->ninputs == 2);
    if (st->device != TGRAD_DEVICE_CPU && binds > TGRAD_LAUNCH_MAX_BUFFERS) return;
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
    if (tg_kind_of(st->op)->role == TG_ROLE_REDUCTION && n->ninputs == 1) collect_prologue(st, n);
    if (st->pro_base) {
        for (int32_t i = 0; i < st->pro_base->ninputs; i++) st->reads[st->nreads++] = &st->pro_base->inputs[i];
        for (int32_t i = 0; i < st->npro; i++)
            if (st->prologue[i].operand) st->reads[st->nreads++] = st->prologue[i].operand;
    } else {
        for (int32_t i = 0; i < st->ninputs; i++, st->nreads++) /* past TG_MAX_READS: tg_step_read */
            if (i < TG_MAX_READS) st->reads[i] = &st->inputs[i];
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

/* Append a finished step and index its buffer. */
static bool emit(tg_schedule *S, const tg_step *st) {
    if (S->n == S->cap) {
        int32_t cap = S->cap ? S->cap * 2 : 16;
        tg_step *q = tg_realloc(S->steps, sizeof *q * (size_t)cap);
        if (!q) return false;
        S->steps = q, S->cap = cap;
    }
    S->steps[S->n++] = *st;
    if (S->n <= SCAN_STEPS) return true;
    for (int32_t i = indexed(S) ? S->n - 1 : 0; i < S->n; i++) { /* the index starts with every step so far */
        tg_index_entry *e = tg_step_index_add(&S->index, S->steps[i].buf);
        if (!e) return false;
        e->step = i;
    }
    return true;
}

/* A pending buffer this schedule has no step for yet: the walk enters it. */
static bool unvisited(const tg_schedule *S, const tg_buffer *b) {
    return b->node && tg_schedule_step_of(S, b) < 0;
}

/* One buffer on the walk's path: its step (decided on entry, as the recursive walk did) and the
 * next of the step's reads to enter. */
typedef struct walk_frame {
    tg_step st;
    int32_t next;
} walk_frame;

enum { WALK_INLINE = 4 }; /* frames on the C stack before the walk moves its path to the heap */

/* Post order from b: every operand's step first, each pending buffer once, in the order of a
 * depth-first walk over each step's reads. Iterative: the path is an explicit stack (on the heap
 * past WALK_INLINE frames), so a chain of any length takes no C stack. Caller holds
 * tg_graph_lock (no node detaches meanwhile; the graph is acyclic, so a buffer on the path is
 * never reached again from above it). */
static bool visit(tg_schedule *S, tg_buffer *b) {
    if (!unvisited(S, b)) return true;
    walk_frame inline_path[WALK_INLINE], *path = inline_path;
    int32_t depth = 1, cap = WALK_INLINE;
    bool ok = true;
    step_init(&path[0].st, b);
    path[0].next = 0;
    while (depth > 0) {
        walk_frame *f = &path[depth - 1];
        if (f->next == f->st.nreads) { /* every operand has its step: this one follows them */
            if (!(ok = emit(S, &f->st))) break;
            depth--;
            continue;
        }
        tg_buffer *in = tg_step_read(&f->st, f->next++)->buf;
        if (!unvisited(S, in)) continue;
        if (depth == cap) {
            int32_t ncap = cap * 2;
            walk_frame *q = path == inline_path ? tg_malloc(sizeof *q * (size_t)ncap)
                                                : tg_realloc(path, sizeof *q * (size_t)ncap);
            if (!(ok = q != NULL)) break;
            if (path == inline_path) memcpy(q, inline_path, sizeof inline_path);
            path = q, cap = ncap;
        }
        step_init(&path[depth].st, in);
        path[depth++].next = 0;
    }
    if (path != inline_path) free(path);
    return ok;
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

static bool read_before(const tg_step *st, int32_t i) {
    for (int32_t j = 0; j < i; j++)
        if (tg_step_read(st, j)->buf == tg_step_read(st, i)->buf) return true;
    return false;
}

/* How b is used: the step computing it (-1: none), how many times the steps read it and the last
 * step that does (-1: none). From the index (counted by plan_memory), or by scanning the steps. */
typedef struct buffer_use {
    int32_t step, last;
    int64_t readers;
} buffer_use;

static buffer_use use_of(tg_schedule *S, const tg_buffer *b) {
    if (indexed(S)) {
        const tg_index_entry *e = tg_step_index_find(&S->index, b);
        return (buffer_use){ e->step, e->last, e->readers };
    }
    buffer_use u = { tg_schedule_step_of(S, b), -1, 0 };
    for (int32_t s = 0; s < S->n; s++)
        for (int32_t i = 0; i < S->steps[s].nreads; i++)
            if (tg_step_read(&S->steps[s], i)->buf == b) u.readers++, u.last = s;
    return u;
}

/* Memory: a buffer is freed after its last reader when all its references are readers in this
 * schedule (no handle holds it); the schedule's own reference goes after that same step. One pass
 * counts every buffer's readers and finds its last one (in the index); a second decides. */
static bool plan_memory(tg_schedule *S) {
    int64_t total = 0;
    for (int32_t s = 0; s < S->n; s++) total += S->steps[s].nreads, S->steps[s].release_after = s;
    for (int32_t s = 0; indexed(S) && s < S->n; s++) { /* every buffer's readers, in one pass */
        const tg_step *st = &S->steps[s];
        for (int32_t i = 0; i < st->nreads; i++) {
            tg_index_entry *e = tg_step_index_add(&S->index, tg_step_read(st, i)->buf);
            if (!e) return false;
            e->readers++, e->last = s;
        }
    }
    S->reads = total;
    if (!S->n) return true;
    /* free[total], then (indexed) release_start[n + 1] and release_order[n] */
    size_t bytes = sizeof *S->free * (size_t)total + (indexed(S) ? sizeof(int32_t) * (2 * (size_t)S->n + 1) : 0);
    if (!(S->free = tg_malloc(bytes))) return false;
    for (int32_t s = 0; s < S->n; s++) {
        tg_step *st = &S->steps[s];
        st->first_free = S->nfree_total;
        for (int32_t i = 0; i < st->nreads; i++) {
            tg_buffer *in = tg_step_read(st, i)->buf;
            if (read_before(st, i)) continue;
            buffer_use u = use_of(S, in);
            if (u.step >= 0) S->steps[u.step].release_after = u.last;
            if (u.last == s && u.readers == (int64_t)atomic_load(&in->refs)) S->free[S->nfree_total++] = in;
        }
        st->nfree = S->nfree_total - st->first_free;
    }
    if (!indexed(S)) return true; /* a few steps: dropping their references scans them */
    /* the steps by release_after, stable (a counting sort): each bucket in step order */
    S->release_start = (int32_t *)(S->free + total), S->release_order = S->release_start + S->n + 1;
    int32_t *start = S->release_start;
    memset(start, 0, sizeof *start * ((size_t)S->n + 1));
    for (int32_t s = 0; s < S->n; s++) start[S->steps[s].release_after + 1]++;
    for (int32_t r = 0; r < S->n; r++) start[r + 1] += start[r];
    for (int32_t s = 0; s < S->n; s++) S->release_order[start[S->steps[s].release_after]++] = s;
    for (int32_t r = S->n; r > 0; r--) start[r] = start[r - 1]; /* back to each bucket's start */
    start[0] = 0;
    return true;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

tgrad_status tg_schedule_build_locked(tg_buffer *b, tg_schedule *out) {
    tg_schedule *S = out; /* built in place */
    *S = (tg_schedule){ .released_through = -1 };
    int64_t t0 = atomic_load_explicit(&timed, memory_order_relaxed) ? now_ns() : 0;
    if (!visit(S, b) || !plan_memory(S)) {
        free(S->steps);
        free(S->free);
        tg_step_index_free(&S->index);
        *S = (tg_schedule){ .released_through = -1 };
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate the schedule of a pending tensor");
    }
    note_unfused(S);
    if (t0) S->build_ns = now_ns() - t0;
    for (int32_t s = 0; s < S->n; s++) S->steps[s].released = true; /* holds no references */
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

static void release_step(tg_step *st) {
    if (st->released) return;
    st->released = true;
    tg_buffer_release(st->buf);
}

void tg_schedule_release_through(tg_schedule *S, int32_t step) {
    int32_t upto = step < S->n - 1 ? step : S->n - 1; /* release_after < n */
    if (upto <= S->released_through) return;
    if (upto == S->released_through + 1 && S->release_start) {
        /* the next bucket: the steps whose release_after is upto, in step order */
        for (int32_t k = S->release_start[upto]; k < S->release_start[upto + 1]; k++, S->release_checks++)
            release_step(&S->steps[S->release_order[k]]);
    } else { /* a few steps, or a jump (a run that stopped early): every step, in step order */
        for (int32_t s = 0; s < S->n; s++, S->release_checks++)
            if (S->steps[s].release_after <= upto) release_step(&S->steps[s]);
    }
    S->released_through = upto;
}

void tg_schedule_free(tg_schedule *S) {
    tg_schedule_release_through(S, INT32_MAX);
    publish_work(S);
    free(S->steps);
    free(S->free);
    tg_step_index_free(&S->index);
    *S = (tg_schedule){ .released_through = -1 };
}
