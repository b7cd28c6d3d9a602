/* The emitter's shared parts: see emit.h. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"
#include "routes.h"

/* ---- route table ---------------------------------------------------------------------------- */
#define TG_ROUTE_ENTRY_(code, nm, kind, tm, tn, tk, tx, ty, mm, mk, mn, sg, summary) \
    { code, #nm, kind, tm, tn, tk, tx, ty, mm, mk, mn, sg, summary },
static const tg_route routes[] = { TG_ROUTE_LIST(TG_ROUTE_ENTRY_) };
#undef TG_ROUTE_ENTRY_

const tg_route *tg_route_find(int32_t id) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (routes[i].id == id) return &routes[i];
    return NULL;
}

int64_t tg_ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

bool tg_fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

bool tg_span_view(const tg_view *v, int64_t *lo, int64_t *hi) {
    int64_t l = v->offset, h = v->offset, t;
    for (int32_t d = 0; d < v->ndim; d++) {
        if (tg_mul_ovf(v->shape[d] - 1, v->strides[d], &t)) return false;
        if (tg_add_ovf(t < 0 ? l : h, t, t < 0 ? &l : &h)) return false;
    }
    *lo = l, *hi = h;
    return true;
}

/* ---- index expressions ------------------------------------------------------------------------ */
uint64_t tg_magnitude(int64_t s) { return s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s; }

void tg_add_term(char *dst, size_t cap, bool *first, const char *var, int64_t s) {
    size_t n = strlen(dst);
    uint64_t mag = tg_magnitude(s);
    const char *sign = *first ? (s < 0 ? "-" : "") : (s < 0 ? " - " : " + ");
    if (mag == 1) snprintf(dst + n, cap - n, "%s%s", sign, var);
    else snprintf(dst + n, cap - n, "%s%s * %" PRIu64, sign, var, mag);
    *first = false;
}

void tg_index_expr(char *dst, size_t cap, int64_t offset, const char *v0, int64_t s0, int64_t ext0,
                       const char *v1, int64_t s1, int64_t ext1) {
    bool first = true;
    dst[0] = '\0';
    if (offset != 0) {
        snprintf(dst, cap, "%" PRId64, offset);
        first = false;
    }
    if (s0 != 0 && ext0 > 1) tg_add_term(dst, cap, &first, v0, s0);
    if (s1 != 0 && ext1 > 1) tg_add_term(dst, cap, &first, v1, s1);
    if (first) snprintf(dst, cap, "0");
}

void tg_view_index(char *dst, size_t cap, const tg_view *v, const char *const *coord) {
    bool first = true;
    dst[0] = '\0';
    if (v->offset != 0) {
        snprintf(dst, cap, "%" PRId64, v->offset);
        first = false;
    }
    for (int32_t d = 0; d < v->ndim; d++)
        if (v->shape[d] > 1 && v->strides[d] != 0) tg_add_term(dst, cap, &first, coord[d], v->strides[d]);
    if (first) snprintf(dst, cap, "0");
}

void tg_buffer_param(char *dst, size_t cap, const char *space, const char *name) {
    tg_buffer_param_typed(dst, cap, space, "ushort", name);
}

void tg_buffer_param_typed(char *dst, size_t cap, const char *space, const char *type, const char *name) {
    snprintf(dst, cap, "%s%s%s *%s", space, *space ? " " : "", type, name);
}

int64_t tg_launch_operands(struct tgrad_launch *launch, const tg_view *const *v, const char *const *names, int32_t n) {
    int64_t reach = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!v[i]) continue;
        int64_t lo = 0, hi = -1, cnt = 0;
        tg_view_numel(v[i], &cnt);
        if (cnt > 0) tg_span_view(v[i], &lo, &hi);
        reach = hi > reach ? hi : reach;
        launch->buffer_elements[launch->buffer_count] = (uint64_t)(hi + 1);
        snprintf(launch->buffer_names[launch->buffer_count++], 8, "%s", names[i]);
    }
    return reach;
}

void tg_launch_flagged_rows(struct tgrad_launch *launch, int64_t out_elements, int64_t rows, int32_t threads) {
    uint32_t nb = launch->buffer_count;
    launch->buffer_elements[nb] = (uint64_t)out_elements;
    snprintf(launch->buffer_names[nb++], 8, "c");
    launch->buffer_elements[nb] = (uint64_t)rows;
    snprintf(launch->buffer_names[nb++], 8, "f");
    launch->buffer_count = nb;
    launch->grid[0] = (uint32_t)tg_ceil_div(rows, threads);
    launch->grid[1] = launch->grid[2] = 1;
    launch->threadgroup[0] = (uint32_t)threads;
    launch->threadgroup[1] = launch->threadgroup[2] = 1;
}

