/* The selecting copies: gather (tgrad_take), concat (tgrad_concat, and so stack) and slice_scatter
 * at a start tensor (tgrad_slice_scatter_at), one output element per thread, its coordinates from the linear index. Nothing is read as a number: each
 * element moves as an unsigned integer of its size (1, 2, 4 or 8 bytes), so every dtype keeps its
 * bits. A gather's indices are int32 read through their view; the device executor checks them on
 * the host before the launch (kinds.h, gpu_check), so the kernel's own range test never fires in
 * a run that passed that check: it only keeps a kernel launched by hand inside its buffer. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

static const char *const out_coord[] = { "o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7" };
_Static_assert(sizeof out_coord / sizeof out_coord[0] == TGRAD_MAX_DIMS, "one coordinate name per axis");

const char *tg_elem_type(const tg_lang *l, int32_t esize) {
    switch (esize) {
    case 1: return l->id == TGRAD_LANG_CUDA ? "unsigned char" : "uchar";
    case 2: return "ushort";
    case 4: return "uint";
    case 8: return l->u64;
    default: return NULL;
    }
}

static tgrad_status check_common(const tg_route *r, const tg_lang *l, int32_t esize, const tg_view *out) {
    int64_t numel;
    if (!tg_elem_type(l, esize)) return tg_not_eligible(r->name, l->name, "%lld-byte elements (1, 2, 4 or 8)", esize, 0, 0);
    if (tg_view_numel(out, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (tg_ceil_div(numel, r->tile_m) > UINT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements need more than 2^32-1 threadgroups", numel, 0, 0);
    return TGRAD_OK;
}

/* A read view stays inside its buffer; *hi is its highest element (-1: reads nothing). */
static bool span_ok(const tg_view *v, int64_t *hi) {
    int64_t numel = 0, lo = 0;
    *hi = -1;
    if (tg_view_numel(v, &numel)) return false;
    return numel == 0 || (tg_span_view(v, &lo, hi) && lo >= 0);
}

void tg_emit_out_coords(const emitter *e, const tg_view *out, const bool *needed) {
    int32_t outer = -1, last = -1; /* the outermost axis of extent > 1; the outermost needed */
    for (int32_t d = 0; d < out->ndim && outer < 0; d++)
        if (out->shape[d] > 1) outer = d;
    for (int32_t d = out->ndim - 1; d >= 0; d--)
        if (needed[d] && out->shape[d] > 1) last = d;
    if (last < 0) return;
    E("    %s rest = i;\n", e->it);
    for (int32_t d = out->ndim - 1; d > last; d--) {
        if (out->shape[d] <= 1) continue;
        if (needed[d]) E("    const %s o%d = rest %% %" PRId64 ";\n", e->it, (int)d, out->shape[d]);
        E("    rest /= %" PRId64 ";\n", out->shape[d]);
    }
    if (last == outer) E("    const %s o%d = rest;\n", e->it, (int)last);
    else E("    const %s o%d = rest %% %" PRId64 ";\n", e->it, (int)last, out->shape[last]);
}

/* Axis d of view v is read by coordinate (tg_view_index writes a term for it). */
static bool reads(const tg_view *v, int32_t d) { return v->shape[d] > 1 && v->strides[d] != 0; }

static void describe_view(const emitter *e, const char *name, const tg_view *v) {
    E("// %s [", name);
    for (int32_t d = 0; d < v->ndim; d++) E("%s%" PRId64, d ? ", " : "", v->shape[d]);
    E("] (offset %" PRId64 ", strides", v->offset);
    for (int32_t d = 0; d < v->ndim; d++) E("%s%" PRId64, d ? ", " : " ", v->strides[d]);
    E(")\n");
}

