/* The one kernel emitter: a route declaration (kernels/routes.h) and a problem become kernel
 * source in any language of lang.c.
 *
 * Every view offset and stride is a constant in the text (folded: stride 1 is `k`, stride 0 and
 * extent 1 vanish), so a transposed, sliced, reversed or expanded operand costs nothing at run
 * time. Bounds are checked in the kernels, so tiles need not divide the shape. The numerics of
 * the naive and tiled routes are the canonical order of docs/numerics.md, written with fma and
 * exact bit operations only (no double, no reliance on fp32 subnormals): see emit_helpers. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

/* ---- small arithmetic ------------------------------------------------------------------------- */
/* Lowest and highest element index an operand view touches (extents > 0). False on overflow. */
static bool span2(const tg_gen_operand *o, int64_t ext0, int64_t ext1, int64_t *lo, int64_t *hi) {
    int64_t l = o->offset, h = o->offset, t;
    const int64_t ext[2] = { ext0, ext1 };
    for (int d = 0; d < 2; d++) {
        if (tg_mul_ovf(ext[d] - 1, o->stride[d], &t)) return false;
        if (tg_add_ovf(t < 0 ? l : h, t, t < 0 ? &l : &h)) return false;
    }
    *lo = l, *hi = h;
    return true;
}

/* span2, with the batch axes of operand `which` (0: a, 1: b, 2: c) of a batched problem. */
static bool span_full(const tg_gen_matmul *p, int which, int64_t ext0, int64_t ext1, int64_t *lo, int64_t *hi) {
    const tg_gen_operand *o = which == 0 ? &p->a : which == 1 ? &p->b : &p->c;
    int64_t l, h, t;
    if (!span2(o, ext0, ext1, &l, &h)) return false;
    for (int32_t d = 0; d < p->nbatch; d++) {
        if (tg_mul_ovf(p->batch[d] - 1, p->batch_stride[which][d], &t)) return false;
        if (tg_add_ovf(t < 0 ? l : h, t, t < 0 ? &l : &h)) return false;
    }
    *lo = l, *hi = h;
    return true;
}

tg_gen_matmul tg_gen_matmul_of(const tg_view *a, const tg_view *b) {
    const int32_t nd = a->ndim, nb = nd > 2 ? nd - 2 : 0;
    tg_gen_matmul p = { .m = a->shape[nd - 2], .k = a->shape[nd - 1], .n = b->shape[nd - 1],
                        .a = { a->offset, { a->strides[nd - 2], a->strides[nd - 1] } },
                        .b = { b->offset, { b->strides[nd - 2], b->strides[nd - 1] } },
                        .c = { 0, { b->shape[nd - 1], 1 } }, .nbatch = nb };
    int64_t inner; /* the output's compact strides; an empty output's may saturate (never read) */
    if (tg_mul_ovf(p.m, p.n, &inner)) inner = INT64_MAX;
    for (int32_t d = nb - 1; d >= 0; d--) {
        p.batch[d] = a->shape[d];
        p.batch_stride[0][d] = a->strides[d];
        p.batch_stride[1][d] = b->strides[d];
        p.batch_stride[2][d] = inner;
        if (tg_mul_ovf(inner, a->shape[d], &inner)) inner = INT64_MAX;
    }
    return p;
}

int64_t tg_gen_matmul_batches(const tg_gen_matmul *p) {
    int64_t n = 1;
    for (int32_t d = 0; d < p->nbatch; d++)
        if (tg_mul_ovf(n, p->batch[d], &n)) return INT64_MAX;
    return n;
}

/* offset + i * stride[axis]: for an operand with elements an element's offset (tg_gen_check_matmul
 * checked its span). An operand without elements is never read (its kernel has an empty grid) and
 * may carry any strides: there the sum can overflow, and the bare offset stands in for it. */
static int64_t fold(const tg_gen_operand *o, int64_t i, int axis) {
    int64_t t, r;
    return tg_mul_ovf(i, o->stride[axis], &t) || tg_add_ovf(o->offset, t, &r) ? o->offset : r;
}

/* ---- the emitter ------------------------------------------------------------------------------ */
/* `as_type<float>(0x00800000u)` and friends: exact fp32 constants without hex-float literals. */
static const char *fconst(const emitter *e, char *buf, size_t cap, uint32_t bits) {
    snprintf(buf, cap, "%s(0x%08" PRIx32 "u)", e->l->bits_to_float, bits);
    return buf;
}

/* The numerics of docs/numerics.md as device functions.
 *  - tg_load_bf16: bf16 bits -> fp32, subnormals read as zeros of their sign (DAZ).
 *  - tg_step: acc + a*b, the exact sum rounded once to nearest even (fma), then flushed to a zero
 *    of its sign when the rounding with unbounded exponent is below 2^-126. Operands are never
 *    subnormal (DAZ, and acc is kept normal or zero), so only a result at or below 2^-126 needs
 *    care: there the device may have returned a subnormal, a flushed zero, or 2^-126 reached by
 *    rounding from below. Such a sum is decided again in a domain scaled by 2^64, where it is a
 *    normal number and fp32 rounding is the unbounded-exponent rounding: s = fma(a', b', acc
 *    * 2^64) with the smaller factor scaled (exact; no overflow, since |a*b| < 2^-99 there).
 *    |s| < 2^-62 means flush, else the result is s * 2^-64 (= +-2^-126). With |acc| >= 2^-100
 *    the sum is a multiple of 2^-123, so a result at or below 2^-126 is an exact zero and fma's
 *    own signed zero is right. The outcome does not depend on the device's subnormal handling.
 *  - tg_store_bf16: round to nearest even; any NaN becomes 0x7fc0. */
