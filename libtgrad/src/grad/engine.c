/* The gradient engine: tgrad_grad walks the recorded graph (pending nodes and the history that
 * buffers requiring a gradient keep past realization) from the outputs back to the inputs and
 * builds the backward graph lazily, one kind's rule (its `vjp` row in kinds.c) per node. The
 * walk is in a fixed order (depth first from outputs[0], inputs in their order), so the same
 * graph always gives the same backward graph. docs/autograd.md has the contract. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kinds.h"
#include "grad.h"

/* ---- requires_grad and no_grad ---- */
static _Thread_local bool grad_off; /* zero-initialized: enabled */

bool tg_grad_enabled(void) { return !grad_off; }

TGRAD_API tgrad_status tgrad_set_grad_enabled(int32_t on) {
    if (on != 0 && on != 1) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_grad_enabled: on is %d, not 0 or 1", (int)on);
    grad_off = !on;
    return TGRAD_OK;
}

TGRAD_API int32_t tgrad_grad_enabled(void) { return !grad_off; }

static bool float_dtype(int32_t d) { return d == TGRAD_DTYPE_BF16 || d == TGRAD_DTYPE_F32; }

TGRAD_API tgrad_status tgrad_tensor_set_requires_grad(tgrad_tensor_t tensor, int32_t on) {
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    if (on != 0 && on != 1) s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_requires_grad: on is %d, not 0 or 1", (int)on);
    else if (on && !float_dtype(t.buf->dtype))
        s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "set_requires_grad: a %s tensor has no gradient (bfloat16 and float32 do)",
                    tg_dtype_name(t.buf->dtype));
    else t.buf->requires_grad = on;
    tg_tensor_unref(&t);
    return s;
}

TGRAD_API tgrad_status tgrad_tensor_requires_grad(tgrad_tensor_t tensor, int32_t *on) {
    if (!on) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_requires_grad: on is NULL");
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    *on = t.buf->requires_grad;
    tg_tensor_unref(&t);
    return TGRAD_OK;
}

/* ---- the arena and the helpers the rules compose with ---- */
tgrad_status tg_keep(tg_grad_arena *A, tgrad_status s, tgrad_tensor_t h) {
    if (s) return s;
    if (A->n == A->cap) {
        int32_t cap = A->cap ? 2 * A->cap : 64;
        tgrad_tensor_t *bigger = tg_realloc(A->h, sizeof *bigger * (size_t)cap);
        if (!bigger) {
            tgrad_tensor_release(h);
            return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot grow the list of intermediate tensors");
        }
        A->h = bigger, A->cap = cap;
    }
    A->h[A->n++] = h;
    return TGRAD_OK;
}

static void arena_free(tg_grad_arena *A) {
    for (int32_t i = 0; i < A->n; i++) tgrad_tensor_release(A->h[i]);
    free(A->h);
    *A = (tg_grad_arena){ 0 };
}

/* Keep the handle a call just wrote to *out (0 on failure). */
tgrad_status tg_keep_out(tg_grad_arena *A, tgrad_status s, tgrad_tensor_t *out) {
    if (s) return *out = 0, s;
    return tg_keep(A, TGRAD_OK, *out);
}
#define KEEP(call, out) tg_keep_out(A, (call), (out))

tgrad_status tg_g_handle(tg_grad_arena *A, tg_buffer *b, const tg_view *v, tgrad_tensor_t *out) {
    tg_buffer_retain(b);
    tgrad_status s = tg_handle_new_tensor(b, v, out);
    if (s) {
        tg_buffer_release(b);
        return s;
    }
    return tg_keep(A, TGRAD_OK, *out);
}

