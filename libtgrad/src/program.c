/* Programs: the pending graph behind some outputs, kept as data so that it can be made again over
 * new inputs in one call (tgrad.h, "programs"). A node of the open graph is data already (its kind,
 * params, dtype and views: internal.h), so capturing copies each pending node once, in post
 * order, with each of its inputs named as an earlier node, an input slot (a buffer the caller
 * named) or a constant (any other realized buffer, which the program retains). Running the
 * program makes a new pending buffer per node over the given inputs: the graph the caller's own
 * calls would have made, so its realization (schedule, fusion, routes, bytes) is the same. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "step_index.h"

enum { REF_NODE = 0, REF_SLOT = 1, REF_CONST = 2 };

typedef struct {
    int32_t kind, index;
    tg_view view;
} prog_input;

typedef struct {
    tg_op op;
    tgrad_op ew;
    int32_t dtype, device, ninputs;
    int64_t numel;
    tg_node_params params;
    tg_view out;
    prog_input *inputs;
} prog_node;

/* What an input must be at a run: the captured input's view of a buffer like its own. */
typedef struct {
    tg_view view;
    int64_t numel;
    int32_t dtype, device;
} prog_slot;

struct tgrad_program {
    int32_t nslots, nconsts, nnodes, nouts;
    prog_slot *slots;
    tg_buffer **consts;   /* retained */
    prog_node *nodes;     /* post order */
    prog_input *outs;     /* each output: a node or slot or constant, and the handle's view */
};

/* ---- capture ---- */
/* What each buffer met so far became, in a schedule's buffer index (step_index.h): an entry's
 * `step` is its index among the program's nodes, slots or constants, `last` which of them
 * (REF_*). */
typedef struct {
    struct tgrad_program *p;
    tg_step_index seen;
    int32_t node_cap, const_cap;
} capture;

/* b's entry, NULL when b has none yet. */
static const tg_index_entry *seen(capture *c, const tg_buffer *b) { return tg_step_index_find(&c->seen, b); }

static tgrad_status remember(capture *c, const tg_buffer *b, int32_t kind, int32_t index) {
    tg_index_entry *e = tg_step_index_add(&c->seen, b);
    if (!e) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot grow the capture's index");
    e->step = index, e->last = kind;
    return TGRAD_OK;
}

static tgrad_status add_const(capture *c, tg_buffer *b, int32_t *index) {
    struct tgrad_program *p = c->p;
    if (p->nconsts == c->const_cap) {
        int32_t cap = c->const_cap ? 2 * c->const_cap : 16;
        tg_buffer **more = tg_realloc(p->consts, (size_t)cap * sizeof *more);
        if (!more) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot hold its constants");
        p->consts = more, c->const_cap = cap;
    }
    tgrad_status s = remember(c, b, REF_CONST, p->nconsts);
    if (s) return s;
    tg_buffer_retain(b);
    *index = p->nconsts;
    p->consts[p->nconsts++] = b;
    return TGRAD_OK;
}

static tgrad_status refuse_node(const tg_buffer *b) {
    if (b->requires_grad)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: buf#%llu records gradients; capture a graph made "
                       "without them (tgrad_set_grad_enabled(0))", (unsigned long long)b->id);
    if (b->node->op == TG_OP_RANDOM)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: buf#%llu draws random numbers, which a rerun would "
                       "draw again (the same seed and offset): make them an input", (unsigned long long)b->id);
    return TGRAD_OK;
}

static tgrad_status add_node(capture *c, tg_buffer *b, int32_t *index);

/* What input buffer b of a node becomes: its slot, constant or node (captured first). */
static tgrad_status refer(capture *c, tg_buffer *b, int32_t *kind, int32_t *index) {
    const tg_index_entry *e = seen(c, b);
    if (e) {
        *kind = e->last, *index = e->step;
        return TGRAD_OK;
    }
    if (b->node) {
        *kind = REF_NODE;
        return add_node(c, b, index);
    }
    *kind = REF_CONST;
    return add_const(c, b, index);
}