static void emit_helpers(const emitter *e, bool with_load, bool with_step) {
    const tg_lang *l = e->l;
    char c1[48], c2[48], c3[48], c4[48], c5[48];
    if (with_load) {
        E("// bf16 bits -> fp32; subnormal inputs are zeros of their sign (DAZ).\n");
        E("%s float tg_load_bf16(ushort h) {\n", l->function_prefix);
        E("    uint u = (uint)h << 16;\n");
        E("    if ((u & 0x7f800000u) == 0u)\n");
        E("        u &= 0x80000000u;\n");
        E("    return %s(u);\n", l->bits_to_float);
        E("}\n\n");
    }
    if (with_step) {
        E("// acc + a*b rounded once to nearest-even fp32, flushed to a signed zero below 2^-126 (tininess\n");
        E("// after rounding). Results at or below 2^-126 are decided again scaled by 2^64, where nothing is\n");
        E("// subnormal: the same bits whether or not the device keeps fp32 subnormals.\n");
        E("%s float tg_step(float acc, float a, float b) {\n", l->function_prefix);
        E("    float r = fma(a, b, acc);\n");
        E("    if (fabs(r) <= %s && fabs(acc) < %s) {\n", fconst(e, c1, sizeof c1, 0x00800000u),
          fconst(e, c2, sizeof c2, 0x0d800000u));
        E("        float sa = a;\n");
        E("        float sb = b;\n");
        E("        if (fabs(a) <= fabs(b))\n");
        E("            sa = a * %s;\n", fconst(e, c3, sizeof c3, 0x5f800000u));
        E("        else\n");
        E("            sb = b * %s;\n", c3);
        E("        float s = fma(sa, sb, acc * %s);\n", c3);
        E("        r = fabs(s) < %s ? copysign(0.0f, s) : s * %s;\n", fconst(e, c4, sizeof c4, 0x20800000u),
          fconst(e, c5, sizeof c5, 0x1f800000u));
        E("    }\n");
        E("    return r;\n");
        E("}\n\n");
    }
    E("// fp32 -> bf16 bits, round to nearest even; every NaN becomes 0x7fc0.\n");
    E("%s ushort tg_store_bf16(float f) {\n", l->function_prefix);
    E("    uint u = %s(f);\n", l->float_to_bits);
    E("    if ((u & 0x7fffffffu) > 0x7f800000u)\n");
    E("        return (ushort)0x7fc0u;\n");
    E("    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n");
    E("}\n\n");
}

/* Stage a block of operand o into shared memory (as fp32, or as the value `v` names), +0 outside
 * the matrix. Axis 0 of the block is the operand's rows (a: m, b: k), axis 1 its columns (a: k,
 * b: n). Consecutive threads walk the axis with the smaller stride (coalesced loads, whatever the
 * view); `store` is the tile element the value goes to, in the block's local names. */
typedef struct stage_axis {
    const char *local, *global, *origin; /* e.g. "r", "m", "m0" */
    int32_t size;                         /* block extent */
    int64_t extent, stride;               /* the operand's */
} stage_axis;

const tg_stage_value tg_stage_fp32 = { "float", "0.0f", "tg_load_bf16" };

static void emit_stage(const emitter *e, const char *buf, const stage_axis ax[2], int64_t offset, const char *store,
                       int32_t nthreads, const tg_stage_value *val) {
    char idx[256];
    int fast = 1; /* the axis consecutive threads walk */
    if (ax[1].stride == 0 || (ax[0].stride != 0 && ax[0].extent > 1 && tg_magnitude(ax[0].stride) < tg_magnitude(ax[1].stride)))
        fast = 0;
    const stage_axis *f = &ax[fast], *s = &ax[1 - fast];
    E("        for (%s e = li; e < %d; e += %d) {\n", e->it, ax[0].size * ax[1].size, nthreads);
    E("            const %s %s = e %% %d;\n", e->it, f->local, f->size);
    E("            const %s %s = e / %d;\n", e->it, s->local, f->size);
    for (int i = 0; i < 2; i++) E("            const %s %s = %s + %s;\n", e->it, ax[i].global, ax[i].origin, ax[i].local);
    E("            %s v = %s;\n", val->type, val->zero);
    tg_index_expr(idx, sizeof idx, offset, ax[0].global, ax[0].stride, ax[0].extent, ax[1].global, ax[1].stride,
               ax[1].extent);
    E("            if (%s < %" PRId64 " && %s < %" PRId64 ")\n", ax[0].global, ax[0].extent, ax[1].global, ax[1].extent);
    E("                v = %s(%s[%s]);\n", val->load, buf, idx);
    E("            %s = v;\n", store);
    E("        }\n");
}

void tg_emit_stage_a(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *store, int32_t nthreads,
                     const tg_stage_value *val) {
    const stage_axis ax[2] = { { "r", "m", "m0", r->tile_m, p->m, p->a.stride[0] },
                               { "kk", "k", "k0", r->tile_k, p->k, p->a.stride[1] } };
    emit_stage(e, "a", ax, p->a.offset, store, nthreads, val);
}

void tg_emit_stage_b(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *store, int32_t nthreads,
                     const tg_stage_value *val) {
    const stage_axis ax[2] = { { "kk", "k", "k0", r->tile_k, p->k, p->b.stride[0] },
                               { "col", "n", "n0", r->tile_n, p->n, p->b.stride[1] } };
    emit_stage(e, "b", ax, p->b.offset, store, nthreads, val);
}