tgrad_status tg_g_scalar_on(tg_grad_arena *A, double v, int32_t dtype, int32_t device, tgrad_tensor_t *out) {
    tgrad_status s = KEEP(tgrad_tensor_from_host(&v, TGRAD_DTYPE_F64, 0, NULL, dtype, out), out);
    if (!s && device != TGRAD_DEVICE_CPU) s = KEEP(tgrad_tensor_to(*out, device, out), out);
    return s;
}
tgrad_status tg_g_scalar(tg_grad_arena *A, double v, int32_t dtype, tgrad_tensor_t like, tgrad_tensor_t *out) {
    int32_t device = TGRAD_DEVICE_CPU;
    tgrad_status s = tgrad_tensor_device(like, &device);
    return s ? s : tg_g_scalar_on(A, v, dtype, device, out);
}
tgrad_status tg_g_cast(tg_grad_arena *A, tgrad_tensor_t x, int32_t dtype, tgrad_tensor_t *out) {
    return KEEP(tgrad_cast(x, dtype, out), out);
}
tgrad_status tg_g_un(tg_grad_arena *A, tgrad_op op, tgrad_tensor_t x, tgrad_tensor_t *out) {
    return KEEP(tgrad_unary(op, x, out), out);
}
tgrad_status tg_g_bin(tg_grad_arena *A, tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out) {
    return KEEP(tgrad_binary(op, a, b, out), out);
}
tgrad_status tg_g_binc(tg_grad_arena *A, tgrad_op op, tgrad_tensor_t a, double c, tgrad_tensor_t *out) {
    int32_t dt = 0;
    tgrad_tensor_t k = 0;
    tgrad_status s = tgrad_tensor_dtype(a, &dt);
    if (!s) s = tg_g_scalar(A, c, dt, a, &k);
    return s ? s : tg_g_bin(A, op, a, k, out);
}
tgrad_status tg_g_cmpc(tg_grad_arena *A, int32_t cmp, tgrad_tensor_t a, double c, tgrad_tensor_t *out) {
    int32_t dt = 0;
    tgrad_tensor_t k = 0;
    tgrad_status s = tgrad_tensor_dtype(a, &dt);
    if (!s) s = tg_g_scalar(A, c, dt, a, &k);
    return s ? s : KEEP(tgrad_compare(cmp, a, k, out), out);
}
tgrad_status tg_g_mask(tg_grad_arena *A, tgrad_tensor_t cond, tgrad_tensor_t a, tgrad_tensor_t *out) {
    int32_t dt = 0;
    tgrad_tensor_t zero = 0;
    tgrad_status s = tgrad_tensor_dtype(a, &dt);
    if (!s) s = tg_g_scalar(A, 0.0, dt, a, &zero);
    return s ? s : KEEP(tgrad_where(cond, a, zero, out), out);
}
tgrad_status tg_g_reshape(tg_grad_arena *A, tgrad_tensor_t x, int32_t ndim, const int64_t *shape, tgrad_tensor_t *out) {
    return KEEP(tgrad_tensor_reshape(x, shape, ndim, out), out);
}
tgrad_status tg_g_expand(tg_grad_arena *A, tgrad_tensor_t x, int32_t ndim, const int64_t *shape, tgrad_tensor_t *out) {
    return KEEP(tgrad_tensor_expand(x, shape, ndim, out), out);
}

tgrad_status tg_g_unview(tg_grad_arena *A, tgrad_tensor_t g, const tg_view *v, int64_t numel, tgrad_tensor_t *out) {
    int32_t axes[TGRAD_MAX_DIMS], naxes = 0;
    tg_view w = *v;
    for (int32_t d = 0; d < v->ndim; d++)
        if (v->strides[d] == 0 && v->shape[d] > 1) axes[naxes++] = d, w.shape[d] = 1;
    tgrad_status s = TGRAD_OK;
    if (naxes) s = KEEP(tgrad_reduce(TGRAD_REDUCE_SUM, g, axes, naxes, 1, 0, &g), &g); /* correctly rounded */
    if (s) return s;
    int64_t n = 0;
    tg_view_numel(&w, &n);
    if (n == numel && w.offset == 0 && tg_view_is_compact_rowmajor(&w)) return tg_g_reshape(A, g, 1, &numel, out);
    if (!naxes && n == numel) { /* g already lies where w puts it (vjp_matmul.c's transposed products) */
        tg_tensor t;
        if ((s = tg_handle_get_tensor(g, &t))) return s;
        bool same = t.buf->numel == numel && t.view.ndim == w.ndim && t.view.offset == w.offset;
        for (int32_t d = 0; same && d < w.ndim; d++) same = t.view.shape[d] == w.shape[d] && t.view.strides[d] == w.strides[d];
        tg_view whole;
        if (same) s = tg_view_contiguous(1, &numel, &whole);
        if (same && !s) s = tg_g_handle(A, t.buf, &whole, out);
        tg_tensor_unref(&t);
        if (same || s) return s;
    }
    return KEEP(tg_place(g, &w, numel, out), out);
}

