/* The gradient's transposes on the GPU routes, one output element per thread: place (the
 * transpose of an injective view, grad/place.c) and scatter_add (the transpose of a gather,
 * grad/scatter_add.c). Neither writes an element twice or races: each thread finds what lands on
 * its own element. place moves bits (any element size); scatter_add sums exactly in the exact
 * reductions' integer accumulator (kernels/gpu/reduce.h) and rounds once, so both give the CPU's
 * bytes whatever the device's floating point. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

static const char *const q_name[] = { "q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7" };
_Static_assert(sizeof q_name / sizeof q_name[0] == TGRAD_MAX_DIMS, "one coordinate name per axis");

/* ---- place ---- */

/* Where the view lands, made positive: the axes of extent > 1, each stride's magnitude, largest
 * first (flip: the stride was negative, so coordinate c sits at n - 1 - c), and the offset of the
 * lowest element. Division recovers the coordinates when each stride exceeds the reach of all
 * smaller ones (sum of s (n - 1)): then every landing offset has one spelling, found greedily. */
typedef struct landing {
    int32_t n, axis[TGRAD_MAX_DIMS];
    int64_t stride[TGRAD_MAX_DIMS];
    bool flip[TGRAD_MAX_DIMS];
    int64_t base, reach; /* lowest landing element; highest minus lowest */
} landing;

static bool landing_of(const tg_view *at, landing *g) {
    memset(g, 0, sizeof *g);
    g->base = at->offset;
    for (int32_t d = 0; d < at->ndim; d++) {
        if (at->shape[d] <= 1) continue;
        int64_t s = at->strides[d];
        if (s == 0 || s == INT64_MIN) return false;
        g->flip[g->n] = s < 0;
        if (s < 0) {
            if (__builtin_mul_overflow(-s, at->shape[d] - 1, &s)) return false;
            g->base -= s; /* the lowest element: this axis at its far end */
            s = -at->strides[d];
        }
        g->axis[g->n] = d, g->stride[g->n++] = s;
    }
    for (int32_t i = 1; i < g->n; i++) /* insertion sort, largest stride first */
        for (int32_t j = i; j > 0 && g->stride[j] > g->stride[j - 1]; j--) {
            int64_t ts = g->stride[j];
            int32_t ta = g->axis[j];
            bool tf = g->flip[j];
            g->stride[j] = g->stride[j - 1], g->axis[j] = g->axis[j - 1], g->flip[j] = g->flip[j - 1];
            g->stride[j - 1] = ts, g->axis[j - 1] = ta, g->flip[j - 1] = tf;
        }
    int64_t below = 0; /* the reach of the axes after i */
    for (int32_t i = g->n - 1; i >= 0; i--) {
        if (g->stride[i] <= below) return false;
        int64_t span;
        if (__builtin_mul_overflow(g->stride[i], at->shape[g->axis[i]] - 1, &span) ||
            __builtin_add_overflow(below, span, &below))
            return false;
    }
    g->reach = below;
    return true;
}

static tg_view at_view(const tg_gen_place *p) {
    tg_view at = p->src;
    for (int32_t d = 0; d < at.ndim; d++) at.strides[d] = p->strides[d];
    at.offset = p->offset;
    return at;
}

