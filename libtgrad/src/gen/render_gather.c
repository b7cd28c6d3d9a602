/* The gather kernels: the copy that materializes a view, the standalone elementwise kernel (the
 * first operand gathered through its view, then an elementwise chain; ew.c) and the cast between
 * bfloat16 and float32, one output element per thread, coordinates from the linear index. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

tgrad_status tg_gen_check_copy(const tg_lang *l, const tg_view *src) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_COPY);
    int64_t numel, lo, hi;
    if (tg_view_numel(src, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (tg_ceil_div(numel, r->tile_m) > UINT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements need more than 2^32-1 threadgroups", numel, 0, 0);
    if (numel > 0 && (!tg_span_view(src, &lo, &hi) || lo < 0))
        return tg_not_eligible(r->name, l->name, "the view reaches outside its buffer", 0, 0, 0);
    return TGRAD_OK;
}

/* Coordinates i<d> of the output element i (row-major over shape), for the axes needed[d]
 * marks (each of extent > 1), from the innermost axis out; an unneeded axis only divides the rest. */
static void emit_coords(const emitter *e, int32_t ndim, const int64_t *shape, const bool *needed) {
    int32_t outer = -1, last_used = -1; /* first axis with extent > 1; outermost needed axis */
    for (int32_t d = 0; d < ndim; d++)
        if (shape[d] > 1) { outer = d; break; }
    for (int32_t d = ndim - 1; d >= 0; d--)
        if (needed[d]) last_used = d;
    if (last_used < 0) return;
    E("    %s rest = i;\n", e->it);
    for (int32_t d = ndim - 1; d > last_used; d--) {
        if (shape[d] <= 1) continue;
        if (needed[d]) E("    const %s i%d = rest %% %" PRId64 ";\n", e->it, (int)d, shape[d]);
        E("    rest /= %" PRId64 ";\n", shape[d]);
    }
    if (last_used == outer) E("    const %s i%d = rest;\n", e->it, (int)last_used);
    else E("    const %s i%d = rest %% %" PRId64 ";\n", e->it, (int)last_used, shape[last_used]);
}

/* The axes a view reads by coordinate: extent > 1 and a non-zero stride. */
static void mark_needed(const tg_view *v, bool *needed) {
    for (int32_t d = 0; d < v->ndim; d++) needed[d] |= v->shape[d] > 1 && v->strides[d] != 0;
}

/* The coordinate of axis d in the kernels' text (emit_coords declares them). */
static const char *const coord[] = { "i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7" };
_Static_assert(sizeof coord / sizeof coord[0] == TGRAD_MAX_DIMS, "one coordinate name per axis");

/* Launch geometry of a gather over the elements of view `src` (its own shape is the output's):
 * buffers 0 (the source, named src_name) and 1 (the output). Sets *numel and *src_hi, the highest
 * element of the source it reads (-1: none). */
static void gather_launch(const tg_route *r, const tg_view *src, const char *src_name, struct tgrad_launch *launch,
                          int64_t *numel_out, int64_t *src_hi) {
    int64_t numel = 0, lo = 0, hi = -1;
    tg_view_numel(src, &numel);
    if (numel > 0) tg_span_view(src, &lo, &hi);
    *numel_out = numel, *src_hi = hi;
    memset(launch, 0, sizeof *launch);
    launch->buffer_count = 2;
    launch->buffer_elements[0] = (uint64_t)(hi + 1);
    launch->buffer_elements[1] = (uint64_t)numel;
    snprintf(launch->buffer_names[0], 8, "%s", src_name);
    snprintf(launch->buffer_names[1], 8, r->id == TGRAD_ROUTE_COPY ? "dst" : "c");
    launch->grid[0] = (uint32_t)tg_ceil_div(numel, r->tile_m);
    launch->grid[1] = launch->grid[2] = 1;
    launch->threadgroup[0] = (uint32_t)r->threads_x;
    launch->threadgroup[1] = launch->threadgroup[2] = 1;
}

static void view_key(const tg_view *v, char *key, size_t cap, char *dims, size_t dcap) {
    size_t kn = strlen(key);
    for (int32_t d = 0; d < v->ndim; d++) {
        kn += (size_t)snprintf(key + kn, cap - kn, ";%" PRId64 ":%" PRId64, v->shape[d], v->strides[d]);
        size_t dn = strlen(dims);
        snprintf(dims + dn, dcap - dn, "%s%" PRId64, d ? ", " : "", v->shape[d]);
    }
}

