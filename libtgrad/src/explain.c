/* explain, route and buffer ids: the plan that realizing a tensor runs, printed from the scheduler's
 * steps (schedule.c) without running or changing anything. The schedule is built and read under
 * tg_graph_lock so that no node is detached (by a realization finishing on another thread) while
 * it is read. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kinds.h"

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    if (t->oom) return;
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { t->oom = true; return; }
        if (t->p && t->len + (size_t)n < t->cap) { t->len += (size_t)n; return; }
        size_t cap = (t->cap ? t->cap * 2 : 1024) + (size_t)n;
        char *q = tg_realloc(t->p, cap);
        if (!q) { t->oom = true; return; }
        t->p = q, t->cap = cap;
    }
}

static void put_dims(text *t, const int64_t *v, int32_t n, bool json) {
    put(t, json ? "[" : "(");
    for (int32_t i = 0; i < n; i++) put(t, "%s%lld", i ? ", " : "", (long long)v[i]);
    put(t, json ? "]" : (n == 1 ? ",)" : ")"));
}

/* Bytes an operand's view reads: at most INT64_MAX - 1 (views obey the size rule of view.c), so
 * the two operands of a step sum to less than 2^64 in uint64_t (expanded views can pass 2^63). */
static uint64_t view_bytes(const tg_view *v, int32_t dtype) {
    int64_t n;
    tg_view_numel(v, &n);
    return (uint64_t)n * (uint64_t)tg_dtype_size(dtype);
}

/* The step's kernel: its prologue (a reduction's: "mul+"), its base op, then each fused op
 * ("matmul+add+gelu", "mul+sum+add+rsqrt"). */
static void kernel_name(const tg_step *st, char *dst, size_t cap) {
    size_t n = 0;
    if (st->pro_base) {
        n += (size_t)snprintf(dst, cap, "%s+", tgrad_op_name(st->pro_base->ew));
        for (int32_t i = 0; i < st->npro && n < cap; i++)
            n += (size_t)snprintf(dst + n, cap - n, "%s+", tgrad_op_name(st->prologue[i].op));
    }
    if (n < cap) n += (size_t)snprintf(dst + n, cap - n, "%s", tg_kind_of(st->op)->base_name(st));
    for (int32_t i = 0; i < st->nfused && n < cap; i++)
        n += (size_t)snprintf(dst + n, cap - n, "+%s", tgrad_op_name(st->epilogue[i].op));
}

/* What operand i of the step's reads is to its kernel: a matmul's a or b, an elementwise op's x
 * (or a, b), a fused op's other operand by that op's name. */
static const char *operand_name(const tg_step *st, int32_t i) {
    if (tg_kind_of(st->op)->role == TG_ROLE_MOVEMENT) return "source";
    int32_t nbase = st->pro_base ? st->pro_base->ninputs : st->ninputs;
    static const char *const abc[] = { "a", "b", "c" }; /* where: cond, then its values */
    if (i < nbase) return nbase == 1 ? "x" : i < 3 ? abc[i] : "operand";
    int32_t k = i - nbase;
    for (int32_t f = 0; f < st->npro; f++)
        if (st->prologue[f].operand && k-- == 0) return tgrad_op_name(st->prologue[f].op);
    for (int32_t f = 0; f < st->nfused; f++)
        if (st->epilogue[f].operand && k-- == 0) return tgrad_op_name(st->epilogue[f].op);
    return "operand";
}

