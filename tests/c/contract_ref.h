/* The numerics contract's scalar pieces, written in the tests (independent of libtgrad's kernels):
 * bf16 widening, DAZ, the step (exact product and sum in double, one rounding to fp32, flushed
 * below 2^-126 after rounding) and the bf16 output rounding. Included by the matmul tests. */
#ifndef TGRAD_TESTS_CONTRACT_REF_H
#define TGRAD_TESTS_CONTRACT_REF_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static float widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The contract's step: exact product and sum in double, one rounding to fp32, flush below 2^-126
 * (tininess after rounding, unbounded exponent). Inputs are DAZ'd by the caller. */
static float step(float acc, float a, float b) {
    double d = (double)acc + (double)a * (double)b;
    float r = (float)d;
    if (fabsf(r) < FLT_MIN || (fabsf(r) == FLT_MIN && fabs(d) < 0x1p-126 - 0x1p-151)) return copysignf(0.0f, (float)d);
    return r;
}

static float daz(uint16_t h) { return (h & 0x7f80) == 0 ? copysignf(0.0f, widen(h)) : widen(h); }

static uint16_t rne(uint32_t u) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif
