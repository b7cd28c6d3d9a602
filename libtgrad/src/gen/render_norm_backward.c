/* The norm route's derivatives: rms_norm_backward and layer_norm_backward over the trailing axes
 * (the input's gradient), one thread per row, in double (OpenCL C with cl_khr_fp64, CUDA; MSL has
 * none and is refused). Each row's thread does what the CPU's rows do (ops/norm_backward.c,
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
    snprintf(dst, cap, dt == TGRAD_DTYPE_BF16 ? "(double)tg_f_of((uint)%s[%s(%s)] << 16)" : "(double)tg_f_of(%s[%s(%s)])",
             buf, fn, at);
}

/* The row's sums and constants (mu, a, kc (the CPU's c), rinv, rho, ea, delta, ec), or a return with the row
 * flagged where the CPU's row would not bound it. */
static void emit_constants(const emitter *e, bool layer, const char *X, const char *GW) {
    E("    %s j;\n", e->it);
    if (!layer) {
        E("    double q = 0.0, sg = 0.0, sa = 0.0; // sum x^2, sum gw x, sum |gw x|\n");
        E("    for (j = 0; j < n; j++) {\n        const double xv = %s, p = %s * xv;\n", X, GW);
        E("        q += xv * xv;\n        sg += p;\n        sa += fabs(p);\n    }\n");
        E("    const double d = q + dn * eps;\n");
        E("    if (!(fabs(q) < inf) || !(fabs(sa) < inf) || !(d > 0.0)) { // the IEEE formula: the host's\n");
        E("        f[r] = 1u;\n        return;\n    }\n");
        E("    const double dd = (dn + 1.0) * U * 1.01, es = dn * U * sa * 1.01;\n");
        E("    const double mu = 0.0, a = 0.0, ea = 0.0, delta = 0.0;\n");
        E("    const double kc = sg / d, rinv = 1.0 / sqrt(d / dn), rho = (dn + 6.0) * U * 0.5 * 1.02;\n");
        E("    const double ec = (es / d + fabs(kc) * (dd + U)) * 1.01;\n");
        E("    if (!(rho <= 0.0009765625)) { // a wide bound: every element exact, the host's\n");
        E("        f[r] = 1u;\n        return;\n    }\n");
        return;
    }
    E("    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0; // sum x, |x|, gw, |gw|\n");
    E("    for (j = 0; j < n; j++) {\n        const double xv = %s, gv = %s;\n", X, GW);
    E("        s0 += xv;\n        s1 += fabs(xv);\n        s2 += gv;\n        s3 += fabs(gv);\n    }\n");
    E("    const double mu = s0 / dn;\n");
    E("    double q = 0.0, m = 0.0, bb = 0.0; // sum (x - mu)^2, sum gw (x - mu), sum |gw (x - mu)|\n");
    E("    for (j = 0; j < n; j++) {\n        const double dv = %s - mu, p = %s * dv;\n", X, GW);
    E("        q += dv * dv;\n        m += p;\n        bb += fabs(p);\n    }\n");
    E("    if (!(fabs(s1) < inf) || !(fabs(s3) < inf) || !(fabs(q) < inf) || !(fabs(bb) < inf)) { // the host's\n");
    E("        f[r] = 1u;\n        return;\n    }\n");
    E("    const double delta = (dn + 4.0) * U * (s1 / dn) * 1.01, gq = (dn + 4.0) * U * 1.01;\n");
    E("    const double rlo = ((q / (1.0 + gq) - dn * delta * delta) / dn + eps) * (1.0 - 4.0 * U);\n");
    E("    const double rhi = ((q / (1.0 - gq)) / dn + eps) * (1.0 + 4.0 * U);\n");
    E("    const double rho = rlo > 0.0 && rhi < inf ? 0.5 * ((rhi - rlo) / rlo) * 1.01 + 4.0 * U : inf;\n");
    E("    const double d = q + dn * eps, em = (delta * s3 + (dn + 1.0) * U * bb) * 1.02;\n");
    E("    if (!(rho <= 0.0009765625) || !(d > 0.0)) { // no bound: every element exact, the host's\n");
    E("        f[r] = 1u;\n        return;\n    }\n");
    E("    const double a = s2 / dn, kc = m / d, rinv = 1.0 / sqrt(d / dn), ea = (dn + 1.0) * U * (s3 / dn) * 1.01;\n");
    E("    const double ec = (em / d + fabs(kc) * (2.0 * rho + U)) * 1.01;\n");
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
    E("    const double U = 1.1102230246251565e-16; // 2^-53\n");
    E("    const double eps = %.17g, dn = %" PRId64 ".0, inf = tg_sm_inf();\n", p->eps, n);
    char xj[128], gj[128], wj[128], gwj[300], xi[128], gi[128], wi[128], gwi[300];
    load_expr(xj, sizeof xj, "x", "tg_x_at", "base + j", p->x_dtype);
    load_expr(gj, sizeof gj, "g", "tg_g_at", "base + j", p->g_dtype);
    load_expr(xi, sizeof xi, "x", "tg_x_at", "base + i", p->x_dtype);
    load_expr(gi, sizeof gi, "g", "tg_g_at", "base + i", p->g_dtype);
    if (p->has_w) {
        load_expr(wj, sizeof wj, "w", "tg_w_at", "j", p->w_dtype);
        load_expr(wi, sizeof wi, "w", "tg_w_at", "i", p->w_dtype);
        snprintf(gwj, sizeof gwj, "(%s * %s)", gj, wj); /* exact: two 24-bit significands */
        snprintf(gwi, sizeof gwi, "(%s * %s)", gi, wi);
    } else {
        snprintf(gwj, sizeof gwj, "%s", gj);
        snprintf(gwi, sizeof gwi, "%s", gi);
    }
    emit_constants(e, layer, xj, gwj);
    const uint32_t bf = out_bf16 ? 1u : 0u;
    E("    uint undecided = 0u;\n");
    E("    for (%s i = 0; i < n; i++) {\n", e->it);
    E("        const double dv = %s - mu, ga = %s - a, xc = dv * kc, t = ga - xc, vi = rinv * t;\n", xi, gwi);
    E("        const double et = (ea + delta * (fabs(kc) + ec) + fabs(dv) * ec + U * (fabs(ga) + 2.0 * fabs(xc) + "
      "fabs(t))) * 1.02;\n");
    E("        const double ei = (rinv * (et + rho * (fabs(t) + et)) + 4.0 * U * fabs(vi)) * 1.1 + "
      "9.332636185032189e-302;\n");
    E("        const uint lo = tg_sm_round(vi - ei, %uu), hi = tg_sm_round(vi + ei, %uu);\n", bf, bf);
    E("        const bool ok = lo == hi && (lo & %s) != 0u;\n", out_bf16 ? "0x7fffu" : "0x7fffffffu");
    E("        c[base + i] = %slo;\n        undecided |= ok ? 0u : 1u;\n    }\n", out_bf16 ? "(ushort)" : "");
    E("    f[r] = undecided;\n}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
