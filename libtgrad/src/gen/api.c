/* The kernel-generation entry points of tgrad.h: argument checks, operand views read from tensor
 * handles, then the renderer (render.c). Checks run in a fixed order (pointers, codes, handles,
 * shapes, eligibility, capacity) and nothing is written on failure. */
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "routes.h"
#include "kinds.h"
#include "step_kernel.h"

TGRAD_API const char *tgrad_route_name(int32_t route) {
    const tg_route *r = tg_route_find(route);
    return r ? r->name : NULL;
}

TGRAD_API const char *tgrad_lang_name(int32_t lang) {
    const tg_lang *l = tg_lang_find(lang);
    return l ? l->name : NULL;
}

static tgrad_status find(int32_t route, int32_t lang, const tg_route **r, const tg_lang **l, const char *fn) {
    if (!(*r = tg_route_find(route)))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: unknown route %d (known: 1 .. %d)", fn, (int)route,
                       TGRAD_ROUTE_COUNT);
    if (!(*l = tg_lang_find(lang)))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: unknown language %d (known: 1 .. %d)", fn, (int)lang,
                       TGRAD_LANG_COUNT);
    return TGRAD_OK;
}

/* The operands' views as a problem, with tgrad_matmul's checks and messages. */
static tgrad_status matmul_problem(tgrad_tensor_t a, tgrad_tensor_t b, tg_gen_matmul *p, const char *fn) {
    tg_tensor ta, tb;
    tgrad_status s = tg_handle_get_pair(a, b, &ta, &tb);
    if (s) return s;
    tg_view out;
    s = tg_view_matmul(&ta.view, &tb.view, fn, &out);
    if (!s)
        *p = (tg_gen_matmul){
            .m = out.shape[0], .k = ta.view.shape[1], .n = out.shape[1],
            .a = { ta.view.offset, { ta.view.strides[0], ta.view.strides[1] } },
            .b = { tb.view.offset, { tb.view.strides[0], tb.view.strides[1] } },
            .c = { 0, { out.strides[0], out.strides[1] } },
            .order = tgrad_matmul_order(), /* the calling thread's (tgrad_set_matmul_order) */
        };
    tg_tensor_unref(&ta);
    tg_tensor_unref(&tb);
    return s;
}

static tgrad_status check_dst(char *dst, size_t capacity, size_t *length, struct tgrad_launch *launch,
                              const char *fn) {
    if (!length) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: length pointer is NULL", fn);
    if (!launch) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: launch pointer is NULL", fn);
    if (launch->size < sizeof *launch)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: launch->size is %u; set it to sizeof(struct tgrad_launch) (%zu)", fn,
                       launch->size, sizeof *launch);
    if (!dst && capacity)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: dst is NULL but capacity is %zu (pass 0 to ask the length)",
                       fn, capacity);
    return TGRAD_OK;
}

/* Hand the text out (or only its length), then free it. */
static tgrad_status deliver(tgrad_status s, tg_text *t, const struct tgrad_launch *made, char *dst, size_t capacity,
                            size_t *length, struct tgrad_launch *launch, const char *fn) {
    if (!s && dst && capacity < t->len + 1)
        s = tg_fail(TGRAD_ERR_BUFFER_TOO_SMALL, "%s: the kernel is %zu bytes plus its NUL, dst holds %zu", fn,
                    t->len, capacity);
    if (!s) {
        if (dst) memcpy(dst, t->data, t->len + 1);
        *length = t->len;
        *launch = *made;
        launch->size = (uint32_t)sizeof *launch;
    }
    tg_text_free(t);
    return s;
}

TGRAD_API tgrad_status tgrad_route_check(int32_t route, int32_t lang, tgrad_tensor_t a, tgrad_tensor_t b) {
    const tg_route *r;
    const tg_lang *l;
    tgrad_status s = find(route, lang, &r, &l, "route_check");
    if (s) return s;
    if (r->kind == TG_ROUTE_COPY) {
        if (b != 0)
            return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "route_check: the copy route takes one tensor (pass b = 0)");
        tg_tensor t;
        if ((s = tg_handle_get_tensor(a, &t))) return s;
        s = tg_gen_check_copy(l, &t.view);
        tg_tensor_unref(&t);
        return s;
    }
    tg_gen_matmul p;
    if ((s = matmul_problem(a, b, &p, "route_check"))) return s;
    return tg_gen_check_matmul(r, l, &p);
}

