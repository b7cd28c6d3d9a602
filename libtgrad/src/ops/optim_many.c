/* tgrad_optim_step_many: every output of one optimizer step over many tensors in one call, computed
 * now. The lazy kind (optim_step.c) makes one node per output, each recomputing the element from
 * the same inputs, and a training step then realizes a cast per gradient, three or four step nodes
 * and a cast per parameter, one realize each; this call reads each element's inputs once and
 * writes all of its outputs (the new parameter, each new state, and the parameter rounded to
 * bfloat16), through the same per-element arithmetic (optim_arith.h): the same bytes. Elements
 * are computed alone, so the thread split cannot change a byte. docs/nn.md, "Optimizers". */
#include <stdlib.h>
#include <string.h>

#include "../cpu/runs.h"
#include "../kinds.h"
#include "optim_arith.h"
#if defined(TGRAD_HAVE_X86_VARIANTS)
#include "optim_avx512f.h"
_Static_assert((int)TG_OPTIM_MAXIMIZE_FLAG == (int)TGRAD_OPTIM_MAXIMIZE && (int)TG_OPTIM_DECAY_FLAG == (int)TGRAD_OPTIM_DECAY,
               "optim_avx512f.h's flags are tgrad.h's");
#endif

TG_HIDDEN tgrad_status tg_buffer_new_storage_typed(int64_t numel, int32_t dtype, tg_buffer **out); /* buffer.c */

enum { STEP_ALONE = 1 << 14, STEP_TASK = 1 << 12, MAX_IN = 5, MAX_OUT = 5, MAX_TENSORS = 1 << 20 };

typedef struct many_job {
    int32_t algo, flags, n, ndim, nstate;
    float s[TGRAD_OPTIM_NSCALARS];
    const void *data[MAX_IN];
    const tg_view *view[MAX_IN];
    bool grad_bf16; /* input 1 is bfloat16: widened exactly */
    const int64_t *shape;
    float *out[4];  /* TGRAD_OPTIM_OUT_PARAM, the states */
    uint16_t *bf16; /* the new parameter rounded to bfloat16, or NULL */
    bool wide;      /* AdamW without amsgrad on AVX-512 (optim_avx512f.h) for contiguous runs */
} many_job;

/* The AVX-512 loop unless the CPU lacks it or another variant is forced (as the norms choose). */
static bool wide_adamw(void) {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    const char *name = tgrad_cpu_isa_forced() ? tgrad_cpu_isa() : "";
    return tg_optim_avx512f_available() && (!*name || !strcmp(name, "avx512f") || !strcmp(name, "avx512bf16"));
#else
    return false;
#endif
}

static void many_range(const void *job, int64_t lin, int64_t n) {
    const many_job *J = job;
    while (n > 0) {
        int64_t off[MAX_IN], step[MAX_IN], run = tg_run_at(J->ndim, J->shape, J->n, J->view, lin, n, off, step);
        int64_t i = 0;
#if defined(TGRAD_HAVE_X86_VARIANTS)
        if (J->wide && step[0] == 1 && step[1] == 1 && step[2] == 1 && step[3] == 1) {
            size_t gsize = J->grad_bf16 ? 2 : 4;
            i = tg_optim_adamw_avx512f(run, J->flags, J->s, (const float *)J->data[0] + off[0],
                                       (const char *)J->data[1] + (size_t)off[1] * gsize, J->grad_bf16,
                                       (const float *)J->data[2] + off[2], (const float *)J->data[3] + off[3],
                                       J->out[0] + lin, J->out[1] + lin, J->out[2] + lin, J->bf16 ? J->bf16 + lin : NULL);
        }
#endif
        for (; i < run; i++) {
            float in[MAX_IN] = { 0 }, r[4] = { 0 };
            for (int32_t k = 0; k < J->n; k++) {
                int64_t at = off[k] + i * step[k];
                in[k] = k == 1 && J->grad_bf16 ? tg_bf16_to_f32(((const uint16_t *)J->data[k])[at])
                                               : ((const float *)J->data[k])[at];
            }
            every(J->algo, J->flags, J->n, J->s, in, r);
            for (int32_t o = 0; o <= J->nstate; o++) J->out[o][lin + i] = canonical(r[o]);
            if (J->bf16) J->bf16[lin + i] = tg_acc_to_bf16(canonical(r[0]));
        }
        lin += run, n -= run;
    }
}

/* The checks of one tensor's inputs t[0 .. ninputs): float32 (the gradient may be bfloat16), one
 * shape, one device, the CPU. */
static tgrad_status check_inputs(const tg_tensor *t, int32_t ninputs, int32_t i, const char *fn) {
    for (int32_t k = 0; k < ninputs; k++) {
        int32_t dt = t[k].buf->dtype;
        if (dt != TGRAD_DTYPE_F32 && !(k == 1 && dt == TGRAD_DTYPE_BF16))
            return tg_fail(TGRAD_ERR_DTYPE_UNSUPPORTED, "%s: tensor %d's input %d is %s; every input is float32 (the "
                           "gradient may be bfloat16)", fn, (int)i, (int)k, tg_dtype_name(dt));
        if (t[k].buf->device != t[0].buf->device)
            return tg_fail(TGRAD_ERR_DEVICE_MISMATCH, "%s: tensor %d's inputs live on different devices (%s and %s)", fn,
                           (int)i, tg_device_name(t[0].buf->device), tg_device_name(t[k].buf->device));
        if (t[k].view.ndim != t[0].view.ndim ||
            memcmp(t[k].view.shape, t[0].view.shape, sizeof(int64_t) * (size_t)t[0].view.ndim)) {
            char a[160], b[160];
            tg_format_shape(a, sizeof a, &t[0].view), tg_format_shape(b, sizeof b, &t[k].view);
            return tg_fail(TGRAD_ERR_SHAPE_MISMATCH, "%s: tensor %d's input %d is %s, the parameter %s", fn, (int)i,
                           (int)k, b, a);
        }
    }
    if (t[0].buf->device == TGRAD_DEVICE_CPU) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "%s: tensor %d lives on %s; this call runs on the CPU (a device's step "
                   "runs as lazy tgrad_optim_step nodes)", fn, (int)i, tg_device_name(t[0].buf->device));
}