static void emit_header_comment(const emitter *e, const tg_route *r, const tg_gen_matmul *p,
                                const struct tgrad_launch *launch) {
    char ia[256], ib[256], ic[256];
    tg_index_expr(ia, sizeof ia, p->a.offset, "m", p->a.stride[0], p->m, "k", p->a.stride[1], p->k);
    tg_index_expr(ib, sizeof ib, p->b.offset, "k", p->b.stride[0], p->k, "n", p->b.stride[1], p->n);
    tg_index_expr(ic, sizeof ic, p->c.offset, "m", p->c.stride[0], p->m, "n", p->c.stride[1], p->n);
    E("// Generated by libtgrad from kernels/routes.h (route %s, language %s). Do not edit.\n", r->name,
      e->l->name);
    E("// C[M, N] = A[M, K] @ B[K, N] with M = %" PRId64 ", K = %" PRId64 ", N = %" PRId64
      "; bf16 in and out as ushort bits.\n", p->m, p->k, p->n);
    if (r->simdgroup_matrix && e->l->warp_mma)
        E("// fp32 accumulation in bf16 mma.sync m16n8k16 tiles (tensor cores, sm_80+), the hardware's order\n"
          "// (bound: docs/kernels.md).\n");
    else if (r->simdgroup_matrix)
        E("// fp32 accumulation in 8x8 simdgroup matrices, the hardware's order (bound: docs/kernels.md).\n");
    else if (p->order == TGRAD_MATMUL_ORDER_BLOCK32)
        E("// fp32 accumulation in the block32 order of docs/numerics.md: the CPU's bits exactly.\n");
    else
        E("// fp32 accumulation in the canonical order of docs/numerics.md: the CPU's bits exactly.\n");
    if (e->batched)
        E("// Batched (torch.matmul's rule): %" PRId64 " products, product gz in threadgroup row z; a, b and c\n"
          "// are moved to its first elements, and below index the product from there.\n",
          tg_gen_matmul_batches(e->batched));
    E("// a[m, k] = a[%s]\n// b[k, n] = b[%s]\n// c[m, n] = c[%s]\n", ia, ib, ic);
    if (p->epilogue && p->epilogue->n) {
        E("// Epilogue, on each bf16 result before it is stored:");
        for (int32_t i = 0; i < p->epilogue->n; i++) E("%s %s", i ? "," : "", tgrad_op_name(p->epilogue->ops[i].op));
        E(" (each rounded to bf16 as alone:\n// kernels/gpu/elementwise.h, integer arithmetic; "
          "t<i>: tables, an entry per bf16 value).\n");
    }
    E("// Launch: grid (%u, %u, %u) x threadgroup (%u, %u, %u); buffers", launch->grid[0], launch->grid[1],
      launch->grid[2], launch->threadgroup[0], launch->threadgroup[1], launch->threadgroup[2]);
    for (uint32_t i = 0; i < launch->buffer_count; i++) E("%s %s", i ? "," : "", launch->buffer_names[i]);
    E(".\n");
    if (*e->l->preamble) E("%s", e->l->preamble);
    E("\n");
}

static const char *const batch_coord[] = { "bz0", "bz1", "bz2", "bz3", "bz4", "bz5" };
_Static_assert(sizeof batch_coord / sizeof batch_coord[0] == TG_GEN_MAX_BATCH, "a name per batch axis");

/* Whether batch axis d enters an index: extent > 1 and a stride of an operand, the output or a
 * fused op's operand (a view over [batch..., M, N]) along it. */
static bool batch_axis_read(const tg_gen_matmul *w, int32_t d) {
    if (w->batch[d] <= 1) return false;
    for (int i = 0; i < 3; i++)
        if (w->batch_stride[i][d] != 0) return true;
    for (int32_t i = 0; w->epilogue && i < w->epilogue->n; i++) {
        const tg_view *v = &w->epilogue->ops[i].operand;
        if (v->ndim == w->nbatch + 2 && v->strides[d] != 0) return true;
    }
    return false;
}

/* Whether any batch axis moves an operand (the kernel then reads its product's index gz). */
static bool batch_read(const tg_gen_matmul *w) {
    for (int32_t d = 0; d < w->nbatch; d++)
        if (batch_axis_read(w, d)) return true;
    return false;
}

/* A batched kernel's first lines: product gz's coordinates along the batch axes (row-major over
 * them, as the output), then a, b and c moved to that product's first elements (batch strides of
 * 0 broadcast an operand; each partial sum is an element's index, inside its buffer). */
static void emit_batch(const emitter *e, const tg_gen_matmul *w) {
    const int64_t total = tg_gen_matmul_batches(w);
    int64_t after = 1;
    E("    // product gz of the batch of %" PRId64 ": its coordinates, and the operands moved to its first elements\n",
      total);
    int64_t afters[TG_GEN_MAX_BATCH];
    for (int32_t d = w->nbatch - 1; d >= 0; d--) afters[d] = after, after *= w->batch[d] > 0 ? w->batch[d] : 1;
    for (int32_t d = 0; d < w->nbatch; d++) {
        if (!batch_axis_read(w, d)) continue;
        char expr[96] = "gz";
        if (afters[d] > 1) snprintf(expr, sizeof expr, "gz / %" PRId64, afters[d]);
        size_t len = strlen(expr);
        if (afters[d] * w->batch[d] < total) snprintf(expr + len, sizeof expr - len, " %% %" PRId64, w->batch[d]);
        E("    const %s %s = %s;\n", e->it, batch_coord[d], expr);
    }
    static const char *const names[3] = { "a", "b", "c" };
    const tg_gen_operand *ops[3] = { &w->a, &w->b, &w->c };
    for (int i = 0; i < 3; i++) {
        tg_view v = { .ndim = w->nbatch, .offset = ops[i]->offset };
        for (int32_t d = 0; d < w->nbatch; d++) v.shape[d] = w->batch[d], v.strides[d] = w->batch_stride[i][d];
        char idx[512];
        tg_view_index(idx, sizeof idx, &v, batch_coord);
        if (strcmp(idx, "0") != 0) E("    %s += %s;\n", names[i], idx);
    }
}

