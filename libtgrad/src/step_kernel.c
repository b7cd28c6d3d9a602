/* A decided step as a GPU kernel: see step_kernel.h. The chain mirrors the CPU's
 * (cpu/epilogue.c, tg_chain_from_step): an elementwise step's own op first, then the fused ops in
 * order, each binary op reading its other operand through a view over the output's shape. */
#include <string.h>

#include "kinds.h"
#include "ops/elementwise.h"
#include "render_cache.h"
#include "step_kernel.h"

typedef struct chain_build {
    tg_gen_chain chain;
    const tg_buffer *operand_buf[TG_GEN_MAX_CHAIN];
} chain_build;

static void add_op(chain_build *c, tgrad_op op, bool value_right, const tg_node_input *operand) {
    int32_t i = c->chain.n++;
    c->chain.ops[i] = (tg_gen_ew_op){ .op = op, .value_right = value_right };
    if (operand) c->chain.ops[i].operand = operand->view, c->operand_buf[i] = operand->buf;
}

static void chain_of(const tg_step *st, chain_build *c) {
    memset(c, 0, sizeof *c);
    if (st->op == TG_OP_ELEMENTWISE) add_op(c, st->ew, false, st->ninputs == 2 ? &st->inputs[1] : NULL);
    for (int32_t i = 0; i < st->nfused; i++) add_op(c, st->epilogue[i].op, st->epilogue[i].value_right, st->epilogue[i].operand);
}

/* The chain's bindings after the base op's `base` buffers. */
static void bind_chain(const chain_build *c, uint32_t base, tg_step_kernel *k) {
    tg_gen_binding b[TG_GEN_MAX_BINDINGS];
    int32_t nb = tg_gen_chain_bindings(&c->chain, b);
    for (int32_t j = 0; j < nb; j++) {
        if (b[j].table) k->table_op[base + (uint32_t)j] = c->chain.ops[b[j].op].op;
        else k->bufs[base + (uint32_t)j] = c->operand_buf[b[j].op];
    }
}

tgrad_status tg_step_render_matmul(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    /* bf16, or float32: the accumulators themselves (naive and tiled; a float32 result is never
     * fused, so no epilogue) */
    if (st->buf->dtype != TGRAD_DTYPE_BF16 && st->buf->dtype != TGRAD_DTYPE_F32)
        return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "render: the GPU routes store bfloat16 or float32; this matmul's "
                       "result is %s", tg_dtype_name(st->buf->dtype));
    chain_build c;
    chain_of(st, &c);
    const tg_node_input *in = st->inputs;
    tg_gen_matmul p = tg_gen_matmul_of(&in[0].view, &in[1].view); /* batch axes (grid z) included */
    p.epilogue = &c.chain;
    p.out_f32 = st->buf->dtype == TGRAD_DTYPE_F32;
    p.order = st->base->params.matmul_order;
    tgrad_status s = tg_gen_check_matmul(route, l, &p);
    if (!s) s = tg_gen_render_matmul(route, l, &p, &k->text, &k->launch);
    k->bufs[0] = in[0].buf, k->bufs[1] = in[1].buf, k->bufs[2] = st->buf;
    bind_chain(&c, 3, k);
    return s;
}

tgrad_status tg_step_render_elementwise(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    chain_build c;
    chain_of(st, &c);
    const tg_node_input *in = st->inputs;
    c.chain.f32 = st->buf->dtype == TGRAD_DTYPE_F32; /* never fused (the scheduler fuses no float32 op) */
    tg_gen_elementwise p = { .first = in[0].view, .chain = c.chain };
    tgrad_status s = tg_gen_check_elementwise(l, &p);
    if (!s) s = tg_gen_render_elementwise(l, &p, &k->text, &k->launch);
    k->bufs[0] = in[0].buf, k->bufs[1] = st->buf;
    bind_chain(&c, 2, k);
    if (!s && tg_gen_chain_flags(&c.chain)) /* binding f, last: a flag per element (tg_ew_on_host) */
        k->flags_at = (int32_t)k->launch.buffer_count - 1, k->nflags = (int64_t)st->buf->numel;
    return s;
}

tgrad_status tg_step_render_copy(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_input *in = st->inputs;
    tgrad_status s = tg_gen_check_copy(l, &in[0].view);
    if (!s) s = tg_gen_render_copy(l, &in[0].view, (int32_t)tg_dtype_size(st->buf->dtype), &k->text, &k->launch);
    k->bufs[0] = in[0].buf, k->bufs[1] = st->buf;
    return s;
}

