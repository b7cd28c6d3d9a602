/* The norms' exact decisions (private): fixed-size signed big integers, enough to compare the
 * exact value of rms_norm or layer_norm of bf16 inputs with a bf16 rounding midpoint without
 * rounding anything (docs/numerics.md, "Norms"). Every bf16 value x is the integer X = x * 2^134
 * (even: the smallest subnormal is X = 2), so every quantity below is an integer of at most
 * ~1,500 bits. Nothing allocates or fails; no floating-point environment is read. */
#ifndef TGRAD_OPS_NORM_EXACT_H
#define TGRAD_OPS_NORM_EXACT_H

#include <stdint.h>

#include "internal.h"

#define TG_BIG_LIMBS 48 /* 3,072 bits: the norms' backward needs ~2,800 (norm_backward_exact.c) */
typedef struct tg_big {
    uint64_t w[TG_BIG_LIMBS]; /* magnitude, little-endian */
    int32_t n;                /* limbs in use (w[n..] are zero) */
    int32_t neg;              /* 1: negative (never for zero) */
} tg_big;

TG_HIDDEN void tg_big_zero(tg_big *a);
/* a += s * (v << shift) (s = +1 or -1, v < 2^64, 0 <= shift < 3,000). */
TG_HIDDEN void tg_big_add_small(tg_big *a, uint64_t v, int32_t shift, int32_t s);
/* The norms' row sums: s1 += +-(sig << shift), s2 += sig^2 << 2 shift (sig < 2^32). */
TG_HIDDEN void tg_big_add_moments(tg_big *s1, tg_big *s2, uint64_t sig, int32_t shift, int32_t neg);
/* r = a + b, r = a * b, r = a << k (r may alias a or b). */
TG_HIDDEN void tg_big_add(tg_big *r, const tg_big *a, const tg_big *b);
TG_HIDDEN void tg_big_mul(tg_big *r, const tg_big *a, const tg_big *b);
TG_HIDDEN void tg_big_shl(tg_big *r, const tg_big *a, int32_t k);
/* -1, 0, 1 as a < b, a == b, a > b (signed). */
TG_HIDDEN int tg_big_cmp(const tg_big *a, const tg_big *b);
/* The integer d * 2^scale for a double d that it makes an integer (finite; exact). */
TG_HIDDEN void tg_big_from_double(tg_big *a, double d, int32_t scale);

/* A bf16 or float32 value x (exact in double) as the integer X = x 2^149 = sig << shift (the
 * derivative ops' exact paths: softmax_backward.c, norm_backward_exact.c). */
TG_HIDDEN void tg_exact_int_of(double x, uint64_t *sig, int32_t *shift, int32_t *neg);

/* bf16 helpers shared by the norms and rope. Keys order the bf16 values with inf: key(bits) =
 * bits for +0 .. +inf (0 .. 0x7F80), -(bits & 0x7FFF) for negative ones. */
static inline int32_t tg_bf16_key(uint16_t b) { return (b & 0x8000) ? -(int32_t)(b & 0x7FFF) : (int32_t)b; }
static inline uint16_t tg_bf16_of_key(int32_t k) { return k >= 0 ? (uint16_t)k : (uint16_t)(0x8000 | -k); }
/* The double nearest to the exact value, rounded once to bf16 (RNE, gradual underflow,
 * overflow to inf, NaN canonical 0x7FC0). Assumes round-to-nearest (the default). */
TG_HIDDEN uint16_t tg_bf16_from_double(double y);
/* The midpoint between the bf16 values of keys k and k + 1 (|k|, |k + 1| <= 0x7F80; inf counts
 * as 2^128), exact in double. */
TG_HIDDEN double tg_bf16_key_midpoint(int32_t k);

/* The exact rounding by bisection: the result's key in [klo, khi], given cmp(mid) = sign(exact -
 * mid) for any midpoint; ties go to the even neighbour. */
typedef int (*tg_midpoint_cmp)(double mid, void *ctx);
TG_HIDDEN int32_t tg_bf16_round_exact(int32_t klo, int32_t khi, tg_midpoint_cmp cmp, void *ctx);

/* eps of a norm or its backward: 0, or finite in [2^-256, 2^64] (so that eps * 2^400 is an
 * integer of bounded size in the exact decisions: docs/numerics.md); else
 * TGRAD_ERR_INVALID_ARGUMENT naming fn. */
TG_HIDDEN tgrad_status tg_norm_check_eps(double eps, const char *fn);

/* The rope kind's counters: values evaluated, decided in binary128, undecided (ops/rope.c). */
TG_HIDDEN void tg_rope_counts(int64_t c[4]);

/* The norms' hot loops (kernels/cpu/norm_loops.h), portable and AVX-512 builds of one source. */
#define TG_NORM_DECLARE_(sfx)                                                                                  \
    TG_HIDDEN void tg_norm_sumsq_##sfx(const uint16_t *x, int64_t n, double *sumsq);                           \
    TG_HIDDEN void tg_norm_sums_##sfx(const uint16_t *x, int64_t n, double *sum, double *sumabs);              \
    TG_HIDDEN void tg_norm_sumdev_##sfx(const uint16_t *x, int64_t n, double mu, double *q);                   \
    TG_HIDDEN int64_t tg_norm_rms_out_##sfx(const uint16_t *x, const uint16_t *w, int64_t n, double inv,        \
                                            double rel, uint16_t *out);                                        \
    TG_HIDDEN int64_t tg_norm_layer_out_##sfx(const uint16_t *x, const uint16_t *w, const uint16_t *b,          \
                                              int64_t n, double mu, double inv, double c1, double c2,          \
                                              uint16_t *out);
TG_NORM_DECLARE_(portable)
#if defined(TGRAD_HAVE_X86_VARIANTS)
TG_NORM_DECLARE_(avx512f)
TG_HIDDEN int tg_norm_avx512f_available(void);
/* Rope's fast path for n rotate-half pairs (x1[i], x2[i]) at one position p != 0, 8 a vector
 * (kernels/cpu/rope_avx512f.c): o1[i], o2[i] where ops/rope.c's pair() decides them by its double
 * bound (the same bits); e4[i] = E_i + 4u of pair()'s bound (NaN where f_i = 0). Returns how many
 * pairs it left, their indices in undecided[] (n entries of room), for pair() to do. */
TG_HIDDEN int32_t tg_rope_pairs_avx512f(const uint16_t *x1, const uint16_t *x2, const double *c, const double *s,
                                       const double *e4, int32_t n, uint16_t *o1, uint16_t *o2, int32_t *undecided);
TG_HIDDEN int tg_rope_avx512f_available(void);
/* layer_norm's outputs in float32, 16 a vector, with their own rigorous bound (docs/numerics.md,
 * "Norms"): delta bounds |mu - exact mean|, rho the relative error of inv. Returns the number of
 * elements left 0xFFFF (undecided), or -1 when the row is outside the float32 bound's domain (the
 * caller then runs the double loop). */
TG_HIDDEN int64_t tg_norm_layer_out_f32_avx512f(const uint16_t *x, const uint16_t *w, const uint16_t *b, int64_t n,
                                                double mu, double inv, double delta, double rho, uint16_t *out);
#endif

#endif
