/* The softmax route's derivatives: softmax_backward(y, g) = y_i (g_i - sum_j g_j y_j) and
 * log_softmax_backward(z, g) = g_i - exp(z_i) sum_j g_j along one axis, one thread per row, in
 * binary64 (native in OpenCL C and CUDA, kernels/gpu/softdouble.h in MSL). Each row's thread does
 * what the CPU's rows do (ops/softmax_backward.c, softmax_row and log_row): the sum in the same
 * sequential order, the same bounds, kernels/gpu/softmax.h's exp and rounding; it writes each
 * element whose bound decides its rounding to a nonzero value (or a masked position's zero whose
 * sign the bound decides) and flags the row (f[r] = 1) when an element is left undecided, a sum
 * is not finite, or (log_softmax) an input z_i is not below 0. The host reruns the flagged rows
 * with the CPU's own row code (tg_softmax_backward_rows_on_host), so the bytes are the CPU's. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

static bool float_dtype(int32_t dt) { return dt == TGRAD_DTYPE_BF16 || dt == TGRAD_DTYPE_F32; }

tgrad_status tg_gen_check_softmax_backward(const tg_lang *l, const tg_gen_softmax_backward *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_SOFTMAX);
    tgrad_status s = tg_gen_need_double(l, r->name, "softmax");
    if (s) return s;
    if (p->op != TGRAD_SOFTMAX_SOFTMAX && p->op != TGRAD_SOFTMAX_LOG_SOFTMAX)
        return tg_not_eligible(r->name, l->name, "the backward of softmax op %lld", p->op, 0, 0);
    if (!float_dtype(p->y_dtype) || !float_dtype(p->g_dtype) || !float_dtype(p->out_dtype))
        return tg_not_eligible(r->name, l->name, "dtypes %lld, %lld -> %lld", p->y_dtype, p->g_dtype, p->out_dtype);
    if (p->y.ndim != p->g.ndim || (p->y.ndim > 0 && (p->axis < 0 || p->axis >= p->y.ndim)))
        return tg_not_eligible(r->name, l->name, "axis %lld of %lld and %lld dimensions", p->axis, p->y.ndim, p->g.ndim);
    for (int32_t d = 0; d < p->y.ndim; d++)
        if (p->y.shape[d] != p->g.shape[d]) return tg_not_eligible(r->name, l->name, "y and g differ in shape", 0, 0, 0);
    int64_t numel, lo, hi;
    if (tg_view_numel(&p->y, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    const tg_view *v[2] = { &p->y, &p->g };
    for (int32_t k = 0; k < 2 && numel > 0; k++)
        if (!tg_span_view(v[k], &lo, &hi) || lo < 0)
            return tg_not_eligible(r->name, l->name, "an input's view reaches outside its buffer", 0, 0, 0);
    int64_t n = p->y.ndim ? p->y.shape[p->axis] : 1, rows = n ? numel / n : 0;
    if (tg_ceil_div(rows, r->threads_x) > INT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld rows need more than 2^31-1 threadgroups", rows, 0, 0);
    return TGRAD_OK;
}

/* `<name> = <the row's first element of view v>`, from the row index r: the other axes,
 * innermost first. */
static void emit_row_offset(const emitter *e, const tg_view *v, int32_t axis, const char *name) {
    E("    %s %s = %" PRId64 ";\n    {\n        %s rest = r;\n", e->it, name, v->offset, e->it);
    for (int32_t d = v->ndim - 1; d >= 0; d--) {
        if (d == axis || v->shape[d] <= 1) continue;
        if (v->strides[d]) E("        %s += (rest %% %" PRId64 ") * %" PRId64 ";\n", name, v->shape[d], v->strides[d]);
        E("        rest /= %" PRId64 ";\n", v->shape[d]);
    }
    E("    }\n");
}

/* A double load of element j of the row at `off` of buffer `buf` (bf16 bits or float32 bits). */
static void load_expr(char *dst, size_t cap, const char *buf, const char *off, int64_t stride, bool bf16) {
    snprintf(dst, cap, bf16 ? "tg_d_f32((uint)%s[%s + j * %" PRId64 "] << 16)" : "tg_d_f32(%s[%s + j * %" PRId64 "])",
             buf, off, stride);
}