/* A reduction: its input (or, with a prologue, the first operand of the prologue's base op) read
 * through its view, the prologue's ops (tag "p") on each value, the epilogue's on the result. */
tgrad_status tg_step_render_reduce(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    chain_build epi, pro;
    chain_of(st, &epi);
    memset(&pro, 0, sizeof pro);
    const tg_node_input *x = &st->inputs[0];
    tg_gen_reduce p = { .op = st->base->params.reduce_op, .in_dtype = x->buf->dtype, .out_dtype = st->base->dtype,
                        .in = x->view, .out = *st->out, .epilogue = &epi.chain };
    for (int32_t i = 0; i < st->base->params.naxes; i++) p.reduced[st->base->params.axes[i]] = true;
    if (st->pro_base) {
        const tg_node *b = st->pro_base;
        x = &b->inputs[0];
        add_op(&pro, b->ew, false, b->ninputs == 2 ? &b->inputs[1] : NULL);
        for (int32_t i = 0; i < st->npro; i++) add_op(&pro, st->prologue[i].op, st->prologue[i].value_right, st->prologue[i].operand);
        pro.chain.tag = "p";
        p.in = x->view, p.in_dtype = x->buf->dtype, p.prologue = &pro.chain;
    }
    tgrad_status s = tg_gen_check_reduce(l, &p);
    if (!s) s = tg_gen_render_reduce(l, &p, &k->text, &k->launch);
    k->bufs[0] = x->buf, k->bufs[1] = st->buf;
    tg_gen_binding pb[TG_GEN_MAX_BINDINGS];
    bind_chain(&pro, 2, k);
    bind_chain(&epi, 2 + (uint32_t)tg_gen_chain_bindings(&pro.chain, pb), k);
    return s;
}

tgrad_status tg_step_render_cast(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_input *in = st->inputs;
    tgrad_status s = tg_gen_check_cast(l, &in[0].view, in[0].buf->dtype, st->buf->dtype);
    if (!s) s = tg_gen_render_cast(l, &in[0].view, in[0].buf->dtype, st->buf->dtype, &k->text, &k->launch);
    k->bufs[0] = in[0].buf, k->bufs[1] = st->buf;
    if (!s && st->buf->dtype == TGRAD_DTYPE_I32) /* binding f: a flag per element (tg_cast_flagged) */
        k->flags_at = 2, k->nflags = (int64_t)k->launch.buffer_elements[2];
    return s;
}

/* take: x and the indices read through their views (the indices' range is the executor's to
 * check: tg_gather_device_check). */
tgrad_status tg_step_render_gather(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_input *in = st->inputs;
    tg_gen_take p = { .esize = tg_dtype_size(st->buf->dtype), .axis = st->base->params.axes[0], .x = in[0].view,
                      .index = in[1].view, .out = *st->out };
    tgrad_status s = tg_gen_check_take(l, &p);
    if (!s) s = tg_gen_render_take(l, &p, &k->text, &k->launch);
    k->bufs[0] = in[0].buf, k->bufs[1] = in[1].buf, k->bufs[2] = st->buf;
    return s;
}

tgrad_status tg_step_render_concat(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    if (st->ninputs > TG_GEN_MAX_CONCAT)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "render: a concat of %d operands (a kernel takes at most %d)",
                       (int)st->ninputs, TG_GEN_MAX_CONCAT);
    tg_gen_concat p = { .esize = tg_dtype_size(st->buf->dtype), .axis = st->base->params.axes[0], .n = st->ninputs,
                        .out = *st->out };
    for (int32_t j = 0; j < st->ninputs; j++) p.in[j] = st->inputs[j].view, k->bufs[j] = st->inputs[j].buf;
    k->bufs[st->ninputs] = st->buf;
    tgrad_status s = tg_gen_check_concat(l, &p);
    if (!s) s = tg_gen_render_concat(l, &p, &k->text, &k->launch);
    return s;
}

/* slice_scatter at a start tensor (its third input) on a device: one kernel reads the start from
 * the tensor, so a decode step's cache write is the same text at every position; the start was
 * checked on the host before the launch (kinds.h, gpu_check). */
static tgrad_status render_slice_at(const tg_step *st, const tg_lang *l, tg_step_kernel *k) {
    const tg_node_input *in = st->inputs;
    tg_gen_slice_at p = { .esize = tg_dtype_size(st->buf->dtype), .axis = st->base->params.axes[0], .dst = in[0].view,
                          .src = in[1].view, .start = in[2].view, .out = *st->out };
    tgrad_status s = tg_gen_check_slice_at(l, &p);
    if (!s) s = tg_gen_render_slice_at(l, &p, &k->text, &k->launch);
    k->bufs[0] = in[0].buf, k->bufs[1] = in[1].buf, k->bufs[2] = in[2].buf, k->bufs[3] = st->buf;
    return s;
}

