/* The kind registry's rows (kinds.h): for each node kind its route decision, CPU executor, GPU
 * support and explain name. The matmul, copy and elementwise executors are here; cast and reduce
 * have their own files (ops/cast.c, ops/reduce.c, ops/softmax.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/epilogue.h"
#include "grad/grad.h"
#include "kinds.h"
#include "ops/elementwise.h"
#include "ops/elementwise_f32.h"
#include "step_kernel.h"

/* ---- routes ---- */
static void route_named(tg_step *st, const char *what) {
    snprintf(st->route, sizeof st->route, "%s.%s", tg_device_name(st->device), what);
}

static void decide_none(tg_step *st) { route_named(st, "unknown"); }
static void decide_copy(tg_step *st) { route_named(st, "copy"); }
static void decide_gather(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_GATHER);
    route_named(st, "gather");
}
static void decide_concat(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_CONCAT);
    route_named(st, "concat");
}
static void decide_where(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_WHERE);
    route_named(st, "where");
}
static void decide_optim_step(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_OPTIM_STEP);
    route_named(st, "optim_step");
}

static void decide_compare(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_COMPARE);
    route_named(st, "compare");
}
static void decide_cast(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_CAST);
    route_named(st, "cast");
}
static void decide_norm(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_NORM);
    route_named(st, tg_norm_op_name(st->base->params.norm_op));
}
static void decide_rope(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_ROPE);
    route_named(st, st->base->params.rope_backward ? "rope_backward" : "rope");
}
static void decide_reduce(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_REDUCE);
    route_named(st, "reduce");
}

static void decide_random(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_RANDOM);
    route_named(st, "random");
}
static void decide_place(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_PLACE);
    route_named(st, "place");
}
static void decide_scatter_add(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_SCATTER_ADD);
    route_named(st, "scatter_add");
}
static void decide_slice_scatter(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) st->dev_route = tg_route_find(TGRAD_ROUTE_CONCAT); /* step_kernel.c */
    route_named(st, "slice_scatter");
}
static void decide_softmax(tg_step *st) {
    if (st->device != TGRAD_DEVICE_CPU) {
        st->dev_route = tg_route_find(TGRAD_ROUTE_SOFTMAX);
        route_named(st, "softmax");
        return;
    }
    snprintf(st->route, sizeof st->route, "cpu.%s.softmax", st->ew_variant ? st->ew_variant->name : "portable");
}

static void decide_matmul(tg_step *st) {
    if (st->device == TGRAD_DEVICE_CPU) {
        tg_cpu_matmul_plan_make(&st->inputs[0].view, &st->inputs[1].view, st->base->dtype,
                                st->base->params.matmul_order, &st->cpu);
        tg_cpu_matmul_plan_name(&st->cpu, st->route, sizeof st->route);
    } else {
        st->precision = tgrad_matmul_precision(); /* read once: the route and explain agree */
        /* tc (bounded only) accumulates in the hardware's order whatever the product's order */
        st->dev_route = tg_device_matmul_route(&st->inputs[0].view, &st->inputs[1].view, st->device, st->precision);
        if (st->base->dtype == TGRAD_DTYPE_F32 && st->dev_route && st->dev_route->simdgroup_matrix)
            st->dev_route = tg_route_find(TGRAD_ROUTE_TILED); /* tc stores bf16 only */
        snprintf(st->route, sizeof st->route, "%s.%s", tg_device_name(st->device),
                 st->dev_route ? st->dev_route->name : "unknown");
    }
}

static void decide_elementwise(tg_step *st) {
    if (st->device == TGRAD_DEVICE_CPU) {
        if (st->buf->dtype == TGRAD_DTYPE_F32) /* one portable loop set (ops/elementwise_f32.c) */
            snprintf(st->route, sizeof st->route, "cpu.portable.elementwise_f32");
        else
            snprintf(st->route, sizeof st->route, "cpu.%s.elementwise", st->ew_variant->name);
    } else {
        st->dev_route = tg_route_find(TGRAD_ROUTE_ELEMENTWISE);
        route_named(st, "elementwise");
    }
}

