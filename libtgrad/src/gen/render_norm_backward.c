/* The norm route's derivatives: rms_norm_backward and layer_norm_backward over the trailing axes
 * (the input's gradient), one thread per row, in binary64 (native in OpenCL C and CUDA, kernels/gpu/
 * softdouble.h in MSL). Each row's thread does what the CPU's rows do (ops/norm_backward.c,
 * rms_row and layer_row, through kernels/cpu/norm_backward_loops.h's formulas): the sums (the
 * bound holds for any order), the row's constants and their bounds, then each element's value and
 * bound, written where both ends of its interval round alike to a nonzero value. The row is
 * flagged (f[r] = 1) when an element is left open, a sum is not finite, or the bound does not
 * hold (rho above 2^-10, a variance not above 0); the host reruns it with the CPU's own row code
 * (tg_norm_backward_rows_on_host), so the bytes are the CPU's. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

static bool float_dtype(int32_t dt) { return dt == TGRAD_DTYPE_BF16 || dt == TGRAD_DTYPE_F32; }

static int64_t row_length(const tg_gen_norm_backward *p) {
    int64_t n = 1;
    for (int32_t d = 0; d < p->naxes; d++) n *= p->x.shape[p->x.ndim - 1 - d];
    return n;
}

tgrad_status tg_gen_check_norm_backward(const tg_lang *l, const tg_gen_norm_backward *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_NORM);
    tgrad_status need = tg_gen_need_double(l, r->name, "norm");
    if (need) return need;
    if (p->op != TG_NORM_RMS_BACKWARD && p->op != TG_NORM_LAYER_BACKWARD)
        return tg_not_eligible(r->name, l->name, "norm op %lld", p->op, 0, 0);
    if (p->naxes < 1 || p->naxes > p->x.ndim || p->g.ndim != p->x.ndim)
        return tg_not_eligible(r->name, l->name, "%lld normalized axes of %lld", p->naxes, p->x.ndim, 0);
    if (!float_dtype(p->x_dtype) || !float_dtype(p->g_dtype) || !float_dtype(p->out_dtype) ||
        (p->has_w && !float_dtype(p->w_dtype)))
        return tg_not_eligible(r->name, l->name, "dtypes %lld, %lld -> %lld", p->x_dtype, p->g_dtype, p->out_dtype);
    int64_t numel, lo, hi, n = row_length(p);
    if (tg_view_numel(&p->x, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    if (n > 0 && tg_ceil_div(numel / n, r->threads_x) > INT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld rows need more than 2^31-1 threadgroups", numel / n, 0, 0);
    const tg_view *v[3] = { &p->x, &p->g, p->has_w ? &p->w : NULL };
    for (int32_t i = 0; i < 3; i++)
        if (v[i] && numel > 0 && (!tg_span_view(v[i], &lo, &hi) || lo < 0))
            return tg_not_eligible(r->name, l->name, "an operand's view reaches outside its buffer", 0, 0, 0);
    return TGRAD_OK;
}

static const char *elem(int32_t dt) { return dt == TGRAD_DTYPE_BF16 ? "ushort" : "uint"; }

/* A double load of element `at` of buffer `buf` (bf16 or float32 bits). */
static void load_expr(char *dst, size_t cap, const char *buf, const char *fn, const char *at, int32_t dt) {
    snprintf(dst, cap, dt == TGRAD_DTYPE_BF16 ? "tg_d_f32((uint)%s[%s(%s)] << 16)" : "tg_d_f32(%s[%s(%s)])",
             buf, fn, at);
}

/* The row's sums and constants (mu, a, kc (the CPU's c), rinv, rho, ea, delta, ec), or a return with the row
 * flagged where the CPU's row would not bound it. */