/* slice_scatter on a device: the concat route over dst's part before the slice, src, and dst's
 * part after it, along the axis (empty parts left out), every element moved as bits: the CPU's
 * bytes (ops/slice_scatter.c) without a kernel of its own; at a start tensor, render_slice_at. */
tgrad_status tg_step_render_slice_scatter(const tg_step *st, const tg_route *route, const tg_lang *l,
                                          tg_step_kernel *k) {
    (void)route;
    if (st->ninputs == 3) return render_slice_at(st, l, k);
    const tg_node_input *in = st->inputs;
    int32_t a = st->base->params.axes[0];
    int64_t start = st->base->params.scatter_start, n = in[1].view.shape[a], extent = in[0].view.shape[a];
    tg_gen_concat p = { .esize = tg_dtype_size(st->buf->dtype), .axis = a, .out = *st->out };
    tg_view before = in[0].view, after = in[0].view;
    before.shape[a] = start;
    after.offset += (start + n) * after.strides[a], after.shape[a] = extent - start - n;
    const tg_view *parts[3] = { &before, &in[1].view, &after };
    const tg_buffer *bufs[3] = { in[0].buf, in[1].buf, in[0].buf };
    for (int32_t j = 0; j < 3; j++) {
        if (parts[j]->shape[a] == 0 && !(j == 1 && p.n == 0 && after.shape[a] == 0)) continue;
        p.in[p.n] = *parts[j], k->bufs[p.n++] = bufs[j];
    }
    k->bufs[p.n] = st->buf;
    tgrad_status s = tg_gen_check_concat(l, &p);
    if (!s) s = tg_gen_render_concat(l, &p, &k->text, &k->launch);
    return s;
}

/* place (a view's transpose): the input lands through params.place's strides and offset in a
 * zeroed compact buffer of the output's element count. */
tgrad_status tg_step_render_place(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_input *in = st->inputs;
    tg_gen_place p = { .esize = tg_dtype_size(st->buf->dtype), .src = in[0].view,
                       .offset = st->base->params.place.offset, .numel = st->buf->numel };
    memcpy(p.strides, st->base->params.place.strides, sizeof p.strides);
    tgrad_status s = tg_gen_check_place(l, &p);
    if (!s) s = tg_gen_render_place(l, &p, &k->text, &k->launch);
    k->bufs[0] = in[0].buf, k->bufs[1] = st->buf;
    return s;
}

/* scatter_add (a gather's transpose): the gradient and the indices, both compact (the node's
 * constructor made them so); their range is checked on the host first (kinds.c, gpu_check). */
tgrad_status tg_step_render_scatter_add(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_input *in = st->inputs;
    tg_gen_scatter_add p = { .dtype = st->buf->dtype, .axis = st->base->params.axes[0], .g = in[0].view,
                             .index = in[1].view, .out = *st->out };
    tgrad_status s = tg_gen_check_scatter_add(l, &p);
    if (!s) s = tg_gen_render_scatter_add(l, &p, &k->text, &k->launch);
    k->bufs[0] = in[0].buf, k->bufs[1] = in[1].buf, k->bufs[2] = st->buf;
    /* binding pos: the positions grouped by the index they name, made on the host at the launch */
    k->host_at = 3, k->nhost = s ? 0 : (int64_t)k->launch.buffer_elements[3];
    return s;
}

/* an optimizer step's output: its inputs through their views, its scalars the launch's words */
tgrad_status tg_step_render_optim_step(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_params *q = &st->base->params;
    if (st->ninputs > TG_GEN_OPTIM_INPUTS || st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "render: an optim_step step of %d operands and %d fused ops", (int)st->ninputs,
                       (int)st->nfused);
    tg_gen_optim p = { .algo = q->optim.algo, .flags = q->optim.flags, .n = st->ninputs, .which = q->optim.which,
                       .out = *st->out };
    for (int32_t j = 0; j < st->ninputs; j++) p.in[j] = st->inputs[j].view, k->bufs[j] = st->inputs[j].buf;
    k->bufs[st->ninputs] = st->buf;
    k->words_at = st->ninputs + 1, k->nwords = 8;
    tg_gen_optim_words(q->optim.s, k->words);
    tgrad_status s = tg_gen_check_optim(l, &p);
    if (!s) s = tg_gen_render_optim(l, &p, &k->text, &k->launch);
    return s;
}