/* ---- gather ---- */
tgrad_status tg_gen_check_take(const tg_lang *l, const tg_gen_take *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_GATHER);
    int64_t hi;
    tgrad_status s = check_common(r, l, p->esize, &p->out);
    if (s) return s;
    if (p->axis < 0 || p->axis >= p->x.ndim || p->x.ndim - 1 + p->index.ndim != p->out.ndim)
        return tg_not_eligible(r->name, l->name, "axis %lld of a %lld-d source with %lld-d indices", p->axis, p->x.ndim,
                               p->index.ndim);
    if (!span_ok(&p->x, &hi) || !span_ok(&p->index, &hi))
        return tg_not_eligible(r->name, l->name, "a view reaches outside its buffer", 0, 0, 0);
    return TGRAD_OK;
}

tgrad_status tg_gen_render_take(const tg_lang *l, const tg_gen_take *p, tg_text *t, struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_GATHER);
    const int32_t a = p->axis, ni = p->index.ndim;
    const int64_t n = p->x.shape[a];
    int64_t numel = 0, x_hi, ix_hi;
    tg_view_numel(&p->out, &numel);
    span_ok(&p->x, &x_hi);
    span_ok(&p->index, &ix_hi);
    memset(launch, 0, sizeof *launch);
    launch->buffer_count = 3;
    launch->buffer_elements[0] = (uint64_t)(x_hi + 1);
    launch->buffer_elements[1] = (uint64_t)(ix_hi + 1);
    launch->buffer_elements[2] = (uint64_t)numel;
    snprintf(launch->buffer_names[0], 8, "x");
    snprintf(launch->buffer_names[1], 8, "ix");
    snprintf(launch->buffer_names[2], 8, "c");
    tg_launch_1d(r, numel, launch);

    char key[2048];
    snprintf(key, sizeof key, "gather;%d;%d", (int)p->esize, (int)a);
    tg_key_view(key, sizeof key, &p->x);
    tg_key_view(key, sizeof key, &p->index);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_gather_%" PRId64 "_%08" PRIx32, numel, h);

    /* x's coordinates: the output's before the axis, k on it, the output's after the indices' */
    const char *xc[TGRAD_MAX_DIMS], *ic[TGRAD_MAX_DIMS];
    for (int32_t d = 0; d < p->x.ndim; d++) xc[d] = d < a ? out_coord[d] : d == a ? "k" : out_coord[d + ni - 1];
    for (int32_t d = 0; d < ni; d++) ic[d] = out_coord[a + d];
    char x_idx[TGRAD_MAX_DIMS * 48 + 64], ix_idx[TGRAD_MAX_DIMS * 48 + 32];
    tg_view x_read = p->x;
    x_read.shape[a] = 2; /* k always takes part (an extent-1 axis has k = 0: the term is 0) */
    tg_view_index(x_idx, sizeof x_idx, &x_read, xc);
    tg_view_index(ix_idx, sizeof ix_idx, &p->index, ic);

    int64_t reach = x_hi > ix_hi ? x_hi : ix_hi;
    if (n > reach) reach = n;
    emitter em = { t, l, tg_fits_int(reach) && tg_fits_int(numel + r->tile_m) ? "int" : "long", NULL }, *e = &em;
    const char *et = tg_elem_type(l, p->esize);
    E("// Generated by libtgrad from kernels/routes.h (route gather, language %s). Do not edit.\n", l->name);
    E("// c[");
    for (int32_t d = 0; d < p->out.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->out.shape[d]);
    E("] (%d-byte elements, compact row-major) = take(x, ix, axis %d), bit for bit\n", (int)p->esize, (int)a);
    describe_view(e, "x", &p->x);
    describe_view(e, "ix (int32)", &p->index);
    E("// Each index lies in -%" PRId64 " .. %" PRId64 " (checked on the host before the launch); negative ones count "
      "from the end.\n", n, n - 1);
    tg_emit_launch_line(e, launch);
    if (*l->preamble) E("%s", l->preamble);
    E("\n");
    char b0[64], b1[64], b2[64];
    snprintf(b0, sizeof b0, "%s%s%s *x", l->global_in, *l->global_in ? " " : "", et);
    snprintf(b1, sizeof b1, "%s%sint *ix", l->global_in, *l->global_in ? " " : "");
    snprintf(b2, sizeof b2, "%s%s%s *c", l->global_out, *l->global_out ? " " : "", et);
    const char *bp[3] = { b0, b1, b2 };
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, 3, used);
    E("    const %s i = gx * %d + li;\n", e->it, r->tile_m);
    E("    if (i >= %" PRId64 ")\n        return;\n", numel);
    bool needed[TGRAD_MAX_DIMS] = { false };
    for (int32_t d = 0; d < p->x.ndim; d++)
        if (d != a && reads(&p->x, d)) needed[d < a ? d : d + ni - 1] = true;
    for (int32_t d = 0; d < ni; d++) needed[a + d] |= reads(&p->index, d);
    tg_emit_out_coords(e, &p->out, needed);
    E("    %s k = (%s)ix[%s];\n", e->it, e->it, ix_idx);
    E("    if (k < 0)\n        k += %" PRId64 ";\n", n);
    E("    if (k < 0 || k >= %" PRId64 ")\n        return;\n", n);
    E("    c[i] = x[%s];\n", x_idx);
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}

