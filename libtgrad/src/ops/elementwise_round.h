/* Exact rounding to bf16 or float32 (private), shared by pow and the derivative ops: a format
 * told apart by its significand's bits p (8 or 24; both share the exponent range, normal from
 * 2^-126, largest below 2^128), values given as an exact (significand, exponent) pair, a double or
 * an xf (the binary128 type, __float128 with libquadmath, else long double), rounded to nearest
 * even with integer arithmetic only: gradual underflow, overflow to inf, never a conversion that
 * could round twice. Moved here from elementwise_pow.c unchanged; round_xf_sticky added. */
#ifndef TGRAD_OPS_ELEMENTWISE_ROUND_H
#define TGRAD_OPS_ELEMENTWISE_ROUND_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(TGRAD_HAVE_QUADMATH)
#include <quadmath.h>
typedef __float128 xf;
#define XPOW powq
#define XFREXP frexpq
#define XLDEXP ldexpq
#define XNEXTAFTER nextafterq
#define XEXP expq
#define XERFC erfcq
#define XFABS fabsq
#define XWINDOW 0x1p-100Q
#else
#include <float.h>
typedef long double xf; /* binary128 on aarch64 Linux; x87's 64 bits on x86; double on macOS */
#define XPOW powl
#define XFREXP frexpl
#define XLDEXP ldexpl
#define XNEXTAFTER nextafterl
#define XEXP expl
#define XERFC erfcl
#define XFABS fabsl
#define XWINDOW ((xf)ldexp(1.0, 13 - LDBL_MANT_DIG)) /* 2^-100 for binary128 */
#endif

typedef struct { int p; uint32_t sign, one, inf, nan; } fmt;

static inline fmt format(int p) {
    return (fmt){ p, 1u << (p + 7), 127u << (p - 1), 255u << (p - 1), 0x1ffu << (p - 2) };
}

/* The nearest (ties to even) value of the format to (-1)^neg (sig 2^e + s), where 0 <= s < 2^e
 * and s > 0 exactly when sticky: gradual underflow, overflow to inf. */
static inline uint32_t round_sig(const fmt *F, bool neg, uint64_t sig, int64_t e, bool sticky) {
    uint32_t sign = neg ? F->sign : 0;
    if (sig == 0) return sign; /* never with sticky (the callers' values are normalized) */
    int lz = __builtin_clzll(sig);
    sig <<= lz, e -= lz; /* sig in [2^63, 2^64) */
    int64_t top = e + 63; /* 2^top <= value < 2^(top + 1) */
    if (top > 127) return sign | F->inf;
    int64_t unit = (top < -126 ? -126 : top) - (F->p - 1); /* the result counts units of 2^unit */
    int64_t shift = unit - e;                               /* >= 64 - p: bits dropped */
    uint64_t q = 0;
    bool up;
    if (shift > 64) {
        up = false; /* value < 2^(e + 64) <= half a unit */
    } else if (shift == 64) {
        up = sig > (1ull << 63) || (sig == (1ull << 63) && sticky); /* a tie goes to even: 0 */
    } else {
        q = sig >> shift;
        uint64_t rest = sig & ((1ull << shift) - 1), half = 1ull << (shift - 1);
        up = rest > half || (rest == half && (sticky || (q & 1)));
    }
    q += up;
    /* q's implicit bit (2^(p-1)) adds one to the exponent field; a carry moves to the next binade */
    uint64_t bits = ((uint64_t)((top < -126 ? -126 : top) + 126) << (F->p - 1)) + q;
    return sign | (uint32_t)(bits >= F->inf ? F->inf : bits);
}

static inline uint32_t round_double(const fmt *F, bool neg, double d) { /* d >= 0 */
    if (isinf(d)) return (neg ? F->sign : 0) | F->inf;
    if (d == 0) return neg ? F->sign : 0;
    int ex;
    double fr = frexp(d, &ex); /* [0.5, 1): 53 bits, exact in a uint64 once scaled */
    return round_sig(F, neg, (uint64_t)ldexp(fr, 64), (int64_t)ex - 64, false);
}

/* v + s for v >= 0 and some 0 < s < an xf ulp of v when sticky (v itself when not) */
static inline uint32_t round_xf_sticky(const fmt *F, bool neg, xf v, bool sticky) {
    if (v - v != 0) return (neg ? F->sign : 0) | F->inf;
    if (v == 0) return neg ? F->sign : 0;
    int ex;
    xf s = XLDEXP(XFREXP(v, &ex), 64);
    uint64_t sig = (uint64_t)s; /* truncated: the rest, if any, is the sticky part */
    return round_sig(F, neg, sig, (int64_t)ex - 64, sticky || s - (xf)sig != 0);
}

static inline uint32_t round_xf(const fmt *F, bool neg, xf v) { return round_xf_sticky(F, neg, v, false); } /* v >= 0 */

#endif