TGRAD_API tgrad_status tgrad_render_matmul(int32_t route, int32_t lang, tgrad_tensor_t a, tgrad_tensor_t b,
                                           char *dst, size_t capacity, size_t *length,
                                           struct tgrad_launch *launch) {
    const char *fn = "render_matmul";
    const tg_route *r;
    const tg_lang *l;
    tg_gen_matmul p;
    tgrad_status s = check_dst(dst, capacity, length, launch, fn);
    if (!s) s = find(route, lang, &r, &l, fn);
    if (!s) s = matmul_problem(a, b, &p, fn);
    if (!s) s = tg_gen_check_matmul(r, l, &p);
    if (s) return s;
    tg_text t = { 0 };
    struct tgrad_launch made;
    s = tg_gen_render_matmul(r, l, &p, &t, &made);
    return deliver(s, &t, &made, dst, capacity, length, launch, fn);
}

TGRAD_API tgrad_status tgrad_render_copy(int32_t lang, tgrad_tensor_t src, char *dst, size_t capacity,
                                         size_t *length, struct tgrad_launch *launch) {
    const char *fn = "render_copy";
    const tg_route *r;
    const tg_lang *l;
    tgrad_status s = check_dst(dst, capacity, length, launch, fn);
    if (!s) s = find(TGRAD_ROUTE_COPY, lang, &r, &l, fn);
    if (s) return s;
    tg_tensor ts;
    if ((s = tg_handle_get_tensor(src, &ts))) return s;
    tg_view v = ts.view;
    int32_t elem_bytes = (int32_t)tg_dtype_size(ts.buf->dtype);
    tg_tensor_unref(&ts);
    if ((s = tg_gen_check_copy(l, &v))) return s;
    tg_text t = { 0 };
    struct tgrad_launch made;
    s = tg_gen_render_copy(l, &v, elem_bytes, &t, &made);
    return deliver(s, &t, &made, dst, capacity, length, launch, fn);
}

/* The route a step's kernel takes: for a matmul the requested one or (0) the one the scheduler
 * decided (tiled for a CPU matmul); a copy or an elementwise chain has its own. */
static tgrad_status step_route(const tg_step *st, int32_t route, const tg_route **r) {
    int32_t own = tg_kind_of(st->op)->gpu_route; /* a copy or a chain has its own route */
    if (own) {
        *r = tg_route_find(own);
        return TGRAD_OK;
    }
    *r = route ? tg_route_find(route) : st->dev_route ? st->dev_route : tg_route_find(TGRAD_ROUTE_TILED);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_render_tensor(int32_t route, int32_t lang, tgrad_tensor_t t, int32_t step, char *dst,
                                           size_t capacity, size_t *length, struct tgrad_launch *launch) {
    const char *fn = "render_tensor";
    const tg_lang *l;
    const tg_route *rq = route ? tg_route_find(route) : NULL;
    tgrad_status s = check_dst(dst, capacity, length, launch, fn);
    if (s) return s;
    if (route != 0 && (!rq || rq->kind != TG_ROUTE_MATMUL))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: route %d is not a matmul route (0, naive, tiled, tc)", fn, (int)route);
    if (!(l = tg_lang_find(lang)))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: unknown language %d (known: 1 .. %d)", fn, (int)lang,
                       TGRAD_LANG_COUNT);
    tg_tensor ts;
    if ((s = tg_handle_get_tensor(t, &ts))) return s;
    tg_schedule S = { 0 };
    tg_step_kernel k;
    const tg_route *r = NULL;
    pthread_mutex_lock(&tg_graph_lock); /* the pending nodes stay as they are while we read them */
    if (!ts.buf->node) s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: the tensor is realized: there is nothing to compute", fn);
    if (!s) s = tg_schedule_build_locked(ts.buf, &S);
    if (!s && (step < -1 || step >= S.n))
        s = tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: step %d is not in the schedule (steps 0 .. %d, or -1)", fn, (int)step,
                    (int)S.n - 1);
    const tg_step *st = s ? NULL : &S.steps[step < 0 ? S.n - 1 : step]; /* post order: t's own step is last */
    if (!s) s = step_route(st, route, &r);
    if (!s) s = tg_step_kernel_render(st, r, l, &k);
    for (uint32_t i = 0; !s && i < k.launch.buffer_count; i++) k.launch.buffer_ids[i] = k.bufs[i] ? k.bufs[i]->id : 0;
    pthread_mutex_unlock(&tg_graph_lock);
    tg_schedule_free(&S); /* built locked: it holds no references */
    tg_tensor_unref(&ts);
    if (s) return s;
    return deliver(TGRAD_OK, &k.text, &k.launch, dst, capacity, length, launch, fn);
}