/* ---- CPU executors ---- */
static tgrad_status execute_none(const tg_step *st) {
    return tg_fail(TGRAD_ERR_INTERNAL, "a step of kind %d has no executor", (int)st->op);
}

static tgrad_status execute_matmul(const tg_step *st) {
    const tg_node_input *in = st->inputs;
    tg_chain chain;
    if (st->nfused) tg_chain_from_step(st, &chain);
    return tg_cpu_matmul_run(&st->cpu, in[0].buf->data, &in[0].view, in[1].buf->data, &in[1].view, st->buf->data,
                             st->nfused ? &chain : NULL);
}

static tgrad_status execute_elementwise(const tg_step *st) {
    if (st->buf->dtype == TGRAD_DTYPE_F32) return tg_ew32_execute(st);
    tg_chain chain;
    tg_chain_from_step(st, &chain);
    tg_chain_pass(&chain, st->buf->data, st->buf->numel);
    return TGRAD_OK;
}

static tgrad_status execute_copy(const tg_step *st) {
    const tg_node_input *in = st->inputs;
    if (st->buf->numel) tg_cpu_copy_view_pool(in[0].buf->data, &in[0].view, st->buf->data, tg_dtype_size(st->buf->dtype));
    return TGRAD_OK;
}

/* ---- explain details ---- */
static void detail_matmul(const tg_step *st, char *dst, size_t cap) {
    dst[0] = '\0';
    if (st->device != TGRAD_DEVICE_CPU) {
        tg_device_matmul_detail(st, dst, cap);
        return;
    }
    const tg_cpu_matmul_plan *P = &st->cpu;
    const char *order = P->order == TGRAD_MATMUL_ORDER_BLOCK32 ? "order block32" : "order pairwise";
    if (st->out->ndim <= 2) {
        snprintf(dst, cap, "%s", order);
        return;
    }
    snprintf(dst, cap, "%s%sbatch %lld (%s)", order, *order ? ", " : "", (long long)P->batch,
             P->rows_merged         ? "one product of all the batches' rows: b is shared"
             : P->a_shared        ? "a is shared: packed once, the batches in runs over the threads"
             : P->batch_tasks > 1 ? "whole products spread over the threads"
                                    : "one product after another, each threaded over its tiles");
}

/* ---- explain names ---- */
static const char *name_kind(const tg_step *st) { return tg_kind_of(st->op)->name; }
static const char *name_elementwise(const tg_step *st) { return tgrad_op_name(st->ew); }
static const char *name_reduce(const tg_step *st) { return tgrad_reduce_name(st->base->params.reduce_op); }
static const char *name_random(const tg_step *st) { return tgrad_random_name(st->base->params.random.dist); }
static const char *name_compare(const tg_step *st) {
    static const char *const names[] = { "compare", "eq", "ne", "lt", "le", "gt", "ge" };
    int32_t c = st->base->params.compare_op;
    return names[c >= TGRAD_COMPARE_EQ && c <= TGRAD_COMPARE_GE ? c : 0];
}
static const char *name_norm(const tg_step *st) { return tg_norm_op_name(st->base->params.norm_op); }
static const char *name_rope(const tg_step *st) { return st->base->params.rope_backward ? "rope_backward" : "rope"; }
static const char *name_softmax(const tg_step *st) { return tg_softmax_kind_name(st->base->params.softmax_op); }