static tgrad_status append_node(capture *c, tg_buffer *b, prog_input *ins, int32_t *index) {
    struct tgrad_program *p = c->p;
    if (p->nnodes == c->node_cap) {
        int32_t cap = c->node_cap ? 2 * c->node_cap : 64;
        prog_node *more = tg_realloc(p->nodes, (size_t)cap * sizeof *more);
        if (!more) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot hold its nodes");
        p->nodes = more, c->node_cap = cap;
    }
    tgrad_status s = remember(c, b, REF_NODE, p->nnodes);
    if (s) return s;
    const tg_node *n = b->node;
    p->nodes[p->nnodes] = (prog_node){ .op = n->op, .ew = n->ew, .dtype = n->dtype, .device = b->device,
                                       .ninputs = n->ninputs, .numel = b->numel, .params = n->params, .out = n->out,
                                       .inputs = ins };
    *index = p->nnodes++;
    return TGRAD_OK;
}

typedef struct {
    tg_buffer *b;
    int32_t next;    /* the node's next input to name */
    prog_input *ins;
} frame;

/* Depth first without recursion (a chain of pending nodes may be long): a node is appended once
 * every input is named, so the nodes are in post order. A node on the stack cannot be reached
 * again before it is appended (the graph is acyclic). */
static tgrad_status add_node(capture *c, tg_buffer *root, int32_t *index) {
    frame *stack = NULL;
    int32_t depth = 0, cap = 0;
    tgrad_status s = TGRAD_OK;
    tg_buffer *push = root;
    while (!s && (push || depth)) {
        if (push) {
            if (depth == cap) {
                frame *more = tg_realloc(stack, (size_t)(cap = cap ? 2 * cap : 32) * sizeof *more);
                if (!more) { s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot walk the graph"); break; }
                stack = more;
            }
            int32_t n = push->node->ninputs;
            stack[depth] = (frame){ push, 0, tg_calloc((size_t)(n ? n : 1), sizeof(prog_input)) };
            if (!stack[depth++].ins) { s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot copy a node"); break; }
            if ((s = refuse_node(push))) break;
            push = NULL;
        }
        frame *f = &stack[depth - 1];
        const tg_node *n = f->b->node;
        if (f->next < n->ninputs) {
            tg_buffer *in = n->inputs[f->next].buf;
            const tg_index_entry *e = seen(c, in);
            prog_input *x = &f->ins[f->next];
            x->view = n->inputs[f->next].view;
            if (e) x->kind = e->last, x->index = e->step, f->next++;
            else if (in->node) push = in; /* named when it is appended, on the next look at this input */
            else x->kind = REF_CONST, s = add_const(c, in, &x->index), f->next++;
            continue;
        }
        int32_t at = 0;
        if ((s = append_node(c, f->b, f->ins, &at))) break;
        f->ins = NULL; /* the program's now */
        if (--depth == 0) *index = at;
    }
    for (int32_t i = 0; i < depth; i++) free(stack[i].ins);
    free(stack);
    return s;
}

TGRAD_API void tgrad_program_release(tgrad_program *p) {
    if (!p) return;
    for (int32_t i = 0; i < p->nnodes; i++) free(p->nodes[i].inputs);
    for (int32_t i = 0; i < p->nconsts; i++) tg_buffer_release(p->consts[i]);
    free(p->nodes), free(p->consts), free(p->slots);
    free(p->outs), free(p);
}

static tgrad_status check_counts(int32_t n, const tgrad_tensor_t *h, const char *what) {
    if (n < 0 || n > (1 << 20) || (n && !h))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: %d %s (NULL or a count outside 0 .. 2^20)", (int)n, what);
    return TGRAD_OK;
}

/* The inputs: each one buffer, none named twice. */
static tgrad_status capture_slots(capture *c, int32_t nin, const tgrad_tensor_t *inputs) {
    struct tgrad_program *p = c->p;
    p->slots = tg_calloc((size_t)(nin ? nin : 1), sizeof *p->slots);
    if (!p->slots) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot hold its inputs");
    for (int32_t i = 0; i < nin; i++) {
        tg_tensor t;
        tgrad_status s = tg_handle_get_tensor(inputs[i], &t);
        if (s) return s;
        const tg_index_entry *e = seen(c, t.buf);
        if (e) s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: inputs %d and %d share one buffer", (int)e->step, (int)i);
        if (!s) s = remember(c, t.buf, REF_SLOT, i);
        p->slots[i] = (prog_slot){ t.view, t.buf->numel, t.buf->dtype, t.buf->device };
        tg_tensor_unref(&t);
        if (s) return s;
        p->nslots = i + 1;
    }
    return TGRAD_OK;
}

static tgrad_status capture_outputs(capture *c, int32_t nout, const tgrad_tensor_t *outputs) {
    struct tgrad_program *p = c->p;
    p->outs = tg_calloc((size_t)(nout ? nout : 1), sizeof *p->outs);
    if (!p->outs) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot hold its outputs");
    for (int32_t i = 0; i < nout; i++) {
        tg_tensor t;
        tgrad_status s = tg_handle_get_tensor(outputs[i], &t);
        if (s) return s;
        p->outs[i].view = t.view;
        s = refer(c, t.buf, &p->outs[i].kind, &p->outs[i].index);
        tg_tensor_unref(&t);
        if (s) return s;
        p->nouts = i + 1;
    }
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_program_capture(int32_t nout, const tgrad_tensor_t *outputs, int32_t nin,
                                             const tgrad_tensor_t *inputs, tgrad_program **out) {
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: out is NULL");
    *out = NULL;
    tgrad_status s = check_counts(nout, outputs, "outputs");
    if (!s) s = check_counts(nin, inputs, "inputs");
    if (!s && nout == 0) s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: no outputs to capture");
    if (s) return s;
    capture c = { .p = tg_calloc(1, sizeof(struct tgrad_program)) };
    if (!c.p) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot allocate one");
    s = capture_slots(&c, nin, inputs);
    if (!s) {
        pthread_mutex_lock(&tg_graph_lock); /* no node detaches while the walk reads it */
        s = capture_outputs(&c, nout, outputs);
        pthread_mutex_unlock(&tg_graph_lock);
    }
    tg_step_index_free(&c.seen);
    if (s) {
        tgrad_program_release(c.p);
        return s;
    }
    *out = c.p;
    return TGRAD_OK;
}

/* ---- run ---- */
static tgrad_status check_input(const struct tgrad_program *p, int32_t i, const tg_tensor *t) {
    const prog_slot *want = &p->slots[i];
    const tg_view *wv = &want->view, *got = &t->view;
    bool same = wv->ndim == got->ndim && wv->offset == got->offset &&
                !memcmp(wv->shape, got->shape, sizeof wv->shape[0] * (size_t)wv->ndim) &&
                !memcmp(wv->strides, got->strides, sizeof wv->strides[0] * (size_t)wv->ndim);
    if (!same || t->buf->numel != want->numel) {
        char ws[160], gs[160];
        tg_format_shape(ws, sizeof ws, wv), tg_format_shape(gs, sizeof gs, got);
        return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "program: input %d is %s over %lld elements, captured as %s over %lld "
                       "(the same view of a buffer of the same size)", (int)i, gs, (long long)t->buf->numel, ws,
                       (long long)want->numel);
    }
    if (t->buf->dtype != want->dtype)
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "program: input %d is %s, captured as %s", (int)i,
                       tg_dtype_name(t->buf->dtype), tg_dtype_name(want->dtype));
    if (t->buf->device != want->device)
        return tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "program: input %d lives on %s, captured on %s", (int)i,
                       tg_device_name(t->buf->device), tg_device_name(want->device));
    return TGRAD_OK;
}