/* ---- the walk ---- */
typedef struct gvisit {
    tg_buffer *buf;
    const tg_node *node; /* its recipe (NULL: a leaf or a constant) */
    bool relevant;       /* an input, or a buffer some input's path passes through */
    bool target;
    int32_t next_input;  /* the DFS cursor */
    int32_t ncot, capcot;
    tgrad_tensor_t *cot; /* contributions (compact 1-D, numel elements), in arrival order */
} gvisit;

typedef struct gwalk {
    gvisit *v;
    int32_t n, cap;
    int32_t *slot; /* open addressing: buffer -> index + 1 */
    int32_t nslot;
} gwalk;

static int32_t walk_find(const gwalk *W, const tg_buffer *b, int32_t *at) {
    if (!W->nslot) return -1;
    uint64_t h = (uint64_t)(uintptr_t)b * 0x9E3779B97F4A7C15ull;
    int32_t i = (int32_t)(h >> 40) & (W->nslot - 1);
    while (W->slot[i] && W->v[W->slot[i] - 1].buf != b) i = (i + 1) & (W->nslot - 1);
    if (at) *at = i;
    return W->slot[i] - 1;
}

static tgrad_status walk_add(gwalk *W, tg_buffer *b, int32_t *index) {
    if (2 * (W->n + 1) > W->nslot) { /* rehash at half load */
        int32_t ns = W->nslot ? 2 * W->nslot : 64;
        int32_t *slots = tg_calloc((size_t)ns, sizeof *slots);
        if (!slots) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot allocate the walk's table");
        free(W->slot);
        W->slot = slots, W->nslot = ns;
        for (int32_t k = 0; k < W->n; k++) {
            int32_t at;
            walk_find(W, W->v[k].buf, &at);
            W->slot[at] = k + 1;
        }
    }
    if (W->n == W->cap) {
        int32_t cap = W->cap ? 2 * W->cap : 64;
        gvisit *bigger = tg_realloc(W->v, sizeof *bigger * (size_t)cap);
        if (!bigger) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot grow the walk");
        W->v = bigger, W->cap = cap;
    }
    int32_t at = 0; /* set: the table has slots by now */
    walk_find(W, b, &at);
    W->slot[at] = W->n + 1;
    W->v[W->n] = (gvisit){ .buf = b, .node = b->requires_grad && float_dtype(b->dtype) ? tg_buffer_recipe(b) : NULL };
    *index = W->n++;
    return TGRAD_OK;
}

static void walk_free(gwalk *W) {
    for (int32_t i = 0; i < W->n; i++) free(W->v[i].cot);
    free(W->v);
    free(W->slot);
}

