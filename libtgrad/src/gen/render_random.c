/* The random route: the counter-based generator (docs/random.md) as a kernel, one element per
 * thread, with the CPU's bytes for the same (seed, offset). Element i's words are Philox-4x32-10
 * of its call's counter under the seed (kernels/gpu/philox.h, pasted as it is: integer arithmetic
 * only), mapped by integer arithmetic:
 *  - uniform on [0, 1) ("rand"): k 2^-b exactly (tg_philox_unit_bf16 / _f32);
 *  - uniform(low, high) in bfloat16: k = the word's top 8 bits picks one of 256 values, each the
 *    exact low + (high - low) k 2^-8 rounded once, computed on the host by the CPU executor's own
 *    function (tg_random_uniform_bits) and written into the kernel as a constant table;
 *  - randint: low + floor(x n / 2^64) (tg_philox_below);
 *  - normal: one thread per Philox call (four values, two Box-Muller pairs) in binary64
 *    (kernels/gpu/normal.h; native in OpenCL C and CUDA, kernels/gpu/softdouble.h and softmath.h
 *    in MSL), each value decided within the CPU's window; a call with an undecided value is
 *    flagged and drawn again on the host by the CPU's code (tg_random_calls_on_host);
 *  - uniform(low, high) in float32 (2^24 values: too many for a table): the same kernel of calls,
 *    each value low + (high - low) k 2^-24 in binary64 decided within the CPU's window
 *    (kernels/gpu/uniform.h), a call with an undecided value drawn again on the host. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "kinds.h"
#include "routes.h"

static bool unit_interval(const tg_gen_random *p) { return p->p0 == 0 && p->p1 == 1; }

tgrad_status tg_gen_random_renders(int32_t lang, int32_t dist, int32_t dtype, double p0, double p1) {
    const tg_lang *l = tg_lang_find(lang);
    const tg_gen_random p = { .dist = dist, .dtype = dtype, .p0 = p0, .p1 = p1 };
    if (tg_gen_random_flagged(&p) && !(l && l->f64))
        return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE,
                       "%s: %s kernels do not draw these values (they are decided in binary64, which %s lacks; "
                       "docs/random.md): draw on the CPU and move it", tgrad_random_name(dist),
                       l ? l->name : "this device's", l ? l->name : "its language");
    return TGRAD_OK;
}

tgrad_status tg_gen_check_random(const tg_lang *l, const tg_gen_random *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_RANDOM);
    tgrad_status s = tg_gen_random_renders(l->id, p->dist, p->dtype, p->p0, p->p1);
    if (s) return s;
    if (p->dist != TGRAD_RANDOM_UNIFORM && p->dist != TGRAD_RANDOM_RANDINT && p->dist != TGRAD_RANDOM_NORMAL)
        return tg_not_eligible(r->name, l->name, "distribution %lld", p->dist, 0, 0);
    if (tg_ceil_div(p->numel, r->tile_m) > INT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld elements need more than 2^31-1 threadgroups", p->numel, 0, 0);
    return TGRAD_OK;
}

void tg_gen_random_words(const tg_gen_random *p, uint32_t words[4]) {
    words[0] = (uint32_t)p->offset, words[1] = (uint32_t)(p->offset >> 32);
    words[2] = (uint32_t)p->seed, words[3] = (uint32_t)(p->seed >> 32);
}

/* A 64-bit constant in every language: two 32-bit halves. */
static void u64_const(char *dst, size_t cap, uint64_t v) {
    if (v >> 32) snprintf(dst, cap, "((tg_u64)0x%08" PRIx32 "u << 32 | (tg_u64)0x%08" PRIx32 "u)", (uint32_t)(v >> 32), (uint32_t)v);
    else snprintf(dst, cap, "(tg_u64)0x%08" PRIx32 "u", (uint32_t)v);
}

/* A kernel of calls' threads (one Philox call each) and flags: the most calls numel values touch. */
static int64_t normal_calls(int64_t numel) { return numel > 0 ? (numel + 6) / 4 : 0; }

bool tg_gen_random_flagged(const tg_gen_random *p) {
    return p->dist == TGRAD_RANDOM_NORMAL ||
           (p->dist == TGRAD_RANDOM_UNIFORM && p->dtype == TGRAD_DTYPE_F32 && !unit_interval(p));
}

/* normal and float32 uniform(low, high), the draws decided in binary64: thread t draws Philox call
 * offset / 4 + t (mod 2^62: the calls of 2^64 elements), its values of the draw (elements
 * (4 call + j - offset) mod 2^64 below numel), and writes f[t]. The grid covers the most calls
 * numel values can touch (one more when the offset starts mid-call). */