typedef struct {
    const struct tgrad_program *p;
    tg_tensor *in;   /* the given inputs (retained) */
    tg_buffer **made; /* one reference each */
} run_state;

static tg_buffer *resolve(const run_state *r, const prog_input *x) {
    return x->kind == REF_NODE ? r->made[x->index] : x->kind == REF_SLOT ? r->in[x->index].buf : r->p->consts[x->index];
}

static tgrad_status make_node(run_state *r, int32_t i) {
    const prog_node *pn = &r->p->nodes[i];
    tgrad_status s = tg_memory_admit_typed(pn->numel, tg_dtype_size(pn->dtype), "program");
    tg_node *n = s ? NULL : tg_node_new(pn->op, pn->ninputs);
    if (!s && !n) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot allocate a graph node");
    if (s) return s;
    n->ew = pn->ew, n->dtype = pn->dtype, n->params = pn->params, n->out = pn->out;
    for (int32_t k = 0; k < pn->ninputs; k++) {
        tg_buffer *b = resolve(r, &pn->inputs[k]);
        tg_buffer_retain(b);
        n->inputs[k] = (tg_node_input){ b, pn->inputs[k].view };
    }
    tg_buffer *b = NULL;
    if ((s = tg_buffer_new_typed(pn->numel, pn->dtype, n, &b))) {
        for (int32_t k = 0; k < pn->ninputs; k++) tg_buffer_release(n->inputs[k].buf);
        free(n);
        return s;
    }
    b->device = pn->device;
    r->made[i] = b;
    return TGRAD_OK;
}

