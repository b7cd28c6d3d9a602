/* The compare and where routes: one output element per thread over operands already broadcast to
 * the output's shape (ops/compare.c), read through their views.
 *
 * compare: the CPU compares exact values (every bf16, f32, i32 and bool value is exact in double,
 * and double's comparison is IEEE 754's). The kernel compares the same values without a float
 * instruction, so no device's flushing of subnormals or compare quirk can change a byte: each
 * operand becomes the bits of its double (exponent and fraction, a 63-bit magnitude, by integer
 * shifts), then a 64-bit key monotone in the value: 2^63 for both zeros, 2^63 + magnitude above,
 * 2^63 - magnitude below, and 0 for NaN (which no number takes). Keys order as the values do, in
 * any pair of dtypes; a NaN satisfies only `ne`. A bool byte counts as its unsigned value, as on
 * the CPU. where: the condition byte non-zero picks a, else b, copied as integers of their size. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

static const char *const cmp_names[] = { "compare", "eq", "ne", "lt", "le", "gt", "ge" };
static const char *const cmp_ops[] = { "", "==", "!=", "<", "<=", ">", ">=" };

static bool is_compare(const tg_gen_pointwise *p) { return p->cmp != 0; }

tgrad_status tg_gen_check_pointwise(const tg_lang *l, const tg_gen_pointwise *p) {
    const tg_route *r = tg_route_find(is_compare(p) ? TGRAD_ROUTE_COMPARE : TGRAD_ROUTE_WHERE);
    int64_t numel, lo, hi;
    if (p->cmp < 0 || p->cmp > TGRAD_COMPARE_GE || p->n != (is_compare(p) ? 2 : 3))
        return tg_not_eligible(r->name, l->name, "comparison %lld of %lld operands", p->cmp, p->n, 0);
    if (tg_view_numel(&p->out, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (tg_ceil_div(numel, r->tile_m) > UINT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements need more than 2^32-1 threadgroups", numel, 0, 0);
    for (int32_t j = 0; j < p->n; j++) {
        int32_t d = p->dtype[j];
        bool ok = d == TGRAD_DTYPE_BF16 || d == TGRAD_DTYPE_F32 || d == TGRAD_DTYPE_I32 || d == TGRAD_DTYPE_BOOL;
        if (!ok || (!is_compare(p) && j == 0 && d != TGRAD_DTYPE_BOOL) || (!is_compare(p) && j == 2 && d != p->dtype[1]))
            return tg_not_eligible(r->name, l->name, "operand %lld's dtype %lld", j, d, 0);
        if (p->in[j].ndim != p->out.ndim) return tg_not_eligible(r->name, l->name, "operand %lld is not broadcast", j, 0, 0);
        if (numel > 0 && (!tg_span_view(&p->in[j], &lo, &hi) || lo < 0))
            return tg_not_eligible(r->name, l->name, "operand %lld's view reaches outside its buffer", j, 0, 0);
    }
    return TGRAD_OK;
}

/* The key functions: tg_key_of(sign, magnitude); tg_key_f32(bits) for bf16 (bits << 16) and
 * float32; tg_key_int(bits) for int32 and bool (its byte). */