/* The matmul kernel's signature: a, b, c, then the epilogue's buffers (ew.c). */
void tg_matmul_signature(const emitter *e, const tg_gen_matmul *p, const char *name, const bool used[TG_B_COUNT_]) {
    char bufs[3][64], extra[TG_GEN_MAX_BINDINGS][64];
    const char *bp[3 + TG_GEN_MAX_BINDINGS] = { bufs[0], bufs[1], bufs[2] };
    int n = 3;
    tg_buffer_param(bufs[0], 64, e->l->global_in, "a");
    tg_buffer_param(bufs[1], 64, e->l->global_in, "b");
    if (p->out_f32) snprintf(bufs[2], 64, "%s%suint *c", e->l->global_out, *e->l->global_out ? " " : "");
    else tg_buffer_param(bufs[2], 64, e->l->global_out, "c");
    if (p->epilogue) tg_gen_emit_chain_params(e, p->epilogue, extra, bp, &n);
    bool with_z[TG_B_COUNT_];
    memcpy(with_z, used, sizeof with_z);
    with_z[TG_B_GROUP_Z] = e->batched != NULL && batch_read(e->batched); /* a batch of 1 reads no gz */
    tg_emit_signature(e, name, bp, n, with_z);
    if (e->batched) emit_batch(e, e->batched);
}

/* The one store step of every route: the fp32 accumulator `acc` of output (m, n) rounded to
 * bf16, then the epilogue's ops on that bf16 value (each rounding to bf16, as alone), then the
 * write. The caller has checked that (m, n) is inside the output. */
void tg_emit_store(const emitter *e, const tg_gen_matmul *p, const char *indent, const char *acc) {
    const char *coord[TG_GEN_MAX_BATCH + 2];
    for (int32_t d = 0; d < p->nbatch; d++) coord[d] = batch_coord[d];
    coord[p->nbatch] = "m", coord[p->nbatch + 1] = "n";
    char ic[256];
    tg_index_expr(ic, sizeof ic, p->c.offset, "m", p->c.stride[0], p->m, "n", p->c.stride[1], p->n);
    if (p->out_f32) { /* the accumulator itself, any NaN as the canonical one */
        E("%sc[%s] = %s != %s ? 0x7fc00000u : %s(%s);\n", indent, ic, acc, acc, e->l->float_to_bits, acc);
        return;
    }
    if (!p->epilogue || !p->epilogue->n) {
        E("%sc[%s] = tg_store_bf16(%s);\n", indent, ic, acc);
        return;
    }
    char inner[32];
    snprintf(inner, sizeof inner, "%s    ", indent);
    E("%s{\n", indent);
    E("%sushort v = tg_store_bf16(%s);\n", inner, acc);
    tg_gen_emit_chain(e, p->epilogue, inner, coord);
    E("%sc[%s] = v;\n", inner, ic);
    E("%s}\n", indent);
}

/* The block32 order's block (docs/numerics.md, "The block32 order") for the naive route: the
 * even-k and odd-k chains over the 32 elements from k0, then folded into acc; `guard` loads an
 * element past K as +0 (the last, partial block). */
static void emit_naive_block32(const emitter *e, const tg_gen_matmul *p, const char *indent, bool guard) {
    char ia[256], ib[256], a1[256], b1[256];
    tg_index_expr(ia, sizeof ia, p->a.offset, "m", p->a.stride[0], p->m, "k", p->a.stride[1], p->k);
    tg_index_expr(ib, sizeof ib, p->b.offset, "k", p->b.stride[0], p->k, "n", p->b.stride[1], p->n);
    tg_index_expr(a1, sizeof a1, p->a.offset, "m", p->a.stride[0], p->m, "(k + 1)", p->a.stride[1], p->k);
    tg_index_expr(b1, sizeof b1, p->b.offset, "(k + 1)", p->b.stride[0], p->k, "n", p->b.stride[1], p->n);
    E("%sfloat even = 0.0f;\n%sfloat odd = 0.0f;\n", indent, indent);
    E("%sfor (%s k = k0; k < k0 + 32; k += 2) {\n", indent, e->it);
    if (guard) {
        E("%s    even = tg_step(even, k < %" PRId64 " ? tg_load_bf16(a[%s]) : 0.0f, k < %" PRId64
          " ? tg_load_bf16(b[%s]) : 0.0f);\n", indent, p->k, ia, p->k, ib);
        E("%s    odd = tg_step(odd, k + 1 < %" PRId64 " ? tg_load_bf16(a[%s]) : 0.0f, k + 1 < %" PRId64
          " ? tg_load_bf16(b[%s]) : 0.0f);\n", indent, p->k, a1, p->k, b1);
    } else {
        E("%s    even = tg_step(even, tg_load_bf16(a[%s]), tg_load_bf16(b[%s]));\n", indent, ia, ib);
        E("%s    odd = tg_step(odd, tg_load_bf16(a[%s]), tg_load_bf16(b[%s]));\n", indent, a1, b1);
    }
    E("%s}\n", indent);
    E("%sacc = tg_step(acc, tg_step(even, odd, 1.0f), 1.0f);\n", indent);
}