void tg_emit_signature(const emitter *e, const char *name, const char *const *bufs, int nbufs,
                           const bool used[TG_B_COUNT_]) {
    static const char *const vars[TG_B_COUNT_] = { "gx", "gy", "lx", "ly", "li", "sg", "gz" };
    const tg_lang *l = e->l;
    E("%s %s(", l->kernel_prefix, name);
    for (int i = 0; i < nbufs; i++) {
        E("%s\n    %s", i ? "," : "", bufs[i]);
        E(l->buffer_suffix, i);
    }
    bool param_used[TG_P_COUNT_] = { false };
    for (int b = 0; b < TG_B_COUNT_; b++)
        if (used[b] && l->builtin_uses_param[b] >= 0) param_used[l->builtin_uses_param[b]] = true;
    for (int p = 0; p < TG_P_COUNT_; p++)
        if (param_used[p]) E(",\n    %s", l->builtin_param[p]);
    E(")\n{\n");
    for (int b = 0; b < TG_B_COUNT_; b++)
        if (used[b]) E("    const %s %s = (%s)%s;\n", e->it, vars[b], e->it, l->builtin_expr[b]);
}

void tg_launch_1d(const tg_route *r, int64_t numel, struct tgrad_launch *launch) {
    launch->grid[0] = (uint32_t)tg_ceil_div(numel, r->tile_m);
    launch->grid[1] = launch->grid[2] = 1;
    launch->threadgroup[0] = (uint32_t)r->threads_x;
    launch->threadgroup[1] = launch->threadgroup[2] = 1;
}

void tg_emit_launch_line(const emitter *e, const struct tgrad_launch *launch) {
    E("// Launch: grid (%u, %u, %u) x threadgroup (%u, %u, %u); buffers", launch->grid[0], launch->grid[1],
      launch->grid[2], launch->threadgroup[0], launch->threadgroup[1], launch->threadgroup[2]);
    for (uint32_t i = 0; i < launch->buffer_count; i++) E("%s %s", i ? "," : "", launch->buffer_names[i]);
    E(".\n");
}

void tg_key_view(char *key, size_t cap, const tg_view *v) {
    size_t n = strlen(key);
    n += (size_t)snprintf(key + n, cap - n, ";off=%" PRId64, v->offset);
    for (int32_t d = 0; d < v->ndim && n < cap; d++)
        n += (size_t)snprintf(key + n, cap - n, ";%" PRId64 ":%" PRId64, v->shape[d], v->strides[d]);
}

const char *tg_dk_text(const emitter *e, char *buf, double v) {
    if (e->t->discard) return ""; /* nothing is written (a render cache hit): skip the formatting */
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    char lit[40];
    int n = snprintf(lit, sizeof lit, "%.17g", v);
    if (!strpbrk(lit, ".e")) snprintf(lit + n, sizeof lit - (size_t)n, ".0"); /* a double literal, never an int */
    snprintf(buf, TG_DK_TEXT, "tg_dk(%s, 0x%016" PRIx64 "ul)", lit, bits);
    return buf;
}

void tg_emit_lane_sum(const emitter *e, const char *dst, const char *lanes) {
    E("    const tg_f64 %s = tg_dadd(tg_dadd(tg_dadd(%s[0], %s[1]), tg_dadd(%s[2], %s[3])),\n", dst, lanes, lanes, lanes, lanes);
    E("                              tg_dadd(tg_dadd(%s[4], %s[5]), tg_dadd(%s[6], %s[7])));\n", lanes, lanes, lanes, lanes);
}

void tg_emit_double_head(const emitter *e) {
    if (*e->l->preamble) E("%s", e->l->preamble);
    tg_emit_double_api(e);
}

void tg_emit_double_api(const emitter *e) {
    E("%s", e->l->f64);
    E("typedef %s tg_u64;\n", e->l->u64);
    if (e->l->soft_f64) {
        tg_gen_emit_text(e, tg_gen_softdouble_prelude);
        tg_gen_emit_text(e, tg_gen_softmath_prelude);
    }
}

tgrad_status tg_gen_need_double(const tg_lang *l, const char *route, const char *kind) {
    if (l->f64) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE,
                   "route %s (%s): the %s kind's kernels compute in double, which %s lacks (docs/metal.md); run it on "
                   "the CPU or on OpenCL or CUDA",
                   route, l->name, kind, l->name);
}

tgrad_status tg_not_eligible(const char *route, const char *lang, const char *why, int64_t a, int64_t b,
                                 int64_t c) {
    char msg[256];
    snprintf(msg, sizeof msg, why, (long long)a, (long long)b, (long long)c);
    return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "route %s (%s): %s", route, lang, msg);
}

void tg_finish_launch(tg_text *t, struct tgrad_launch *launch) {
    launch->source_hash = t->failed ? 0 : tg_fnv1a64(t->data, t->len);
}

/* `<it> <name>(<it> L)`: the buffer index of element L (row-major over v's shape) of view v. */
void tg_emit_index_fn(const emitter *e, const char *name, const tg_view *v) {
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