static void emit_constants(const emitter *e, bool layer, const char *X, const char *GW) {
    E("    %s j;\n", e->it);
    if (!layer) {
        E("    tg_f64 q = zero, sg = zero, sa = zero; // sum x^2, sum gw x, sum |gw x|\n");
        E("    for (j = 0; j < n; j++) {\n        const tg_f64 xv = %s, p = tg_dmul(%s, xv);\n", X, GW);
        E("        q = tg_dadd(q, tg_dmul(xv, xv));\n        sg = tg_dadd(sg, p);\n        sa = tg_dadd(sa, tg_dabs(p));\n"
          "    }\n");
        E("    const tg_f64 d = tg_dadd(q, tg_dmul(dn, eps));\n");
        E("    if (!tg_dlt(tg_dabs(q), inf) || !tg_dlt(tg_dabs(sa), inf) || !tg_dgt(d, zero)) { // the IEEE formula: the host's\n");
        E("        f[r] = 1u;\n        return;\n    }\n");
        E("    const tg_f64 dd = tg_dmul(tg_dmul(tg_dadd(dn, one), U), M101), es = tg_dmul(tg_dmul(tg_dmul(dn, U), sa), M101);\n");
        E("    const tg_f64 mu = zero, a = zero, ea = zero, delta = zero;\n");
        E("    const tg_f64 kc = tg_ddiv(sg, d), rinv = tg_ddiv(one, tg_dsqrt(tg_ddiv(d, dn)));\n");
        E("    const tg_f64 rho = tg_dmul(tg_dmul(tg_dmul(tg_dadd(dn, %s), U), %s), %s); // (n + 6) U 0.5 1.02\n", DK(6.0),
          DK(0.5), DK(1.02));
        E("    const tg_f64 ec = tg_dmul(tg_dadd(tg_ddiv(es, d), tg_dmul(tg_dabs(kc), tg_dadd(dd, U))), M101);\n");
        E("    if (!tg_dle(rho, %s)) { // a wide bound: every element exact, the host's\n", DK(0x1p-10));
        E("        f[r] = 1u;\n        return;\n    }\n");
        return;
    }
    E("    tg_f64 s0 = zero, s1 = zero, s2 = zero, s3 = zero; // sum x, |x|, gw, |gw|\n");
    E("    for (j = 0; j < n; j++) {\n        const tg_f64 xv = %s, gv = %s;\n", X, GW);
    E("        s0 = tg_dadd(s0, xv);\n        s1 = tg_dadd(s1, tg_dabs(xv));\n        s2 = tg_dadd(s2, gv);\n"
      "        s3 = tg_dadd(s3, tg_dabs(gv));\n    }\n");
    E("    const tg_f64 mu = tg_ddiv(s0, dn);\n");
    E("    tg_f64 q = zero, m = zero, bb = zero; // sum (x - mu)^2, sum gw (x - mu), sum |gw (x - mu)|\n");
    E("    for (j = 0; j < n; j++) {\n        const tg_f64 dv = tg_dsub(%s, mu), p = tg_dmul(%s, dv);\n", X, GW);
    E("        q = tg_dadd(q, tg_dmul(dv, dv));\n        m = tg_dadd(m, p);\n        bb = tg_dadd(bb, tg_dabs(p));\n    }\n");
    E("    if (!tg_dlt(tg_dabs(s1), inf) || !tg_dlt(tg_dabs(s3), inf) || !tg_dlt(tg_dabs(q), inf) ||\n"
      "        !tg_dlt(tg_dabs(bb), inf)) { // the host's\n");
    E("        f[r] = 1u;\n        return;\n    }\n");
    E("    const tg_f64 n4U = tg_dmul(tg_dadd(dn, %s), U), n1U = tg_dmul(tg_dadd(dn, one), U);\n", DK(4.0));
    E("    const tg_f64 delta = tg_dmul(tg_dmul(n4U, tg_ddiv(s1, dn)), M101), gq = tg_dmul(n4U, M101);\n");
    E("    // rlo = ((q / (1 + gq) - n delta^2) / n + eps) (1 - 4U), rhi = ((q / (1 - gq)) / n + eps) (1 + 4U)\n");
    E("    const tg_f64 qlo = tg_dsub(tg_ddiv(q, tg_dadd(one, gq)), tg_dmul(tg_dmul(dn, delta), delta));\n");
    E("    const tg_f64 rlo = tg_dmul(tg_dadd(tg_ddiv(qlo, dn), eps), tg_dsub(one, U4));\n");
    E("    const tg_f64 rhi = tg_dmul(tg_dadd(tg_ddiv(tg_ddiv(q, tg_dsub(one, gq)), dn), eps), tg_dadd(one, U4));\n");
    E("    const tg_f64 rho = tg_dgt(rlo, zero) && tg_dlt(rhi, inf)\n"
      "                           ? tg_dadd(tg_dmul(tg_dmul(%s, tg_ddiv(tg_dsub(rhi, rlo), rlo)), M101), U4) : inf;\n",
      DK(0.5));
    E("    const tg_f64 d = tg_dadd(q, tg_dmul(dn, eps));\n");
    E("    const tg_f64 em = tg_dmul(tg_dadd(tg_dmul(delta, s3), tg_dmul(n1U, bb)), %s);\n", DK(1.02));
    E("    if (!tg_dle(rho, %s) || !tg_dgt(d, zero)) { // no bound: every element exact, the host's\n", DK(0x1p-10));
    E("        f[r] = 1u;\n        return;\n    }\n");
    E("    const tg_f64 a = tg_ddiv(s2, dn), kc = tg_ddiv(m, d), rinv = tg_ddiv(one, tg_dsqrt(tg_ddiv(d, dn)));\n");
    E("    const tg_f64 ea = tg_dmul(tg_dmul(n1U, tg_ddiv(s3, dn)), M101);\n");
    E("    const tg_f64 ec = tg_dmul(tg_dadd(tg_ddiv(em, d), tg_dmul(tg_dabs(kc), tg_dadd(tg_dmul(%s, rho), U))), M101);\n",
      DK(2.0));
}