static void emit_naive(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *name) {
    char ia[256], ib[256];
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_GROUP_Y] = true, [TG_B_LOCAL_X] = true,
                               [TG_B_LOCAL_Y] = true };
    tg_matmul_signature(e, p, name, used);
    E("    const %s m = gy * %d + ly;\n", e->it, r->tile_m);
    E("    const %s n = gx * %d + lx;\n", e->it, r->tile_n);
    E("    if (m >= %" PRId64 " || n >= %" PRId64 ")\n        return;\n", p->m, p->n);
    E("    float acc = 0.0f;\n");
    if (p->order == TGRAD_MATMUL_ORDER_BLOCK32) {
        int64_t whole = p->k / 32 * 32;
        E("    // the block32 order: per block of 32 k, the even-k and odd-k chains, then acc + (even + odd)\n");
        if (whole) {
            E("    for (%s k0 = 0; k0 < %" PRId64 "; k0 += 32) {\n", e->it, whole);
            emit_naive_block32(e, p, "        ", false);
            E("    }\n");
        }
        if (p->k % 32) {
            E("    {\n        // the last block: elements past K are the +0 padding of both operands\n");
            E("        const %s k0 = %" PRId64 ";\n", e->it, whole);
            emit_naive_block32(e, p, "        ", true);
            E("    }\n");
        }
        tg_emit_store(e, p, "    ", "acc");
        E("}\n");
        return;
    }
    if (p->k >= 2) {
        E("    // k-pairs (k, k + 1): the odd element first, then the even one\n");
        E("    for (%s k = 0; k < %" PRId64 "; k += 2) {\n", e->it, p->k & ~(int64_t)1);
        tg_index_expr(ia, sizeof ia, p->a.offset, "m", p->a.stride[0], p->m, "(k + 1)", p->a.stride[1], p->k);
        tg_index_expr(ib, sizeof ib, p->b.offset, "(k + 1)", p->b.stride[0], p->k, "n", p->b.stride[1], p->n);
        E("        acc = tg_step(acc, tg_load_bf16(a[%s]), tg_load_bf16(b[%s]));\n", ia, ib);
        tg_index_expr(ia, sizeof ia, p->a.offset, "m", p->a.stride[0], p->m, "k", p->a.stride[1], p->k);
        tg_index_expr(ib, sizeof ib, p->b.offset, "k", p->b.stride[0], p->k, "n", p->b.stride[1], p->n);
        E("        acc = tg_step(acc, tg_load_bf16(a[%s]), tg_load_bf16(b[%s]));\n", ia, ib);
        E("    }\n");
    }
    if (p->k & 1) {
        E("    {\n");
        E("        // odd K: the last pair's odd element is the +0 padding of both operands\n");
        E("        acc = tg_step(acc, 0.0f, 0.0f);\n");
        /* k = K - 1 folded into the offsets */
        tg_index_expr(ia, sizeof ia, fold(&p->a, p->k - 1, 1), "m", p->a.stride[0], p->m, "", 0, 1);
        tg_index_expr(ib, sizeof ib, fold(&p->b, p->k - 1, 0), "", 0, 1, "n", p->b.stride[1], p->n);
        E("        acc = tg_step(acc, tg_load_bf16(a[%s]), tg_load_bf16(b[%s]));\n", ia, ib);
        E("    }\n");
    }
    tg_emit_store(e, p, "    ", "acc");
    E("}\n");
}

static void emit_tiled(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *name) {
    const int32_t tm = r->tile_m, tn = r->tile_n, tk = r->tile_k, nx = r->threads_x, ny = r->threads_y;
    const int32_t rm = tm / ny, rn = tn / nx, nthreads = nx * ny;
    const bool block32 = p->order == TGRAD_MATMUL_ORDER_BLOCK32;
    const int64_t keven = block32 ? (p->k + 31) / 32 * 32 : p->k + (p->k & 1);
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_GROUP_Y] = true, [TG_B_LOCAL_X] = true,
                               [TG_B_LOCAL_Y] = true, [TG_B_LOCAL_INDEX] = true };
    tg_matmul_signature(e, p, name, used);
    E("    %s float a_tile[%d][%d]; // [k][m]\n", e->l->local_decl, tk, tm);
    E("    %s float b_tile[%d][%d]; // [k][n]\n", e->l->local_decl, tk, tn);
    E("    const %s m0 = gy * %d;\n", e->it, tm);
    E("    const %s n0 = gx * %d;\n", e->it, tn);
    E("    // this thread's outputs: rows m0 + ly + %d * i, columns n0 + lx + %d * j\n", ny, nx);
    E("    float acc[%d][%d];\n", rm, rn);
    if (block32) E("    float even[%d][%d];\n    float odd[%d][%d];\n", rm, rn, rm, rn);
    E("    for (int i = 0; i < %d; i++)\n", rm);
    E("        for (int j = 0; j < %d; j++)\n", rn);
    E(block32 ? "            acc[i][j] = even[i][j] = odd[i][j] = 0.0f;\n" : "            acc[i][j] = 0.0f;\n");
    if (block32)
        E("    // the block32 order: k runs to K rounded up to 32 (the +0 padding, numerics.md); per block\n"
          "    // the even-k and odd-k chains, folded into acc at the block's end\n");
    else
        E("    // k runs to K rounded up to even: element K of an odd K is the +0 padding (numerics.md)\n");
    E("    for (%s k0 = 0; k0 < %" PRId64 "; k0 += %d) {\n", e->it, keven, tk);
    tg_emit_stage_a(e, r, p, "a_tile[kk][r]", nthreads, &tg_stage_fp32);
    tg_emit_stage_b(e, r, p, "b_tile[kk][col]", nthreads, &tg_stage_fp32);
    E("        %s\n", e->l->barrier);
    if (strcmp(e->it, "int") == 0)
        E("        const int kend = min(%d, %" PRId64 " - k0);\n", tk, keven);
    else
        E("        const long kend = %" PRId64 " - k0 < %d ? %" PRId64 " - k0 : %d;\n", keven, tk, keven, tk);
    E("        for (%s kk = 0; kk < kend; kk += 2) {\n", e->it);
    E("            for (int i = 0; i < %d; i++) {\n", rm);
    E("                const float a_odd = a_tile[kk + 1][ly + %d * i];\n", ny);
    E("                const float a_even = a_tile[kk][ly + %d * i];\n", ny);
    E("                for (int j = 0; j < %d; j++) {\n", rn);
    if (block32) {
        E("                    odd[i][j] = tg_step(odd[i][j], a_odd, b_tile[kk + 1][lx + %d * j]);\n", nx);
        E("                    even[i][j] = tg_step(even[i][j], a_even, b_tile[kk][lx + %d * j]);\n", nx);
    } else {
        E("                    acc[i][j] = tg_step(acc[i][j], a_odd, b_tile[kk + 1][lx + %d * j]);\n", nx);
        E("                    acc[i][j] = tg_step(acc[i][j], a_even, b_tile[kk][lx + %d * j]);\n", nx);
    }
    E("                }\n");
    E("            }\n");
    if (block32) {
        E("            if (((k0 + kk + 2) & 31) == 0) {\n");
        E("                for (int i = 0; i < %d; i++)\n", rm);
        E("                    for (int j = 0; j < %d; j++) {\n", rn);
        E("                        acc[i][j] = tg_step(acc[i][j], tg_step(even[i][j], odd[i][j], 1.0f), 1.0f);\n");
        E("                        even[i][j] = odd[i][j] = 0.0f;\n");
        E("                    }\n");
        E("            }\n");
    }
    E("        }\n");
    E("        %s\n", e->l->barrier);
    E("    }\n");
    E("    for (int i = 0; i < %d; i++) {\n", rm);
    E("        const %s m = m0 + ly + %d * i;\n", e->it, ny);
    E("        for (int j = 0; j < %d; j++) {\n", rn);
    E("            const %s n = n0 + lx + %d * j;\n", e->it, nx);
    E("            if (m < %" PRId64 " && n < %" PRId64 ")\n", p->m, p->n);
    tg_emit_store(e, p, "                ", "acc[i][j]");
    E("        }\n");
    E("    }\n");
    E("}\n");
}