/* ---- concat ---- */
tgrad_status tg_gen_check_concat(const tg_lang *l, const tg_gen_concat *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_CONCAT);
    tgrad_status s = check_common(r, l, p->esize, &p->out);
    if (s) return s;
    if (p->n < 1 || p->n > TG_GEN_MAX_CONCAT)
        return tg_not_eligible(r->name, l->name, "%lld operands (1 .. %lld: one buffer each, and the output's)", p->n,
                               TG_GEN_MAX_CONCAT, 0);
    if (p->axis < 0 || p->axis >= p->out.ndim)
        return tg_not_eligible(r->name, l->name, "axis %lld of a %lld-d result", p->axis, p->out.ndim, 0);
    for (int32_t j = 0; j < p->n; j++) {
        int64_t hi;
        if (p->in[j].ndim != p->out.ndim || !span_ok(&p->in[j], &hi))
            return tg_not_eligible(r->name, l->name, "operand %lld's view (rank, or outside its buffer)", j, 0, 0);
    }
    return TGRAD_OK;
}

tgrad_status tg_gen_render_concat(const tg_lang *l, const tg_gen_concat *p, tg_text *t, struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_CONCAT);
    const int32_t a = p->axis;
    int64_t numel = 0, reach = 0;
    tg_view_numel(&p->out, &numel);
    memset(launch, 0, sizeof *launch);
    launch->buffer_count = (uint32_t)p->n + 1;
    char key[8192];
    snprintf(key, sizeof key, "concat;%d;%d", (int)p->esize, (int)a);
    for (int32_t j = 0; j < p->n; j++) {
        int64_t hi;
        span_ok(&p->in[j], &hi);
        if (hi > reach) reach = hi;
        launch->buffer_elements[j] = (uint64_t)(hi + 1);
        snprintf(launch->buffer_names[j], 8, "x%d", (int)j);
        tg_key_view(key, sizeof key, &p->in[j]);
    }
    launch->buffer_elements[p->n] = (uint64_t)numel;
    snprintf(launch->buffer_names[p->n], 8, "c");
    tg_launch_1d(r, numel, launch);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_concat_%" PRId64 "_%08" PRIx32, numel, h);

    if (p->out.shape[a] > reach) reach = p->out.shape[a];
    emitter em = { t, l, tg_fits_int(reach) && tg_fits_int(numel + r->tile_m) ? "int" : "long", NULL }, *e = &em;
    const char *et = tg_elem_type(l, p->esize);
    E("// Generated by libtgrad from kernels/routes.h (route concat, language %s). Do not edit.\n", l->name);
    E("// c[");
    for (int32_t d = 0; d < p->out.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->out.shape[d]);
    E("] (%d-byte elements, compact row-major) = x0", (int)p->esize);
    for (int32_t j = 1; j < p->n; j++) E(", x%d", (int)j);
    E(" joined along axis %d, bit for bit\n", (int)a);
    for (int32_t j = 0; j < p->n; j++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", (int)j);
        describe_view(e, name, &p->in[j]);
    }
    tg_emit_launch_line(e, launch);
    if (*l->preamble) E("%s", l->preamble);
    E("\n");
    char decl[TG_GEN_MAX_CONCAT + 1][64];
    const char *bp[TG_GEN_MAX_CONCAT + 1];
    for (int32_t j = 0; j < p->n; j++) {
        snprintf(decl[j], sizeof decl[j], "%s%s%s *x%d", l->global_in, *l->global_in ? " " : "", et, (int)j);
        bp[j] = decl[j];
    }
    snprintf(decl[p->n], sizeof decl[p->n], "%s%s%s *c", l->global_out, *l->global_out ? " " : "", et);
    bp[p->n] = decl[p->n];
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, p->n + 1, used);
    E("    const %s i = gx * %d + li;\n", e->it, r->tile_m);
    E("    if (i >= %" PRId64 ")\n        return;\n", numel);
    const char *coord[TGRAD_MAX_DIMS];
    for (int32_t d = 0; d < p->out.ndim; d++) coord[d] = d == a ? "q" : out_coord[d];
    const char *pos = p->out.shape[a] > 1 ? out_coord[a] : "0";
    int64_t start = 0, live = 0;
    for (int32_t j = 0; j < p->n; j++) live += p->in[j].shape[a] > 0;
    bool needed[TGRAD_MAX_DIMS] = { false };
    needed[a] = live > 1; /* the position picks the operand */
    for (int32_t j = 0; j < p->n; j++)
        for (int32_t d = 0; d < p->out.ndim && p->in[j].shape[a] > 0; d++) needed[d] |= reads(&p->in[j], d);
    tg_emit_out_coords(e, &p->out, needed);
    for (int32_t j = 0, seen = 0; j < p->n; j++) {
        const int64_t ext = p->in[j].shape[a];
        if (ext == 0) continue; /* contributes nothing: never read */
        char idx[TGRAD_MAX_DIMS * 48 + 32];
        tg_view_index(idx, sizeof idx, &p->in[j], coord);
        bool last = ++seen == live;
        if (last) E("    {\n");
        else E("    if (%s < %" PRId64 ") {\n", pos, start + ext);
        if (strstr(idx, "q")) E("        const %s q = %s - %" PRId64 ";\n", e->it, pos, start);
        E("        c[i] = x%d[%s];\n", (int)j, idx);
        E("        return;\n    }\n");
        start += ext;
    }
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}