static void emit_keys(const emitter *e) {
    const char *fp = e->l->function_prefix;
    E("typedef %s tg_u64;\n", e->l->u64);
    E("%s tg_u64 tg_key_of(uint s, tg_u64 mag)\n{\n", fp);
    E("    const tg_u64 mid = (tg_u64)1u << 63;\n");
    E("    return mag == (tg_u64)0u ? mid : s != 0u ? mid - mag : mid + mag;\n}\n");
    E("%s tg_u64 tg_key_f32(uint u)\n{\n", fp);
    E("    const uint ex = (u >> 23) & 0xffu, m = u & 0x7fffffu;\n");
    E("    const tg_u64 frac = ((tg_u64)1u << 52) - (tg_u64)1u;\n");
    E("    tg_u64 mag = (tg_u64)0u;\n");
    E("    if (ex == 0xffu) {\n        if (m != 0u)\n            return (tg_u64)0u; // NaN\n");
    E("        mag = (tg_u64)2047u << 52;\n");
    E("    } else if (ex != 0u) {\n        mag = ((tg_u64)(ex + 896u) << 52) | ((tg_u64)m << 29);\n");
    E("    } else if (m != 0u) { // a subnormal float32 is a normal double\n");
    E("        const uint top = 31u - clz(m);\n");
    E("        mag = ((tg_u64)(top + 874u) << 52) | (((tg_u64)m << (52u - top)) & frac);\n    }\n");
    E("    return tg_key_of(u >> 31, mag);\n}\n");
    E("%s tg_u64 tg_key_int(uint x)\n{\n", fp);
    E("    const uint s = x >> 31, a = s != 0u ? 0u - x : x;\n");
    E("    if (a == 0u)\n        return tg_key_of(0u, (tg_u64)0u);\n");
    E("    const uint top = 31u - clz(a);\n");
    E("    const tg_u64 frac = ((tg_u64)1u << 52) - (tg_u64)1u;\n");
    E("    return tg_key_of(s, ((tg_u64)(top + 1023u) << 52) | (((tg_u64)a << (52u - top)) & frac));\n}\n");
}

static const char *key_call(int32_t dtype) {
    switch (dtype) {
    case TGRAD_DTYPE_BF16: return "tg_key_f32((uint)%s << 16)";
    case TGRAD_DTYPE_F32: return "tg_key_f32(%s)";
    default: return "tg_key_int((uint)%s)"; /* int32 bits, or a bool byte */
    }
}

