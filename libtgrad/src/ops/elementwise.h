/* Elementwise ops over contiguous bf16 arrays (private). The contract is in
 * kernels/cpu/elementwise_kernel.h and docs/numerics.md: each output is the correctly rounded bf16 of the
 * op's exact result, the same bytes on every variant and under any floating-point environment of
 * the calling thread. Single-threaded; callable from any thread; nothing allocates or fails. */
#ifndef TGRAD_OPS_ELEMENTWISE_H
#define TGRAD_OPS_ELEMENTWISE_H

#include <stdbool.h>
#include <stdint.h>

#include "elementwise_kernel.h"
#include "internal.h"

/* The unary ops read from a table (the transcendentals and rsqrt). */
TG_HIDDEN bool tg_ew_from_table(tgrad_op op);
/* The 65,536 results of unary op `op` indexed by the input's bits (for every unary op, table or
 * not: what a GPU backend uploads). Built at first use, once (thread-safe), in static storage;
 * NULL for a code that is not a unary op. */
TG_HIDDEN const uint16_t *tg_ew_table(tgrad_op op);

/* The variants this build has, most capable first (the portable one last), and the one used:
 * the first this CPU runs. */
TG_HIDDEN int32_t tg_ew_variant_count(void);
TG_HIDDEN const tg_ew_variant *tg_ew_variant_at(int32_t index);
TG_HIDDEN const tg_ew_variant *tg_ew_best(void);
/* The variant matching the CPU variant selection now (tgrad_set_cpu_isa): see elementwise.c. */
TG_HIDDEN const tg_ew_variant *tg_ew_for_selection(void);

/* y[i] = op(x[i]) for a unary op; y may be x. */
TG_HIDDEN void tg_ew_unary_on(const tg_ew_variant *v, tgrad_op op, const uint16_t *x, uint16_t *y, int64_t n);
/* y[i] = op(a[i * sa], b[i * sb]) for a binary op, sa and sb each 0 (broadcast) or 1; y may be a or b. */
TG_HIDDEN void tg_ew_binary_on(const tg_ew_variant *v, tgrad_op op, const uint16_t *a, int64_t sa, const uint16_t *b,
                               int64_t sb, uint16_t *y, int64_t n);

static inline void tg_ew_unary(tgrad_op op, const uint16_t *x, uint16_t *y, int64_t n) {
    tg_ew_unary_on(tg_ew_best(), op, x, y, n);
}
static inline void tg_ew_binary(tgrad_op op, const uint16_t *a, const uint16_t *b, uint16_t *y, int64_t n) {
    tg_ew_binary_on(tg_ew_best(), op, a, 1, b, 1, y, n);
}
/* y[i] = op(a[i], b) or, with scalar_first, op(b, a[i]) */
static inline void tg_ew_binary_scalar(tgrad_op op, const uint16_t *a, uint16_t b, bool scalar_first, uint16_t *y,
                                       int64_t n) {
    if (scalar_first) tg_ew_binary_on(tg_ew_best(), op, &b, 0, a, 1, y, n);
    else tg_ew_binary_on(tg_ew_best(), op, a, 1, &b, 0, y, n);
}

#endif