static void describe(text *t, const tg_schedule *P, const tg_buffer *target, const tg_view *tv, bool json) {
    if (json) {
        put(t, "{\"tensor\": {\"buffer\": %llu, \"shape\": ", (unsigned long long)target->id);
        put_dims(t, tv->shape, tv->ndim, true);
        put(t, ", \"strides\": ");
        put_dims(t, tv->strides, tv->ndim, true);
        put(t, ", \"offset\": %lld, \"realized\": %s", (long long)tv->offset, target->node ? "false" : "true");
        if (!target->node) put(t, ", \"route\": \"%s\"", target->route);
        put(t, "}, \"steps\": [");
    } else if (!target->node) {
        put(t, "realized: buf#%llu by %s; nothing to run\n", (unsigned long long)target->id, target->route);
    } else {
        put(t, "plan for buf#%llu: %d step%s\n", (unsigned long long)target->id, P->n, P->n == 1 ? "" : "s");
    }
    for (int32_t s = 0; s < P->n; s++) {
        const tg_step *st = &P->steps[s];
        const tg_buffer *b = st->buf;
        const char *route = st->route;
        uint64_t read = 0;
        int64_t written = (int64_t)tg_buffer_bytes(b); /* a buffer's byte count fits */
        for (int32_t i = 0; i < st->nreads; i++) read += view_bytes(&tg_step_read(st, i)->view, tg_step_read(st, i)->buf->dtype);
        char kernel[160];
        kernel_name(st, kernel, sizeof kernel);
        if (json) {
            put(t, "%s{\"step\": %d, \"op\": \"%s\", \"kernel\": \"%s\", \"fused\": [", s ? ", " : "", s,
                tg_kind_of(st->op)->base_name(st), kernel);
            for (int32_t f = 0; f < st->nfused; f++) put(t, "%s\"%s\"", f ? ", " : "", tgrad_op_name(st->epilogue[f].op));
            put(t, "], \"prologue\": [");
            if (st->pro_base) put(t, "\"%s\"", tgrad_op_name(st->pro_base->ew));
            for (int32_t f = 0; f < st->npro; f++) put(t, ", \"%s\"", tgrad_op_name(st->prologue[f].op));
            put(t, "], \"not_fused\": ");
            if (st->unfused) put(t, "\"%s\"", st->unfused);
            else put(t, "null");
            put(t, ", \"route\": \"%s\", \"output\": {\"buffer\": %llu, \"shape\": ", route, (unsigned long long)b->id);
        } else {
            put(t, "step %d: %s %s -> buf#%llu ", s, kernel, route, (unsigned long long)b->id);
        }
        put_dims(t, b->node->out.shape, b->node->out.ndim, json);
        char detail[192] = "";
        if (tg_kind_of(st->op)->plan_detail) tg_kind_of(st->op)->plan_detail(st, detail, sizeof detail);
        if (json) put(t, ", \"dtype\": \"%s\", \"bytes\": %lld}, ", tg_dtype_name(b->dtype), (long long)written);
        if (json && detail[0]) put(t, "\"plan\": \"%s\", ", detail);
        if (!json && detail[0]) put(t, " | %s", detail);
        if (json) put(t, "\"inputs\": [");
        for (int32_t i = 0; i < st->nreads; i++) {
            const tg_buffer *in = tg_step_read(st, i)->buf;
            const tg_view *v = &tg_step_read(st, i)->view;
            int32_t from = tg_schedule_step_of(P, in);
            /* Every kernel reads its operands through their views; a copy step is itself the
             * materialization of a view. */
            const char *load = tg_kind_of(st->op)->role == TG_ROLE_MOVEMENT ? "materialized" : "composed";
            char source[32];
            if (from >= 0) snprintf(source, sizeof source, "step %d", from);
            else snprintf(source, sizeof source, "%s", in->node ? "pending" : "realized");
            if (json) {
                put(t, "%s{\"operand\": \"%s\", \"buffer\": %llu, \"shape\": ", i ? ", " : "",
                    operand_name(st, i), (unsigned long long)in->id);
                put_dims(t, v->shape, v->ndim, true);
                put(t, ", \"strides\": ");
                put_dims(t, v->strides, v->ndim, true);
                put(t, ", \"offset\": %lld, \"load\": \"%s\", \"from\": \"%s\"}", (long long)v->offset, load, source);
            } else {
                put(t, " | %s: buf#%llu%s ", operand_name(st, i),
                    (unsigned long long)in->id, from >= 0 ? "" : (in->node ? "" : " (realized)"));
                put_dims(t, v->shape, v->ndim, false);
                put(t, " strides ");
                put_dims(t, v->strides, v->ndim, false);
                put(t, " offset %lld %s", (long long)v->offset, load);
            }
        }
        /* buffers freed after this step: intermediates (and released inputs) whose last reader
         * this is and that no handle holds (all their references are readers in this plan) */
        if (json) put(t, "], \"bytes_read\": %llu, \"bytes_written\": %lld, \"alloc\": [%llu], \"free_after\": [",
                      (unsigned long long)read, (long long)written, (unsigned long long)b->id);
        else put(t, " | reads %llu B, writes %lld B | alloc buf#%llu (%lld B)", (unsigned long long)read, (long long)written,
                 (unsigned long long)b->id, (long long)written);
        if (!json && st->device == TGRAD_DEVICE_CPU && tg_kind_of(st->op)->cpu_allocates && st->ninputs) /* hmodel */
            put(t, " or takes buf#%llu's storage (when this step holds its only reference)",
                (unsigned long long)st->inputs[0].buf->id);
        for (int32_t f = 0; f < st->nfree; f++) {
            const tg_buffer *in = P->free[st->first_free + f];
            if (json) put(t, "%s%llu", f ? ", " : "", (unsigned long long)in->id);
            else put(t, "%sbuf#%llu", f ? ", " : " | frees ", (unsigned long long)in->id);
        }
        if (!json && st->unfused) put(t, " | not fused into its reader: %s", st->unfused);
        put(t, json ? "]}" : "\n");
    }
    if (json) put(t, "]}");
}