/* What the gather kernels (copy, cast) share after their header comment: the language's
 * preamble, the signature over the two buffers bp (source, destination), the element index i with
 * its bounds check, and the source view's coordinates of i. */
static void emit_gather_head_n(emitter *e, const tg_route *r, const tg_view *src, int64_t numel, const char *name,
                               const char *const *bp, int nbp) {
    if (*e->l->preamble) E("%s", e->l->preamble);
    E("\n");
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, name, bp, nbp, used);
    E("    const %s i = gx * %d + li;\n", e->it, r->tile_m);
    E("    if (i >= %" PRId64 ")\n        return;\n", numel);
    bool needed[TGRAD_MAX_DIMS] = { false };
    mark_needed(src, needed);
    emit_coords(e, src->ndim, src->shape, needed);
}

static void emit_gather_head(emitter *e, const tg_route *r, const tg_view *src, int64_t numel, const char *name,
                             const char *const bp[2]) {
    emit_gather_head_n(e, r, src, numel, name, bp, 2);
}

/* Binding f, after the others: a flag per element, which the kernel writes and the host reads
 * back (the kind's gpu_finish). */
static void launch_flags(struct tgrad_launch *launch, int64_t numel) {
    launch->buffer_elements[launch->buffer_count] = (uint64_t)numel;
    snprintf(launch->buffer_names[launch->buffer_count++], 8, "f");
}

tgrad_status tg_gen_render_copy(const tg_lang *l, const tg_view *src, int32_t elem_bytes, tg_text *t,
                                struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_COPY);
    int64_t numel, hi;
    gather_launch(r, src, "src", launch, &numel, &hi);

    char key[TGRAD_MAX_DIMS * 48 + 64], dims[TGRAD_MAX_DIMS * 24 + 8] = "", src_idx[TGRAD_MAX_DIMS * 48 + 32];
    /* bf16 elements move as ushort, float32 and int32 ones as uint: bits, never values */
    const char *type = elem_bytes == 4 ? "uint" : "ushort";
    snprintf(key, sizeof key, "copy;%soff=%" PRId64, elem_bytes == 4 ? "uint;" : "", src->offset);
    view_key(src, key, sizeof key, dims, sizeof dims);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_copy_%" PRId64 "_%08" PRIx32, numel, h);
    tg_view_index(src_idx, sizeof src_idx, src, coord);

    emitter em = { t, l, tg_fits_int(hi) && tg_fits_int(numel + r->tile_m) ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route copy, language %s). Do not edit.\n", l->name);
    E("// dst = the view [%s] of src (offset %" PRId64 ", strides", dims, src->offset);
    for (int32_t d = 0; d < src->ndim; d++) E("%s%" PRId64, d ? ", " : " ", src->strides[d]);
    E("), compact row-major, bit for bit%s.\n", elem_bytes == 4 ? " (4-byte elements: float32 or int32)" : "");
    E("// Launch: grid (%u, %u, %u) x threadgroup (%u, %u, %u); buffers src, dst.\n", launch->grid[0],
      launch->grid[1], launch->grid[2], launch->threadgroup[0], launch->threadgroup[1], launch->threadgroup[2]);
    char b0[64], b1[64];
    tg_buffer_param_typed(b0, sizeof b0, l->global_in, type, "src");
    tg_buffer_param_typed(b1, sizeof b1, l->global_out, type, "dst");
    const char *bp[2] = { b0, b1 };
    emit_gather_head(e, r, src, numel, launch->kernel_name, bp);
    E("    dst[i] = src[%s];\n", src_idx);
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}