/* compare (its code in the params) and where: the operands' views broadcast to the output's
 * shape already (ops/compare.c). */
tgrad_status tg_step_render_pointwise(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    tg_gen_pointwise p = { .cmp = st->op == TG_OP_COMPARE ? st->base->params.compare_op : 0, .n = st->ninputs,
                           .out = *st->out };
    if (st->ninputs > 3 || st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "render: a %s step of %d operands and %d fused ops", tg_kind_of(st->op)->name,
                       (int)st->ninputs, (int)st->nfused);
    for (int32_t j = 0; j < st->ninputs; j++)
        p.in[j] = st->inputs[j].view, p.dtype[j] = st->inputs[j].buf->dtype, k->bufs[j] = st->inputs[j].buf;
    k->bufs[st->ninputs] = st->buf;
    tgrad_status s = tg_gen_check_pointwise(l, &p);
    if (!s) s = tg_gen_render_pointwise(l, &p, &k->text, &k->launch);
    return s;
}

/* a draw of the counter-based generator: its parameters, no inputs */
tgrad_status tg_step_render_random(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_params *q = &st->base->params;
    tg_gen_random p = { .dist = q->random.dist, .dtype = st->buf->dtype, .seed = q->random.seed,
                        .offset = q->random.offset, .numel = st->buf->numel, .p0 = q->random.p0, .p1 = q->random.p1 };
    tgrad_status s = tg_gen_check_random(l, &p);
    if (!s) s = tg_gen_render_random(l, &p, &k->text, &k->launch);
    k->bufs[0] = st->buf;
    k->words_at = 1, k->nwords = 4; /* binding q: the offset and the seed, low words first */
    tg_gen_random_words(&p, k->words);
    if (tg_gen_random_flagged(&p)) /* binding f: a flag per Philox call (tg_random_calls_on_host) */
        k->flags_at = 2, k->nflags = s ? 0 : (int64_t)k->launch.buffer_elements[2];
    return s;
}

/* softmax, log_softmax, logsumexp (never with fused chains on a device: the kind's gpu_unfused);
 * binding f: the rows' flags (the host reruns the flagged ones, tg_softmax_rows_on_host). */
/* softmax_backward, log_softmax_backward: y (or z), g; binding f: the rows' flags */
static tgrad_status render_softmax_backward(const tg_step *st, const tg_lang *l, tg_step_kernel *k) {
    const tg_node_input *y = &st->inputs[0], *g = &st->inputs[1];
    tg_gen_softmax_backward p = { .op = tg_softmax_forward_op(st->base->params.softmax_op),
                                  .axis = y->view.ndim ? st->base->params.axes[0] : 0, .y_dtype = y->buf->dtype,
                                  .g_dtype = g->buf->dtype, .out_dtype = st->base->dtype, .y = y->view, .g = g->view };
    tgrad_status s = tg_gen_check_softmax_backward(l, &p);
    if (!s) s = tg_gen_render_softmax_backward(l, &p, &k->text, &k->launch);
    k->bufs[0] = y->buf, k->bufs[1] = g->buf, k->bufs[2] = st->buf;
    k->flags_at = 3, k->nflags = s ? 0 : (int64_t)k->launch.buffer_elements[3];
    return s;
}

tgrad_status tg_step_render_softmax(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_input *x = &st->inputs[0];
    if (tg_softmax_is_backward(st->base->params.softmax_op) && !st->pro_base && !st->nfused && st->ninputs == 2)
        return render_softmax_backward(st, l, k);
    if (st->pro_base || st->nfused || st->ninputs != 1)
        return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "render: route softmax takes one input (two: a backward op) and "
                                                     "no fused chains (fused steps run on the CPU)");
    tg_gen_softmax p = { .op = st->base->params.softmax_op, .axis = x->view.ndim ? st->base->params.axes[0] : 0,
                         .in_dtype = x->buf->dtype, .out_dtype = st->base->dtype, .in = x->view };
    tgrad_status s = tg_gen_check_softmax(l, &p);
    if (!s) s = tg_gen_render_softmax(l, &p, &k->text, &k->launch);
    k->bufs[0] = x->buf, k->bufs[1] = st->buf;
    k->flags_at = 2, k->nflags = s ? 0 : (int64_t)k->launch.buffer_elements[2];
    return s;
}

/* rms_norm, layer_norm: x, then the weight and the bias when present; binding f: the rows' flags
 * (the host reruns the flagged ones, tg_norm_rows_on_host). */