static tgrad_status deliver(const char *src, size_t n, char *dst, size_t cap, size_t *len, const char *fn) {
    *len = n;
    if (!dst || cap <= n)
        return tg_fail(TGRAD_ERR_BUFFER_TOO_SMALL, "%s: %zu bytes needed (with the NUL), %zu given", fn, n + 1, dst ? cap : 0);
    memcpy(dst, src, n);
    dst[n] = '\0';
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_tensor_explain(tgrad_tensor_t tensor, int32_t format, char *dst, size_t cap, size_t *len) {
    if (!len) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_explain: len is NULL");
    if (format != TGRAD_FORMAT_TEXT && format != TGRAD_FORMAT_JSON)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_explain: unknown format %d", format);
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    tg_schedule P;
    text out = { 0 };
    pthread_mutex_lock(&tg_graph_lock);
    bool ok = tg_schedule_build_locked(t.buf, &P) == TGRAD_OK;
    if (ok) describe(&out, &P, t.buf, &t.view, format == TGRAD_FORMAT_JSON);
    pthread_mutex_unlock(&tg_graph_lock);
    if (!ok || out.oom) s = tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "tensor_explain: cannot allocate the description");
    else s = deliver(out.p ? out.p : "", out.len, dst, cap, len, "tensor_explain");
    free(out.p);
    tg_schedule_free(&P);
    tg_tensor_unref(&t);
    return s;
}

TGRAD_API tgrad_status tgrad_tensor_route(tgrad_tensor_t tensor, char *dst, size_t cap, size_t *len) {
    if (!len) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_route: len is NULL");
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    char route[48];
    pthread_mutex_lock(&tg_graph_lock);
    if (!t.buf->node) snprintf(route, sizeof route, "%s", t.buf->route);
    else tg_schedule_route(t.buf, route, sizeof route);
    pthread_mutex_unlock(&tg_graph_lock);
    s = deliver(route, strlen(route), dst, cap, len, "tensor_route");
    tg_tensor_unref(&t);
    return s;
}

TGRAD_API tgrad_status tgrad_tensor_buffer_id(tgrad_tensor_t tensor, uint64_t *id) {
    if (!id) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "tensor_buffer_id: output pointer is NULL");
    tg_tensor t;
    tgrad_status s = tg_handle_get_tensor(tensor, &t);
    if (s) return s;
    *id = t.buf->id;
    tg_tensor_unref(&t);
    return TGRAD_OK;
}
