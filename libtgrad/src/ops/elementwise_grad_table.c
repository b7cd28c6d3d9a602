/* The GPU routes' tables of gelu', gelu_tanh' and silu' (elementwise_grad.h): for each bf16 x an
 * interval of f'(x) with a 64-bit significand, from the binary128 evaluation the CPU's slow path
 * decides with. The device (kernels/gpu/elementwise.h, tg_bf_table_grad) multiplies g's
 * significand into it exactly and rounds once; tests/c/test_gpu_elementwise.c shows that every
 * one of the 2^32 (x, g) pairs is decided and gives the CPU's bytes (docs/numerics.md).
 *
 * Entry of x, 8 ushorts: m0..m3 the significand M (16 bits each, m0 lowest), B, the exponent
 * field e, the flags, a zero. With B > 0, f'(x) lies in the open interval (M, M + B) 2^(e - 1024),
 * M >= 2^62; B = 0: f'(x) is M 2^(e - 1024) exactly. Flags: bit 15 f's sign, bit 0 f' is a zero
 * (x = -inf: the limit -0), bit 1 f' is non-zero but below 2^-280 (no bf16 g lifts g f' to half
 * the smallest subnormal). A NaN x's entry is zero (the device tests x itself). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "elementwise.h"
#include "elementwise_grad.h"
#include "elementwise_round.h"
#include "tgrad.h"

enum { FLAG_ZERO = 1, FLAG_TINY = 2, E_BIAS = 1024 };

bool tg_ew_grad_from_table(tgrad_op op) {
    return op == TGRAD_OP_GELU_BACKWARD || op == TGRAD_OP_GELU_TANH_BACKWARD || op == TGRAD_OP_SILU_BACKWARD;
}

#if defined(TGRAD_HAVE_QUADMATH)

static uint16_t tables[3][65536 * TG_EW_GRAD_ENTRY];
static atomic_int built[3]; /* 0: not yet, 1: built, -1: an entry broke its bounds (never seen) */
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

static void put(uint16_t *t, uint64_t m, uint64_t b, int e, bool neg, uint16_t flags) {
    for (int k = 0; k < 4; k++) t[k] = (uint16_t)(m >> (16 * k));
    t[4] = (uint16_t)b, t[5] = (uint16_t)(e + E_BIAS), t[6] = (uint16_t)(flags | (neg ? 0x8000u : 0u)), t[7] = 0;
}

/* f'(x) within (lo, hi) (0 < lo < hi) as (M, M + B) 2^E: false when B or M leave the layout's
 * bounds (a B past 16 bits, an M below 2^62). */
static bool put_interval(uint16_t *t, xf lo, xf hi, bool neg) {
    int ex;
    XFREXP(hi, &ex); /* hi = f 2^ex, f in [1/2, 1): hi 2^(64 - ex) in [2^63, 2^64) */
    int e = ex - 64;
    xf m = floorq(XLDEXP(lo, -e)), top = ceilq(XLDEXP(hi, -e)); /* exact: integers up to 2^64 */
    xf b = top - m;
    if (m < 0x1p62Q || b > 0xffff) return false;
    put(t, (uint64_t)m, (uint64_t)b, e, neg, 0);
    return true;
}

/* x finite and non-zero. Below 2^-80 f'(x) = 1/2 + c x + O(x^2) with 0 < c < 1 (c = 0.80 for
 * gelu and gelu_tanh, 1/2 for silu): (1/2, 1/2 + 2^-64) for x > 0, (1/2 - 2^-65, 1/2) for x < 0,
 * the tail's sign the CPU decides a midpoint with (elementwise_grad.c, slow_smooth). Elsewhere the
 * binary128 value within (mag + |d|) 2^-96 (the CPU's bound), widened to 2^-95 for the
 * subtraction's and addition's own roundings. */
static bool entry(tgrad_op op, xf x, uint16_t *t) {
    if (XFABS(x) < 0x1p-80Q) {
        if (x > 0) put(t, 1ull << 63, 1, -64, false, 0);
        else put(t, ~0ull, 1, -65, false, 0);
        return true;
    }
    xf mag, d = tg_ew_grad_deriv_q(op, x, &mag);
    bool neg = signbit(d) != 0;
    xf a = XFABS(d);
    if (a < 0x1p-280Q) { /* |g f'| < 2^128 2^-280: a signed zero for every finite g */
        put(t, 0, 0, 0, neg, FLAG_TINY);
        return true;
    }
    xf err = (mag + a) * 0x1p-95Q;
    return put_interval(t, a - err, a + err, neg);
}

/* noinline: no evaluation is moved across the environment's install or restore (binary128 is
 * software that reads the rounding mode from the environment) */
static __attribute__((noinline)) bool build_all(tgrad_op op, uint16_t *table) {
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t *t = table + (size_t)i * TG_EW_GRAD_ENTRY, h = (uint16_t)i;
        xf x = (xf)tg_bf16_to_f32(h);
        if (x != x) put(t, 0, 0, 0, false, 0);
        else if (isinf(x)) put(t, 1ull << 63, 0, x > 0 ? -63 : 0, x < 0, x > 0 ? 0 : FLAG_ZERO); /* 1, -0 */
        else if (x == 0) put(t, 1ull << 63, 0, -64, false, 0); /* f'(0) = 1/2 exactly */
        else if (!entry(op, x, t)) return false;
    }
    return true;
}

static bool build(tgrad_op op, uint16_t *table) {
    tg_fp_env env = tg_fp_env_ieee();
    bool ok = build_all(op, table);
    tg_fp_env_restore(env);
    return ok;
}

const uint16_t *tg_ew_grad_table(tgrad_op op) {
    if (!tg_ew_grad_from_table(op)) return NULL;
    int k = op - TGRAD_OP_GELU_BACKWARD;
    int state = atomic_load_explicit(&built[k], memory_order_acquire);
    if (!state) {
        pthread_mutex_lock(&build_lock);
        state = atomic_load_explicit(&built[k], memory_order_relaxed);
        if (!state) {
            state = build(op, tables[k]) ? 1 : -1;
            atomic_store_explicit(&built[k], state, memory_order_release);
        }
        pthread_mutex_unlock(&build_lock);
    }
    return state == 1 ? tables[k] : NULL;
}

#else

const uint16_t *tg_ew_grad_table(tgrad_op op) {
    (void)op;
    return NULL;
}

#endif

int64_t tg_ew_device_table_len(tgrad_op op) { return tg_ew_grad_from_table(op) ? 65536 * TG_EW_GRAD_ENTRY : 65536; }

const uint16_t *tg_ew_device_table(tgrad_op op) {
    return tg_ew_grad_from_table(op) ? tg_ew_grad_table(op) : tg_ew_table(op);
}

TGRAD_API tgrad_status tgrad_debug_device_table(tgrad_op op, uint16_t *out, int64_t count) {
    int64_t len = tg_ew_device_table_len(op);
    if (!out || (!tg_ew_grad_from_table(op) && tgrad_op_arity(op) != 1) || count != len)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_device_table: out is NULL, op %d has no table, or count "
                       "%lld is not its %lld entries", (int)op, (long long)count, (long long)len);
    const uint16_t *t = tg_ew_device_table(op);
    if (!t) return tg_fail(TGRAD_ERR_ROUTE_NOT_ELIGIBLE, "debug_device_table: op %s reads a table of f'(x) built "
                           "in binary128, which this build lacks (no libquadmath)", tgrad_op_name(op));
    memcpy(out, t, (size_t)len * sizeof *out);
    return TGRAD_OK;
}
