/* The interface every CPU elementwise variant implements: loops over contiguous bf16 arrays,
 * chosen at run time like the matmul's micro-kernels (ukernel.h).
 *
 * Numerics (docs/numerics.md, "Elementwise ops"): each output is the correctly rounded bf16
 * (round to nearest even) of the op's exact result, with gradual underflow, overflow to inf and
 * every NaN made the canonical 0x7FC0. How each kind of op gets there:
 *  - a table op (the transcendentals and rsqrt) reads one of 65,536 precomputed results,
 *    indexed by the input's bits (libtgrad/src/ops/elementwise_tables.c builds them);
 *  - add, sub, mul, div and square compute in fp32 and round once to bf16: that is correctly
 *    rounded for bf16 operands (the exact sum or product fits fp32, or the bits it drops cannot
 *    move the bf16 rounding; a quotient is never close enough to a bf16 midpoint for fp32's
 *    rounding to land on it), provided fp32 arithmetic is IEEE: so the variants run under
 *    fp_env.h's environment, whatever flush modes or rounding mode the caller's thread has;
 *  - relu, neg, abs, maximum and minimum select or change the sign of an input: bit operations.
 * Every variant computes the same bytes: one source (elementwise_loops.h) compiled with each
 * variant's target flags, no contraction, no fast math.
 *
 * Arrays: y may be the same array as an input (in place) but must not overlap one otherwise. */
#ifndef TGRAD_CPU_ELEMENTWISE_KERNEL_H
#define TGRAD_CPU_ELEMENTWISE_KERNEL_H

#include <stdint.h>

#include "tgrad.h"

typedef struct tg_ew_variant {
    const char *name;
    int (*available)(void); /* does this CPU run it */
    /* y[i] = table[x[i]] for i < n */
    void (*lookup)(const uint16_t *table, const uint16_t *x, uint16_t *y, int64_t n);
    /* y[i] = op(x[i]) for the ops computed directly: relu, neg, abs, square */
    void (*unary)(tgrad_op op, const uint16_t *x, uint16_t *y, int64_t n);
    /* y[i] = op(a[i * sa], b[i * sb]) for a binary op, with sa and sb each 0 (one value for all
     * i: a scalar broadcast) or 1 */
    void (*binary)(tgrad_op op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y,
                   int64_t n);
    /* y[i] = x[i] for i < n, the whole 64-byte lines of y written past the caches (non-temporal
     * stores) where the target has them: for outputs too big to stay in cache, so that writing
     * them reads nothing first. The caller fences (tg_store_fence) before another thread reads y. */
    void (*store_stream)(const uint16_t *x, uint16_t *y, int64_t n);
} tg_ew_variant;

extern const tg_ew_variant tg_ew_portable;
#if defined(TGRAD_HAVE_X86_VARIANTS)
extern const tg_ew_variant tg_ew_avx512f, tg_ew_avx2;
#endif

#endif
