/* The reduce route: one threadgroup per output element. Its threads stride over the reduced
 * elements (thread li takes positions li, li + T, ...), each into its own exact accumulator or
 * extremum candidate (kernels/gpu/reduce.h); a tree over threadgroup memory combines them, and
 * thread 0 rounds once, runs the epilogue and stores. Combining is exact integer addition (or an
 * order-free pick), so the bytes are the CPU's whatever the tree's shape. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

enum { SUM_SLOT = 13, EXT_SLOT = 4 }; /* uints per thread in threadgroup memory */

static bool is_sum(int32_t op) { return op == TGRAD_REDUCE_SUM || op == TGRAD_REDUCE_MEAN; }
static bool is_arg(int32_t op) { return op == TGRAD_REDUCE_ARGMAX || op == TGRAD_REDUCE_ARGMIN; }
static bool wants_max(int32_t op) { return op == TGRAD_REDUCE_MAX || op == TGRAD_REDUCE_ARGMAX; }
static bool has(const tg_gen_chain *c) { return c && c->n > 0; }

static int64_t reduced_count(const tg_gen_reduce *p) {
    int64_t n = 1;
    for (int32_t d = 0; d < p->in.ndim; d++)
        if (p->reduced[d]) n *= p->in.shape[d];
    return n;
}

static int32_t chain_buffers(const tg_gen_chain *c) {
    tg_gen_binding b[TG_GEN_MAX_BINDINGS];
    return has(c) ? tg_gen_chain_bindings(c, b) : 0;
}

tgrad_status tg_gen_check_reduce(const tg_lang *l, const tg_gen_reduce *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_REDUCE);
    int64_t numel, nout, lo, hi;
    if (p->op <= 0 || p->op >= TGRAD_REDUCE_END_) return tg_not_eligible(r->name, l->name, "reduction %lld", p->op, 0, 0);
    bool in_ok = p->in_dtype == TGRAD_DTYPE_BF16 || (p->in_dtype == TGRAD_DTYPE_F32 && !has(p->prologue));
    bool out_ok = is_arg(p->op) ? p->out_dtype == TGRAD_DTYPE_I32
                                : p->out_dtype == TGRAD_DTYPE_F32 || p->out_dtype == TGRAD_DTYPE_BF16;
    if (!in_ok || !out_ok || (has(p->epilogue) && p->out_dtype != TGRAD_DTYPE_BF16))
        return tg_not_eligible(r->name, l->name, "dtypes %lld -> %lld (or a chain on a non-bf16 value)", p->in_dtype,
                               p->out_dtype, 0);
    if (tg_view_numel(&p->in, &numel) || tg_view_numel(&p->out, &nout))
        return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (reduced_count(p) > INT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements per output (at most 2^31 - 1: an int32 index)",
                               reduced_count(p), 0, 0);
    if (nout > UINT32_MAX) return tg_not_eligible(r->name, l->name, "%lld outputs need more than 2^32-1 threadgroups", nout, 0, 0);
    if (numel > 0 && (!tg_span_view(&p->in, &lo, &hi) || lo < 0))
        return tg_not_eligible(r->name, l->name, "the input's view reaches outside its buffer", 0, 0, 0);
    if (2 + chain_buffers(p->prologue) + chain_buffers(p->epilogue) > TGRAD_LAUNCH_MAX_BUFFERS)
        return tg_not_eligible(r->name, l->name, "the fused chains need %lld buffers (at most %lld)",
                               2 + chain_buffers(p->prologue) + chain_buffers(p->epilogue), TGRAD_LAUNCH_MAX_BUFFERS, 0);
    tgrad_status s = has(p->prologue) ? tg_gen_check_chain(r->name, l, p->prologue) : TGRAD_OK;
    if (!s && has(p->epilogue)) s = tg_gen_check_chain(r->name, l, p->epilogue);
    return s;
}

/* Coordinates <prefix><d> of linear index `var` over the axes axes[0 .. n) (outer to inner) of
 * `shape`, for the axes needed[d] marks, innermost first; an unneeded axis only divides the rest. */
