/* Elementwise chains on the CPU (epilogue.h): built from a decided step, applied to runs of the
 * output by matmul workers (the epilogue) or by the elementwise pass. */
#include <string.h>

#include "../ops/elementwise.h"
#include "epilogue.h"

enum { RUN = 1024 }; /* elements per call into the loops: two stack buffers of 2 KiB */

/* ---- building ----------------------------------------------------------------------------- */

static void add_op(tg_chain *c, tgrad_op op, bool value_right, const tg_node_input *operand) {
    tg_chain_op *o = &c->ops[c->n++];
    *o = (tg_chain_op){ .op = op, .binary = operand != NULL, .value_right = value_right };
    if (operand) o->data = operand->buf->data, o->view = operand->view;
}

/* Every view of the chain (same shape as the output), simplified together: size-1 axes dropped,
 * then neighbours merged where all views allow it. */
static void simplify(tg_chain *c) {
    tg_view *views[2 + TG_MAX_FUSED];
    int32_t nv = 0;
    views[nv++] = &c->first_view;
    for (int32_t k = 0; k < c->n; k++)
        if (c->ops[k].binary) views[nv++] = &c->ops[k].view;
    tg_views_coalesce(views, nv);
    const tg_view *shape = views[0];
    c->ndim = shape->ndim;
    int64_t pitch = 1;
    for (int32_t i = c->ndim - 1; i >= 0; i--) c->shape[i] = shape->shape[i], c->pitch[i] = pitch, pitch *= shape->shape[i];
}

/* The chain of step st: first_op (an elementwise node over its realized operands, which the
 * chain starts from; NULL: the running value is the step's own result, as for a matmul's or a
 * reduction's epilogue), then ops[0 .. n). */
static void build(tg_chain *c, const tg_step *st, const tg_node *first_op, const tg_fused_op *ops, int32_t n) {
    *c = (tg_chain){ .v = st->ew_variant };
    tg_view_contiguous(st->out->ndim, st->out->shape, &c->first_view);
    if (first_op) { /* its first operand's view is already the chain's shape */
        c->first = first_op->inputs[0].buf->data;
        c->first_view = first_op->inputs[0].view;
        add_op(c, first_op->ew, false, first_op->ninputs == 2 ? &first_op->inputs[1] : NULL);
    }
    for (int32_t i = 0; i < n; i++) add_op(c, ops[i].op, ops[i].value_right, ops[i].operand);
    simplify(c);
}

void tg_chain_prologue(const tg_step *st, tg_chain *c) { build(c, st, st->pro_base, st->prologue, st->npro); }

void tg_chain_from_step(const tg_step *st, tg_chain *c) {
    build(c, st, st->op == TG_OP_ELEMENTWISE ? st->base : NULL, st->epilogue, st->nfused);
}

/* ---- applying ----------------------------------------------------------------------------- */

/* Element offset of position idx in v (the chain's simplified shape). */
static int64_t offset_of(const tg_view *v, const int64_t *idx) {
    int64_t off = v->offset;
    for (int32_t i = 0; i < v->ndim; i++) off += idx[i] * v->strides[i];
    return off;
}

/* n elements of data starting at off, stride s: in place when s is 0 or 1 (the loops broadcast a
 * stride-0 operand), else gathered into tmp. Sets *stride to what the loops read with. */
static const uint16_t *operand_run(const uint16_t *data, int64_t off, int64_t s, int64_t n, uint16_t *tmp,
                                   int64_t *stride) {
    if (s == 0 || s == 1) {
        *stride = s;
        return data + off;
    }
    for (int64_t i = 0; i < n; i++) tmp[i] = data[off + i * s];
    *stride = 1;
    return tmp;
}

/* The ops over a run: the first reads the running value from src (the first operand in place, or
 * val itself), every op writes val. */
static void run_ops(const tg_chain *c, const int64_t *idx, const uint16_t *src, uint16_t *val, int64_t n) {
    uint16_t tmp[RUN];
    int64_t last = c->ndim - 1;
    for (int32_t k = 0; k < c->n; k++, src = val) {
        const tg_chain_op *o = &c->ops[k];
        if (!o->binary) {
            tg_ew_unary_on(c->v, o->op, src, val, n);
            continue;
        }
        int64_t s;
        const uint16_t *p = operand_run(o->data, offset_of(&o->view, idx), last < 0 ? 0 : o->view.strides[last], n, tmp, &s);
        if (o->value_right) tg_ew_binary_on(c->v, o->op, p, s, src, 1, val, n);
        else tg_ew_binary_on(c->v, o->op, src, 1, p, s, val, n);
    }
}

