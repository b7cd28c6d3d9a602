/* The optimizer step kind (OPTIM_STEP): one node per output state tensor (a node has one output),
 * each reading the same float32 inputs and recomputing what it needs. The per-element arithmetic
 * is torch's single-tensor float32 update as tgrad.optim.functional documents it: every op one
 * IEEE float32 operation, torch's fused multiply-adds as fmaf (one rounding); the file is
 * compiled with -ffp-contract=off (meson.build), so nothing else is fused. Elements are computed
 * alone, so the thread split cannot change a byte. docs/nn.md, "Optimizers". */
#include <math.h>
#include <string.h>

#include "../cpu/runs.h"
#include "../kinds.h"
#include "optim_arith.h"

enum { STEP_ALONE = 1 << 14, STEP_TASK = 1 << 12, MAX_IN = 5 };

typedef struct step_job {
    int32_t algo, which, flags, n, ndim;
    float s[TGRAD_OPTIM_NSCALARS];
    const float *data[MAX_IN];
    const tg_view *view[MAX_IN];
    const int64_t *shape;
    float *out;
} step_job;

static inline float one(const step_job *J, const float *in) {
    float r[4] = { 0 };
    every(J->algo, J->flags, J->n, J->s, in, r);
    return r[J->which];
}

static void run_range(const void *job, int64_t lin, int64_t n) {
    const step_job *J = job;
    while (n > 0) {
        int64_t off[MAX_IN], step[MAX_IN], run = tg_run_at(J->ndim, J->shape, J->n, J->view, lin, n, off, step);
        const float *p[MAX_IN];
        for (int32_t k = 0; k < J->n; k++) p[k] = J->data[k] + off[k];
        float *o = J->out + lin;
        for (int64_t i = 0; i < run; i++) {
            float in[MAX_IN] = { 0 };
            for (int32_t k = 0; k < J->n; k++) in[k] = p[k][i * step[k]];
            o[i] = canonical(one(J, in));
        }
        lin += run, n -= run;
    }
}

tgrad_status tg_optim_step_execute(const tg_step *st) {
    const tg_node_params *P = &st->base->params;
    step_job J = { .algo = P->optim.algo, .which = P->optim.which, .flags = P->optim.flags, .n = st->ninputs,
                   .ndim = st->out->ndim, .shape = st->out->shape, .out = (float *)st->buf->data };
    memcpy(J.s, P->optim.s, sizeof J.s);
    if (J.n > MAX_IN || st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "optim_step: a step with %d operands and %d fused ops", (int)J.n,
                       (int)st->nfused);
    for (int32_t k = 0; k < J.n; k++) {
        J.data[k] = (const float *)st->inputs[k].buf->data;
        J.view[k] = &st->inputs[k].view;
    }
    tg_run_ranges(st->buf->numel, STEP_ALONE, STEP_TASK, 64, run_range, &J);
    return TGRAD_OK;
}

/* ---- the node ---- */
tgrad_status tg_optim_check(int32_t algo, int32_t flags, int32_t ninputs, const char *fn, int32_t *nstate) {
    if (algo != TGRAD_OPTIM_SGD && algo != TGRAD_OPTIM_ADAMW)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: algorithm %d is not TGRAD_OPTIM_SGD or _ADAMW", fn, (int)algo);
    if (flags & ~(TGRAD_OPTIM_MAXIMIZE | TGRAD_OPTIM_DECAY | TGRAD_OPTIM_MOMENTUM | TGRAD_OPTIM_NESTEROV |
                  TGRAD_OPTIM_AMSGRAD))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: unknown flags 0x%x", fn, (unsigned)flags);
    int32_t lo = algo == TGRAD_OPTIM_SGD ? 2 : 4;
    int32_t hi = algo == TGRAD_OPTIM_SGD ? ((flags & TGRAD_OPTIM_MOMENTUM) ? 3 : 2)
                                         : ((flags & TGRAD_OPTIM_AMSGRAD) ? 5 : 4);
    if (ninputs < lo || ninputs > hi)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: %d inputs; this step takes %d to %d", fn, (int)ninputs,
                       (int)lo, (int)hi);
    *nstate = algo == TGRAD_OPTIM_SGD ? ((flags & TGRAD_OPTIM_MOMENTUM) ? 1 : 0)
                                      : ((flags & TGRAD_OPTIM_AMSGRAD) ? 3 : 2);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_optim_step(int32_t algo, int32_t which, int32_t flags, int32_t ninputs,
                                        const tgrad_tensor_t *inputs, const float *scalars, tgrad_tensor_t *out) {
    const char *fn = "optim_step";
    if (!out) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "optim_step: out is NULL");
    int32_t nstate = 0;
    tgrad_status c = tg_optim_check(algo, flags, ninputs, fn, &nstate);
    if (c) return c;
    if (!inputs) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "optim_step: inputs is NULL");
    int32_t top = TGRAD_OPTIM_OUT_PARAM + nstate;
    if (which < TGRAD_OPTIM_OUT_PARAM || which > top)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "optim_step: output %d is not one this step makes (0 .. %d)",
                       (int)which, (int)top);
    if (!scalars) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "optim_step: scalars is NULL");
    tg_node_params P = { .optim = { .algo = algo, .which = which, .flags = flags } };
    memcpy(P.optim.s, scalars, sizeof P.optim.s);
    tg_tensor t[MAX_IN] = { 0 };
    tgrad_status s = TGRAD_OK;
    int32_t have = 0;
    for (; have < ninputs && !s; have++)
        if ((s = tg_handle_get_tensor(inputs[have], &t[have]))) break;
    for (int32_t k = 0; k < have && !s; k++) {
        if (t[k].buf->dtype != TGRAD_DTYPE_F32)
            s = tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "optim_step: input %d is %s; every input is float32", (int)k,
                        tg_dtype_name(t[k].buf->dtype));
        else if (t[k].buf->device != t[0].buf->device)
            s = tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "optim_step: inputs live on different devices (%s and %s)",
                        tg_device_name(t[0].buf->device), tg_device_name(t[k].buf->device));
        else if (t[k].view.ndim != t[0].view.ndim ||
                 memcmp(t[k].view.shape, t[0].view.shape, sizeof(int64_t) * (size_t)t[0].view.ndim)) {
            char a[160], b[160];
            tg_format_shape(a, sizeof a, &t[0].view), tg_format_shape(b, sizeof b, &t[k].view);
            s = tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "optim_step: input %d is %s, the parameter %s", (int)k, b, a);
        }
    }
    if (!s) s = tg_kind_check_device(TG_OP_OPTIM_STEP, t[0].buf->device, fn);
    tg_view ov = { 0 };
    if (!s) s = tg_view_contiguous(t[0].view.ndim, t[0].view.shape, &ov);
    if (s && have < ninputs) { /* a handle failed: release those taken */
        for (int32_t k = 0; k < have; k++) tg_tensor_unref(&t[k]);
        return s;
    }
    return tg_kind_make(s, TG_OP_OPTIM_STEP, t, have, &ov, TGRAD_DTYPE_F32, &P, fn, out);
}
