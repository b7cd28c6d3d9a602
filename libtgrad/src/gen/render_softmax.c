/* The softmax route: softmax, log_softmax and logsumexp along one axis, one thread per row, in
 * binary64 (native in OpenCL C with cl_khr_fp64 and CUDA, the software double of kernels/gpu/
 * softdouble.h in MSL: the same bits, written once in its function-call form). Each row's thread
 * does what the CPU's row loops do (kernels/cpu/softmax_rows.h, through kernels/gpu/softmax.h):
 * the scan and the sum in eight lanes (j mod 8), the exp polynomial, the bounds of ops/softmax.c;
 * it writes each element whose bound decides its rounding, and flags the row (f[r] = 1) when an
 * element is left undecided or the row is special (empty, a NaN, an infinite maximum, one finite
 * element). The host reruns the flagged rows with the CPU's own row code (device.c calls the
 * kind's gpu_finish, tg_softmax_rows_on_host), so the bytes are the CPU's. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

static const char *op_name(int32_t op) {
    return op == TGRAD_SOFTMAX_SOFTMAX ? "softmax" : op == TGRAD_SOFTMAX_LOG_SOFTMAX ? "log_softmax" : "logsumexp";
}

static bool float_dtype(int32_t dt) { return dt == TGRAD_DTYPE_BF16 || dt == TGRAD_DTYPE_F32; }

/* The row geometry: row length n, the rows, the elements after the axis (the output's step). */
static void geometry(const tg_gen_softmax *p, int64_t *n, int64_t *rows, int64_t *inner) {
    const tg_view *v = &p->in;
    *n = v->ndim ? v->shape[p->axis] : 1, *rows = 1, *inner = 1;
    for (int32_t d = 0; d < v->ndim; d++) {
        if (d == p->axis) continue;
        *rows *= v->shape[d];
        if (d > p->axis) *inner *= v->shape[d];
    }
}

