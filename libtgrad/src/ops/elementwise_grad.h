/* The elementwise derivative ops (private; codes 24-31, docs/numerics.md "Derivative ops"): the
 * first operand the forward op's input x (or output y), the second the cotangent g, one rounding
 * of the exact value to bf16 or float32:
 *   gelu_backward(x, g) = g gelu'(x)          gelu_tanh_backward(x, g) = g gelu_tanh'(x)
 *   silu_backward(x, g) = g silu'(x)          sigmoid_backward(y, g) = g y (1 - y)
 *   tanh_backward(y, g) = g (1 - y^2)         relu_backward(x, g) = g where x > 0, else +0
 *   rsqrt_backward(y, g) = -g y^3 / 2         sqrt_backward(y, g) = g / (2 y)
 * One portable evaluation serves every CPU variant (the same bytes trivially). The method:
 *  - gelu, gelu_tanh, silu: g times f'(x). bf16: f'(x) for each of the 65,536 x is a table of
 *    doubles (long double evaluation, built at first use) with a per-x error bound; the double
 *    product is accepted when no bf16 midpoint lies within that bound, else decided in binary128
 *    (within 2^-96 of the terms' magnitude), else counted as undecided (never among all 2^32 bf16
 *    pairs: tests/c/test_elementwise.c). float32: Ziv's strategy, f'(x) in double accepted within
 *    2^-40 of the terms' magnitude, else binary128. f'(0) = 1/2 exactly: decided exactly.
 *  - sigmoid, tanh: the exact value is the sum of two exact products (g y - g y y, g - g y y),
 *    summed exactly (TwoSum) and rounded with its sticky part: double for bf16, binary128 for
 *    float32.
 *  - rsqrt: g y y y is exact in double (bf16: 32 bits) or binary128 (float32: 96 bits).
 *  - sqrt: one double division, rounded again (innocuous: 53 >= 2p + 2, as div's).
 *  - relu: a select.
 * Special cases (NaN, inf, zeros) follow IEEE multiplication of g and the derivative's value with
 * the limits f'(+inf) = 1 and f'(-inf) = -0 (docs/numerics.md). Runs under fp_env.h's IEEE
 * environment; allocates nothing; y may be an input. */
#ifndef TGRAD_OPS_ELEMENTWISE_GRAD_H
#define TGRAD_OPS_ELEMENTWISE_GRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "elementwise_pow.h"
#include "internal.h"

/* The derivative ops' codes (tgrad.h TGRAD_OP_LIST). */
static inline bool tg_ew_is_grad(tgrad_op op) { return op >= TGRAD_OP_GELU_BACKWARD && op <= TGRAD_OP_SQRT_BACKWARD; }

/* y[i] = op(a[i * sa], b[i * sb]) over bf16 bits (sa, sb each 0 or 1); slow paths counted for
 * tgrad_debug_bf16_slow_path. */
TG_HIDDEN void tg_ew_grad_bf16(tgrad_op op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y,
                               int64_t n);
/* The same over float32 bits; the counts are returned for elementwise_f32.c's counters. */
TG_HIDDEN tg_pow_counts tg_ew_grad_f32(tgrad_op op, const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb,
                                       uint32_t *y, int64_t n);
/* The bf16 counts of op so far (evaluated, slow, undecided: index 0..2). */
TG_HIDDEN int64_t tg_ew_grad_bf16_count(tgrad_op op, int32_t what);

/* The GPU routes' tables of gelu', gelu_tanh' and silu' (elementwise_grad_table.c): for each of
 * the 65,536 x, 8 ushorts the device prelude's tg_bf_table_grad reads (kernels/gpu/elementwise.h
 * states the layout). Built at first use, once (thread-safe), from the binary128 evaluation the
 * CPU's slow path uses; NULL for another op, or where the build has no binary128 (libquadmath):
 * the GPU routes then refuse the three ops. */
enum { TG_EW_GRAD_ENTRY = 8 };
static inline bool tg_ew_grad_tables_here(void) { /* whether this build makes them */
#if defined(TGRAD_HAVE_QUADMATH)
    return true;
#else
    return false;
#endif
}
TG_HIDDEN bool tg_ew_grad_from_table(tgrad_op op);
TG_HIDDEN const uint16_t *tg_ew_grad_table(tgrad_op op);
/* The table a GPU kernel binds for a table op (a unary op's 65,536 results, or a derivative op's
 * f'(x), TG_EW_GRAD_ENTRY ushorts per x) and its length in ushorts; the one place both kinds are
 * told apart for the launcher, the renderer and tgrad_debug_device_table. */
TG_HIDDEN int64_t tg_ew_device_table_len(tgrad_op op);
TG_HIDDEN const uint16_t *tg_ew_device_table(tgrad_op op);
#if defined(TGRAD_HAVE_QUADMATH)
/* f'(x) in binary128 for finite x, within 2^-96 of *mag (the terms' magnitude): the CPU's own. */
TG_HIDDEN __float128 tg_ew_grad_deriv_q(tgrad_op op, __float128 x, __float128 *mag);
#endif

#endif