tgrad_status tg_gen_check_place(const tg_lang *l, const tg_gen_place *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_PLACE);
    int64_t numel, lo, hi;
    if (!tg_elem_type(l, p->esize)) return tg_not_eligible(r->name, l->name, "%lld-byte elements (1, 2, 4 or 8)", p->esize, 0, 0);
    if (p->numel < 0 || tg_ceil_div(p->numel, r->tile_m) > UINT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements need more than 2^32-1 threadgroups", p->numel, 0, 0);
    if (tg_view_numel(&p->src, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (numel == 0) return TGRAD_OK; /* nothing lands: all +0 */
    if (!tg_span_view(&p->src, &lo, &hi) || lo < 0)
        return tg_not_eligible(r->name, l->name, "the source's view reaches outside its buffer", 0, 0, 0);
    tg_view at = at_view(p);
    landing g;
    if (!landing_of(&at, &g))
        return tg_not_eligible(r->name, l->name, "a view whose strides do not nest (a broadcast axis, or overlapping or "
                               "interleaved strides): its positions cannot be found by division", 0, 0, 0);
    if (g.base < 0 || g.base > p->numel - 1 - g.reach)
        return tg_not_eligible(r->name, l->name, "the view lands outside the %lld-element buffer", p->numel, 0, 0);
    return TGRAD_OK;
}

tgrad_status tg_gen_render_place(const tg_lang *l, const tg_gen_place *p, tg_text *t, struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_PLACE);
    int64_t src_numel = 0, lo = 0, hi = -1;
    tg_view_numel(&p->src, &src_numel);
    if (src_numel > 0) tg_span_view(&p->src, &lo, &hi);
    tg_view at = at_view(p);
    landing g;
    if (src_numel > 0) landing_of(&at, &g);
    memset(launch, 0, sizeof *launch);
    launch->buffer_count = 2;
    launch->buffer_elements[0] = (uint64_t)(hi + 1);
    launch->buffer_elements[1] = (uint64_t)p->numel;
    snprintf(launch->buffer_names[0], 8, "src");
    snprintf(launch->buffer_names[1], 8, "c");
    tg_launch_1d(r, p->numel, launch);
    char key[2048];
    snprintf(key, sizeof key, "place;%d;%" PRId64, (int)p->esize, p->numel);
    tg_key_view(key, sizeof key, &p->src);
    tg_key_view(key, sizeof key, &at);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_place_%" PRId64 "_%08" PRIx32, p->numel, h);

    emitter em = { t, l, tg_fits_int(hi) && tg_fits_int(p->numel + r->tile_m) ? "int" : "long", NULL }, *e = &em;
    const char *et = tg_elem_type(l, p->esize);
    E("// Generated by libtgrad from kernels/routes.h (route place, language %s). Do not edit.\n", l->name);
    E("// c (%" PRId64 " elements, compact) = +0, except where the view [", p->numel);
    for (int32_t d = 0; d < at.ndim; d++) E("%s%" PRId64, d ? ", " : "", at.shape[d]);
    E("] (offset %" PRId64 ", strides", at.offset);
    for (int32_t d = 0; d < at.ndim; d++) E("%s%" PRId64, d ? ", " : " ", at.strides[d]);
    E(") lands:\n// there the element of src (offset %" PRId64 ", strides", p->src.offset);
    for (int32_t d = 0; d < p->src.ndim; d++) E("%s%" PRId64, d ? ", " : " ", p->src.strides[d]);
    E(") at the same index, its bits (%d-byte elements).\n", (int)p->esize);
    E("// Each thread divides its own offset by the strides, largest first (they nest), to find it.\n");
    tg_emit_launch_line(e, launch);
    if (*l->preamble) E("%s", l->preamble);
    E("\n");
    char b0[64], b1[64];
    tg_buffer_param_typed(b0, sizeof b0, l->global_in, et, "src");
    tg_buffer_param_typed(b1, sizeof b1, l->global_out, et, "c");
    const char *bp[2] = { b0, b1 };
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, 2, used);
    E("    const %s i = gx * %d + li;\n", e->it, r->tile_m);
    E("    if (i >= %" PRId64 ")\n        return;\n", p->numel);
    if (src_numel == 0) {
        E("    c[i] = (%s)0;\n}\n", et);
        tg_finish_launch(t, launch);
        return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
    }
    E("    %s r = i - %" PRId64 ";\n", e->it, g.base);
    E("    bool hit = r >= 0 && r <= %" PRId64 ";\n", g.reach);
    char coords[TGRAD_MAX_DIMS][48];
    const char *cn[TGRAD_MAX_DIMS];
    for (int32_t d = 0; d < p->src.ndim; d++) snprintf(coords[d], sizeof coords[d], "0"), cn[d] = coords[d];
    for (int32_t k = 0; k < g.n; k++) {
        int32_t d = g.axis[k];
        E("    const %s %s = r / %" PRId64 ";\n", e->it, q_name[d], g.stride[k]);
        E("    r -= %s * %" PRId64 ";\n", q_name[d], g.stride[k]);
        E("    hit = hit && %s < %" PRId64 ";\n", q_name[d], at.shape[d]);
        if (g.flip[k]) snprintf(coords[d], sizeof coords[d], "(%" PRId64 " - %s)", at.shape[d] - 1, q_name[d]);
        else snprintf(coords[d], sizeof coords[d], "%s", q_name[d]);
    }
    char idx[TGRAD_MAX_DIMS * 64 + 32];
    tg_view_index(idx, sizeof idx, &p->src, cn);
    E("    if (hit && r == 0)\n        c[i] = src[%s];\n    else\n        c[i] = (%s)0;\n}\n", idx, et);
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}