/* The language's matrix load (fmt): fragment `frag` from the element `at` (a format taking the
 * fragment's offset, `step`), row pitch `pitch`. */
static const char *matrix_op(char *dst, size_t cap, const char *fmt, const char *frag, const char *at, int32_t step,
                             int32_t pitch) {
    char where[64];
    snprintf(where, sizeof where, at, step);
    snprintf(dst, cap, fmt, frag, where, pitch);
    return dst;
}

static void emit_tc(const emitter *e, const tg_route *r, const tg_gen_matmul *p, const char *name) {
    const int32_t tm = r->tile_m, tn = r->tile_n, tk = r->tile_k, nthreads = r->threads_x * r->threads_y;
    const int32_t f = TG_TC_FRAGMENT, sgc = TG_TC_SIMDGROUP_COLS;
    const int32_t sm = tm / TG_TC_SIMDGROUP_ROWS, sn = tn / sgc; /* block of one simdgroup */
    const int32_t fm = sm / f, fn = sn / f;                      /* fragments per simdgroup */
    const char *mt = e->l->matrix_type;
    bool used[TG_B_COUNT_] = { [TG_B_GROUP_X] = true, [TG_B_GROUP_Y] = true, [TG_B_LOCAL_INDEX] = true,
                               [TG_B_SIMDGROUP] = true };
    tg_matmul_signature(e, p, name, used);
    E("    %s float a_tile[%d][%d]; // [m][k]\n", e->l->local_decl, tm, tk);
    E("    %s float b_tile[%d][%d]; // [k][n]\n", e->l->local_decl, tk, tn);
    E("    %s float c_tile[%d][%d]; // [m][n]\n", e->l->local_decl, tm, tn);
    E("    const %s m0 = gy * %d;\n", e->it, tm);
    E("    const %s n0 = gx * %d;\n", e->it, tn);
    E("    // simdgroup sg owns the %dx%d block at (sm, sn) of the tile, as %dx%d fragments of %dx%d\n", sm, sn,
      fm, fn, f, f);
    E("    const int sm = (int)(sg / %d) * %d;\n", sgc, sm);
    E("    const int sn = (int)(sg %% %d) * %d;\n", sgc, sn);
    E("    %s acc[%d][%d];\n", mt, fm, fn);
    E("    for (int i = 0; i < %d; i++)\n", fm);
    E("        for (int j = 0; j < %d; j++)\n", fn);
    char op[160];
    snprintf(op, sizeof op, e->l->matrix_zero, f, f);
    E("            acc[i][j] = %s;\n", op);
    E("    // zeros stand in for the elements past M, K and N: zero products leave the sums unchanged\n");
    E("    for (%s k0 = 0; k0 < %" PRId64 "; k0 += %d) {\n", e->it, p->k, tk);
    tg_emit_stage_a(e, r, p, "a_tile[r][kk]", nthreads, &tg_stage_fp32);
    tg_emit_stage_b(e, r, p, "b_tile[kk][col]", nthreads, &tg_stage_fp32);
    E("        %s\n", e->l->barrier);
    E("        for (int kk = 0; kk < %d; kk += %d) {\n", tk, f);
    E("            %s a_frag[%d];\n", mt, fm);
    E("            %s b_frag[%d];\n", mt, fn);
    E("            for (int i = 0; i < %d; i++)\n", fm);
    E("                %s\n", matrix_op(op, sizeof op, e->l->matrix_load, "a_frag[i]", "a_tile[sm + %d * i][kk]", f, tk));
    E("            for (int j = 0; j < %d; j++)\n", fn);
    E("                %s\n", matrix_op(op, sizeof op, e->l->matrix_load, "b_frag[j]", "b_tile[kk][sn + %d * j]", f, tn));
    E("            for (int i = 0; i < %d; i++)\n", fm);
    E("                for (int j = 0; j < %d; j++)\n", fn);
    snprintf(op, sizeof op, e->l->matrix_mma, "acc[i][j]", "a_frag[i]", "b_frag[j]", "acc[i][j]");
    E("                    %s\n", op);
    E("        }\n");
    E("        %s\n", e->l->barrier);
    E("    }\n");
    E("    for (int i = 0; i < %d; i++)\n", fm);
    E("        for (int j = 0; j < %d; j++)\n", fn);
    char at[64];
    snprintf(at, sizeof at, "c_tile[sm + %d * i][sn + %d * j]", f, f);
    snprintf(op, sizeof op, e->l->matrix_store, "acc[i][j]", at, tn);
    E("            %s\n", op);
    E("    %s\n", e->l->barrier);
    E("    for (%s e = li; e < %d; e += %d) {\n", e->it, tm * tn, nthreads);
    E("        const %s r = e / %d;\n", e->it, tn);
    E("        const %s col = e %% %d;\n", e->it, tn);
    E("        const %s m = m0 + r;\n", e->it);
    E("        const %s n = n0 + col;\n", e->it);
    E("        if (m < %" PRId64 " && n < %" PRId64 ")\n", p->m, p->n);
    tg_emit_store(e, p, "            ", "c_tile[r][col]");
    E("    }\n");
    E("}\n");
}