static void emit_split(const emitter *e, const char *indent, const char *var, const char *rest, const char *prefix,
                       const int32_t *axes, int32_t n, const int64_t *shape, const bool *needed) {
    int32_t outer = -1, last = -1; /* the outermost axis of extent > 1; the outermost needed */
    for (int32_t k = 0; k < n && outer < 0; k++)
        if (shape[axes[k]] > 1) outer = k;
    for (int32_t k = n - 1; k >= 0; k--)
        if (needed[axes[k]] && shape[axes[k]] > 1) last = k;
    if (last < 0) return;
    E("%s%s %s = %s;\n", indent, e->it, rest, var);
    for (int32_t k = n - 1; k > last; k--) {
        int32_t d = axes[k];
        if (shape[d] <= 1) continue;
        if (needed[d]) E("%sconst %s %s%d = %s %% %" PRId64 ";\n", indent, e->it, prefix, (int)d, rest, shape[d]);
        E("%s%s /= %" PRId64 ";\n", indent, rest, shape[d]);
    }
    int32_t d = axes[last];
    if (last == outer) E("%sconst %s %s%d = %s;\n", indent, e->it, prefix, (int)d, rest);
    else E("%sconst %s %s%d = %s %% %" PRId64 ";\n", indent, e->it, prefix, (int)d, rest, shape[d]);
}

static void mark(const tg_view *v, bool *needed) {
    for (int32_t d = 0; d < v->ndim; d++) needed[d] |= v->shape[d] > 1 && v->strides[d] != 0;
}
static void mark_chain(const tg_gen_chain *c, bool *needed) {
    for (int32_t k = 0; has(c) && k < c->n; k++)
        if (tgrad_op_arity(c->ops[k].op) == 2) mark(&c->ops[k].operand, needed);
}

static const char *const in_coord[] = { "i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7" };
static const char *const out_coord[] = { "o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7" };
_Static_assert(sizeof in_coord / sizeof in_coord[0] == TGRAD_MAX_DIMS, "one coordinate name per axis");

static void launch_of(const tg_gen_reduce *p, const tg_route *r, struct tgrad_launch *launch, int64_t *nout,
                      int64_t *in_hi) {
    int64_t numel = 0, lo = 0, hi = -1;
    tg_view_numel(&p->in, &numel);
    tg_view_numel(&p->out, nout);
    if (numel > 0) tg_span_view(&p->in, &lo, &hi);
    *in_hi = hi;
    memset(launch, 0, sizeof *launch);
    launch->buffer_count = 2;
    launch->buffer_elements[0] = (uint64_t)(hi + 1);
    launch->buffer_elements[1] = (uint64_t)*nout;
    snprintf(launch->buffer_names[0], 8, "x");
    snprintf(launch->buffer_names[1], 8, "c");
    if (has(p->prologue)) tg_gen_chain_launch(p->prologue, launch);
    if (has(p->epilogue)) tg_gen_chain_launch(p->epilogue, launch);
    launch->grid[0] = (uint32_t)*nout;
    launch->grid[1] = launch->grid[2] = 1;
    launch->threadgroup[0] = (uint32_t)r->threads_x;
    launch->threadgroup[1] = launch->threadgroup[2] = 1;
    launch->threadgroup_memory = (uint32_t)(r->threads_x * (is_sum(p->op) ? SUM_SLOT : EXT_SLOT) * 4);
}

static void key_of(const tg_gen_reduce *p, char *key, size_t cap) {
    size_t n = (size_t)snprintf(key, cap, "reduce;%d;%d;%d;off=%" PRId64, (int)p->op, (int)p->in_dtype,
                                (int)p->out_dtype, p->in.offset);
    for (int32_t d = 0; d < p->in.ndim && n < cap; d++)
        n += (size_t)snprintf(key + n, cap - n, ";%" PRId64 ":%" PRId64 "%s", p->in.shape[d], p->in.strides[d],
                              p->reduced[d] ? "r" : "");
    for (int32_t d = 0; d < p->out.ndim && n < cap; d++) n += (size_t)snprintf(key + n, cap - n, ";o%" PRId64, p->out.shape[d]);
    if (has(p->prologue) && n < cap) {
        n += (size_t)snprintf(key + n, cap - n, ";pro");
        tg_gen_chain_key(p->prologue, key, cap);
    }
    n = strlen(key);
    if (has(p->epilogue) && n < cap) {
        snprintf(key + n, cap - n, ";epi");
        tg_gen_chain_key(p->epilogue, key, cap);
    }
}

