/* Elementwise ops over contiguous arrays: the variant choice, the table-or-kernel dispatch, and
 * tgrad_debug_elementwise (the tests' way in from outside the library). */
#include <string.h>

#include "elementwise.h"
#include "elementwise_grad.h"
#include "elementwise_pow.h"

static const tg_ew_variant *const variants[] = {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    &tg_ew_avx512f,
    &tg_ew_avx2,
#endif
    &tg_ew_portable,
};
enum { NVARIANTS = (int)(sizeof variants / sizeof variants[0]) };

int32_t tg_ew_variant_count(void) { return NVARIANTS; }
const tg_ew_variant *tg_ew_variant_at(int32_t index) {
    return index >= 0 && index < NVARIANTS ? variants[index] : NULL;
}

static _Atomic(const tg_ew_variant *) best;

const tg_ew_variant *tg_ew_best(void) {
    const tg_ew_variant *v = atomic_load_explicit(&best, memory_order_acquire);
    if (!v) { /* a race only repeats the same answer */
        int i = 0;
        while (!variants[i]->available()) i++; /* the portable variant is always available */
        v = variants[i];
        atomic_store_explicit(&best, v, memory_order_release);
    }
    return v;
}

/* The loops a step uses, decided with the step: a variant forced by TGRAD_CPU_ISA or
 * tgrad_set_cpu_isa picks the elementwise variant of its name if there is one (avx512bf16, which
 * has none, the best this CPU runs: avx512f's), "portable" the portable loops. Every variant
 * gives the same bytes; forcing one is how tests run each. */
const tg_ew_variant *tg_ew_for_selection(void) {
    if (!tgrad_cpu_isa_forced()) return tg_ew_best();
    const char *name = tgrad_cpu_isa();
    for (int i = 0; i < NVARIANTS; i++)
        if (strcmp(variants[i]->name, name) == 0 && variants[i]->available()) return variants[i];
    return tg_ew_best();
}

void tg_ew_unary_on(const tg_ew_variant *v, tgrad_op op, const uint16_t *x, uint16_t *y, int64_t n) {
    if (tg_ew_from_table(op)) v->lookup(tg_ew_table(op), x, y, n);
    else v->unary(op, x, y, n);
}

void tg_ew_binary_on(const tg_ew_variant *v, tgrad_op op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb,
                     uint16_t *y, int64_t n) {
    if (op == TGRAD_OP_POW) tg_ew_pow_bf16(a, sa, b, sb, y, n); /* one portable evaluation for every variant */
    else if (tg_ew_is_grad(op)) tg_ew_grad_bf16(op, a, sa, b, sb, y, n); /* the same (elementwise_grad.h) */
    else v->binary(op, a, sa, b, sb, y, n);
}

TGRAD_API tgrad_status tgrad_debug_elementwise(tgrad_op op, const uint16_t *a, const uint16_t *b, uint16_t *out,
                                               int64_t n) {
    int32_t arity = tgrad_op_arity(op);
    if (arity == 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_elementwise: %d is not an op code", (int)op);
    if (n < 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_elementwise: n = %lld < 0", (long long)n);
    if (arity == 1 && b)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_elementwise: %s is unary, b must be NULL", tgrad_op_name(op));
    if (n > 0 && (!a || !out || (arity == 2 && !b)))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_elementwise: NULL array with n = %lld", (long long)n);
    if (arity == 1) tg_ew_unary(op, a, out, n);
    else tg_ew_binary(op, a, b, out, n);
    return TGRAD_OK;
}
