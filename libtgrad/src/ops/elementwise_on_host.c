/* A GPU elementwise step's flagged elements (kernels/gpu/transcendental_f32.h left them
 * undecided: a float32 transcendental or derivative op, or pow in either dtype): each recomputed
 * here by the CPU's own op, and the output uploaded again. The elementwise kind's gpu_finish. */
#include <stdio.h>

#include "../kinds.h"
#include "elementwise.h"
#include "elementwise_f32.h"
#include "elementwise_pow.h"

/* Element i of the step's output y, from its operands a (and b) staged on the host. */
static void one_element(const tg_step *st, const void *a, const void *b, void *y, int64_t i) {
    int64_t ia = tg_view_element_offset(&st->inputs[0].view, i);
    int64_t ib = st->ninputs == 2 ? tg_view_element_offset(&st->inputs[1].view, i) : 0;
    if (st->buf->dtype == TGRAD_DTYPE_F32) {
        const uint32_t *a32 = a, *b32 = b;
        uint32_t *y32 = y;
        if (st->ninputs == 1) tg_ew32_unary(st->ew, &a32[ia], &y32[i], 1);
        else tg_ew32_binary(st->ew, &a32[ia], 0, &b32[ib], 0, &y32[i], 1);
    } else {
        const uint16_t *a16 = a, *b16 = b;
        uint16_t *y16 = y;
        if (st->ninputs == 1) tg_ew_unary(st->ew, &a16[ia], &y16[i], 1);
        else tg_ew_binary(st->ew, &a16[ia], &b16[ib], &y16[i], 1);
    }
}

tgrad_status tg_ew_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged) {
    if (st->ninputs < 1 || st->ninputs > 2 || st->nfused)
        return tg_fail(TGRAD_ERR_INTERNAL, "a flagged elementwise step has %d inputs and %d fused ops",
                       (int)st->ninputs, (int)st->nfused);
    void *host[4];
    size_t bytes[4];
    char what[96];
    snprintf(what, sizeof what, "%s: cannot stage %lld flagged elements on the host", tgrad_op_name(st->ew),
             (long long)flagged);
    tgrad_status s = tg_device_stage_step(st, host, bytes, what);
    if (s) return s;
    for (int64_t i = 0; i < nflags && i < st->buf->numel; i++)
        if (flags[i]) one_element(st, host[0], host[1], host[3], i);
    if (st->buf->dtype == TGRAD_DTYPE_F32) tg_ew32_count_device_host(st->ew, flagged);
    else tg_ew_pow_count_device_host(flagged);
    s = tg_device_upload(st->device, st->buf->dev_mem, host[3], bytes[3]);
    tg_device_staged_free(host);
    return s;
}