tgrad_status tg_gen_render_pointwise(const tg_lang *l, const tg_gen_pointwise *p, tg_text *t,
                                     struct tgrad_launch *launch) {
    const bool cmp = is_compare(p);
    const tg_route *r = tg_route_find(cmp ? TGRAD_ROUTE_COMPARE : TGRAD_ROUTE_WHERE);
    int64_t numel = 0, reach = 0;
    tg_view_numel(&p->out, &numel);
    memset(launch, 0, sizeof *launch);
    launch->buffer_count = (uint32_t)p->n + 1;
    char key[4096];
    snprintf(key, sizeof key, "%s", cmp_names[p->cmp]);
    for (int32_t j = 0; j < p->n; j++) {
        int64_t lo = 0, hi = -1;
        if (numel > 0) tg_span_view(&p->in[j], &lo, &hi);
        if (hi > reach) reach = hi;
        launch->buffer_elements[j] = (uint64_t)(hi + 1);
        snprintf(launch->buffer_names[j], 8, "%s", cmp ? (j ? "b" : "a") : (const char *[]){ "cond", "a", "b" }[j]);
        size_t n = strlen(key);
        n += (size_t)snprintf(key + n, sizeof key - n, ";%d;off=%" PRId64, (int)p->dtype[j], p->in[j].offset);
        for (int32_t d = 0; d < p->in[j].ndim && n < sizeof key; d++)
            n += (size_t)snprintf(key + n, sizeof key - n, ";%" PRId64 ":%" PRId64, p->in[j].shape[d], p->in[j].strides[d]);
    }
    launch->buffer_elements[p->n] = (uint64_t)numel;
    snprintf(launch->buffer_names[p->n], 8, "c");
    launch->grid[0] = (uint32_t)tg_ceil_div(numel, r->tile_m);
    launch->grid[1] = launch->grid[2] = 1;
    launch->threadgroup[0] = (uint32_t)r->threads_x;
    launch->threadgroup[1] = launch->threadgroup[2] = 1;
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_%s%s_%" PRId64 "_%08" PRIx32, cmp ? "compare_" : "where",
             cmp ? cmp_names[p->cmp] : "", numel, h);

    emitter em = { t, l, tg_fits_int(reach) && tg_fits_int(numel + r->tile_m) ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route %s, language %s). Do not edit.\n", r->name, l->name);
    E("// c[");
    for (int32_t d = 0; d < p->out.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->out.shape[d]);
    if (cmp)
        E("] (bool, compact row-major) = a %s b, exact: a %s, b %s, compared as 64-bit keys of their exact values "
          "(integers only; NaN: only ne holds)\n", cmp_ops[p->cmp], tg_dtype_name(p->dtype[0]), tg_dtype_name(p->dtype[1]));
    else
        E("] (%s, compact row-major) = cond != 0 ? a : b, bit for bit\n", tg_dtype_name(p->dtype[1]));
    for (int32_t j = 0; j < p->n; j++) {
        E("// %s (%s) read through its view (offset %" PRId64 ", strides", launch->buffer_names[j],
          tg_dtype_name(p->dtype[j]), p->in[j].offset);
        for (int32_t d = 0; d < p->in[j].ndim; d++) E("%s%" PRId64, d ? ", " : " ", p->in[j].strides[d]);
        E(")\n");
    }
    E("// Launch: grid (%u, %u, %u) x threadgroup (%u, %u, %u); buffers", launch->grid[0], launch->grid[1],
      launch->grid[2], launch->threadgroup[0], launch->threadgroup[1], launch->threadgroup[2]);
    for (uint32_t i = 0; i < launch->buffer_count; i++) E("%s %s", i ? "," : "", launch->buffer_names[i]);
    E(".\n");
    if (*l->preamble) E("%s", l->preamble);
    E("\n");
    if (cmp) emit_keys(e);
    char decl[4][80];
    const char *bp[4];
    for (int32_t j = 0; j <= p->n; j++) {
        const bool out = j == p->n;
        int32_t dt = out ? (cmp ? TGRAD_DTYPE_BOOL : p->dtype[1]) : p->dtype[j];
        snprintf(decl[j], sizeof decl[j], "%s%s%s *%s", out ? l->global_out : l->global_in,
                 *(out ? l->global_out : l->global_in) ? " " : "", tg_elem_type(l, tg_dtype_size(dt)),
                 launch->buffer_names[j]);
        bp[j] = decl[j];
    }
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, p->n + 1, used);
    E("    const %s i = gx * %d + li;\n", e->it, r->tile_m);
    E("    if (i >= %" PRId64 ")\n        return;\n", numel);
    bool needed[TGRAD_MAX_DIMS] = { false };
    for (int32_t j = 0; j < p->n; j++)
        for (int32_t d = 0; d < p->out.ndim; d++) needed[d] |= p->in[j].shape[d] > 1 && p->in[j].strides[d] != 0;
    tg_emit_out_coords(e, &p->out, needed);
    static const char *const coord[] = { "o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7" };
    char idx[3][TGRAD_MAX_DIMS * 48 + 32], read[3][1536];
    for (int32_t j = 0; j < p->n; j++) {
        tg_view_index(idx[j], sizeof idx[j], &p->in[j], coord);
        char elem[1400];
        snprintf(elem, sizeof elem, "%s[%s]", launch->buffer_names[j], idx[j]);
        snprintf(read[j], sizeof read[j], key_call(p->dtype[j]), elem);
    }
    if (cmp) {
        E("    const tg_u64 ka = %s;\n", read[0]);
        E("    const tg_u64 kb = %s;\n", read[1]);
        const char *b8 = tg_elem_type(l, 1);
        E("    c[i] = (ka == (tg_u64)0u || kb == (tg_u64)0u) ? (%s)%s : (%s)(ka %s kb ? 1 : 0);\n", b8,
          p->cmp == TGRAD_COMPARE_NE ? "1" : "0", b8, cmp_ops[p->cmp]);
    } else {
        E("    c[i] = cond[%s] != 0 ? a[%s] : b[%s];\n", idx[0], idx[1], idx[2]);
    }
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