tgrad_status tg_gen_render_softmax_backward(const tg_lang *l, const tg_gen_softmax_backward *p, tg_text *t,
                                            struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_SOFTMAX);
    const bool log = p->op == TGRAD_SOFTMAX_LOG_SOFTMAX, out_bf16 = p->out_dtype == TGRAD_DTYPE_BF16;
    const int32_t T = r->threads_x;
    int64_t numel = 0;
    tg_view_numel(&p->y, &numel);
    const int64_t n = p->y.ndim ? p->y.shape[p->axis] : 1, rows = n ? numel / n : 0;
    int64_t inner = 1;
    for (int32_t d = p->axis + 1; d < p->y.ndim; d++) inner *= p->y.shape[d];
    memset(launch, 0, sizeof *launch);
    const tg_view *in[2] = { &p->y, &p->g };
    const char *names[2] = { "y", "g" };
    const int64_t hi = tg_launch_operands(launch, in, names, 2);
    tg_launch_flagged_rows(launch, numel, rows, T);
    char key[4096];
    snprintf(key, sizeof key, "softmax_backward;%d;%d;%d;%d;%d", (int)p->op, (int)p->axis, (int)p->y_dtype,
             (int)p->g_dtype, (int)p->out_dtype);
    tg_key_view(key, sizeof key, &p->y);
    tg_key_view(key, sizeof key, &p->g);
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_softmax_%s_backward_%" PRId64 "_%08" PRIx32,
             log ? "log_softmax" : "softmax", n, (uint32_t)tg_fnv1a64(key, strlen(key)));

    bool small = tg_fits_int(hi + 1) && tg_fits_int(numel + n * inner) && tg_fits_int(rows + T) && tg_fits_int(n + 8);
    emitter em = { t, l, small ? "int" : "long", NULL }, *e = &em;
    const char *fwd = log ? "log_softmax" : "softmax";
    E("// Generated by libtgrad from kernels/routes.h (route softmax, language %s). Do not edit.\n", l->name);
    E("// c = %s_backward(%s, g) along axis %d of [", fwd, log ? "z" : "y", (int)p->axis);
    for (int32_t d = 0; d < p->y.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->y.shape[d]);
    E("] (%s; g %s), %s, compact row-major;\n", tg_dtype_name(p->y_dtype), tg_dtype_name(p->g_dtype),
      tg_dtype_name(p->out_dtype));
    E("// %s. %" PRId64 " rows of %" PRId64 ", one thread each.\n",
      log ? "g_i - exp(z_i) sum_j g_j" : "y_i (g_i - sum_j g_j y_j)", rows, n);
    E("// The CPU's doubles and bounds (ops/softmax_backward.c): an element is written where its bound decides its\n"
      "// rounding; f[row] = 1 where one is not (the host reruns the row with the CPU's exact code), else 0.\n");
    E("// Launch: grid (%u, 1, 1) x threadgroup (%d, 1, 1); buffers y, g, c, f.\n", launch->grid[0], (int)T);
    tg_emit_double_head(e);
    tg_gen_emit_text(e, tg_gen_softmax_prelude);

    char b0[64], b1[64], b2[64], b3[64];
    tg_buffer_param_typed(b0, sizeof b0, l->global_in, p->y_dtype == TGRAD_DTYPE_BF16 ? "ushort" : "uint", "y");
    tg_buffer_param_typed(b1, sizeof b1, l->global_in, p->g_dtype == TGRAD_DTYPE_BF16 ? "ushort" : "uint", "g");
    tg_buffer_param_typed(b2, sizeof b2, l->global_out, out_bf16 ? "ushort" : "uint", "c");
    tg_buffer_param_typed(b3, sizeof b3, l->global_out, "uint", "f");
    const char *bp[4] = { b0, b1, b2, b3 };
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, 4, used);
    E("    const %s r = gx * %d + li;\n", e->it, (int)T);
    E("    if (r >= %" PRId64 ")\n        return;\n", rows);
    if (n == 0) { /* nothing to write */
        E("    f[r] = 0u;\n}\n");
        tg_finish_launch(t, launch);
        return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
    }
    emit_row_offset(e, &p->y, p->axis, "oy");
    emit_row_offset(e, &p->g, p->axis, "og");
    char ly[160], lg[160];
    load_expr(ly, sizeof ly, "y", "oy", p->y.ndim ? p->y.strides[p->axis] : 0, p->y_dtype == TGRAD_DTYPE_BF16);
    load_expr(lg, sizeof lg, "g", "og", p->g.ndim ? p->g.strides[p->axis] : 0, p->g_dtype == TGRAD_DTYPE_BF16);
    const uint32_t bf = out_bf16 ? 1u : 0u;
    const char *st = out_bf16 ? "(ushort)" : "(uint)", *sign = out_bf16 ? "0x8000u" : "0x80000000u";
    const char *mag = out_bf16 ? "0x7fffu" : "0x7fffffffu";
    char oj[128];
    snprintf(oj, sizeof oj, "(r / %" PRId64 ") * %" PRId64 " + r %% %" PRId64 " + j * %" PRId64, inner, n * inner, inner,
             inner);
    E("    const tg_f64 inf = tg_sm_inf(), zero = %s;\n", DK(0.0));
    E("    const tg_f64 U = %s; // 2^-53\n", DK(0x1p-53));
    E("    const tg_f64 M101 = %s, M11 = %s, U2 = tg_dmul(%s, U), U4 = tg_dmul(%s, U);\n", DK(1.01), DK(1.1), DK(2.0),
      DK(4.0));
    E("    %s j;\n", e->it);
    E("    tg_f64 s = zero, a = zero;\n");
    E("    for (j = 0; j < %" PRId64 "; j++) {\n", n);
    if (log) E("        const tg_f64 v = %s;\n", lg);
    else E("        const tg_f64 v = tg_dmul(%s, %s); // exact: 48 bits at most\n", lg, ly);
    E("        s = tg_dadd(s, v);\n        a = tg_dadd(a, tg_dabs(v));\n    }\n");
    E("    if (!tg_dlt(tg_dabs(s), inf)) { // a NaN or infinity in the row: the host's\n        f[r] = 1u;\n        return;\n"
      "    }\n");
    E("    const tg_f64 es = tg_dmul(tg_dmul(a, tg_dmul(%s, U)), M101); // the sequential sum's bound: a n U 1.01\n",
      DK((double)n));
    if (log) {
        E("    const tg_f64 se = tg_dadd(tg_dabs(s), es);\n");
        E("    const tg_f64 eu = tg_dlt(se, %s) ? %s : tg_dmul(%s, se);\n", DK(1048576.0), DK(0x1p-1000),
          DK(8.900295434028806e-308));
    }
    E("    uint undecided = 0u;\n");
    E("    for (j = 0; j < %" PRId64 "; j++) {\n", n);
    E("        const tg_f64 yv = %s, gv = %s;\n", ly, lg);
    E("        tg_u64 d = (tg_u64)1u << 32;\n");
    if (log) {
        E("        if (tg_dlt(yv, zero)) { // z_i >= 0, NaN or -inf: the host's\n");
        E("            if (tg_dgt(yv, tg_dneg(inf))) {\n");
        E("                const tg_f64 eh = tg_sm_exp_neg(yv), pv = tg_dmul(eh, s), v = tg_dsub(gv, pv);\n");
        E("                // err = (eh es 1.01 + (2^-48 + 2U) 1.01 |pv| + eu + 4U |v|) 1.1\n");
        E("                const tg_f64 ep = tg_dmul(tg_dmul(tg_dadd(%s, U2), M101), tg_dabs(pv));\n", DK(0x1p-48));
        E("                const tg_f64 e3 = tg_dadd(tg_dadd(tg_dmul(tg_dmul(eh, es), M101), ep), eu);\n");
        E("                const tg_f64 err = tg_dmul(tg_dadd(e3, tg_dmul(U4, tg_dabs(v))), M11);\n");
        E("                const uint lo = tg_sm_round(tg_dsub(v, err), %uu), hi = tg_sm_round(tg_dadd(v, err), %uu);\n", bf,
          bf);
        E("                if (lo == hi && (lo & %s) != 0u)\n                    d = (tg_u64)lo;\n", mag);
        E("            }\n        }\n");
    } else {
        E("        const tg_f64 dv = tg_dsub(gv, s);\n");
        E("        if (tg_deq(yv, zero)) { // a masked position: a zero, its sign y's times D's where the bound keeps D from 0\n");
        E("            const tg_f64 ed = tg_dmul(tg_dadd(tg_dmul(es, M101), tg_dmul(U2, tg_dabs(dv))), M11);\n");
        E("            const bool neg = ((tg_d_bits(yv) >> 63) != (tg_u64)0u) != tg_dlt(dv, zero);\n");
        E("            if (tg_dgt(tg_dabs(dv), ed))\n                d = neg ? (tg_u64)%s : (tg_u64)0u;\n", sign);
        E("        } else {\n");
        E("            const tg_f64 v = tg_dmul(yv, dv);\n");
        E("            const tg_f64 err = tg_dmul(tg_dadd(tg_dmul(tg_dmul(tg_dabs(yv), es), M101), tg_dmul(U4, tg_dabs(v))), M11);\n");
        E("            const uint lo = tg_sm_round(tg_dsub(v, err), %uu), hi = tg_sm_round(tg_dadd(v, err), %uu);\n", bf, bf);
        E("            if (lo == hi && (lo & %s) != 0u)\n                d = (tg_u64)lo;\n", mag);
        E("        }\n");
    }
    E("        c[%s] = %sd;\n        undecided |= (uint)(d >> 32);\n    }\n", oj, st);
    E("    f[r] = undecided;\n}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