/* ---- scatter_add ---- */

/* The extents around the axis: P before it, n on it (the output's), R after it; Q the indices. */
static void scatter_dims(const tg_gen_scatter_add *p, int64_t *P, int64_t *n, int64_t *R, int64_t *Q) {
    *P = 1, *R = 1, *Q = 1, *n = p->out.shape[p->axis];
    for (int32_t d = 0; d < p->axis; d++) *P *= p->out.shape[d];
    for (int32_t d = p->axis + 1; d < p->out.ndim; d++) *R *= p->out.shape[d];
    for (int32_t d = 0; d < p->index.ndim; d++) *Q *= p->index.shape[d];
}

tgrad_status tg_gen_check_scatter_add(const tg_lang *l, const tg_gen_scatter_add *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_SCATTER_ADD);
    int64_t numel, gn, in;
    if (p->dtype != TGRAD_DTYPE_BF16 && p->dtype != TGRAD_DTYPE_F32)
        return tg_not_eligible(r->name, l->name, "dtype %lld (bfloat16 or float32)", p->dtype, 0, 0);
    if (p->axis < 0 || p->axis >= p->out.ndim || p->g.ndim != p->out.ndim - 1 + p->index.ndim)
        return tg_not_eligible(r->name, l->name, "axis %lld of a %lld-d result with %lld-d indices", p->axis, p->out.ndim,
                               p->index.ndim);
    if (tg_view_numel(&p->out, &numel) || tg_view_numel(&p->g, &gn) || tg_view_numel(&p->index, &in))
        return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (tg_ceil_div(numel, r->tile_m) > UINT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements need more than 2^32-1 threadgroups", numel, 0, 0);
    if (!tg_view_is_compact_rowmajor(&p->g) || !tg_view_is_compact_rowmajor(&p->index))
        return tg_not_eligible(r->name, l->name, "operands that are not compact (the node reads them compact)", 0, 0, 0);
    int64_t P, n, R, Q;
    scatter_dims(p, &P, &n, &R, &Q);
    if (n + 1 + Q > INT32_MAX) /* the positions binding: int words */
        return tg_not_eligible(r->name, l->name, "%lld indices into an axis of %lld (their positions need int32)", Q, n, 0);
    return TGRAD_OK;
}

