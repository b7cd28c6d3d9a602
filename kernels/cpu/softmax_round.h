/* Rounding a double once to bfloat16 or float32 (round to nearest even, gradual underflow,
 * overflow to inf), for the softmax kind (kernels/cpu/softmax_rows.h, libtgrad/src/ops/softmax.c).
 * float32: the conversion itself. bfloat16: through float32, corrected where float32's rounding
 * lands on a bfloat16 midpoint that v is not (double rounding): v's side of it decides. */
#ifndef TGRAD_CPU_SOFTMAX_ROUND_H
#define TGRAD_CPU_SOFTMAX_ROUND_H

#include <stdint.h>
#include <string.h>

static inline uint32_t tg_sm_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline uint32_t tg_sm_round_f32(double v) { return tg_sm_f32_bits((float)v); }

static inline uint32_t tg_sm_round_bf16(double v) {
    float f = (float)v;
    uint32_t u = tg_sm_f32_bits(f);
    /* branch-free, so that the loops vectorize: +1 or -1 at a false midpoint, else 0 */
    uint32_t fix = (uint32_t)((u & 0xffffu) == 0x8000u) & (uint32_t)((double)f != v);
    uint32_t up = (uint32_t)(((double)f < v) == (v > 0));
    u += fix * (2u * up - 1u);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* out_dtype: 1 bf16, 2 float32 (tgrad.h's codes) */
static inline uint32_t tg_sm_round(double v, int32_t out_dtype) {
    return out_dtype == 1 ? tg_sm_round_bf16(v) : tg_sm_round_f32(v);
}

#endif