/* Depth first from each output; order[] receives the post order (inputs before their readers). */
static tgrad_status walk_build(gwalk *W, const tg_tensor *outs, int32_t n_out, int32_t **order_out) {
    tgrad_status s = TGRAD_OK;
    int32_t *stack = NULL, *order = NULL, depth = 0, cap = 0, norder = 0;
    pthread_mutex_lock(&tg_graph_lock); /* no node detaches (to history or freed) meanwhile */
    for (int32_t o = 0; o < n_out && !s; o++) {
        int32_t idx;
        if (walk_find(W, outs[o].buf, NULL) >= 0) continue;
        if ((s = walk_add(W, outs[o].buf, &idx))) break;
        depth = 0;
        for (int32_t push = idx;;) {
            if (push >= 0) {
                if (depth == cap) {
                    cap = cap ? 2 * cap : 64;
                    int32_t *bigger = tg_realloc(stack, sizeof *bigger * (size_t)cap);
                    if (!bigger) { s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot grow the walk's stack"); break; }
                    stack = bigger;
                }
                stack[depth++] = push;
                push = -1;
            }
            if (!depth) break;
            gvisit *top = &W->v[stack[depth - 1]];
            const tg_node *n = top->node;
            if (n && top->next_input < n->ninputs) {
                tg_buffer *in = n->inputs[top->next_input++].buf;
                if (in && walk_find(W, in, NULL) < 0) {
                    if ((s = walk_add(W, in, &push))) break;
                }
                continue;
            }
            int32_t *bigger = norder % 64 ? order : tg_realloc(order, sizeof *order * (size_t)(norder + 64));
            if (!bigger) { s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot grow the walk's order"); break; }
            order = bigger;
            order[norder++] = stack[--depth];
        }
    }
    pthread_mutex_unlock(&tg_graph_lock);
    free(stack);
    if (s) free(order);
    else *order_out = order;
    return s;
}

/* ---- the backward graph ---- */
static int32_t cot_dtype(const tg_buffer *b, int32_t grad_dtype) { return grad_dtype ? grad_dtype : b->dtype; }

static tgrad_status add_cot(tg_grad_arena *A, gvisit *to, tgrad_tensor_t g, int32_t grad_dtype) {
    int32_t dt = 0;
    tgrad_status s = tgrad_tensor_dtype(g, &dt);
    if (!s && dt != cot_dtype(to->buf, grad_dtype)) s = tg_g_cast(A, g, cot_dtype(to->buf, grad_dtype), &g);
    if (s) return s;
    if (to->ncot == to->capcot) {
        int32_t cap = to->capcot ? 2 * to->capcot : 2;
        tgrad_tensor_t *bigger = tg_realloc(to->cot, sizeof *bigger * (size_t)cap);
        if (!bigger) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot grow a cotangent list");
        to->cot = bigger, to->capcot = cap;
    }
    to->cot[to->ncot++] = g;
    return TGRAD_OK;
}

/* The sum of a buffer's contributions, rounded once: one is itself, two an add (one rounding),
 * more a stack summed by the REDUCE kind (correctly rounded, so their order does not matter). */
static tgrad_status sum_cot(tg_grad_arena *A, gvisit *v, tgrad_tensor_t *out) {
    if (v->ncot == 1) return *out = v->cot[0], TGRAD_OK;
    if (v->ncot == 2) return tg_g_bin(A, TGRAD_OP_ADD, v->cot[0], v->cot[1], out);
    tgrad_tensor_t joined = 0;
    int64_t shape[2] = { 1, v->buf->numel };
    tgrad_status s = TGRAD_OK;
    tgrad_tensor_t *rows = tg_calloc((size_t)v->ncot, sizeof *rows);
    if (!rows) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot allocate a cotangent sum");
    for (int32_t i = 0; i < v->ncot && !s; i++) s = tg_g_reshape(A, v->cot[i], 2, shape, &rows[i]);
    if (!s) s = KEEP(tgrad_concat(v->ncot, rows, 0, &joined), &joined);
    free(rows);
    int32_t axis = 0;
    return s ? s : KEEP(tgrad_reduce(TGRAD_REDUCE_SUM, joined, &axis, 1, 0, 0, out), out);
}

static tgrad_status no_rule(const tg_node *n) {
    const tg_kind *k = tg_kind_of(n->op);
    return tg_fail(TGRAD_ERR_NO_GRADIENT_RULE, "grad: the %s kind has no gradient rule yet (docs/autograd.md)", k->name);
}

/* Every node on a path to an input has a rule (checked before anything is built). */
static tgrad_status check_rules(const gwalk *W) {
    for (int32_t i = 0; i < W->n; i++) {
        const gvisit *v = &W->v[i];
        if (!v->relevant || !v->node) continue;
        const tg_vjp *r = tg_kind_of(v->node->op)->vjp;
        if (!r) return no_rule(v->node);
        if (r->check) {
            tgrad_status s = r->check(v->node);
            if (s) return s;
        }
    }
    return TGRAD_OK;
}

/* Propagate v's summed cotangent g (compact 1-D) through its node into its relevant inputs. */
static tgrad_status backward_node(tg_grad_arena *A, gwalk *W, gvisit *v, tgrad_tensor_t g1, int32_t grad_dtype) {
    const tg_node *n = v->node;
    tgrad_tensor_t x[16], *xs = n->ninputs <= 16 ? x : tg_calloc((size_t)n->ninputs, sizeof *xs), y = 0, g = 0;
    if (!xs) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot allocate a node's operands");
    tgrad_status s = tg_g_handle(A, v->buf, &n->out, &y);
    if (!s) s = tg_g_reshape(A, g1, n->out.ndim, n->out.shape, &g);
    for (int32_t i = 0; i < n->ninputs && !s; i++) s = tg_g_handle(A, n->inputs[i].buf, &n->inputs[i].view, &xs[i]);
    tg_vjp_args args = { .A = A, .node = n, .y = y, .g = g, .x = xs, .cd = cot_dtype(v->buf, grad_dtype) };
    for (int32_t i = 0; i < n->ninputs && !s; i++) {
        int32_t at = walk_find(W, n->inputs[i].buf, NULL);
        if (at < 0 || !W->v[at].relevant) continue;
        tgrad_tensor_t gi = 0, gb = 0;
        s = tg_kind_of(n->op)->vjp->input(&args, i, &gi);
        if (!s && gi) s = tg_g_unview(A, gi, &n->inputs[i].view, n->inputs[i].buf->numel, &gb);
        if (!s && gb) s = add_cot(A, &W->v[at], gb, grad_dtype);
    }
    if (xs != x) free(xs);
    return s;
}

static tgrad_status check_args(int32_t n_outputs, const tgrad_tensor_t *outputs, const tgrad_tensor_t *seeds,
                               int32_t n_inputs, const tgrad_tensor_t *inputs, int32_t grad_dtype, tgrad_tensor_t *grads,
                               tg_tensor *outs, tg_tensor *ins, tg_tensor *sds) {
    for (int32_t k = 0; k < n_outputs; k++) {
        tgrad_status s = tg_handle_get_tensor(outputs[k], &outs[k]);
        if (s) return s;
        int64_t numel = 0;
        tg_view_numel(&outs[k].view, &numel);
        if (!float_dtype(outs[k].buf->dtype))
            return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "grad: output %d is %s; gradients flow from bfloat16 and float32", (int)k,
                           tg_dtype_name(outs[k].buf->dtype));
        if (!seeds && numel != 1)
            return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "grad: output %d holds %lld elements; without seeds each must hold one",
                           (int)k, (long long)numel);
        if (!seeds) continue;
        if ((s = tg_handle_get_tensor(seeds[k], &sds[k]))) return s;
        const tg_view *a = &outs[k].view, *b = &sds[k].view;
        bool same = a->ndim == b->ndim;
        for (int32_t d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
        if (!same) {
            char sa[160], sb[160];
            tg_format_shape(sa, sizeof sa, a), tg_format_shape(sb, sizeof sb, b);
            return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "grad: seed %d has shape %s, its output %s", (int)k, sb, sa);
        }
        if (!float_dtype(sds[k].buf->dtype))
            return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "grad: seed %d is %s (bfloat16 or float32)", (int)k,
                           tg_dtype_name(sds[k].buf->dtype));
        if (sds[k].buf->device != outs[k].buf->device)
            return tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "grad: seed %d lives on %s, its output on %s", (int)k,
                           tg_device_name(sds[k].buf->device), tg_device_name(outs[k].buf->device));
    }
    for (int32_t j = 0; j < n_inputs; j++) {
        tgrad_status s = tg_handle_get_tensor(inputs[j], &ins[j]);
        if (s) return s;
        if (!float_dtype(ins[j].buf->dtype))
            return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "grad: input %d is %s; gradients are bfloat16 or float32", (int)j,
                           tg_dtype_name(ins[j].buf->dtype));
    }
    (void)grad_dtype, (void)grads;
    return TGRAD_OK;
}