/* ---- slice_scatter at a start tensor ---- */
tgrad_status tg_gen_check_slice_at(const tg_lang *l, const tg_gen_slice_at *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_CONCAT);
    tgrad_status s = check_common(r, l, p->esize, &p->out);
    if (s) return s;
    if (p->axis < 0 || p->axis >= p->out.ndim || p->dst.ndim != p->out.ndim || p->src.ndim != p->out.ndim)
        return tg_not_eligible(r->name, l->name, "axis %lld of a %lld-d result (dst and src of its rank)", p->axis,
                               p->out.ndim, 0);
    int64_t hi, n = 0;
    if (!span_ok(&p->dst, &hi) || !span_ok(&p->src, &hi) || !span_ok(&p->start, &hi) || tg_view_numel(&p->start, &n) ||
        n != 1)
        return tg_not_eligible(r->name, l->name, "a view reaches outside its buffer, or the start is not one element",
                               0, 0, 0);
    return TGRAD_OK;
}

tgrad_status tg_gen_render_slice_at(const tg_lang *l, const tg_gen_slice_at *p, tg_text *t,
                                    struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_CONCAT);
    const int32_t a = p->axis;
    const int64_t n = p->src.shape[a];
    int64_t numel = 0, dst_hi, src_hi, start_hi;
    tg_view_numel(&p->out, &numel);
    span_ok(&p->dst, &dst_hi), span_ok(&p->src, &src_hi), span_ok(&p->start, &start_hi);
    memset(launch, 0, sizeof *launch);
    launch->buffer_count = 4;
    const int64_t hi[3] = { dst_hi, src_hi, start_hi };
    for (int32_t j = 0; j < 3; j++) {
        launch->buffer_elements[j] = (uint64_t)(hi[j] + 1);
        snprintf(launch->buffer_names[j], 8, "x%d", (int)j);
    }
    launch->buffer_elements[3] = (uint64_t)numel;
    snprintf(launch->buffer_names[3], 8, "c");
    tg_launch_1d(r, numel, launch);
    char key[2048];
    snprintf(key, sizeof key, "slice_at;%d;%d", (int)p->esize, (int)a);
    tg_key_view(key, sizeof key, &p->dst);
    tg_key_view(key, sizeof key, &p->src);
    tg_key_view(key, sizeof key, &p->start);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_concat_at_%" PRId64 "_%08" PRIx32, numel, h);

    int64_t reach = dst_hi > src_hi ? dst_hi : src_hi;
    if (p->out.shape[a] > reach) reach = p->out.shape[a];
    emitter em = { t, l, tg_fits_int(reach) && tg_fits_int(numel + r->tile_m) ? "int" : "long", NULL }, *e = &em;
    const char *et = tg_elem_type(l, p->esize);
    E("// Generated by libtgrad from kernels/routes.h (route concat, language %s). Do not edit.\n", l->name);
    E("// c[");
    for (int32_t d = 0; d < p->out.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->out.shape[d]);
    E("] (%d-byte elements, compact row-major) = x0 with x1's %" PRId64 " positions written along axis %d from "
      "the position x2 holds, bit for bit\n", (int)p->esize, n, (int)a);
    describe_view(e, "x0 (dst)", &p->dst);
    describe_view(e, "x1 (src)", &p->src);
    describe_view(e, "x2 (the start, int32)", &p->start);
    E("// The start lies in 0 .. %" PRId64 " (checked on the host before the launch).\n", p->out.shape[a] - n);
    tg_emit_launch_line(e, launch);
    if (*l->preamble) E("%s", l->preamble);
    E("\n");
    char b0[64], b1[64], b2[64], b3[64];
    snprintf(b0, sizeof b0, "%s%s%s *x0", l->global_in, *l->global_in ? " " : "", et);
    snprintf(b1, sizeof b1, "%s%s%s *x1", l->global_in, *l->global_in ? " " : "", et);
    snprintf(b2, sizeof b2, "%s%sint *x2", l->global_in, *l->global_in ? " " : "");
    snprintf(b3, sizeof b3, "%s%s%s *c", l->global_out, *l->global_out ? " " : "", et);
    const char *bp[4] = { b0, b1, b2, b3 };
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, 4, used);
    E("    const %s i = gx * %d + li;\n", e->it, r->tile_m);
    E("    if (i >= %" PRId64 ")\n        return;\n", numel);
    bool needed[TGRAD_MAX_DIMS] = { false };
    needed[a] = n > 0; /* the position decides between src and dst */
    for (int32_t d = 0; d < p->out.ndim; d++) needed[d] |= reads(&p->dst, d) || (n > 0 && reads(&p->src, d));
    tg_emit_out_coords(e, &p->out, needed);
    const char *coord[TGRAD_MAX_DIMS];
    char idx[TGRAD_MAX_DIMS * 48 + 32];
    const char *pos = p->out.shape[a] > 1 ? out_coord[a] : "0";
    if (n > 0) {
        for (int32_t d = 0; d < p->out.ndim; d++) coord[d] = d == a ? "q" : out_coord[d];
        tg_view_index(idx, sizeof idx, &p->src, coord);
        E("    const %s q = %s - (%s)x2[%" PRId64 "];\n", e->it, pos, e->it, p->start.offset);
        E("    if (q >= 0 && q < %" PRId64 ") {\n", n);
        E("        c[i] = x1[%s];\n        return;\n    }\n", idx);
    }
    for (int32_t d = 0; d < p->out.ndim; d++) coord[d] = out_coord[d];
    tg_view_index(idx, sizeof idx, &p->dst, coord);
    E("    c[i] = x0[%s];\n", idx);
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