/* The description line: what the kernel computes. */
static void describe(const emitter *e, const tg_gen_reduce *p) {
    E("// c[");
    for (int32_t d = 0; d < p->out.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->out.shape[d]);
    E("] (%s, compact row-major) = %s over axes", tg_dtype_name(p->out_dtype), tgrad_reduce_name(p->op));
    for (int32_t d = 0, first = 1; d < p->in.ndim; d++)
        if (p->reduced[d]) E("%s%d", first ? " " : ", ", (int)d), first = 0;
    E(" of x [");
    for (int32_t d = 0; d < p->in.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->in.shape[d]);
    E("] (%s, offset %" PRId64 ", strides", tg_dtype_name(p->in_dtype), p->in.offset);
    for (int32_t d = 0; d < p->in.ndim; d++) E("%s%" PRId64, d ? ", " : " ", p->in.strides[d]);
    E(")\n");
    if (has(p->prologue)) {
        E("// read through");
        for (int32_t i = 0; i < p->prologue->n; i++) E("%s %s", i ? "," : "", tgrad_op_name(p->prologue->ops[i].op));
        E(" (each rounded to bf16 as alone)\n");
    }
    if (has(p->epilogue)) {
        E("// then");
        for (int32_t i = 0; i < p->epilogue->n; i++) E("%s %s", i ? "," : "", tgrad_op_name(p->epilogue->ops[i].op));
        E(" on the rounded result\n");
    }
    E("// %s (kernels/gpu/reduce.h, integers only): the CPU's bytes.\n",
      is_sum(p->op) ? "The exact sum, rounded once" : "The exact extremum: first NaN, else first index among equals");
}

/* Threadgroup slot `slot` <- the running state (acc or best). */
static void emit_store_slot(const emitter *e, const char *indent, bool sum, const char *slot) {
    if (sum) {
        E("%sfor (int k = 0; k < 12; k++)\n%s    sh[%s * %d + k] = acc.q[k];\n", indent, indent, slot, SUM_SLOT);
        E("%ssh[%s * %d + 12] = acc.flags;\n", indent, slot, SUM_SLOT);
    } else {
        E("%ssh[%s * %d] = (uint)best.key;\n", indent, slot, EXT_SLOT);
        E("%ssh[%s * %d + 1] = (uint)best.index;\n", indent, slot, EXT_SLOT);
        E("%ssh[%s * %d + 2] = best.bits;\n", indent, slot, EXT_SLOT);
        E("%ssh[%s * %d + 3] = best.state;\n", indent, slot, EXT_SLOT);
    }
}