static tgrad_status make_outputs(run_state *r, tgrad_tensor_t *outputs) {
    const struct tgrad_program *p = r->p;
    for (int32_t i = 0; i < p->nouts; i++) {
        tg_buffer *b = resolve(r, &p->outs[i]);
        tg_buffer_retain(b);
        tgrad_status s = tg_handle_new_tensor(b, &p->outs[i].view, &outputs[i]);
        if (s) {
            tg_buffer_release(b);
            for (int32_t j = 0; j < i; j++) tgrad_tensor_release(outputs[j]), outputs[j] = 0;
            return s;
        }
    }
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_program_run(const tgrad_program *p, int32_t nin, const tgrad_tensor_t *inputs,
                                         int32_t nout, tgrad_tensor_t *outputs) {
    if (!p) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: NULL program");
    tgrad_status s = check_counts(nin, inputs, "inputs");
    if (!s && (nout != p->nouts || !outputs))
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: room for %d outputs, it makes %d", (int)nout, (int)p->nouts);
    if (!s && nin != p->nslots)
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: %d inputs given, it was captured with %d", (int)nin,
                    (int)p->nslots);
    if (s) return s;
    run_state r = { .p = p, .in = tg_calloc((size_t)(nin ? nin : 1), sizeof *r.in),
                    .made = tg_calloc((size_t)(p->nnodes ? p->nnodes : 1), sizeof *r.made) };
    if (!r.in || !r.made) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "program: cannot run one");
    for (int32_t i = 0; !s && i < nin; i++)
        if (!(s = tg_handle_get_tensor(inputs[i], &r.in[i]))) s = check_input(p, i, &r.in[i]);
    for (int32_t i = 0; !s && i < p->nnodes; i++) s = make_node(&r, i);
    if (!s) s = make_outputs(&r, outputs);
    for (int32_t i = p->nnodes - 1; r.made && i >= 0; i--)
        if (r.made[i]) tg_buffer_release(r.made[i]); /* the outputs' handles and later nodes hold theirs */
    for (int32_t i = 0; r.in && i < nin; i++)
        if (r.in[i].buf) tg_tensor_unref(&r.in[i]);
    free(r.in), free(r.made);
    return s;
}

TGRAD_API tgrad_status tgrad_program_info(const tgrad_program *p, int32_t *nodes, int32_t *inputs, int32_t *constants,
                                          int32_t *outputs) {
    if (!p) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "program: NULL program");
    if (nodes) *nodes = p->nnodes;
    if (inputs) *inputs = p->nslots;
    if (constants) *constants = p->nconsts;
    if (outputs) *outputs = p->nouts;
    return TGRAD_OK;
}
