/* The norm route: rms_norm and layer_norm over the trailing axes, one thread per row, in double
 * (OpenCL C with cl_khr_fp64, CUDA; MSL has no double and is refused). Each row's thread does what
 * the CPU's norm loops do (kernels/cpu/norm_loops.h, through kernels/gpu/norm.h): the sums in eight
 * lanes (j mod 8), the bounds of ops/norm.c; it writes each element whose bound decides its
 * rounding, and flags the row (f[r] = 1) when an element is left undecided or the row's bound does
 * not hold (a non-finite sum, a zero variance, a wide bound). The host reruns the flagged rows with
 * the CPU's own row code (device.c calls the kind's gpu_finish, tg_norm_rows_on_host). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

static const char *op_name(int32_t op) { return op == TG_NORM_RMS ? "rms_norm" : "layer_norm"; }

tgrad_status tg_gen_check_norm(const tg_lang *l, const tg_gen_norm *p) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_NORM);
    if (!l->f64)
        return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE,
                       "route norm (%s): the norm kind's kernels compute in double, which %s lacks (docs/metal.md); "
                       "run it on the CPU or on OpenCL or CUDA",
                       l->name, l->name);
    if (p->op != TG_NORM_RMS && p->op != TG_NORM_LAYER)
        return tg_not_eligible(r->name, l->name, "norm op %lld", p->op, 0, 0);
    if (p->naxes < 1 || p->naxes > p->x.ndim)
        return tg_not_eligible(r->name, l->name, "%lld normalized axes of %lld", p->naxes, p->x.ndim, 0);
    int64_t numel, lo, hi;
    if (tg_view_numel(&p->x, &numel)) return tg_not_eligible(r->name, l->name, "element count overflows", 0, 0, 0);
    int64_t n = 1;
    for (int32_t d = 0; d < p->naxes; d++) n *= p->x.shape[p->x.ndim - 1 - d];
    if (n > 0 && tg_ceil_div(numel / n, r->threads_x) > INT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld rows need more than 2^31-1 threadgroups", numel / n, 0, 0);
    const tg_view *v[3] = { &p->x, p->has_w ? &p->w : NULL, p->has_b ? &p->b : NULL };
    for (int32_t i = 0; i < 3; i++)
        if (v[i] && numel > 0 && (!tg_span_view(v[i], &lo, &hi) || lo < 0))
            return tg_not_eligible(r->name, l->name, "an operand's view reaches outside its buffer", 0, 0, 0);
    return TGRAD_OK;
}

/* `<it> <name>(<it> L)`: the buffer index of element L (row-major over v's shape) of view v. */
static void emit_index_fn(const emitter *e, const char *name, const tg_view *v) {
    E("%s %s %s(%s L)\n{\n    %s at = %" PRId64 ";\n", e->l->function_prefix, e->it, name, e->it, e->it, v->offset);
    int64_t suffix = 1;
    for (int32_t d = v->ndim - 1; d >= 0; d--) {
        if (v->shape[d] > 1 && v->strides[d] != 0) {
            if (d == 0) E("    at += (L / %" PRId64 ") * %" PRId64 ";\n", suffix, v->strides[d]);
            else E("    at += ((L / %" PRId64 ") %% %" PRId64 ") * %" PRId64 ";\n", suffix, v->shape[d], v->strides[d]);
        }
        suffix *= v->shape[d];
    }
    E("    return at;\n}\n");
}

static void buffer_decl(char *dst, size_t cap, const char *space, const char *type, const char *name) {
    snprintf(dst, cap, "%s%s%s *%s", space, *space ? " " : "", type, name);
}