tgrad_status tg_gen_render_reduce(const tg_lang *l, const tg_gen_reduce *p, tg_text *t, struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_REDUCE);
    const bool sum = is_sum(p->op), in_bf16 = p->in_dtype == TGRAD_DTYPE_BF16, out_bf16 = p->out_dtype == TGRAD_DTYPE_BF16;
    const int32_t T = r->threads_x;
    int64_t nout, in_hi, count = reduced_count(p);
    launch_of(p, r, launch, &nout, &in_hi);
    char key[8192];
    key_of(p, key, sizeof key);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_reduce_%s_%" PRId64 "_%08" PRIx32, tgrad_reduce_name(p->op),
             count, h);

    int64_t reach = in_hi;
    if (has(p->prologue) && tg_gen_chain_reach(p->prologue) > reach) reach = tg_gen_chain_reach(p->prologue);
    if (has(p->epilogue) && tg_gen_chain_reach(p->epilogue) > reach) reach = tg_gen_chain_reach(p->epilogue);
    bool small = tg_fits_int(reach) && tg_fits_int(count + T) && tg_fits_int(nout);
    emitter em = { t, l, small ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route reduce, language %s). Do not edit.\n", l->name);
    describe(e, p);
    E("// Launch: grid (%u, %u, %u) x threadgroup (%u, %u, %u); buffers", launch->grid[0], launch->grid[1],
      launch->grid[2], launch->threadgroup[0], launch->threadgroup[1], launch->threadgroup[2]);
    for (uint32_t i = 0; i < launch->buffer_count; i++) E("%s %s", i ? "," : "", launch->buffer_names[i]);
    E(".\n");
    if (*l->preamble) E("%s", l->preamble);
    E("\ntypedef %s tg_u64;\n", l->u64);
    if (has(p->prologue)) tg_gen_emit_prelude(e, p->prologue);
    else if (has(p->epilogue)) tg_gen_emit_prelude(e, p->epilogue);
    tg_gen_emit_text(e, tg_gen_reduce_prelude);

    char b0[64], b1[64], extra[2 * TG_GEN_MAX_BINDINGS][64];
    snprintf(b0, sizeof b0, "%s%s%s *x", l->global_in, *l->global_in ? " " : "", in_bf16 ? "ushort" : "uint");
    snprintf(b1, sizeof b1, "%s%s%s *c", l->global_out, *l->global_out ? " " : "", out_bf16 ? "ushort" : "uint");
    const char *bp[2 + 2 * TG_GEN_MAX_BINDINGS] = { b0, b1 };
    int nb = 2;
    if (has(p->prologue)) tg_gen_emit_chain_params(e, p->prologue, extra, bp, &nb);
    if (has(p->epilogue)) tg_gen_emit_chain_params(e, p->epilogue, extra + TG_GEN_MAX_BINDINGS, bp, &nb);
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, nb, used);
    E("    %s uint sh[%d];\n", l->local_decl, T * (sum ? SUM_SLOT : EXT_SLOT));

    /* the input's coordinates: kept axes from the output's index, reduced ones from j */
    int32_t kept[TGRAD_MAX_DIMS], red[TGRAD_MAX_DIMS], nk = 0, nr = 0;
    for (int32_t d = 0; d < p->in.ndim; d++) {
        if (p->reduced[d]) red[nr++] = d;
        else kept[nk++] = d;
    }
    bool needed[TGRAD_MAX_DIMS] = { false };
    mark(&p->in, needed);
    mark_chain(p->prologue, needed);
    emit_split(e, "    ", "gx", "rk", "i", kept, nk, p->in.shape, needed);
    if (sum) E("    tg_acc acc = tg_acc_zero();\n");
    else E("    tg_ext best = tg_ext_none();\n");
    E("    for (%s j = li; j < %" PRId64 "; j += %d) {\n", e->it, count, T);
    emit_split(e, "        ", "j", "rj", "i", red, nr, p->in.shape, needed);
    char idx[TGRAD_MAX_DIMS * 48 + 32];
    tg_view_index(idx, sizeof idx, &p->in, in_coord);
    if (has(p->prologue)) {
        E("        ushort v = x[%s];\n", idx);
        tg_gen_emit_chain(e, p->prologue, "        ", in_coord);
        E("        const uint b = (uint)v << 16;\n");
    } else if (in_bf16) {
        E("        const uint b = (uint)x[%s] << 16;\n", idx);
    } else {
        E("        const uint b = x[%s];\n", idx);
    }
    if (sum) E("        acc = tg_acc_add(acc, b);\n");
    else E("        best = tg_ext_pick(best, tg_ext_of(b, (int)j), %uu);\n", wants_max(p->op) ? 1u : 0u);
    E("    }\n");

    /* the tree: slot li holds thread li's state; each round folds the upper half into the lower */
    emit_store_slot(e, "    ", sum, "li");
    E("    %s\n", l->barrier);
    E("    for (int s = %d; s > 0; s >>= 1) {\n", T / 2);
    E("        if (li < s) {\n");
    if (sum) {
        E("            tg_acc o;\n");
        E("            for (int k = 0; k < 12; k++)\n                o.q[k] = sh[(li + s) * %d + k];\n", SUM_SLOT);
        E("            o.flags = sh[(li + s) * %d + 12];\n", SUM_SLOT);
        E("            acc = tg_acc_merge(acc, o);\n");
    } else {
        E("            tg_ext o;\n");
        E("            o.key = (int)sh[(li + s) * %d];\n", EXT_SLOT);
        E("            o.index = (int)sh[(li + s) * %d + 1];\n", EXT_SLOT);
        E("            o.bits = sh[(li + s) * %d + 2];\n", EXT_SLOT);
        E("            o.state = sh[(li + s) * %d + 3];\n", EXT_SLOT);
        E("            best = tg_ext_pick(best, o, %uu);\n", wants_max(p->op) ? 1u : 0u);
    }
    emit_store_slot(e, "            ", sum, "li");
    E("        }\n");
    E("        %s\n", l->barrier);
    E("    }\n");

    /* thread 0: one rounding, the epilogue, the store */
    E("    if (li == 0) {\n");
    if (is_arg(p->op)) {
        E("        c[gx] = (uint)best.index;\n");
    } else {
        if (sum) {
            E("        const uint bits = tg_acc_round(acc, %" PRId64 "u, %uu);\n",
              p->op == TGRAD_REDUCE_MEAN ? count : 1, out_bf16 ? 1u : 0u);
        } else {
            E("        const uint bits = best.state == 2u ? %s : best.bits%s;\n", out_bf16 ? "0x7fc0u" : "0x7fc00000u",
              out_bf16 ? " >> 16" : "");
        }
        if (has(p->epilogue)) {
            bool oneed[TGRAD_MAX_DIMS] = { false };
            int32_t all[TGRAD_MAX_DIMS];
            for (int32_t d = 0; d < p->out.ndim; d++) all[d] = d;
            mark_chain(p->epilogue, oneed);
            emit_split(e, "        ", "gx", "ro", "o", all, p->out.ndim, p->out.shape, oneed);
            E("        ushort v = (ushort)bits;\n");
            tg_gen_emit_chain(e, p->epilogue, "        ", out_coord);
            E("        c[gx] = v;\n");
        } else {
            E("        c[gx] = %sbits;\n", out_bf16 ? "(ushort)" : "");
        }
    }
    E("    }\n");
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
