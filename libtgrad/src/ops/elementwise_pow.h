/* pow(a, b) = a^b, correctly rounded to bf16 or float32 (private; docs/numerics.md, "pow").
 * C99 Annex F / IEEE 754 pow's special cases; every NaN out the canonical one. The value:
 *  1. libm's double pow of the exact inputs (glibc: < 0.52 double ulp), accepted when no rounding
 *     boundary of the output lies within 2^-40 of it (relative);
 *  2. else, when a^b is a dyadic rational with a significand below 2^64 (an integer power, or a
 *     2^k-th root that is exact: 49^1.5 = 343, an exact bf16 midpoint), that value, exactly;
 *  3. else binary128 pow (libquadmath's powq, or long double where that is binary128), accepted
 *     within 2^-100; an undecided value (none among all 2^32 bf16 pairs: the docs) is rounded as
 *     it is and counted.
 * Steps 2 and 3 count as the slow path (tgrad_debug_bf16_slow_path, tgrad_debug_f32_slow_path).
 * Runs under fp_env.h's IEEE environment, installed by the loops; allocates nothing. */
#ifndef TGRAD_OPS_ELEMENTWISE_POW_H
#define TGRAD_OPS_ELEMENTWISE_POW_H

#include <stdint.h>

#include "internal.h"

/* What one call of the loops below did: values evaluated, slow paths, undecided slow paths. */
typedef struct { int64_t evaluated, slow, undecided; } tg_pow_counts;

/* pow over bf16 bits: y[i] = a[i * sa] ^ b[i * sb] (sa, sb each 0 or 1); counted in the bf16
 * counters. y may be an input. */
TG_HIDDEN void tg_ew_pow_bf16(const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y, int64_t n);
/* Add n to bf16 pow's TGRAD_DEBUG_F32_DEVICE_HOST count: elements a GPU kernel left to the host. */
TG_HIDDEN void tg_ew_pow_count_device_host(int64_t n);
/* The same over float32 bits; the counts are returned for elementwise_f32.c's counters. */
TG_HIDDEN tg_pow_counts tg_ew_pow_f32(const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb, uint32_t *y,
                                      int64_t n);

#endif