tgrad_status tg_gen_check_elementwise(const tg_lang *l, const tg_gen_elementwise *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_ELEMENTWISE);
    int64_t numel, lo, hi;
    if (tg_view_numel(&p->first, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (tg_ceil_div(numel, r->tile_m) > UINT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements need more than 2^32-1 threadgroups", numel, 0, 0);
    if (numel > 0 && (!tg_span_view(&p->first, &lo, &hi) || lo < 0))
        return tg_not_eligible(r->name, l->name, "the first operand's view reaches outside its buffer", 0, 0, 0);
    if (p->chain.n < 1) return tg_not_eligible(r->name, l->name, "a chain without ops", 0, 0, 0);
    return tg_gen_check_chain(r->name, l, &p->chain);
}

tgrad_status tg_gen_render_elementwise(const tg_lang *l, const tg_gen_elementwise *p, tg_text *t,
                                       struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_ELEMENTWISE);
    const tg_view *x = &p->first;
    int64_t numel, hi;
    gather_launch(r, x, "x", launch, &numel, &hi);
    tg_gen_chain_launch(&p->chain, launch);
    const bool flags = tg_gen_chain_flags(&p->chain); /* binding f, last: a flag per element */
    if (flags) launch_flags(launch, numel);

    const bool f32 = p->chain.f32;
    const char *et = f32 ? "uint" : "ushort";
    char key[4096], dims[TGRAD_MAX_DIMS * 24 + 8] = "", x_idx[TGRAD_MAX_DIMS * 48 + 32];
    snprintf(key, sizeof key, "elementwise%s;off=%" PRId64, f32 ? "_f32" : "", x->offset);
    view_key(x, key, sizeof key, dims, sizeof dims);
    tg_gen_chain_key(&p->chain, key, sizeof key);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    /* a binary64 op's kernel is named for it too (tgrad_elementwise_f32_sin_...) */
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_elementwise%s%s%s_%" PRId64 "_%08" PRIx32,
             f32 ? "_f32" : "", flags ? "_" : "", flags ? tgrad_op_name(p->chain.ops[0].op) : "", numel, h);
    tg_view_index(x_idx, sizeof x_idx, x, coord);

    bool small = tg_fits_int(hi) && tg_fits_int(numel + r->tile_m) && tg_fits_int(tg_gen_chain_reach(&p->chain));
    emitter em = { t, l, small ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route elementwise, language %s). Do not edit.\n", l->name);
    E("// c[%s] (compact row-major) = x, then", dims);
    for (int32_t i = 0; i < p->chain.n; i++) E("%s %s", i ? "," : "", tgrad_op_name(p->chain.ops[i].op));
    E("\n// x is read through its view (offset %" PRId64 ", strides", x->offset);
    for (int32_t d = 0; d < x->ndim; d++) E("%s%" PRId64, d ? ", " : " ", x->strides[d]);
    if (flags)
        E(");\n// float32 bits; the op in binary64 (kernels/gpu/transcendental_f32.h), written where its bound\n"
          "// decides the rounding; f[i] = 1 where it does not (the host reruns element i with the CPU's code).\n");
    else if (f32)
        E(");\n// float32 bits; every op rounds to float32 as alone (kernels/gpu/elementwise_f32.h, integer\n"
          "// arithmetic), the CPU's bytes.\n");
    else
        E("); every op rounds to bf16 as alone (kernels/gpu/elementwise.h, integer arithmetic;\n"
          "// t<i>: 65,536-entry tables), the CPU's bytes.\n");
    E("// Launch: grid (%u, %u, %u) x threadgroup (%u, %u, %u); buffers", launch->grid[0], launch->grid[1],
      launch->grid[2], launch->threadgroup[0], launch->threadgroup[1], launch->threadgroup[2]);
    for (uint32_t i = 0; i < launch->buffer_count; i++) E("%s %s", i ? "," : "", launch->buffer_names[i]);
    E(".\n");
    if (*l->preamble) E("%s", l->preamble);
    E("\n");
    tg_gen_emit_prelude(e, &p->chain);
    char b0[64], b1[64], extra[TG_GEN_MAX_BINDINGS][64];
    tg_buffer_param_typed(b0, sizeof b0, l->global_in, et, "x");
    tg_buffer_param_typed(b1, sizeof b1, l->global_out, et, "c");
    const char *bp[3 + TG_GEN_MAX_BINDINGS] = { b0, b1 };
    int nb = 2;
    tg_gen_emit_chain_params(e, &p->chain, extra, bp, &nb);
    char bf[64];
    if (flags) tg_buffer_param_typed(bf, sizeof bf, l->global_out, "uint", "f"), bp[nb++] = bf;
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, nb, used);
    E("    const %s i = gx * %d + li;\n", e->it, r->tile_m);
    E("    if (i >= %" PRId64 ")\n        return;\n", numel);
    bool needed[TGRAD_MAX_DIMS] = { false };
    mark_needed(x, needed);
    for (int32_t k = 0; k < p->chain.n; k++)
        if (tgrad_op_arity(p->chain.ops[k].op) == 2) mark_needed(&p->chain.ops[k].operand, needed);
    emit_coords(e, x->ndim, x->shape, needed);
    E("    %s v = x[%s];\n", et, x_idx);
    if (flags) E("    uint undecided = 0u;\n");
    tg_gen_emit_chain(e, &p->chain, "    ", coord);
    E("    c[i] = v;\n");
    if (flags) E("    f[i] = undecided;\n");
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}