tgrad_status tg_gen_render_norm(const tg_lang *l, const tg_gen_norm *p, tg_text *t, struct tgrad_launch *launch) {
    const tg_route *r = tg_route_find(TGRAD_ROUTE_NORM);
    const bool rms = p->op == TG_NORM_RMS;
    const int32_t T = r->threads_x;
    int64_t n = 1, numel = 0;
    for (int32_t d = 0; d < p->naxes; d++) n *= p->x.shape[p->x.ndim - 1 - d];
    tg_view_numel(&p->x, &numel);
    const int64_t rows = n ? numel / n : 0;
    memset(launch, 0, sizeof *launch);
    const tg_view *v[3] = { &p->x, p->has_w ? &p->w : NULL, p->has_b ? &p->b : NULL };
    const char *names[3] = { "x", "w", "b" };
    uint32_t nb = 0;
    int64_t reach = 0;
    for (int32_t i = 0; i < 3; i++) {
        if (!v[i]) continue;
        int64_t lo = 0, hi = -1, cnt = 0;
        tg_view_numel(v[i], &cnt);
        if (cnt > 0) tg_span_view(v[i], &lo, &hi);
        reach = hi > reach ? hi : reach;
        launch->buffer_elements[nb] = (uint64_t)(hi + 1);
        snprintf(launch->buffer_names[nb++], 8, "%s", names[i]);
    }
    launch->buffer_elements[nb] = (uint64_t)numel;
    snprintf(launch->buffer_names[nb++], 8, "c");
    launch->buffer_elements[nb] = (uint64_t)rows;
    snprintf(launch->buffer_names[nb++], 8, "f");
    launch->buffer_count = nb;
    launch->grid[0] = (uint32_t)tg_ceil_div(rows, T);
    launch->grid[1] = launch->grid[2] = 1;
    launch->threadgroup[0] = (uint32_t)T;
    launch->threadgroup[1] = launch->threadgroup[2] = 1;
    char key[4096];
    size_t kn = (size_t)snprintf(key, sizeof key, "norm;%d;%d;%a;%d%d", (int)p->op, (int)p->naxes, p->eps, (int)p->has_w,
                                 (int)p->has_b);
    for (int32_t i = 0; i < 3; i++) {
        if (!v[i]) continue;
        kn += (size_t)snprintf(key + kn, sizeof key - kn, ";off=%" PRId64, v[i]->offset);
        for (int32_t d = 0; d < v[i]->ndim && kn < sizeof key; d++)
            kn += (size_t)snprintf(key + kn, sizeof key - kn, ";%" PRId64 ":%" PRId64, v[i]->shape[d], v[i]->strides[d]);
    }
    snprintf(launch->kernel_name, TGRAD_KERNEL_NAME_MAX, "tgrad_norm_%s_%" PRId64 "_%08" PRIx32, rms ? "rms" : "layer", n,
             (uint32_t)tg_fnv1a64(key, strlen(key)));

    bool small = tg_fits_int(reach + 1) && tg_fits_int(numel + n + 8) && tg_fits_int(rows + T);
    emitter em = { t, l, small ? "int" : "long", NULL }, *e = &em;
    E("// Generated by libtgrad from kernels/routes.h (route norm, language %s). Do not edit.\n", l->name);
    E("// c = %s of x [", op_name(p->op));
    for (int32_t d = 0; d < p->x.ndim; d++) E("%s%" PRId64, d ? ", " : "", p->x.shape[d]);
    E("] (bf16, offset %" PRId64 ", strides", p->x.offset);
    for (int32_t d = 0; d < p->x.ndim; d++) E("%s%" PRId64, d ? ", " : " ", p->x.strides[d]);
    E(") over its last %d axes, eps %.17g%s%s, bf16, compact row-major;\n", (int)p->naxes, p->eps,
      p->has_w ? ", weight w" : "", p->has_b ? ", bias b" : "");
    E("// %" PRId64 " rows of %" PRId64 ", one thread each. The CPU's doubles and bounds (kernels/gpu/norm.h): an\n"
      "// element is written where its bound decides its rounding; f[row] = 1 where one is not (the host reruns\n"
      "// the row with the CPU's exact code), else 0.\n", rows, n);
    E("// Launch: grid (%u, 1, 1) x threadgroup (%d, 1, 1); buffers", launch->grid[0], (int)T);
    for (uint32_t i = 0; i < nb; i++) E("%s %s", i ? "," : "", launch->buffer_names[i]);
    E(".\n");
    if (*l->preamble) E("%s", l->preamble);
    E("%s", l->f64);
    E("typedef %s tg_u64;\n", l->u64);
    tg_gen_emit_text(e, tg_gen_norm_prelude);
    emit_index_fn(e, "tg_x_at", &p->x);
    if (p->has_w) emit_index_fn(e, "tg_w_at", &p->w);
    if (p->has_b) emit_index_fn(e, "tg_b_at", &p->b);

    char decl[5][64];
    const char *bp[5];
    int nbp = 0;
    for (int32_t i = 0; i < 3; i++)
        if (v[i]) buffer_decl(decl[nbp], sizeof decl[nbp], l->global_in, "ushort", names[i]), bp[nbp] = decl[nbp], nbp++;
    buffer_decl(decl[nbp], sizeof decl[nbp], l->global_out, "ushort", "c"), bp[nbp] = decl[nbp], nbp++;
    buffer_decl(decl[nbp], sizeof decl[nbp], l->global_out, "uint", "f"), bp[nbp] = decl[nbp], nbp++;
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_LOCAL_INDEX] = true };
    tg_emit_signature(e, launch->kernel_name, bp, nbp, used);
    E("    const %s r = gx * %d + li;\n", e->it, (int)T);
    E("    if (r >= %" PRId64 ")\n        return;\n", rows);
    E("    const %s base = r * %" PRId64 ";\n", e->it, n);
    E("    const double U = 1.1102230246251565e-16; // 2^-53\n");
    E("    const double eps = %.17g, dn = %" PRId64 ".0;\n", p->eps, n);
    E("    const double inf = tg_d_of((tg_u64)0x7ff00000u << 32);\n");
    const int64_t n8 = n / 8 * 8;
    const char *X = "tg_nm_bf((uint)x[tg_x_at(base + %s)])";
    char xl[96], xi[96];
    snprintf(xl, sizeof xl, X, "j + l");
    snprintf(xi, sizeof xi, X, "i");
    /* the lanes: blocks of 8, then the tail at n8 (constant bounds: registers) */