static tgrad_status render_calls(const tg_lang *l, const tg_gen_random *p, tg_text *t, struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_RANDOM);
    const bool bf16 = p->dtype == TGRAD_DTYPE_BF16, normal = p->dist == TGRAD_RANDOM_NORMAL;
    const int64_t calls = normal_calls(p->numel);
    memset(launch, 0, sizeof *launch);
    tg_launch_1d(r, calls, launch);
    launch->buffer_count = 3;
    launch->buffer_elements[0] = (uint64_t)p->numel;
    launch->buffer_elements[1] = 4;
    launch->buffer_elements[2] = (uint64_t)calls;
    snprintf(launch->buffer_names[0], 8, "c");
    snprintf(launch->buffer_names[1], 8, "q");
    snprintf(launch->buffer_names[2], 8, "f");
    char key[256];
    snprintf(key, sizeof key, "%d;%d;%a;%a;%" PRId64, (int)p->dist, (int)p->dtype, p->p0, p->p1, p->numel);
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_random_%s_%s_%" PRId64 "_%08" PRIx32,
             normal ? "normal" : "uniform", bf16 ? "bf16" : "f32", p->numel, (uint32_t)tg_fnv1a64(key, strlen(key)));

    emitter em = { t, l, "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route random, language %s). Do not edit.\n", l->name);
    E("// %s(%.17g, %.17g) draw of %" PRId64 " %s values (docs/random.md): thread t draws Philox-4x32-10 call\n"
      "// offset / 4 + t, counter (call mod 2^32, call / 2^32, %d, 0), key = seed (offset and seed are the launch's, in\n"
      "// q: offset low, high, seed low, high), %s in binary64\n"
      "// (%s), each value decided within the CPU's window or its call flagged: f[t] = 1, and the\n"
      "// host draws the call again with the CPU's code.\n",
      normal ? "normal" : "uniform", p->p0, p->p1, p->numel, tg_dtype_name(p->dtype), (int)p->dist,
      normal ? "its words (0, 1) and (2, 3) two Box-Muller pairs" : "each word low + (high - low) k 2^-24",
      normal ? "kernels/gpu/normal.h" : "kernels/gpu/uniform.h");
    tg_emit_launch_line(e, launch);
    tg_emit_double_head(e);
    tg_gen_emit_text(e, tg_gen_philox_prelude);
    tg_gen_emit_text(e, tg_gen_softmax_prelude); /* tg_sm_round */
    tg_gen_emit_text(e, normal ? tg_gen_normal_prelude : tg_gen_uniform_prelude);
    char b0[64], b1[64], b2[64];
    snprintf(b0, sizeof b0, "%s%s%s *c", l->global_out, *l->global_out ? " " : "", bf16 ? "ushort" : "uint");
    snprintf(b1, sizeof b1, "%s%suint *q", l->global_in, *l->global_in ? " " : "");
    snprintf(b2, sizeof b2, "%s%suint *f", l->global_out, *l->global_out ? " " : "");
    const char *bp[3] = { b0, b1, b2 };
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, 3, used);
    char num[80], ncalls[80];
    u64_const(num, sizeof num, (uint64_t)p->numel);
    u64_const(ncalls, sizeof ncalls, (uint64_t)calls);
    E("    const tg_u64 t = (tg_u64)gx * %uu + (tg_u64)li;\n", (unsigned)r->tile_m);
    E("    if (t >= %s)\n        return;\n", ncalls);
    E("    const tg_u64 off = (tg_u64)q[1] << 32 | (tg_u64)q[0];\n");
    E("    const tg_u64 call = ((off >> 2) + t) & (~(tg_u64)0 >> 2);\n");
    E("    const tg_philox_words w = tg_philox4x32_10((uint)call, (uint)(call >> 32), %du, 0u, q[2], q[3]);\n",
      (int)p->dist);
    E("    uint flag = 0u;\n");
    E("    for (uint j = 0u; j < 4u; j++) {\n");
    E("        const tg_u64 i = (call << 2 | (tg_u64)j) - off; // the value's element (mod 2^64)\n");
    E("        if (i >= %s)\n            continue;\n", num);
    if (normal)
        E("        const tg_u64 v = tg_normal_value(w.w[j & 2u], w.w[(j & 2u) + 1u], j & 1u, %s, %s, %du);\n", DK(p->p0),
          DK(p->p1), bf16 ? 1 : 0);
    else
        E("        const tg_u64 v = tg_uniform_value(w.w[j], %s, %s);\n", DK(p->p0), DK(p->p1));
    E("        flag |= (uint)(v >> 32);\n");
    E("        c[i] = (%s)v;\n", bf16 ? "ushort" : "uint");
    E("    }\n");
    E("    f[t] = flag;\n");
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}

