/* The CPU executor of a float32 elementwise step: the op over its operands' views (already
 * broadcast to the output's shape by tgrad_unary / tgrad_binary) into the compact output, in runs
 * along the last axis, threaded over the pool for big outputs (cpu/runs.h). Every element is
 * computed alone by elementwise_f32.c, so the split into runs and tasks cannot change a byte. */
#include "../cpu/runs.h"
#include "elementwise_f32.h"

enum { RUN = 512, PASS_ALONE = 1 << 14, TASK_MIN = 1 << 12 };

typedef struct {
    tgrad_op op;
    int32_t arity, ndim;
    const int64_t *shape;
    const uint32_t *data[2];
    const tg_view *view[2];
    uint32_t *out;
} pass_job;

/* n elements of operand k from its element offset off, stride s along the run: in place when s is
 * 0 or 1 (a binary loop broadcasts stride 0), else gathered into tmp. */
static const uint32_t *operand_run(const pass_job *J, int32_t k, int64_t off, int64_t s, int64_t n, uint32_t *tmp,
                                   int64_t *stride) {
    if (s == 1 || (s == 0 && J->arity == 2)) {
        *stride = s;
        return J->data[k] + off;
    }
    for (int64_t i = 0; i < n; i++) tmp[i] = J->data[k][off + i * s];
    *stride = 1;
    return tmp;
}

static void run_range(const void *job, int64_t lin, int64_t n) {
    const pass_job *J = job;
    uint32_t ta[RUN], tb[RUN];
    while (n > 0) {
        int64_t off[2], step[2], run = tg_run_at(J->ndim, J->shape, J->arity, J->view, lin, n, off, step);
        if (run > RUN) run = RUN;
        int64_t sa, sb;
        const uint32_t *a = operand_run(J, 0, off[0], step[0], run, ta, &sa);
        if (J->arity == 1) {
            tg_ew32_unary(J->op, a, J->out + lin, run);
        } else {
            const uint32_t *b = operand_run(J, 1, off[1], step[1], run, tb, &sb);
            tg_ew32_binary(J->op, a, sa, b, sb, J->out + lin, run);
        }
        lin += run, n -= run;
    }
}

tgrad_status tg_ew32_execute(const tg_step *st) {
    if (st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "a float32 elementwise step was given %d fused ops", (int)st->nfused);
    pass_job J = { .op = st->ew, .arity = st->ninputs, .ndim = st->out->ndim, .shape = st->out->shape,
                   .out = (uint32_t *)(void *)st->buf->data };
    for (int32_t k = 0; k < st->ninputs; k++) {
        J.data[k] = (const uint32_t *)(const void *)st->inputs[k].buf->data;
        J.view[k] = &st->inputs[k].view;
    }
    tg_run_ranges(st->buf->numel, PASS_ALONE, TASK_MIN, 16, run_range, &J);
    return TGRAD_OK;
}