tgrad_status tg_gen_check_softmax(const tg_lang *l, const tg_gen_softmax *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_SOFTMAX);
    tgrad_status need = tg_gen_need_double(l, r->name, "softmax");
    if (need) return need;
    if (p->op != TGRAD_SOFTMAX_SOFTMAX && p->op != TGRAD_SOFTMAX_LOG_SOFTMAX && p->op != TGRAD_SOFTMAX_LOGSUMEXP)
        return tg_not_eligible(r->name, l->name, "softmax op %lld (the backward ops run on the CPU)", p->op, 0, 0);
    if (!float_dtype(p->in_dtype) || !float_dtype(p->out_dtype))
        return tg_not_eligible(r->name, l->name, "dtypes %lld -> %lld", p->in_dtype, p->out_dtype, 0);
    if (p->in.ndim > 0 && (p->axis < 0 || p->axis >= p->in.ndim))
        return tg_not_eligible(r->name, l->name, "axis %lld of %lld", p->axis, p->in.ndim, 0);
    int64_t numel, n, rows, inner, lo, hi;
    if (tg_view_numel(&p->in, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    geometry(p, &n, &rows, &inner);
    if (tg_ceil_div(rows, r->threads_x) > INT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld rows need more than 2^31-1 threadgroups", rows, 0, 0);
    if (numel > 0 && (!tg_span_view(&p->in, &lo, &hi) || lo < 0))
        return tg_not_eligible(r->name, l->name, "the input's view reaches outside its buffer", 0, 0, 0);
    return TGRAD_OK;
}

static void key_of(const tg_gen_softmax *p, char *key, size_t cap) {
    size_t n = (size_t)snprintf(key, cap, "softmax;%d;%d;%d;%d;off=%" PRId64, (int)p->op, (int)p->axis, (int)p->in_dtype,
                                (int)p->out_dtype, p->in.offset);
    for (int32_t d = 0; d < p->in.ndim && n < cap; d++)
        n += (size_t)snprintf(key + n, cap - n, ";%" PRId64 ":%" PRId64, p->in.shape[d], p->in.strides[d]);
}

/* `off`, the row's first input element, from the row index r: the other axes, innermost first. */
static void emit_row_offset(const emitter *e, const tg_gen_softmax *p) {
    E("    %s off = %" PRId64 ";\n", e->it, p->in.offset);
    E("    %s rest = r;\n", e->it);
    for (int32_t d = p->in.ndim - 1; d >= 0; d--) {
        if (d == p->axis || p->in.shape[d] <= 1) continue;
        if (p->in.strides[d]) E("    off += (rest %% %" PRId64 ") * %" PRId64 ";\n", p->in.shape[d], p->in.strides[d]);
        E("    rest /= %" PRId64 ";\n", p->in.shape[d]);
    }
}

tgrad_status tg_gen_render_softmax(const tg_lang *l, const tg_gen_softmax *p, tg_text *t, struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_SOFTMAX);
    const bool in_bf16 = p->in_dtype == TGRAD_DTYPE_BF16, out_bf16 = p->out_dtype == TGRAD_DTYPE_BF16;
    const bool lse = p->op == TGRAD_SOFTMAX_LOGSUMEXP;
    const int32_t T = r->threads_x;
    int64_t n, rows, inner;
    geometry(p, &n, &rows, &inner);
    const int64_t nout = lse ? rows : rows * n;
    memset(launch, 0, sizeof *launch);
    const tg_view *in[1] = { &p->in };
    const char *names[1] = { "x" };
    const int64_t hi = tg_launch_operands(launch, in, names, 1);
    tg_launch_flagged_rows(launch, nout, rows, T);
    char key[2048];
    key_of(p, key, sizeof key);
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_softmax_%s_%" PRId64 "_%08" PRIx32, op_name(p->op), n,
             (uint32_t)tg_fnv1a64(key, strlen(key)));

    const int64_t stride = p->in.ndim ? p->in.strides[p->axis] : 0;
    bool small = tg_fits_int(hi + 1) && tg_fits_int(nout + n * inner) && tg_fits_int(rows + T) && tg_fits_int(n + 8);
    emitter em = { t, l, small ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route softmax, language %s). Do not edit.\n", l->name);
    E("// c = %s of x [", op_name(p->op));
    for (int32_t d = 0; d < p->in.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->in.shape[d]);
    E("] (%s, offset %" PRId64 ", strides", tg_dtype_name(p->in_dtype), p->in.offset);
    for (int32_t d = 0; d < p->in.ndim; d++) E("%s%" PRId64, d ? ", " : " ", p->in.strides[d]);
    E(") along axis %d, %s, compact row-major; %" PRId64 " rows of %" PRId64 ", one thread each.\n", (int)p->axis,
      tg_dtype_name(p->out_dtype), rows, n);
    E("// The CPU's doubles and bounds (kernels/gpu/softmax.h): an element is written where its bound decides its\n"
      "// rounding; f[row] = 1 where one is not (the host reruns the row with the CPU's exact code), else 0.\n");
    E("// Launch: grid (%u, 1, 1) x threadgroup (%d, 1, 1); buffers x, c, f.\n", launch->grid[0], (int)T);
    tg_emit_double_head(e);
    tg_gen_emit_text(e, tg_gen_softmax_prelude);

    char b0[64], b1[64], b2[64];
    snprintf(b0, sizeof b0, "%s%s%s *x", l->global_in, *l->global_in ? " " : "", in_bf16 ? "ushort" : "uint");
    snprintf(b1, sizeof b1, "%s%s%s *c", l->global_out, *l->global_out ? " " : "", out_bf16 ? "ushort" : "uint");
    snprintf(b2, sizeof b2, "%s%suint *f", l->global_out, *l->global_out ? " " : "");
    const char *bp[3] = { b0, b1, b2 };
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, 3, used);
    E("    const %s r = gx * %d + li;\n", e->it, (int)T);
    E("    if (r >= %" PRId64 ")\n        return;\n", rows);
    if (n == 0) { /* empty rows (logsumexp: -inf each): the host's */
        E("    f[r] = 1u;\n}\n");
        tg_finish_launch(t, launch);
        return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
    }
    emit_row_offset(e, p);
    char load[160];
    snprintf(load, sizeof load, in_bf16 ? "tg_d_f32((uint)x[off + (%%s) * %" PRId64 "] << 16)"
                                        : "tg_d_f32(x[off + (%%s) * %" PRId64 "])",
             stride);
    const uint32_t bf = out_bf16 ? 1u : 0u;
    const char *st = out_bf16 ? "(ushort)" : "(uint)";

    /* the scan: max, smallest finite, finite count, NaN, in lanes j mod 8 (sm_scan) */
    E("    const tg_f64 inf = tg_sm_inf(), ninf = tg_dneg(inf), zero = %s;\n", DK(0.0));
    E("    tg_f64 mx[8], mn[8];\n    %s cnt[8];\n    uint nn[8];\n", "tg_i64");
    E("    for (int l = 0; l < 8; l++) {\n        mx[l] = ninf;\n        mn[l] = inf;\n        cnt[l] = 0;\n"
      "        nn[l] = 0u;\n    }\n");
    const char *scan = "            mx[l] = tg_dgt(v, mx[l]) ? v : mx[l];\n"
                       "            mn[l] = (tg_dlt(tg_dabs(v), inf) && tg_dlt(v, mn[l])) ? v : mn[l];\n"
                       "            cnt[l] += tg_dlt(tg_dabs(v), inf) ? 1 : 0;\n"
                       "            nn[l] |= tg_dne(v, v) ? 1u : 0u;\n";
    char v8[160], vt[160];
    snprintf(v8, sizeof v8, load, "j + l");
    snprintf(vt, sizeof vt, load, "j + l");
    /* blocks of 8, then the tail at n8: constant bounds, so the lanes stay in registers */
    const int64_t n8 = n / 8 * 8;
    E("    %s j;\n", e->it);
    E("    for (j = 0; j < %" PRId64 "; j += 8)\n        for (int l = 0; l < 8; l++) {\n", n8);
    E("            const tg_f64 v = %s;\n%s        }\n", v8, scan);
    E("    j = %" PRId64 ";\n    for (int l = 0; l < %d; l++) {\n        {\n", n8, (int)(n - n8));
    E("            const tg_f64 v = %s;\n%s        }\n    }\n", vt, scan);
    E("    tg_f64 m = ninf, xmin = inf;\n    tg_i64 nfin = 0;\n    uint hasnan = 0u;\n");
    E("    for (int l = 0; l < 8; l++) {\n        m = tg_dgt(mx[l], m) ? mx[l] : m;\n"
      "        xmin = tg_dlt(mn[l], xmin) ? mn[l] : xmin;\n        nfin += cnt[l];\n        hasnan |= nn[l];\n    }\n");
    E("    if (hasnan != 0u || tg_deq(m, inf) || tg_deq(m, ninf) || nfin == 1) { // a special row: the host's\n");
    E("        f[r] = 1u;\n        return;\n    }\n");

    /* T = S - 1: the terms below the maximum, and the maxima's count less one (sm_sum_below) */
    E("    tg_f64 a[8];\n    tg_i64 ct[8];\n");
    E("    for (int l = 0; l < 8; l++) {\n        a[l] = zero;\n        ct[l] = 0;\n    }\n");
    const char *sum = "            a[l] = tg_dadd(a[l], tg_dlt(v, m) ? tg_sm_exp_neg(tg_dsub(v, m)) : zero);\n"
                      "            ct[l] += tg_deq(v, m) ? 1 : 0;\n";
    E("    for (j = 0; j < %" PRId64 "; j += 8)\n        for (int l = 0; l < 8; l++) {\n", n8);
    E("            const tg_f64 v = %s;\n%s        }\n", v8, sum);
    E("    j = %" PRId64 ";\n    for (int l = 0; l < %d; l++) {\n        {\n", n8, (int)(n - n8));
    E("            const tg_f64 v = %s;\n%s        }\n    }\n", vt, sum);
    E("    const tg_i64 ties = ((ct[0] + ct[1]) + (ct[2] + ct[3])) + ((ct[4] + ct[5]) + (ct[6] + ct[7]));\n");
    tg_emit_lane_sum(e, "sum", "a");
    E("    const tg_f64 T = tg_dadd(sum, tg_d_i64(ties - 1));\n");
    E("    const tg_f64 U = %s; // 2^-53\n", DK(0x1p-53));
    E("    const tg_f64 M105 = %s;\n", DK(1.05));
    if (!lse) E("    const tg_f64 M102 = %s;\n", DK(1.02));
    E("    const tg_f64 spread = tg_dmin(tg_dsub(m, xmin), %s);\n", DK(746.0));
    E("    const tg_f64 eT = tg_sm_bound_T(%s, spread);\n", DK((double)((n + 7) / 8 + 3)));
    if (p->op != TGRAD_SOFTMAX_SOFTMAX)
        E("    const bool tinyT = tg_dlt(T, %s); // 2^-200: L = log1p(T) ~ T\n", DK(0x1p-200));
    E("    uint undecided = 0u;\n");
    char oj[96];
    snprintf(oj, sizeof oj, "(r / %" PRId64 ") * %" PRId64 " + r %% %" PRId64 " + j * %" PRId64, inner, n * inner, inner,
             inner);
    char vj[160];
    snprintf(vj, sizeof vj, load, "j");
    if (p->op == TGRAD_SOFTMAX_SOFTMAX) {
        E("    const tg_f64 one = %s;\n", DK(1.0));
        E("    const tg_f64 inv = tg_ddiv(one, tg_dadd(one, T));\n");
        E("    // w = (eT + spread U 1.02 + 2^-48 + 3U) 1.05 + n 2^-1000\n");
        E("    const tg_f64 w0 = tg_dadd(tg_dadd(eT, tg_dmul(tg_dmul(spread, U), M102)), %s);\n", DK(0x1p-48));
        E("    const tg_f64 w = tg_dadd(tg_dmul(tg_dadd(w0, tg_dmul(%s, U)), M105), tg_dmul(%s, %s));\n", DK(3.0),
          DK((double)n), DK(0x1p-1000));
        E("    const tg_i64 thr = tg_sm_thr(w);\n");
        E("    for (j = 0; j < %" PRId64 "; j++) {\n", n);
        E("        const tg_u64 d = tg_sm_decide(tg_dmul(tg_sm_exp_neg(tg_dsub(%s, m)), inv), w, thr, %uu);\n", vj, bf);
        E("        c[%s] = %sd;\n        undecided |= (uint)(d >> 32);\n    }\n", oj, st);
    } else if (p->op == TGRAD_SOFTMAX_LOG_SOFTMAX) {
        E("    const tg_f64 L = tg_dm_log1p(T);\n");
        E("    // w = tinyT ? 2^-49 : ((eT + 2^-50) 1.02 + 2U) 1.05\n");
        E("    const tg_f64 w = tinyT ? %s : tg_dmul(tg_dadd(tg_dmul(tg_dadd(eT, %s), M102), tg_dmul(%s, U)), M105);\n",
          DK(0x1p-49), DK(0x1p-50), DK(2.0));
        E("    const tg_i64 thr = tg_sm_thr(w);\n");
        E("    for (j = 0; j < %" PRId64 "; j++) {\n", n);
        E("        const tg_f64 v = %s;\n", vj);
        E("        // the one maximum under a tiny T: -L in (-2^-199, 0) rounds to -0\n");
        E("        const tg_u64 d = (tinyT && tg_deq(v, m)) ? (tg_u64)%s : tg_sm_decide(tg_dsub(tg_dsub(v, m), L), w, thr, %uu);\n",
          out_bf16 ? "0x8000u" : "0x80000000u", bf);
        E("        c[%s] = %sd;\n        undecided |= (uint)(d >> 32);\n    }\n", oj, st);
    } else {
        E("    const tg_f64 L = tg_dm_log1p(T), y = tg_dadd(m, L);\n");
        E("    // e = (L (eT + 2^-50) 1.05 + |y| U) 1.05 + (tinyT ? 2^-190 : 2^-800)\n");
        E("    const tg_f64 e0 = tg_dmul(tg_dmul(L, tg_dadd(eT, %s)), M105);\n", DK(0x1p-50));
        E("    const tg_f64 e = tg_dadd(tg_dmul(tg_dadd(e0, tg_dmul(tg_dabs(y), U)), M105), tinyT ? %s : %s);\n",
          DK(0x1p-190), DK(0x1p-800));
        E("    const uint lo = tg_sm_round(tg_dsub(y, e), %uu), hi = tg_sm_round(tg_dadd(y, e), %uu);\n", bf, bf);
        E("    c[r] = %slo;\n    undecided = lo != hi ? 1u : 0u;\n", st);
    }
    E("    f[r] = undecided;\n}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