tgrad_status tg_gen_render_scatter_add(const tg_lang *l, const tg_gen_scatter_add *p, tg_text *t,
                                       struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_SCATTER_ADD);
    const bool bf16 = p->dtype == TGRAD_DTYPE_BF16;
    int64_t P, n, R, Q;
    scatter_dims(p, &P, &n, &R, &Q);
    const int64_t numel = P * n * R;
    memset(launch, 0, sizeof *launch);
    launch->buffer_count = 4;
    launch->buffer_elements[0] = (uint64_t)(p->g.offset + P * Q * R);
    launch->buffer_elements[1] = (uint64_t)(p->index.offset + Q);
    launch->buffer_elements[2] = (uint64_t)numel;
    launch->buffer_elements[3] = (uint64_t)(n + 1 + Q);
    snprintf(launch->buffer_names[0], 8, "g");
    snprintf(launch->buffer_names[1], 8, "ix");
    snprintf(launch->buffer_names[2], 8, "c");
    snprintf(launch->buffer_names[3], 8, "pos");
    tg_launch_1d(r, numel, launch);
    char key[2048];
    snprintf(key, sizeof key, "scatter_add;%d;%d", (int)p->dtype, (int)p->axis);
    tg_key_view(key, sizeof key, &p->g);
    tg_key_view(key, sizeof key, &p->index);
    tg_key_view(key, sizeof key, &p->out);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_scatter_add_%" PRId64 "_%08" PRIx32, numel, h);

    bool small = tg_fits_int((int64_t)launch->buffer_elements[0]) && tg_fits_int(numel + r->tile_m);
    emitter em = { t, l, small ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route scatter_add, language %s). Do not edit.\n", l->name);
    E("// c[a, j, b] ([%" PRId64 ", %" PRId64 ", %" PRId64 "], %s, compact) = the sum of g[a, q, b] over the %" PRId64
      " indices q whose\n// index ix[q] names j (a negative one counts from the end), exact, rounded once; +0 where "
      "none does.\n",
      P, n, R, tg_dtype_name(p->dtype), Q);
    E("// g (offset %" PRId64 ") and ix (offset %" PRId64 ") compact; the indices were checked on the host, which\n"
      "// grouped their positions by the index they name: j's are pos[%" PRId64 " + t] for t in [pos[j], pos[j + 1]).\n",
      p->g.offset, p->index.offset, n + 1);
    E("// The exact sum (kernels/gpu/reduce.h, integers only): the CPU's bytes, in any order.\n");
    tg_emit_launch_line(e, launch);
    if (*l->preamble) E("%s", l->preamble);
    E("\ntypedef %s tg_u64;\n", l->u64);
    tg_gen_emit_text(e, tg_gen_reduce_prelude);
    char b0[64], b1[64], b2[64], b3[64];
    tg_buffer_param_typed(b0, sizeof b0, l->global_in, bf16 ? "ushort" : "uint", "g");
    tg_buffer_param_typed(b1, sizeof b1, l->global_in, "int", "ix");
    tg_buffer_param_typed(b2, sizeof b2, l->global_out, bf16 ? "ushort" : "uint", "c");
    tg_buffer_param_typed(b3, sizeof b3, l->global_in, "int", "pos");
    const char *bp[4] = { b0, b1, b2, b3 };
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, 4, used);
    E("    const %s i = gx * %d + li;\n", e->it, r->tile_m);
    E("    if (i >= %" PRId64 ")\n        return;\n", numel);
    E("    const %s b = i %% %" PRId64 ";\n", e->it, R);
    E("    const %s j = (i / %" PRId64 ") %% %" PRId64 ";\n", e->it, R, n);
    E("    const %s a = i / %" PRId64 ";\n", e->it, R * n);
    E("    tg_acc acc = tg_acc_zero();\n");
    E("    const %s end = pos[j + 1];\n", e->it);
    E("    for (%s t = pos[j]; t < end; t++) {\n", e->it);
    E("        const %s q = pos[%" PRId64 " + t];\n", e->it, n + 1);
    E("        acc = tg_acc_add(acc, %sg[%" PRId64 " + (a * %" PRId64 " + q) * %" PRId64 " + b]%s);\n",
      bf16 ? "(uint)" : "", p->g.offset, Q, R, bf16 ? " << 16" : "");
    E("    }\n");
    E("    c[i] = %stg_acc_round(acc, 1u, %uu);\n", bf16 ? "(ushort)" : "", bf16 ? 1u : 0u);
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