/* rms_norm_backward, layer_norm_backward: x, g, then the weight when present; binding f: the
 * rows' flags (tg_norm_backward_rows_on_host reruns the flagged ones). */
static tgrad_status render_norm_backward(const tg_step *st, const tg_lang *l, tg_step_kernel *k) {
    const tg_node_params *P = &st->base->params;
    const tg_node_input *in = st->inputs;
    tg_gen_norm_backward p = { .op = P->norm_op, .naxes = P->norm_axes, .eps = P->eps, .has_w = P->has_weight != 0,
                               .x_dtype = in[0].buf->dtype, .g_dtype = in[1].buf->dtype, .out_dtype = st->base->dtype,
                               .x = in[0].view, .g = in[1].view };
    if (p.has_w) p.w = in[2].view, p.w_dtype = in[2].buf->dtype;
    tgrad_status s = tg_gen_check_norm_backward(l, &p);
    if (!s) s = tg_gen_render_norm_backward(l, &p, &k->text, &k->launch);
    int32_t nin = p.has_w ? 3 : 2;
    for (int32_t i = 0; i < nin; i++) k->bufs[i] = in[i].buf;
    k->bufs[nin] = st->buf;
    k->flags_at = nin + 1, k->nflags = s ? 0 : (int64_t)k->launch.buffer_elements[nin + 1];
    return s;
}

tgrad_status tg_step_render_norm(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_params *P = &st->base->params;
    if (P->norm_op == TG_NORM_RMS_BACKWARD || P->norm_op == TG_NORM_LAYER_BACKWARD) return render_norm_backward(st, l, k);
    tg_gen_norm p = { .op = P->norm_op, .naxes = P->norm_axes, .eps = P->eps, .has_w = P->has_weight != 0,
                      .has_b = P->has_bias != 0, .x = st->inputs[0].view };
    int32_t k_in = 1;
    if (p.has_w) p.w = st->inputs[k_in++].view;
    if (p.has_b) p.b = st->inputs[k_in++].view;
    tgrad_status s = tg_gen_check_norm(l, &p);
    if (!s) s = tg_gen_render_norm(l, &p, &k->text, &k->launch);
    for (int32_t i = 0; i < k_in; i++) k->bufs[i] = st->inputs[i].buf;
    k->bufs[k_in] = st->buf;
    k->flags_at = k_in + 1, k->nflags = s ? 0 : (int64_t)k->launch.buffer_elements[k_in + 1];
    return s;
}

/* rope, rope_backward: x, the positions, inv_freq when given; binding f: the positions' flags
 * (the host reruns the flagged ones, tg_rope_rows_on_host). */
tgrad_status tg_step_render_rope(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    (void)route;
    const tg_node_params *P = &st->base->params;
    tg_gen_rope p = { .rd = P->rotary_dim, .interleaved = P->interleaved, .batched = P->norm_axes == 2,
                      .backward = P->rope_backward, .has_f = P->has_weight != 0, .base = P->eps,
                      .x = st->inputs[0].view, .pos = st->inputs[1].view };
    if (p.has_f) p.f = st->inputs[2].view;
    tgrad_status s = tg_gen_check_rope(l, &p);
    if (!s) s = tg_gen_render_rope(l, &p, &k->text, &k->launch);
    int32_t nin = p.has_f ? 3 : 2;
    for (int32_t i = 0; i < nin; i++) k->bufs[i] = st->inputs[i].buf;
    k->bufs[nin] = st->buf;
    k->flags_at = nin + 1, k->nflags = s ? 0 : (int64_t)k->launch.buffer_elements[nin + 1];
    return s;
}

/* The kind's emitter into k; discard: its text is not written (render_cache.h). */
tgrad_status tg_step_kernel_emit(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k,
                                 bool discard) {
    memset(k, 0, sizeof *k);
    k->words_at = -1, k->flags_at = -1, k->host_at = -1;
    k->text.discard = discard;
    const tg_kind *kind = tg_kind_of(st->op);
    tgrad_status s = kind->gpu_render ? kind->gpu_render(st, route, l, k)
                                      : tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE,
                                                "render: the %s kind runs on the CPU only for now (no GPU emitter)", kind->name);
    if (!s && k->text.failed) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "cannot allocate kernel source");
    if (s) tg_step_kernel_free(k);
    return s;
}

tgrad_status tg_step_kernel_render(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k) {
    return tg_render_cache_render(st, route, l, k);
}

void tg_step_kernel_free(tg_step_kernel *k) {
    tg_text_free(&k->text);
    memset(k, 0, sizeof *k);
}