/* ---- eligibility --------------------------------------------------------------------------- */
tgrad_status tg_gen_check_matmul(const tg_route *r, const tg_lang *l, const tg_gen_matmul *p) {
    if (r->kind != TG_ROUTE_MATMUL)
        return tg_not_eligible(r->name, l->name, "not a matmul route (render it with tgrad_render_copy)", 0, 0, 0);
    if (r->simdgroup_matrix && !l->simdgroup_matrix && !l->warp_mma)
        return tg_not_eligible(r->name, l->name,
                               "needs 8x8 simdgroup matrices (MSL) or warp-level bf16 mma.sync (CUDA, sm_80+), "
                               "which this language lacks", 0, 0, 0);
    if (p->m < r->min_m || p->k < r->min_k || p->n < r->min_n) {
        char why[160];
        snprintf(why, sizeof why, "needs M >= %d, K >= %d, N >= %d (got %%lld, %%lld, %%lld); tiled takes every shape",
                 r->min_m, r->min_k, r->min_n);
        return tg_not_eligible(r->name, l->name, why, p->m, p->k, p->n);
    }
    if (tg_ceil_div(p->m, r->tile_m) > UINT32_MAX || tg_ceil_div(p->n, r->tile_n) > UINT32_MAX)
        return tg_not_eligible(r->name, l->name, "%lld x %lld outputs need more than 2^32-1 threadgroups along an axis",
                            p->m, p->n, 0);
    if (p->nbatch < 0 || p->nbatch > TG_GEN_MAX_BATCH)
        return tg_not_eligible(r->name, l->name, "%lld batch axes (at most %lld)", p->nbatch, TG_GEN_MAX_BATCH, 0);
    if (p->out_f32 && (r->simdgroup_matrix || (p->epilogue && p->epilogue->n)))
        return tg_not_eligible(r->name, l->name,
                               "a float32 result (the accumulators) renders on the naive and tiled routes, "
                               "without an epilogue", 0, 0, 0);
    const int64_t nb = tg_gen_matmul_batches(p);
    if (p->nbatch > 0 && nb > TG_GEN_MAX_GRID_Z)
        return tg_not_eligible(r->name, l->name,
                               "a batch of %lld products needs more than %lld threadgroups along z (CUDA's limit, "
                               "kept on every device)", nb, TG_GEN_MAX_GRID_Z, 0);
    int64_t lo, hi;
    const struct { int64_t e0, e1; } ops[3] = { { p->m, p->k }, { p->k, p->n }, { p->m, p->n } };
    for (int i = 0; i < 3; i++)
        if (ops[i].e0 > 0 && ops[i].e1 > 0 && nb > 0 && (!span_full(p, i, ops[i].e0, ops[i].e1, &lo, &hi) || lo < 0))
            return tg_not_eligible(r->name, l->name,
                                "the view of operand %lld (0: a, 1: b, 2: the output) reaches outside its buffer", i, 0, 0);
    if (p->epilogue) return tg_gen_check_chain(r->name, l, p->epilogue);
    return TGRAD_OK;
}

/* ---- rendering -------------------------------------------------------------------------------- */
/* A stable entry-point name: route, shape, and a hash of everything else that shapes the text. */
static void kernel_name(char dst[TGRAD_KERNEL_NAME_MAX], const char *route, const char *key, int64_t m,
                        int64_t k, int64_t n) {
    uint32_t h = (uint32_t)tg_fnv1a64(key, strlen(key));
    int len = snprintf(dst, TGRAD_KERNEL_NAME_MAX, "tgrad_%s_%" PRId64 "x%" PRId64 "x%" PRId64 "_%08" PRIx32,
                       route, m, k, n, h);
    if (len < 0 || len >= TGRAD_KERNEL_NAME_MAX)
        snprintf(dst, TGRAD_KERNEL_NAME_MAX, "tgrad_%s_%016" PRIx64, route, tg_fnv1a64(key, strlen(key)));
}