const tg_kind tg_kinds[TG_OP_COUNT_] = {
    [TG_OP_NONE] = { .name = "none", .role = TG_ROLE_NONE, .decide = decide_none, .cpu_execute = execute_none,
                     .unfused = "its kind is not fused", .base_name = name_kind },
    [TG_OP_MATMUL] = { .name = "matmul", .role = TG_ROLE_ANCHOR, .decide = decide_matmul, .cpu_execute = execute_matmul,
                       .gpu_render = tg_step_render_matmul, .base_name = name_kind, .plan_detail = detail_matmul,
                       .vjp = &tg_vjp_matmul },
    [TG_OP_COPY] = { .name = "copy", .role = TG_ROLE_MOVEMENT, .decide = decide_copy, .cpu_execute = execute_copy,
                     .gpu_render = tg_step_render_copy, .gpu_route = TGRAD_ROUTE_COPY, .unfused = "a copy is not fused",
                     .base_name = name_kind, .vjp = &tg_vjp_copy },
    [TG_OP_ELEMENTWISE] = { .name = "elementwise", .role = TG_ROLE_ELEMENTWISE, .decide = decide_elementwise,
                            .cpu_execute = execute_elementwise, .gpu_render = tg_step_render_elementwise,
                            .gpu_finish = tg_ew_on_host, /* a binary64 op's flagged elements (float32, pow) */
                            .gpu_route = TGRAD_ROUTE_ELEMENTWISE, .base_name = name_elementwise,
                            .vjp = &tg_vjp_elementwise },
    [TG_OP_CAST] = { .name = "cast", .role = TG_ROLE_ELEMENTWISE, .decide = decide_cast, .cpu_execute = tg_cast_execute,
                     .gpu_render = tg_step_render_cast, .gpu_route = TGRAD_ROUTE_CAST, .unfused = "a cast is not fused",
                     .gpu_finish = tg_cast_flagged, /* float -> int32: a NaN or out-of-range element fails */
                     .base_name = name_kind, .vjp = &tg_vjp_cast },
    [TG_OP_REDUCE] = { .name = "reduce", .role = TG_ROLE_REDUCTION, .decide = decide_reduce,
                       .cpu_execute = tg_reduce_execute, .gpu_render = tg_step_render_reduce,
                       .gpu_route = TGRAD_ROUTE_REDUCE, .base_name = name_reduce, .vjp = &tg_vjp_reduce },
    /* gather and concat: bit-for-bit copies on every device (gen/render_select.c); a GPU gather's
     * indices are checked on the host before its launch */
    [TG_OP_GATHER] = { .name = "gather", .role = TG_ROLE_MOVEMENT, .decide = decide_gather,
                       .cpu_execute = tg_gather_execute, .gpu_render = tg_step_render_gather,
                       .gpu_route = TGRAD_ROUTE_GATHER, .gpu_check = tg_gather_device_check,
                       .unfused = "a gather is not fused", .base_name = name_kind, .vjp = &tg_vjp_gather },
    [TG_OP_CONCAT] = { .name = "concat", .role = TG_ROLE_MOVEMENT, .decide = decide_concat,
                       .cpu_execute = tg_concat_execute, .gpu_render = tg_step_render_concat,
                       .gpu_route = TGRAD_ROUTE_CONCAT, .unfused = "a concat is not fused", .base_name = name_kind,
                       .vjp = &tg_vjp_concat },
    [TG_OP_RANDOM] = { .name = "random", .role = TG_ROLE_NONE, .decide = decide_random, .cpu_execute = tg_random_execute,
                       .gpu_render = tg_step_render_random, .gpu_route = TGRAD_ROUTE_RANDOM,
                       .gpu_finish = tg_random_calls_on_host,
                       .unfused = "a random draw is not fused (its values are stored)", .base_name = name_random,
                       .vjp = &tg_vjp_random },
    /* where and compare (ops/compare.c; gen/render_compare.c on GPUs) read stored operands and
     * store their result */
    [TG_OP_WHERE] = { .name = "where", .role = TG_ROLE_ELEMENTWISE, .decide = decide_where,
                      .cpu_execute = tg_where_execute, .gpu_render = tg_step_render_pointwise,
                      .gpu_route = TGRAD_ROUTE_WHERE,
                      .unfused = "a where is not fused (its selection runs as its own step)", .base_name = name_kind,
                      .vjp = &tg_vjp_where },
    [TG_OP_COMPARE] = { .name = "compare", .role = TG_ROLE_ELEMENTWISE, .decide = decide_compare,
                        .cpu_execute = tg_compare_execute, .gpu_render = tg_step_render_pointwise,
                        .gpu_route = TGRAD_ROUTE_COMPARE,
                        .unfused = "a comparison is not fused (its result is bool)", .base_name = name_compare },
    [TG_OP_NORM] = { .name = "norm", .role = TG_ROLE_NONE, .decide = decide_norm, .cpu_execute = tg_norm_execute,
                     .gpu_render = tg_step_render_norm, .gpu_route = TGRAD_ROUTE_NORM,
                     .gpu_finish = tg_norm_rows_on_host,
                     .unfused = "a norm is not fused (it rounds once, after the whole row)", .base_name = name_norm,
                     .vjp = &tg_vjp_norm },
    [TG_OP_ROPE] = { .name = "rope", .role = TG_ROLE_NONE, .decide = decide_rope, .cpu_execute = tg_rope_execute,
                     .gpu_render = tg_step_render_rope, .gpu_route = TGRAD_ROUTE_ROPE,
                     .gpu_finish = tg_rope_rows_on_host,
                     .unfused = "rope is not fused (it rounds once per rotated value)", .base_name = name_rope,
                     .vjp = &tg_vjp_rope },
    [TG_OP_SOFTMAX] = { .name = "softmax", .role = TG_ROLE_REDUCTION, .decide = decide_softmax,
                        .cpu_execute = tg_softmax_execute, .gpu_render = tg_step_render_softmax,
                        .gpu_route = TGRAD_ROUTE_SOFTMAX, .gpu_finish = tg_softmax_rows_on_host,
                        .gpu_unfused = "a softmax on a GPU device is not fused (its flagged rows rerun on the host)",
                        .base_name = name_softmax, .vjp = &tg_vjp_softmax },
    /* hgcore: the transposes of a gather (grad/scatter_add.c) and of a view (grad/place.c), made
     * by the backward pass; on a device their own routes (gen/render_scatter.c), the indices
     * checked on the host first */
    [TG_OP_SCATTER_ADD] = { .name = "scatter_add", .role = TG_ROLE_NONE, .decide = decide_scatter_add,
                            .cpu_execute = tg_scatter_add_execute, .gpu_render = tg_step_render_scatter_add,
                            .gpu_route = TGRAD_ROUTE_SCATTER_ADD, .gpu_host_words = tg_scatter_add_positions,
                            .unfused = "a scatter-add is not fused (it rounds once per summed element)",
                            .base_name = name_kind, .vjp = &tg_vjp_scatter_add },
    [TG_OP_PLACE] = { .name = "place", .role = TG_ROLE_MOVEMENT, .decide = decide_place, .cpu_execute = tg_place_execute,
                      .gpu_render = tg_step_render_place, .gpu_route = TGRAD_ROUTE_PLACE,
                      .unfused = "a place is not fused (it writes a zeroed buffer)", .base_name = name_kind,
                      .vjp = &tg_vjp_place },
    /* hmodel: writes in place into dst's storage when it may take it (ops/slice_scatter.c); on a
     * device the concat route's kernel over dst's parts and src, or one that reads a start tensor
     * (step_kernel.c; the start checked on the host first) */
    [TG_OP_SLICE_SCATTER] = { .name = "slice_scatter", .role = TG_ROLE_MOVEMENT, .decide = decide_slice_scatter,
                              .cpu_execute = tg_slice_scatter_execute, .cpu_allocates = true,
                              .gpu_render = tg_step_render_slice_scatter, .gpu_route = TGRAD_ROUTE_CONCAT,
                              .gpu_check = tg_slice_scatter_device_check, .unfused = "a slice_scatter is not fused",
                              .base_name = name_kind, .vjp = &tg_vjp_slice_scatter },
    /* hgoptim: the optimizer step (ops/optim_step.c); on a device route optim_step's kernel
     * (gen/render_optim.c), float32 in integers */
    [TG_OP_OPTIM_STEP] = { .name = "optim_step", .role = TG_ROLE_NONE, .decide = decide_optim_step,
                           .cpu_execute = tg_optim_step_execute, .gpu_render = tg_step_render_optim_step,
                           .gpu_route = TGRAD_ROUTE_OPTIM_STEP,
                           .unfused = "an optimizer step is not fused (its value is stored state)",
                           .base_name = name_kind },
};

