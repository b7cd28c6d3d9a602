/* Elementwise ops over float32 (private; docs/numerics.md, "float32 elementwise ops"). Each
 * output is the correctly rounded float32 (round to nearest even, gradual underflow, overflow to
 * inf, every NaN the canonical 0x7FC00000) of the op's exact result on the float32 inputs, under
 * any floating-point environment of the calling thread (the loops install fp_env.h's IEEE one).
 * Portable C only: one variant, so every CPU variant computes the same bytes trivially.
 *  - add, sub, mul, div, square: in double, rounded once to float (double has 53 >= 2*24 + 2
 *    bits: the double rounding is innocuous, see the docs for the argument incl. subnormals);
 *  - relu, neg, abs, maximum, minimum: bit operations;
 *  - rsqrt: 1/sqrt in double, then an exact test of the float's neighbouring midpoints (fma);
 *  - sqrt: IEEE double sqrt rounded again to float (innocuous: 53 >= 2 * 24 + 2);
 *  - pow: elementwise_pow.c (double, an exact dyadic evaluation, binary128), counted here;
 *  - exp, tanh, sigmoid, silu, gelu, gelu_tanh, log, log1p, sin, cos: Ziv's strategy, a double evaluation accepted when
 *    no float rounding boundary lies within 2^-36 of its value (relative), else a slow evaluation
 *    in binary128 (__float128 with libquadmath, or long double where that is binary128) accepted
 *    within 2^-97; counted per op (tgrad_debug_f32_slow_path).
 * Single-threaded per call, callable from any thread, allocates nothing. y may be an input. */
#ifndef TGRAD_OPS_ELEMENTWISE_F32_H
#define TGRAD_OPS_ELEMENTWISE_F32_H

#include <stdint.h>

#include "../schedule.h"

/* y[i] = op(x[i]) for a unary op, over float32 bits. */
TG_HIDDEN void tg_ew32_unary(tgrad_op op, const uint32_t *x, uint32_t *y, int64_t n);
/* y[i] = op(a[i * sa], b[i * sb]) for a binary op, sa and sb each 0 (broadcast) or 1. */
TG_HIDDEN void tg_ew32_binary(tgrad_op op, const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb, uint32_t *y,
                              int64_t n);
/* The CPU executor of a float32 elementwise step (no fused ops: the scheduler fuses none). */
TG_HIDDEN tgrad_status tg_ew32_execute(const tg_step *st);
/* The elementwise kind's gpu_finish (kinds.h; ops/elementwise_on_host.c): the elements a GPU
 * kernel flagged (kernels/gpu/transcendental_f32.h: a float32 transcendental or derivative op,
 * or pow in either dtype), recomputed on the host and uploaded again. */
TG_HIDDEN tgrad_status tg_ew_on_host(const tg_step *st, const uint32_t *flags, int64_t nflags, int64_t flagged);
/* Add n to op's TGRAD_DEBUG_F32_DEVICE_HOST count (tgrad_debug_f32_slow_path). */
TG_HIDDEN void tg_ew32_count_device_host(tgrad_op op, int64_t n);

#endif
