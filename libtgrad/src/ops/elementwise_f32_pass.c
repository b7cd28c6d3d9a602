/* The CPU executor of a float32 elementwise step: the op over its operands' views (already
 * broadcast to the output's shape by tgrad_unary / tgrad_binary) into the compact output, in runs
 * along the last axis, threaded over the pool for big outputs. Every element is computed alone by
 * elementwise_f32.c, so the split into runs and tasks cannot change a byte. */
#include "elementwise_f32.h"

enum { RUN = 512, PASS_ALONE = 1 << 14, TASK_MIN = 1 << 12 };

typedef struct {
    tgrad_op op;
    int32_t arity, ndim;
    const int64_t *shape;
    const uint32_t *data[2];
    const tg_view *view[2];
    uint32_t *out;
    int64_t numel, per_task;
} pass_job;

/* n elements of operand k from output position idx: in place when its stride is 0 or 1 (a binary
 * loop broadcasts stride 0), else gathered into tmp. */
static const uint32_t *operand_run(const pass_job *J, int32_t k, const int64_t *idx, int64_t n, uint32_t *tmp,
                                   int64_t *stride) {
    const tg_view *v = J->view[k];
    int64_t off = v->offset;
    for (int32_t i = 0; i < J->ndim; i++) off += idx[i] * v->strides[i];
    int64_t s = J->ndim ? v->strides[J->ndim - 1] : 0;
    if (s == 1 || (s == 0 && J->arity == 2)) {
        *stride = s;
        return J->data[k] + off;
    }
    for (int64_t i = 0; i < n; i++) tmp[i] = J->data[k][off + i * s];
    *stride = 1;
    return tmp;
}

static void run_range(const pass_job *J, int64_t lin, int64_t n) {
    uint32_t ta[RUN], tb[RUN];
    while (n > 0) {
        int64_t idx[TGRAD_MAX_DIMS], rem = lin, run = n;
        for (int32_t i = J->ndim - 1; i >= 0; i--) idx[i] = rem % J->shape[i], rem /= J->shape[i];
        if (J->ndim && run > J->shape[J->ndim - 1] - idx[J->ndim - 1]) run = J->shape[J->ndim - 1] - idx[J->ndim - 1];
        if (run > RUN) run = RUN;
        int64_t sa, sb;
        const uint32_t *a = operand_run(J, 0, idx, run, ta, &sa);
        if (J->arity == 1) {
            tg_ew32_unary(J->op, a, J->out + lin, run);
        } else {
            const uint32_t *b = operand_run(J, 1, idx, run, tb, &sb);
            tg_ew32_binary(J->op, a, sa, b, sb, J->out + lin, run);
        }
        lin += run, n -= run;
    }
}

static void pass_task(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    const pass_job *J = arg;
    int64_t lin = task * J->per_task;
    run_range(J, lin, J->numel - lin < J->per_task ? J->numel - lin : J->per_task);
}

tgrad_status tg_ew32_execute(const tg_step *st) {
    if (st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "a float32 elementwise step was given %d fused ops", (int)st->nfused);
    pass_job J = { .op = st->ew, .arity = st->ninputs, .ndim = st->out->ndim, .shape = st->out->shape,
                   .out = (uint32_t *)(void *)st->buf->data, .numel = st->buf->numel };
    for (int32_t k = 0; k < st->ninputs; k++) {
        J.data[k] = (const uint32_t *)(const void *)st->inputs[k].buf->data;
        J.view[k] = &st->inputs[k].view;
    }
    int32_t threads = J.numel < PASS_ALONE ? 1 : tg_pool_threads();
    if (threads == 1) {
        run_range(&J, 0, J.numel);
        return TGRAD_OK;
    }
    /* a few tasks per thread, whole cache lines each */
    int64_t per_task = (J.numel + 4 * (int64_t)threads - 1) / (4 * (int64_t)threads);
    if (per_task < TASK_MIN) per_task = TASK_MIN;
    J.per_task = (per_task + 15) / 16 * 16;
    tg_pool_run((J.numel + J.per_task - 1) / J.per_task, pass_task, &J);
    return TGRAD_OK;
}