tgrad_status tg_kind_check_device(tg_op op, int32_t device, const char *fn) {
    if (device == TGRAD_DEVICE_CPU || tg_kind_of(op)->gpu_render) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "%s: the %s kind runs on the CPU only for now; the tensor lives on %s",
                   fn, tg_kind_of(op)->name, tg_device_name(device));
}

tgrad_status tg_kind_get_inputs(const tgrad_tensor_t *h, int32_t n, int32_t need, tg_tensor *t, int32_t *have) {
    *have = 0;
    for (int32_t i = 0; i < n; i++) {
        if (i >= need && !h[i]) continue;
        tgrad_status s = tg_handle_get_tensor(h[i], &t[*have]);
        if (s) return s;
        (*have)++;
    }
    return TGRAD_OK;
}

const void *tg_kind_input_compact(const tg_node_input *in, const void *data, int32_t size, void **owned) {
    *owned = NULL;
    if (tg_view_is_compact_rowmajor(&in->view)) return (const char *)data + in->view.offset * size;
    int64_t numel = 0;
    tg_view_numel(&in->view, &numel);
    *owned = tg_malloc((size_t)(numel ? numel : 1) * (size_t)size);
    if (*owned) tg_cpu_copy_view_sized(data, &in->view, *owned, size);
    return *owned;
}