/* The first operand's run (the elementwise pass): read in place when contiguous, else gathered
 * into val. */
static const uint16_t *first_run(const tg_chain *c, const int64_t *idx, uint16_t *val, int64_t n) {
    int64_t off = offset_of(&c->first_view, idx), s = c->ndim ? c->first_view.strides[c->ndim - 1] : 0;
    if (s == 1) return c->first + off;
    for (int64_t i = 0; i < n; i++) val[i] = c->first[off + i * s];
    return val;
}

/* The chain at positions lin .. lin + n into dst[0 .. n) (out + lin when applied in place), in
 * runs along the last axis. stream (a pass with a first operand only): each run is computed in an
 * L1 buffer and written out past the caches. */
static void apply_runs(const tg_chain *c, uint16_t *dst, int64_t lin, int64_t n, bool stream) {
    _Alignas(64) uint16_t buf[RUN];
    while (n > 0) {
        int64_t idx[TGRAD_MAX_DIMS], rem = lin, run = n;
        for (int32_t i = 0; i < c->ndim; i++) idx[i] = rem / c->pitch[i], rem %= c->pitch[i];
        if (c->ndim && run > c->shape[c->ndim - 1] - idx[c->ndim - 1]) run = c->shape[c->ndim - 1] - idx[c->ndim - 1];
        if (run > RUN) run = RUN;
        uint16_t *val = stream ? buf : dst;
        run_ops(c, idx, c->first ? first_run(c, idx, val, run) : dst, val, run);
        if (stream) c->v->store_stream(buf, dst, run);
        lin += run, n -= run, dst += run;
    }
    if (stream) tg_store_fence(); /* before the task reports done */
}

void tg_chain_eval(const tg_chain *c, uint16_t *dst, int64_t lin, int64_t n) { apply_runs(c, dst, c->lin0 + lin, n, false); }

void tg_chain_apply(const tg_chain *c, uint16_t *out, int64_t lin, int64_t n) {
    apply_runs(c, out + lin, c->lin0 + lin, n, false);
}

void tg_chain_apply_block(const tg_chain *c, uint16_t *out, int64_t ld, int64_t row0, int64_t col0, int64_t rows,
                          int64_t cols) {
    if (!c || !c->n) return;
    for (int64_t r = 0; r < rows; r++) tg_chain_apply(c, out, (row0 + r) * ld + col0, cols);
}

/* ---- the pass ----------------------------------------------------------------------------- */

enum { PASS_ALONE = 1 << 16, PASS_TASK_MIN = 1 << 14 };
/* A pass whose output has at least this many bytes writes it past the caches: a plain store
 * first reads the line it writes (a third stream of memory traffic beside the read and the
 * write), and an output this big is not read back from cache anyway. The matmul's output uses
 * the same size (gemm_packed.c, STREAM_BYTES). */
#define PASS_STREAM_BYTES (16.0 * 1024 * 1024)

typedef struct {
    const tg_chain *c;
    uint16_t *out;
    int64_t numel, per_task;
    bool stream;
} pass_job;

static void pass_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    const pass_job *J = arg;
    int64_t lin = task * J->per_task, n = J->numel - lin < J->per_task ? J->numel - lin : J->per_task;
    apply_runs(J->c, J->out + lin, lin, n, J->stream);
}

void tg_chain_pass(const tg_chain *c, uint16_t *out, int64_t numel) {
    int32_t threads = numel < PASS_ALONE ? 1 : tg_pool_threads();
    bool stream = c->first && (double)numel * 2.0 >= PASS_STREAM_BYTES;
    if (threads == 1) {
        apply_runs(c, out, 0, numel, stream);
        return;
    }
    /* a few tasks per thread, whole cache lines each, so that threads never share a line */
    int64_t per_task = (numel + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
    if (per_task < PASS_TASK_MIN) per_task = PASS_TASK_MIN;
    per_task = (per_task + 31) / 32 * 32;
    pass_job J = { c, out, numel, per_task, stream };
    tg_pool_run((numel + per_task - 1) / per_task, pass_task, &J);
}