/* ---- the cast route: one element per thread, by integer operations: bfloat16 <-> float32, int32
 * -> float32 or bfloat16 (every int32 has a rounding), and either to int32 (a NaN or an
 * out-of-range value is flagged, and the host fails the cast) ---- */
static bool is_float(int32_t d) { return d == TGRAD_DTYPE_BF16 || d == TGRAD_DTYPE_F32; }

static bool cast_renders(int32_t from, int32_t to) {
    return (is_float(from) && is_float(to) && from != to) || (from == TGRAD_DTYPE_I32 && is_float(to)) ||
           (is_float(from) && to == TGRAD_DTYPE_I32);
}

tgrad_status tg_gen_check_cast(const tg_lang *l, const tg_view *src, int32_t from, int32_t to) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_CAST);
    int64_t numel, lo, hi;
    if (!cast_renders(from, to))
        return tg_not_eligible(r->name, l->name, "dtypes %lld -> %lld (bfloat16 <-> float32, int32 <-> either)",
                               from, to, 0);
    if (tg_view_numel(src, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (tg_ceil_div(numel, r->tile_m) > UINT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements need more than 2^32-1 threadgroups", numel, 0, 0);
    if (numel > 0 && (!tg_span_view(src, &lo, &hi) || lo < 0))
        return tg_not_eligible(r->name, l->name, "the view reaches outside its buffer", 0, 0, 0);
    return TGRAD_OK;
}

/* c[i] = the int32 x[idx] rounded once to nearest even with `frac` fraction bits (23: float32,
 * 7: bf16): its magnitude m (2^31 for INT_MIN) and highest set bit p by binary search; q = m's top
 * frac + 1 bits, rounded by the bits shifted out (ties to even); the exponent (p + 127) and q
 * - 2^frac added, so a q that rounded up to 2^(frac + 1) carries into the exponent, exactly. No
 * name a language reserves (OpenCL C's `half`). */
static void emit_int_to_float(const emitter *e, const char *src_idx, int frac) {
    const char *out = frac == 23 ? "uint" : "ushort";
    E("    const uint u = x[%s];\n", src_idx);
    E("    const uint s = u >> 31;\n");
    E("    const uint m = s != 0u ? 0u - u : u;\n");
    E("    uint n = m, p = 0u;\n");
    E("    if (n >= 0x10000u) { n >>= 16; p += 16u; }\n");
    E("    if (n >= 0x100u) { n >>= 8; p += 8u; }\n");
    E("    if (n >= 0x10u) { n >>= 4; p += 4u; }\n");
    E("    if (n >= 4u) { n >>= 2; p += 2u; }\n");
    E("    if (n >= 2u) { p += 1u; }\n");
    E("    uint q = p <= %du ? m << (%du - p) : m >> (p - %du);\n", frac, frac, frac);
    E("    if (p > %du) {\n", frac);
    E("        const uint lost = m & ((1u << (p - %du)) - 1u), tie = 1u << (p - %du - 1u);\n", frac, frac);
    E("        q += (lost > tie || (lost == tie && (q & 1u) != 0u)) ? 1u : 0u;\n");
    E("    }\n");
    E("    c[i] = m == 0u ? (%s)0u : (%s)((s << %d) | (((p + 127u) << %d) + (q - (1u << %d))));\n", out, out,
      frac + 8, frac, frac);
}

/* c[i] = the float x[idx] (bf16 bits widened) truncated toward zero to int32 (two's complement
 * bits), in integers: the magnitude's significand shifted by its exponent; f[i] = 1 for a NaN or
 * a value outside the int32 range (-2^31 itself is in it), whose cast fails on the host with the
 * CPU's error (tg_cast_flagged). The shift is clamped so that no count reaches 32. */
static void emit_float_to_int(const emitter *e, const char *src_idx, bool from_bf16) {
    if (from_bf16) E("    const uint u = (uint)x[%s] << 16;\n", src_idx);
    else E("    const uint u = x[%s];\n", src_idx);
    E("    const uint a = u & 0x7fffffffu, m = (a & 0x7fffffu) | 0x800000u;\n");
    E("    const int ex = (int)(a >> 23) - 127, sh = ex > 31 ? 31 : ex;\n");
    E("    const uint mag = ex < 0 ? 0u : (sh >= 23 ? m << (uint)(sh - 23) : m >> (uint)(23 - sh));\n");
    E("    c[i] = (u >> 31) != 0u ? 0u - mag : mag;\n");
    E("    f[i] = (a > 0x7f800000u || (ex >= 31 && u != 0xcf000000u)) ? 1u : 0u; // NaN, or outside [-2^31, 2^31)\n");
}

tgrad_status tg_gen_render_cast(const tg_lang *l, const tg_view *src, int32_t from, int32_t to, tg_text *t,
                                struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_CAST);
    int64_t numel, hi;
    gather_launch(r, src, "x", launch, &numel, &hi);
    const bool widen = from == TGRAD_DTYPE_BF16, from_int = from == TGRAD_DTYPE_I32, to_f32 = to == TGRAD_DTYPE_F32;
    const bool to_int = to == TGRAD_DTYPE_I32; /* binding f, last: a flag per element (tg_cast_flagged) */
    if (to_int) launch_flags(launch, numel);
    char key[TGRAD_MAX_DIMS * 48 + 64], dims[TGRAD_MAX_DIMS * 24 + 8] = "", src_idx[TGRAD_MAX_DIMS * 48 + 32];
    snprintf(key, sizeof key, "cast;%d;%d;off=%" PRId64, (int)from, (int)to, src->offset);
    view_key(src, key, sizeof key, dims, sizeof dims);
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_cast_%s%s_%" PRId64 "_%08" PRIx32,
             from_int ? "i32_" : (to_int ? (widen ? "bf16_" : "f32_") : ""), to_int ? "i32" : (to_f32 ? "f32" : "bf16"),
             numel, h);
    tg_view_index(src_idx, sizeof src_idx, src, coord);

    emitter em = { t, l, tg_fits_int(hi) && tg_fits_int(numel + r->tile_m) ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route cast, language %s). Do not edit.\n", l->name);
    E("// c[%s] (%s, compact row-major) = x (%s, offset %" PRId64 ", strides", dims, tg_dtype_name(to),
      tg_dtype_name(from), src->offset);
    for (int32_t d = 0; d < src->ndim; d++) E("%s%" PRId64, d ? ", " : " ", src->strides[d]);
    E(")\n// %s\n", from_int ? "int32 -> float: the integer rounded once to nearest even (integers only)."
                     : to_int ? "float -> int32: truncated toward zero (integers only); f[i] = 1 where it has none."
                     : widen  ? "bf16 -> float32: exact (the bits shifted up)."
                              : "float32 -> bf16: round to nearest even, any NaN made 0x7fc0 (integers only).");
    E("// Launch: grid (%u, %u, %u) x threadgroup (%u, %u, %u); buffers x, c%s.\n", launch->grid[0], launch->grid[1],
      launch->grid[2], launch->threadgroup[0], launch->threadgroup[1], launch->threadgroup[2], to_int ? ", f" : "");
    char b0[64], b1[64], b2[64];
    snprintf(b0, sizeof b0, "%s%s%s *x", l->global_in, *l->global_in ? " " : "", widen ? "ushort" : "uint");
    snprintf(b1, sizeof b1, "%s%s%s *c", l->global_out, *l->global_out ? " " : "", to_f32 || to_int ? "uint" : "ushort");
    tg_buffer_param_typed(b2, sizeof b2, l->global_out, "uint", "f");
    const char *bp[3] = { b0, b1, b2 };
    emit_gather_head_n(e, r, src, numel, launch->kernel_name, bp, to_int ? 3 : 2);
    if (to_int) {
        emit_float_to_int(e, src_idx, widen);
    } else if (from_int) {
        emit_int_to_float(e, src_idx, to_f32 ? 23 : 7);
    } else if (widen) {
        E("    c[i] = (uint)x[%s] << 16;\n", src_idx);
    } else {
        E("    const uint u = x[%s];\n", src_idx);
        E("    c[i] = (u & 0x7fffffffu) > 0x7f800000u ? (ushort)0x7fc0u : (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n");
    }
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