tgrad_status tg_kind_make(tgrad_status s, tg_op op, tg_tensor *t, int32_t n, const tg_view *ov, int32_t dtype,
                          const tg_node_params *params, const char *fn, tgrad_tensor_t *out) {
    int64_t numel = 0;
    if (!s) tg_view_numel(ov, &numel);
    if (!s) s = tg_check_bytes(numel, dtype, fn);
    if (!s) s = tg_memory_admit_typed(numel, tg_dtype_size(dtype), fn);
    tg_node *node = s ? NULL : tg_node_new(op, n);
    if (!s && !node) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate a graph node of %d inputs", fn, (int)n);
    tg_buffer *b = NULL;
    if (!s) {
        for (int32_t i = 0; i < n; i++) node->inputs[i] = (tg_node_input){ t[i].buf, t[i].view };
        node->out = *ov;
        node->dtype = dtype;
        if (params) node->params = *params;
        if ((s = tg_buffer_new_typed(numel, dtype, node, &b))) free(node);
        else b->device = t[0].buf->device; /* computed where its first input lives */
    }
    if (s) {
        for (int32_t i = 0; i < n; i++) tg_tensor_unref(&t[i]);
        return s;
    }
    if ((s = tg_handle_new_tensor(b, ov, out))) tg_buffer_release(b); /* the node owns the references */
    return s;
}

tgrad_status tg_kind_make_unary(tgrad_status s, tg_op op, tg_tensor *t, const tg_view *ov, int32_t dtype,
                                const tg_node_params *params, const char *fn, tgrad_tensor_t *out) {
    return tg_kind_make(s, op, t, 1, ov, dtype, params, fn, out);
}

/* The list and the table agree: every kind of the list has a row with its name and role. */
#define TG_KIND_CHECK_(code, NAME, name_, role_) _Static_assert(code == TG_OP_##NAME && code < TG_OP_COUNT_, "kind codes ascend");
TG_KIND_LIST(TG_KIND_CHECK_)
#undef TG_KIND_CHECK_