tgrad_status tg_gen_render_random(const tg_lang *l, const tg_gen_random *p, tg_text *t, struct tgrad_launch *launch) {
    if (tg_gen_random_flagged(p)) return render_calls(l, p, t, launch);
    const tg_route *r = tg_route_find(TGRAD_ROUTE_RANDOM);
    const bool bf16 = p->dtype == TGRAD_DTYPE_BF16, table = p->dist == TGRAD_RANDOM_UNIFORM && !unit_interval(p);
    const int32_t per = p->dist == TGRAD_RANDOM_RANDINT ? 2 : 4; /* elements per Philox call */
    const char *et = bf16 ? "ushort" : "uint";                     /* int32 results as their bits */
    memset(launch, 0, sizeof *launch);
    tg_launch_1d(r, p->numel, launch);
    launch->buffer_count = 2;
    launch->buffer_elements[0] = (uint64_t)p->numel;
    launch->buffer_elements[1] = 4;
    snprintf(launch->buffer_names[0], 8, "c");
    snprintf(launch->buffer_names[1], 8, "q");
    char key[256]; /* the seed and offset are the launch's (q), not the text's */
    snprintf(key, sizeof key, "%d;%d;%a;%a;%" PRId64, (int)p->dist, (int)p->dtype, p->p0, p->p1, p->numel);
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_random_%s_%s_%" PRId64 "_%08" PRIx32,
             tgrad_random_name(p->dist), bf16 ? "bf16" : p->dtype == TGRAD_DTYPE_F32 ? "f32" : "i32", p->numel,
             (uint32_t)tg_fnv1a64(key, strlen(key)));

    emitter em = { t, l, p->numel + r->tile_m <= INT32_MAX ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route random, language %s). Do not edit.\n", l->name);
    E("// %s draw of %" PRId64 " %s values (docs/random.md): element i is Philox-4x32-10 call (offset + i) / %d's\n"
      "// word(s), counter (call mod 2^32, call / 2^32, %d, 0), key = seed; offset and seed are the launch's, in q\n"
      "// (words: offset low, high, seed low, high), so draws of this shape share the compiled kernel;\n",
      tgrad_random_name(p->dist), p->numel, tg_dtype_name(p->dtype), per, (int)p->dist);
    if (p->dist == TGRAD_RANDOM_RANDINT)
        E("// randint(%.17g, %.17g): low + floor(x n / 2^64), x the words' 64 bits (integers only).\n", p->p0, p->p1);
    else if (table)
        E("// uniform(%.17g, %.17g): the word's top 8 bits pick one of the 256 values of tg_uniform_table, each the\n"
          "// exact low + (high - low) k 2^-8 rounded once (computed on the host by the CPU's function).\n", p->p0, p->p1);
    else
        E("// uniform on [0, 1): k 2^-%d exactly, k the word's top %d bits.\n", bf16 ? 8 : 24, bf16 ? 8 : 24);
    E("// Launch: grid (%u, %u, %u) x threadgroup (%u, %u, %u); buffers c, q.\n", launch->grid[0], launch->grid[1],
      launch->grid[2], launch->threadgroup[0], launch->threadgroup[1], launch->threadgroup[2]);
    if (*l->preamble) E("%s", l->preamble);
    E("\ntypedef %s tg_u64;\n", l->u64);
    tg_gen_emit_text(e, tg_gen_philox_prelude);
    if (table) {
        E("%s ushort tg_uniform_table[256] = {", l->constant_decl);
        for (uint32_t k = 0; k < 256; k++)
            E("%s0x%04" PRIx32 "u", k % 8 ? ", " : k ? ",\n    " : "\n    ",
              tg_random_uniform_bits(p->p0, p->p1, k, p->dtype));
        E("\n};\n\n");
    }
    char b0[64], b1[64];
    snprintf(b0, sizeof b0, "%s%s%s *c", l->global_out, *l->global_out ? " " : "", et);
    snprintf(b1, sizeof b1, "%s%suint *q", l->global_in, *l->global_in ? " " : "");
    const char *bp[2] = { b0, b1 };
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, 2, used);
    char num[80];
    u64_const(num, sizeof num, (uint64_t)p->numel);
    E("    const tg_u64 i = (tg_u64)gx * %uu + (tg_u64)li;\n", (unsigned)r->tile_m);
    E("    if (i >= %s)\n        return;\n", num);
    E("    const tg_u64 g = ((tg_u64)q[1] << 32 | (tg_u64)q[0]) + i; // the element's index in the stream (mod 2^64)\n");
    E("    const tg_u64 call = g / %du;\n", per);
    E("    const uint j = (uint)(g %% %du);\n", per);
    E("    const tg_philox_words w = tg_philox4x32_10((uint)call, (uint)(call >> 32), %du, 0u, q[2], q[3]);\n",
      (int)p->dist);
    if (p->dist == TGRAD_RANDOM_RANDINT) {
        uint32_t n = (uint32_t)(p->p1 - p->p0), low = (uint32_t)(int32_t)p->p0;
        E("    const uint lo = j == 0u ? w.w[0] : w.w[2];\n");
        E("    const uint hi = j == 0u ? w.w[1] : w.w[3];\n");
        E("    c[i] = 0x%08" PRIx32 "u + tg_philox_below(lo, hi, 0x%08" PRIx32 "u); // low + ..., as int32 bits\n", low, n);
    } else {
        E("    const uint word = j == 0u ? w.w[0] : j == 1u ? w.w[1] : j == 2u ? w.w[2] : w.w[3];\n");
        if (table) E("    c[i] = tg_uniform_table[word >> 24];\n");
        else if (bf16) E("    c[i] = (ushort)tg_philox_unit_bf16(word);\n");
        else E("    c[i] = tg_philox_unit_f32(word);\n");
    }
    E("}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