#define LANES(body)                                                                                                     \
    do {                                                                                                                \
        E("    for (j = 0; j < %" PRId64 "; j += 8)\n        for (int l = 0; l < 8; l++) {\n", n8);                   \
        E("            const double v = %s;\n%s        }\n", xl, body);                                              \
        E("    j = %" PRId64 ";\n    for (int l = 0; l < %d; l++) {\n", n8, (int)(n - n8));                          \
        E("        const double v = %s;\n    %s    }\n", xl, body);                                                  \
    } while (0)
    E("    %s j;\n", e->it);
    E("    uint undecided = 0u;\n");
    if (rms) {
        E("    double a[8];\n    for (int l = 0; l < 8; l++)\n        a[l] = 0.0;\n");
        LANES("            a[l] += v * v;\n");
        E("    const double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));\n");
        E("    const double rr = s / dn + eps, inv = 1.0 / sqrt(rr);\n");
        E("    if (!(fabs(s) < inf) || !(rr > 0.0)) { // outside the bound's domain: the host's\n");
        E("        f[r] = 1u;\n        return;\n    }\n");
        E("    const double rel = (dn + 16.0) * U;\n");
        E("    for (%s i = 0; i < %" PRId64 "; i++) {\n", e->it, n);
        E("        const double y = %s * %s * inv;\n", xi, p->has_w ? "tg_nm_bf((uint)w[tg_w_at(i)])" : "1.0");
        E("        const tg_u64 d = tg_nm_fast(y, fabs(y) * rel);\n");
        E("        c[base + i] = (ushort)d;\n        undecided |= (uint)(d >> 32);\n    }\n");
    } else {
        E("    double a[8], b8[8];\n    for (int l = 0; l < 8; l++) {\n        a[l] = 0.0;\n        b8[l] = 0.0;\n    }\n");
        LANES("            a[l] += v;\n            b8[l] += fabs(v);\n");
        E("    const double sx = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));\n");
        E("    const double sa = ((b8[0] + b8[1]) + (b8[2] + b8[3])) + ((b8[4] + b8[5]) + (b8[6] + b8[7]));\n");
        E("    const double mu = sx / dn;\n");
        E("    const double delta = (dn + 4.0) * U * (sa / dn) * 1.01; // |mu - the exact mean| <= delta\n");
        E("    for (int l = 0; l < 8; l++)\n        a[l] = 0.0;\n");
        LANES("            a[l] += (v - mu) * (v - mu);\n");
        E("    const double q = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));\n");
        E("    const double rmid = q / dn + eps, inv = 1.0 / sqrt(rmid);\n");
        E("    const double g = (dn + 4.0) * U * 1.01;\n");
        E("    const double rlo = ((q / (1.0 + g) - dn * delta * delta) / dn + eps) * (1.0 - 4.0 * U);\n");
        E("    const double rhi = ((q / (1.0 - g)) / dn + eps) * (1.0 + 4.0 * U);\n");
        E("    const bool bounded = fabs(sa) < inf && fabs(q) < inf && rlo > 0.0 && rhi < inf;\n");
        E("    const double rho = bounded ? 0.5 * ((rhi - rlo) / rlo) * 1.01 + 4.0 * U : inf;\n");
        E("    if (!bounded || !(rho <= 0.0009765625)) { // no bound (or a wide one): the host's\n");
        E("        f[r] = 1u;\n        return;\n    }\n");
        E("    const double c1 = (rho + 5.0 * U) * 1.01, c2 = delta * (1.0 + rho + U) * 1.01;\n");
        E("    for (%s i = 0; i < %" PRId64 "; i++) {\n", e->it, n);
        E("        const double wi = %s, bi = %s;\n", p->has_w ? "tg_nm_bf((uint)w[tg_w_at(i)])" : "1.0",
          p->has_b ? "tg_nm_bf((uint)b[tg_b_at(i)])" : "0.0");
        E("        const double dx = %s - mu, y = wi * dx * inv + bi;\n", xi);
        E("        const double err = fabs(wi) * inv * (fabs(dx) * c1 + c2) + fabs(y) * 2.0 * U;\n");
        E("        const tg_u64 d = tg_nm_fast(y, err);\n");
        E("        c[base + i] = (ushort)d;\n        undecided |= (uint)(d >> 32);\n    }\n");
    }
#undef LANES
    E("    f[r] = undecided;\n}\n");
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}