tgrad_status tg_gen_render_norm_backward(const tg_lang *l, const tg_gen_norm_backward *p, tg_text *t,
                                         struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_NORM);
    const bool layer = p->op == TG_NORM_LAYER_BACKWARD, out_bf16 = p->out_dtype == TGRAD_DTYPE_BF16;
    const int32_t T = r->threads_x;
    int64_t numel = 0;
    const int64_t n = row_length(p);
    tg_view_numel(&p->x, &numel);
    const int64_t rows = n ? numel / n : 0;
    memset(launch, 0, sizeof *launch);
    const tg_view *v[3] = { &p->x, &p->g, p->has_w ? &p->w : NULL };
    const char *names[3] = { "x", "g", "w" };
    const int64_t reach = tg_launch_operands(launch, v, names, 3);
    tg_launch_flagged_rows(launch, numel, rows, T);
    char key[4096];
    snprintf(key, sizeof key, "norm_backward;%d;%d;%a;%d;%d;%d;%d;%d", (int)p->op, (int)p->naxes, p->eps, (int)p->has_w,
             (int)p->x_dtype, (int)p->g_dtype, (int)p->w_dtype, (int)p->out_dtype);
    for (int32_t i = 0; i < 3; i++)
        if (v[i]) tg_key_view(key, sizeof key, v[i]);
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_norm_%s_backward_%" PRId64 "_%08" PRIx32,
             layer ? "layer" : "rms", n, (uint32_t)tg_fnv1a64(key, strlen(key)));

    bool small = tg_fits_int(reach + 1) && tg_fits_int(numel + n + 8) && tg_fits_int(rows + T);
    emitter em = { t, l, small ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route norm, language %s). Do not edit.\n", l->name);
    E("// c = %s_norm_backward(x, g%s) over the last %d axes of [", layer ? "layer" : "rms", p->has_w ? ", w" : "",
      (int)p->naxes);
    for (int32_t d = 0; d < p->x.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->x.shape[d]);
    E("] (x %s, g %s%s%s), eps %.17g, %s, compact row-major;\n", tg_dtype_name(p->x_dtype), tg_dtype_name(p->g_dtype),
      p->has_w ? ", w " : "", p->has_w ? tg_dtype_name(p->w_dtype) : "", p->eps, tg_dtype_name(p->out_dtype));
    E("// %" PRId64 " rows of %" PRId64 ", one thread each. The CPU's doubles and bounds (ops/norm_backward.c): an\n"
      "// element is written where its bound decides its rounding; f[row] = 1 where one is not (the host reruns\n"
      "// the row with the CPU's exact code), else 0.\n", rows, n);
    tg_emit_launch_line(e, launch);
    tg_emit_double_head(e);
    tg_gen_emit_text(e, tg_gen_softmax_prelude); /* tg_sm_round, tg_sm_inf */
    tg_emit_index_fn(e, "tg_x_at", &p->x);
    tg_emit_index_fn(e, "tg_g_at", &p->g);
    if (p->has_w) tg_emit_index_fn(e, "tg_w_at", &p->w);

    char decl[5][64];
    const char *bp[5];
    int nbp = 0;
    const int32_t dts[3] = { p->x_dtype, p->g_dtype, p->w_dtype };
    for (int32_t i = 0; i < 3; i++)
        if (v[i]) tg_buffer_param_typed(decl[nbp], sizeof decl[nbp], l->global_in, elem(dts[i]), names[i]), bp[nbp] = decl[nbp], nbp++;
    tg_buffer_param_typed(decl[nbp], sizeof decl[nbp], l->global_out, out_bf16 ? "ushort" : "uint", "c"), bp[nbp] = decl[nbp], nbp++;
    tg_buffer_param_typed(decl[nbp], sizeof decl[nbp], l->global_out, "uint", "f"), bp[nbp] = decl[nbp], nbp++;
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, nbp, used);
    E("    const %s r = gx * %d + li;\n", e->it, (int)T);
    E("    if (r >= %" PRId64 ")\n        return;\n", rows);
    E("    const %s base = r * %" PRId64 ", n = %" PRId64 ";\n", e->it, n, n);
    E("    const tg_f64 U = %s, U4 = tg_dmul(%s, U); // 2^-53\n", DK(0x1p-53), DK(4.0));
    E("    const tg_f64 eps = %s, dn = %s, inf = tg_sm_inf();\n", DK(p->eps), DK((double)n));
    E("    const tg_f64 zero = %s, one = %s, M101 = %s;\n", DK(0.0), DK(1.0), DK(1.01));
    char xj[128], gj[128], wj[128], gwj[300], xi[128], gi[128], wi[128], gwi[300];
    load_expr(xj, sizeof xj, "x", "tg_x_at", "base + j", p->x_dtype);
    load_expr(gj, sizeof gj, "g", "tg_g_at", "base + j", p->g_dtype);
    load_expr(xi, sizeof xi, "x", "tg_x_at", "base + i", p->x_dtype);
    load_expr(gi, sizeof gi, "g", "tg_g_at", "base + i", p->g_dtype);
    if (p->has_w) {
        load_expr(wj, sizeof wj, "w", "tg_w_at", "j", p->w_dtype);
        load_expr(wi, sizeof wi, "w", "tg_w_at", "i", p->w_dtype);
        snprintf(gwj, sizeof gwj, "tg_dmul(%s, %s)", gj, wj); /* exact: two 24-bit significands */
        snprintf(gwi, sizeof gwi, "tg_dmul(%s, %s)", gi, wi);
    } else {
        snprintf(gwj, sizeof gwj, "%s", gj);
        snprintf(gwi, sizeof gwi, "%s", gi);
    }
    emit_constants(e, layer, xj, gwj);
    const uint32_t bf = out_bf16 ? 1u : 0u;
    E("    uint undecided = 0u;\n");
    E("    for (%s i = 0; i < n; i++) {\n", e->it);
    E("        const tg_f64 dv = tg_dsub(%s, mu), ga = tg_dsub(%s, a), xc = tg_dmul(dv, kc);\n", xi, gwi);
    E("        const tg_f64 t = tg_dsub(ga, xc), vi = tg_dmul(rinv, t);\n");
    E("        // et = (ea + delta (|kc| + ec) + |dv| ec + U (|ga| + 2 |xc| + |t|)) 1.02\n");
    E("        const tg_f64 e2 = tg_dadd(tg_dadd(ea, tg_dmul(delta, tg_dadd(tg_dabs(kc), ec))), tg_dmul(tg_dabs(dv), ec));\n");
    E("        const tg_f64 eu = tg_dmul(U, tg_dadd(tg_dadd(tg_dabs(ga), tg_dmul(%s, tg_dabs(xc))), tg_dabs(t)));\n",
      DK(2.0));
    E("        const tg_f64 et = tg_dmul(tg_dadd(e2, eu), %s);\n", DK(1.02));
    E("        // ei = (rinv (et + rho (|t| + et)) + 4U |vi|) 1.1 + 2^-1000\n");
    E("        const tg_f64 er = tg_dmul(rinv, tg_dadd(et, tg_dmul(rho, tg_dadd(tg_dabs(t), et))));\n");
    E("        const tg_f64 ei = tg_dadd(tg_dmul(tg_dadd(er, tg_dmul(U4, tg_dabs(vi))), %s), %s);\n", DK(1.1),
      DK(0x1p-1000));
    E("        const uint lo = tg_sm_round(tg_dsub(vi, ei), %uu), hi = tg_sm_round(tg_dadd(vi, ei), %uu);\n", bf, bf);
    E("        const bool ok = lo == hi && (lo & %s) != 0u;\n", out_bf16 ? "0x7fffu" : "0x7fffffffu");
    E("        c[base + i] = %slo;\n        undecided |= ok ? 0u : 1u;\n    }\n", out_bf16 ? "(ushort)" : "");
    E("    f[r] = undecided;\n}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