tgrad_status tg_gen_render_matmul(const tg_route *r, const tg_lang *l, const tg_gen_matmul *whole, tg_text *t,
                                  struct tgrad_launch *launch) {
    int64_t hi[3] = { -1, -1, -1 }, lo;
    const int64_t batches = tg_gen_matmul_batches(whole);
    /* A batched kernel moves its operands to each product's first elements (emit_batch): the
     * route emitters index from there, with offsets 0. */
    tg_gen_matmul moved = *whole;
    if (whole->nbatch > 0) moved.a.offset = moved.b.offset = moved.c.offset = 0;
    const tg_gen_matmul *p = &moved;
    const struct { int64_t e0, e1; } ops[3] = { { p->m, p->k }, { p->k, p->n }, { p->m, p->n } };
    bool small = tg_fits_int(p->m + r->tile_m) && tg_fits_int(p->n + r->tile_n) && tg_fits_int(p->k + r->tile_k + 2) &&
                 tg_fits_int(batches);
    memset(launch, 0, sizeof *launch);
    for (int i = 0; i < 3; i++) {
        if (ops[i].e0 > 0 && ops[i].e1 > 0 && batches > 0) span_full(whole, i, ops[i].e0, ops[i].e1, &lo, &hi[i]);
        launch->buffer_elements[i] = (uint64_t)(hi[i] + 1);
        small = small && tg_fits_int(hi[i]);
    }
    launch->buffer_count = 3;
    snprintf(launch->buffer_names[0], 8, "a");
    snprintf(launch->buffer_names[1], 8, "b");
    snprintf(launch->buffer_names[2], 8, "c");
    if (p->epilogue) {
        tg_gen_chain_launch(p->epilogue, launch);
        small = small && tg_fits_int(tg_gen_chain_reach(p->epilogue));
    }
    launch->grid[0] = (uint32_t)tg_ceil_div(p->n, r->tile_n);
    launch->grid[1] = (uint32_t)tg_ceil_div(p->m, r->tile_m);
    launch->grid[2] = (uint32_t)batches; /* 1 for a 2-D product; checked <= TG_GEN_MAX_GRID_Z */
    launch->threadgroup[0] = (uint32_t)r->threads_x;
    launch->threadgroup[1] = (uint32_t)r->threads_y;
    launch->threadgroup[2] = 1;
    if (r->id == TGRAD_ROUTE_TILED) launch->threadgroup_memory = (uint32_t)(4 * r->tile_k * (r->tile_m + r->tile_n));
    if (r->id == TGRAD_ROUTE_TC)
        launch->threadgroup_memory = l->warp_mma ? tg_tc_cuda_shared_bytes(r)
            : (uint32_t)(4 * (r->tile_k * (r->tile_m + r->tile_n) + r->tile_m * r->tile_n));
    char key[2048];
    snprintf(key, sizeof key, "m=%" PRId64 ";k=%" PRId64 ";n=%" PRId64 ";a=%" PRId64 ",%" PRId64 ",%" PRId64
             ";b=%" PRId64 ",%" PRId64 ",%" PRId64 ";c=%" PRId64 ",%" PRId64 ",%" PRId64,
             p->m, p->k, p->n, p->a.offset, p->a.stride[0], p->a.stride[1], p->b.offset, p->b.stride[0],
             p->b.stride[1], p->c.offset, p->c.stride[0], p->c.stride[1]);
    for (int32_t d = 0; d < p->nbatch; d++) {
        size_t len = strlen(key);
        snprintf(key + len, sizeof key - len, ";z%" PRId32 "=%" PRId64 ":%" PRId64 ",%" PRId64 ",%" PRId64 "@%" PRId64
                 ",%" PRId64, d, p->batch[d], p->batch_stride[0][d], p->batch_stride[1][d], p->batch_stride[2][d],
                 whole->a.offset, whole->b.offset);
    }
    if (p->epilogue) tg_gen_chain_key(p->epilogue, key, sizeof key);
    char route_name[32]; /* a block32 kernel's name says so (its text differs for the same problem); a batched one too */
    int len = snprintf(route_name, sizeof route_name, "%s%s", r->name,
                       p->order == TGRAD_MATMUL_ORDER_BLOCK32 && !r->simdgroup_matrix ? "_block32" : "");
    if (p->nbatch > 0) len += snprintf(route_name + len, sizeof route_name - (size_t)len, "_batch%" PRId64, batches);
    if (p->out_f32) snprintf(route_name + len, sizeof route_name - (size_t)len, "_f32"); /* the accumulators */
    kernel_name(launch->kernel_name, route_name, key, p->m, p->k, p->n);

    emitter em = { t, l, small ? "int" : "long", p->nbatch > 0 ? whole : NULL }, *e = &em;
    emit_header_comment(e, r, p, launch);
    emit_helpers(e, !(r->id == TGRAD_ROUTE_TC && l->warp_mma), r->id != TGRAD_ROUTE_TC);
    tg_gen_emit_prelude(e, p->epilogue);
    switch (r->id) {
    case TGRAD_ROUTE_NAIVE: emit_naive(e, r, p, launch->kernel_name); break;
    case TGRAD_ROUTE_TILED: emit_tiled(e, r, p, launch->kernel_name); break;
    case TGRAD_ROUTE_TC:
        if (l->warp_mma) tg_emit_tc_cuda(e, r, p, launch->kernel_name);
        else emit_tc(e, r, p, launch->kernel_name);
        break;
    default: return tg_fail(TGRAD_ERR_INTERNAL, "render: route %s has no emitter", r->name);
    }
    tg_finish_launch(t, launch);
    return t->failed ? tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "render: cannot grow the kernel text") : TGRAD_OK;
}

