/* The softmax kinds' binary128 slow path, shared by the forward ops (softmax.c) and their
 * derivatives (softmax_backward.c): the wide type xf, its exp and log1p, a value rounded once to
 * the output dtype, and the value of output bits. */
#ifndef TGRAD_SOFTMAX_WIDE_H
#define TGRAD_SOFTMAX_WIDE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../kernels/cpu/softmax_round.h"
#include "tgrad.h"

#if defined(TGRAD_HAVE_QUADMATH)
#include <quadmath.h>
typedef __float128 xf;
#define XEXP expq
#define XLOG1P log1pq
#else
typedef long double xf; /* binary128 on aarch64 Linux; less elsewhere (the bounds assume 113 bits) */
#define XEXP expl
#define XLOG1P log1pl
#endif

/* v rounded once to dt (bf16: through float32 with a sticky bit where v is not a float). */
static inline uint32_t round_x(xf v, int32_t dt) {
    if (dt == TGRAD_DTYPE_F32) return tg_sm_f32_bits((float)v);
    float f = (float)v;
    uint32_t u = tg_sm_f32_bits(f);
    if ((u & 0xffffu) == 0x8000u && (xf)f != v) u += ((xf)f < v) == (v > 0) ? 1u : (uint32_t)-1;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* The value of output bits b (an infinity as 2^128: the midpoint with the largest finite value is
 * then the overflow threshold). */
static inline xf value_x(uint32_t b, int32_t dt) {
    uint32_t u = dt == TGRAD_DTYPE_BF16 ? b << 16 : b;
    if ((u & 0x7fffffffu) == 0x7f800000u) return (u >> 31 ? -1 : 1) * (xf)ldexp(1.0, 128);
    float f;
    memcpy(&f, &u, sizeof f);
    return (xf)f;
}

#endif