/* The result for input j: its buffer's cotangent (compact 1-D) read through the input's view, in
 * dtype; a handle of the caller's. */
static tgrad_status result_for(tg_grad_arena *A, tgrad_tensor_t cot, const tg_tensor *in, int32_t dtype, tgrad_tensor_t *out) {
    tgrad_tensor_t c = 0, r = 0;
    tgrad_status s = KEEP(tgrad_tensor_contiguous(cot, &c), &c);
    tg_tensor t = { 0 };
    if (!s) s = tg_handle_get_tensor(c, &t);
    if (s) return s;
    tg_view v = in->view; /* the cotangent holds the buffer's elements in its storage order */
    v.offset += t.view.offset;
    int32_t dt = t.buf->dtype;
    if ((s = tg_handle_new_tensor(t.buf, &v, &r))) {
        tg_tensor_unref(&t);
        return s;
    }
    if (dt == dtype) return *out = r, TGRAD_OK;
    s = tgrad_cast(r, dtype, out);
    tgrad_tensor_release(r);
    return s;
}

TGRAD_API tgrad_status tgrad_grad(int32_t n_outputs, const tgrad_tensor_t *outputs, const tgrad_tensor_t *seeds,
                                  int32_t n_inputs, const tgrad_tensor_t *inputs, int32_t grad_dtype,
                                  tgrad_tensor_t *grads) {
    if (n_outputs < 1 || n_inputs < 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "grad: %d outputs and %d inputs (at least one of each)", (int)n_outputs,
                       (int)n_inputs);
    if (!outputs || !inputs || !grads)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "grad: %s is NULL", !outputs ? "outputs" : !inputs ? "inputs" : "grads");
    if (grad_dtype != 0 && !float_dtype(grad_dtype))
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "grad: grad_dtype %d is not 0, bfloat16 (%d) or float32 (%d)",
                       (int)grad_dtype, TGRAD_DTYPE_BF16, TGRAD_DTYPE_F32);
    tg_tensor *outs = tg_calloc((size_t)(2 * n_outputs + n_inputs), sizeof *outs);
    if (!outs) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot allocate the call's tensors");
    tg_tensor *sds = outs + n_outputs, *ins = sds + n_outputs;
    tgrad_status s = check_args(n_outputs, outputs, seeds, n_inputs, inputs, grad_dtype, grads, outs, ins, sds);
    gwalk W = { 0 };
    int32_t *order = NULL;
    tg_grad_arena A = { 0 };
    tgrad_tensor_t *res = NULL;
    bool was_off = grad_off;
    if (!s) s = walk_build(&W, outs, n_outputs, &order);
    if (!s) { /* relevance, in post order: an input, or a reader of a relevant buffer */
        for (int32_t j = 0; j < n_inputs; j++) {
            int32_t at = walk_find(&W, ins[j].buf, NULL);
            if (at >= 0) W.v[at].target = W.v[at].relevant = true;
        }
        for (int32_t k = 0; k < W.n; k++) {
            gvisit *v = &W.v[order[k]];
            for (int32_t i = 0; v->node && i < v->node->ninputs && !v->relevant; i++) {
                int32_t at = walk_find(&W, v->node->inputs[i].buf, NULL);
                v->relevant = at >= 0 && W.v[at].relevant;
            }
        }
        s = check_rules(&W);
    }
    if (!s) res = tg_calloc((size_t)n_inputs, sizeof *res);
    if (!s && !res) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "grad: cannot allocate the results");
    grad_off = true; /* the backward graph records no history of its own */
    for (int32_t k = 0; k < n_outputs && !s; k++) { /* the seeds */
        gvisit *v = &W.v[walk_find(&W, outs[k].buf, NULL)];
        if (!v->relevant) continue;
        tgrad_tensor_t sd = 0, gb = 0;
        if (seeds) sd = seeds[k];
        else s = tg_g_scalar_on(&A, 1.0, cot_dtype(v->buf, grad_dtype), v->buf->device, &sd);
        if (!s && !seeds) s = tg_g_reshape(&A, sd, outs[k].view.ndim, outs[k].view.shape, &sd);
        if (!s) s = tg_g_unview(&A, sd, &outs[k].view, v->buf->numel, &gb);
        if (!s) s = add_cot(&A, v, gb, grad_dtype);
    }
    for (int32_t k = W.n - 1; k >= 0 && !s; k--) { /* readers before what they read */
        gvisit *v = &W.v[order[k]];
        if (!v->relevant || !v->ncot) continue;
        tgrad_tensor_t g = 0;
        s = sum_cot(&A, v, &g);
        if (!s) v->ncot = 1, v->cot[0] = g;
        if (!s && v->node) s = backward_node(&A, &W, v, g, grad_dtype);
    }
    for (int32_t j = 0; j < n_inputs && !s; j++) {
        int32_t at = walk_find(&W, ins[j].buf, NULL);
        if (at < 0 || !W.v[at].ncot) continue;
        s = result_for(&A, W.v[at].cot[0], &ins[j], grad_dtype ? grad_dtype : ins[j].buf->dtype, &res[j]);
    }
    grad_off = was_off;
    if (!s) memcpy(grads, res, sizeof *res * (size_t)n_inputs);
    else if (res)
        for (int32_t j = 0; j < n_inputs; j++) tgrad_tensor_release(res[j]);
    free(res);
    arena_free(&A);
    free(order);
    walk_free(&W);
    for (int32_t k = 0; k < 2 * n_outputs + n_inputs; k++)
        if (outs[k].buf) tg_tensor_unref(&outs[k]);
    free(outs);
    return s;
}
