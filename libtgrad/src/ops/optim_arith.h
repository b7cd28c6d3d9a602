/* The optimizer step's per-element arithmetic, one copy for its two callers: the lazy kind
 * (optim_step.c, one output per node) and tgrad_optim_step_many (optim_many.c, every output of
 * many tensors in one call). The library is compiled with -ffp-contract=off (meson.build), so
 * nothing but the fmaf calls is fused. */
#ifndef TGRAD_OPS_OPTIM_ARITH_H
#define TGRAD_OPS_OPTIM_ARITH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../internal.h"

static inline float nan_max(float a, float b) { /* torch.maximum: NaN propagates */
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
}

/* Every output of one element: in[k] the inputs' values (SGD: P, g, buf; AdamW: P, g, m, v,
 * vmax), n how many there are; r[TGRAD_OPTIM_OUT_*] the results (those the step makes). The one
 * copy of the arithmetic: the lazy kind (one output per node) and tgrad_optim_step_many (all at
 * once) both call it, so they give the same bytes. */
static inline void every(int32_t algo, int32_t flags, int32_t n, const float *s, const float *in, float *r) {
    float p = in[0], g = in[1];
    if (flags & TGRAD_OPTIM_MAXIMIZE) g = -g;
    if (algo == TGRAD_OPTIM_SGD) {
        /* s: wd, momentum, 1 - dampening, -lr */
        if (flags & TGRAD_OPTIM_DECAY) g = fmaf(p, s[0], g);
        if (flags & TGRAD_OPTIM_MOMENTUM) {
            float buf = n > 2 ? fmaf(g, s[2], in[2] * s[1]) : g;
            r[TGRAD_OPTIM_OUT_STATE1] = buf;
            g = (flags & TGRAD_OPTIM_NESTEROV) ? fmaf(buf, s[1], g) : buf;
        }
        r[TGRAD_OPTIM_OUT_PARAM] = fmaf(g, s[3], p);
        return;
    }
    /* AdamW, s: 1 - lr*wd, w = 1 - b1, w - 1, b2, 1 - b2, c2, eps, -step_size */
    if (flags & TGRAD_OPTIM_DECAY) p = p * s[0];
    float m = in[2], d = g - m;
    m = fabsf(s[1]) < 0.5f ? fmaf(d, s[1], m) : fmaf(d, s[2], g);
    r[TGRAD_OPTIM_OUT_STATE1] = m;
    float v = fmaf(g * s[4], g, in[3] * s[3]);
    r[TGRAD_OPTIM_OUT_STATE2] = v;
    if (flags & TGRAD_OPTIM_AMSGRAD) {
        if (n > 4) v = nan_max(in[4], v);
        r[TGRAD_OPTIM_OUT_STATE3] = v;
    }
    float denom = sqrtf(v) / s[5] + s[6];
    r[TGRAD_OPTIM_OUT_PARAM] = p + (m * s[7]) / denom;
}

/* The library's one NaN (every op gives the quiet NaN 0x7fc00000). */
static inline float canonical(float r) {
    if (r != r) {
        uint32_t q = 0x7fc00000u;
        memcpy(&r, &q, 4);
    }
    return r;
}

/* The checks the two entry points share (optim_step.c): algo, flags and the input count; *nstate
 * the count of state outputs (SGD 0 or 1 with momentum, AdamW 2 or 3 with amsgrad). */
TG_HIDDEN tgrad_status tg_optim_check(int32_t algo, int32_t flags, int32_t ninputs, const char *fn, int32_t *nstate);

#endif