TGRAD_API tgrad_status tgrad_optim_step_many(int32_t algo, int32_t flags, int32_t n, int32_t ninputs,
                                             const tgrad_tensor_t *inputs, const float *scalars, int32_t bf16_param,
                                             tgrad_tensor_t *outs) {
    const char *fn = "optim_step_many";
    if (!outs) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: outs is NULL", fn);
    int32_t nstate = 0;
    tgrad_status s = tg_optim_check(algo, flags, ninputs, fn, &nstate);
    if (s) return s;
    if (n < 0 || n > MAX_TENSORS)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: n is %d, not 0 .. %d", fn, (int)n, (int)MAX_TENSORS);
    if (bf16_param != 0 && bf16_param != 1)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: bf16_param is %d, not 0 or 1", fn, (int)bf16_param);
    if (!inputs || !scalars) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: inputs or scalars is NULL", fn);
    if (n == 0) return TGRAD_OK;
    int32_t nout = 1 + nstate + bf16_param, nin = n * ninputs, nres = n * nout;
    tg_tensor *t = tg_calloc((size_t)nin, sizeof *t);
    tg_buffer **ob = tg_calloc((size_t)nres, sizeof *ob);
    tgrad_tensor_t *made = tg_calloc((size_t)nres, sizeof *made);
    if (!t || !ob || !made) {
        free(t), free(ob), free(made);
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "%s: cannot allocate the lists of %d tensors", fn, (int)n);
    }
    int32_t have = 0;
    for (; have < nin && !s; have++)
        if ((s = tg_handle_get_tensor(inputs[have], &t[have]))) break;
    for (int32_t i = 0; i < n && !s; i++) s = check_inputs(&t[i * ninputs], ninputs, i, fn);
    for (int32_t k = 0; k < nin && !s; k++) s = tg_buffer_realize(t[k].buf);
    bool marked = false; /* the results require a gradient as a node's would (buffer.c), with no history */
    for (int32_t k = 0; k < nin && !s && tg_grad_enabled(); k++) marked = marked || t[k].buf->requires_grad;
    tg_view ov[1];
    for (int32_t i = 0; i < n && !s; i++) {
        const tg_tensor *p = &t[i * ninputs];
        int64_t numel = 0;
        if (!(s = tg_view_contiguous(p->view.ndim, p->view.shape, ov))) tg_view_numel(ov, &numel);
        for (int32_t o = 0; o < nout && !s; o++) {
            int32_t dt = o == nout - 1 && bf16_param ? TGRAD_DTYPE_BF16 : TGRAD_DTYPE_F32;
            if (!(s = tg_memory_admit_typed(numel, tg_dtype_size(dt), fn)) &&
                !(s = tg_buffer_new_storage_typed(numel, dt, &ob[i * nout + o])))
                ob[i * nout + o]->requires_grad = marked;
        }
    }
    bool wide = !s && wide_adamw();
    for (int32_t i = 0; i < n && !s; i++) {
        const tg_tensor *p = &t[i * ninputs];
        many_job J = { .algo = algo, .flags = flags, .n = ninputs, .ndim = p->view.ndim, .nstate = nstate,
                       .grad_bf16 = p[1].buf->dtype == TGRAD_DTYPE_BF16, .shape = p->view.shape };
        memcpy(J.s, scalars + (size_t)i * TGRAD_OPTIM_NSCALARS, sizeof J.s);
        for (int32_t k = 0; k < ninputs; k++) J.data[k] = p[k].buf->data, J.view[k] = &p[k].view;
        for (int32_t o = 0; o <= nstate; o++) J.out[o] = (float *)ob[i * nout + o]->data;
        J.bf16 = bf16_param ? ob[i * nout + nout - 1]->data : NULL;
        J.wide = algo == TGRAD_OPTIM_ADAMW && !(flags & TGRAD_OPTIM_AMSGRAD) && wide;
        tg_run_ranges(ob[i * nout]->numel, STEP_ALONE, STEP_TASK, 64, many_range, &J);
    }
    int32_t registered = 0; /* the handles take over the buffers' references */
    for (; registered < nres && !s; registered++) {
        const tg_tensor *p = &t[(registered / nout) * ninputs];
        if (!(s = tg_view_contiguous(p->view.ndim, p->view.shape, ov)) &&
            !(s = tg_handle_new_tensor(ob[registered], ov, &made[registered])))
            ob[registered] = NULL;
        if (s) break;
    }
    if (s)
        for (int32_t k = 0; k < registered; k++) tg_handle_release(made[k]);
    else
        memcpy(outs, made, sizeof *made * (size_t)nres);
    for (int32_t k = 0; k < nres; k++)
        if (ob[k]) tg_buffer_release(ob[k]);
    for (int32_t k = 0; k < have; k++) tg_tensor_unref(&t[k]);
    free(t), free(ob), free(made);
    return s;
}
