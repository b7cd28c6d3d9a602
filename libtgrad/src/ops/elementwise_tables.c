/* The unary ops' tables: 65,536 results each, indexed by the input's bits, every one the correctly
 * rounded bf16 of the op's exact result.
 *
 * A table op is evaluated in double and rounded once to bf16. An evaluation accurate to 2^-44 of
 * the value (a few hundred double ulps) rounds as the exact value does unless that lies within
 * 2^-36 bf16 ulp of a bf16 midpoint; tests/c/test_elementwise.c checks all 65,536 inputs of each
 * op against a long double reference, and apart from the near-0 cases below the closest any
 * exact result comes to a midpoint is 2^-20.6 ulp (silu and sigmoid at -2^-8; docs/numerics.md).
 * The formulations keep the double evaluation that accurate where the textbook form loses every
 * digit:
 *  - 1 + erf(t) is erfc(-t), 1 + tanh(z) is 2 / (1 + exp(-2z)): for negative inputs the sum
 *    cancels (gelu of -10 would keep no correct digit);
 *  - silu and gelu_tanh divide x by 1 + exp(...) instead of multiplying by a cancelled factor;
 *  - at -inf, where 0 * inf would give NaN, the limit (-0) is stated;
 *  - near 0, gelu, gelu_tanh and silu are x/2 + c x^2 + ... with c > 0 (1/sqrt(2 pi) for both
 *    gelus, 1/4 for silu), and x/2 of a tiny bf16 x can be a bf16 midpoint exactly (x below
 *    2^-125 with an odd last bit): double cannot hold x/2 + c x^2 there, and rounding x/2 itself
 *    would tie to even, the wrong way half of the time. For 0 < |x| < 2^-100, c x^2 is below a
 *    double ulp of x/2, so the exact value lies strictly between x/2 and the next double above
 *    it, and that next double (never itself a midpoint) rounds as the exact value does.
 * sqrt, log, log1p, sin and cos are libm's double functions as they are: IEEE sqrt is correctly
 * rounded, and glibc's log, log1p, sin and cos are accurate to about 1 double ulp (2^-52), sin and
 * cos with an exact range reduction for every argument up to bf16's 3.4e38. None of them needs a
 * reformulation: log near 1 and log1p near 0 are accurate in relative terms (no cancellation
 * inside libm), tiny sin, log1p and cos values round to x (or 1) because x is a bf16 value and
 * not a midpoint. No exact result is a midpoint: sqrt(x) = m (a 9-bit odd significand) needs
 * x = m^2 with 17 significant bits, not a bf16; log, log1p, sin and cos of a non-zero rational
 * (1 for log) are transcendental (Lindemann). docs/numerics.md lists each op's closest input.
 * The direct ops (relu, neg, abs, square) fill their tables from the portable kernel.
 *
 * Built under fp_env.h's IEEE environment (the caller may run with flush modes, e.g. inside a
 * matmul), and rounded to bf16 with integer arithmetic only. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "elementwise.h"
#include "fp_env.h"

static const double SQRT_2_OVER_PI = 0.79788456080286535587989211986876373695; /* sqrt(2/pi) */
static const double GELU_TANH_CUBIC = 0.044715;

static bool near_zero(double x) { return x != 0 && fabs(x) < 0x1p-100; }
static double above_half(double x) { return nextafter(0.5 * x, INFINITY); } /* x/2 + c x^2, c > 0 */

static double gelu(double x) {
    if (isinf(x) && x < 0) return -0.0; /* 0.5 x erfc(inf) = -inf * 0 */
    if (near_zero(x)) return above_half(x);
    return 0.5 * x * erfc(-x * M_SQRT1_2);
}

static double gelu_tanh(double x) { /* 0.5 x (1 + tanh z) = x / (1 + exp(-2z)) */
    if (isinf(x)) return x < 0 ? -0.0 : x;
    if (near_zero(x)) return above_half(x);
    double z = SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x);
    return x / (1.0 + exp(-2.0 * z));
}

static double silu(double x) {
    if (isinf(x) && x < 0) return -0.0; /* -inf / (1 + inf) */
    if (near_zero(x)) return above_half(x);
    return x / (1.0 + exp(-x));
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double rsqrt(double x) { return 1.0 / sqrt(x); } /* rsqrt(-0) = 1 / -0 = -inf */

/* double -> bf16, round to nearest even, with integers only (no FP environment involved):
 * gradual underflow, overflow to inf, NaN canonical. */
static uint16_t round_to_bf16(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
    uint64_t a = u & 0x7fffffffffffffffull;
    if (a > 0x7ff0000000000000ull) return 0x7fc0u;
    int e = (int)(a >> 52) - 1023;         /* a = sig * 2^(e - 52) for a normal double */
    if (e >= 128) return sign | 0x7f80u;   /* past bf16's range (inf included) */
    uint64_t sig = (a & 0xfffffffffffffull) | (1ull << 52);
    int unit = e < -126 ? -126 : e;        /* the result counts units of 2^(unit - 7) */
    int shift = 45 + (unit - e);
    if (shift >= 54) return sign;          /* below half the smallest subnormal (zero included) */
    uint64_t q = (sig + (1ull << (shift - 1)) - 1 + ((sig >> shift) & 1)) >> shift;
    /* q < 256 except after a carry; (unit + 126) << 7 plus q sets the exponent (q's top bit is
     * the implicit one), so a carry to 256 moves to the next binade, or to inf (0x7f80) */
    return (uint16_t)(sign | (uint16_t)(((uint64_t)(unit + 126) << 7) + q));
}

static double (*const evaluate[TGRAD_OP_END_])(double) = {
    [TGRAD_OP_GELU] = gelu, [TGRAD_OP_GELU_TANH] = gelu_tanh, [TGRAD_OP_SILU] = silu,
    [TGRAD_OP_SIGMOID] = sigmoid, [TGRAD_OP_TANH] = tanh, [TGRAD_OP_EXP] = exp, [TGRAD_OP_RSQRT] = rsqrt,
    [TGRAD_OP_SQRT] = sqrt, [TGRAD_OP_LOG] = log, [TGRAD_OP_LOG1P] = log1p, [TGRAD_OP_SIN] = sin,
    [TGRAD_OP_COS] = cos,
};

bool tg_ew_from_table(tgrad_op op) { return op > 0 && op < TGRAD_OP_END_ && evaluate[op] != NULL; }

/* Static storage: a table can always be built (no allocation to fail), and the pages of the
 * binary ops' slots and of tables never used are never touched, so they cost no memory. */
static uint16_t tables[TGRAD_OP_END_][65536];
static atomic_int built[TGRAD_OP_END_];
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

/* noinline: no evaluation is moved across the environment's install or restore */
static __attribute__((noinline)) void evaluate_all(double (*f)(double), uint16_t *table) {
    for (uint32_t i = 0; i < 65536; i++) table[i] = round_to_bf16(f((double)tg_bf16_to_f32((uint16_t)i)));
}

static void build(tgrad_op op, uint16_t *table) {
    if (!evaluate[op]) {
        uint16_t x[256];
        for (uint32_t i = 0; i < 65536; i += 256) {
            for (uint32_t j = 0; j < 256; j++) x[j] = (uint16_t)(i + j);
            tg_ew_portable.unary(op, x, table + i, 256);
        }
        return;
    }
    tg_fp_env env = tg_fp_env_ieee();
    evaluate_all(evaluate[op], table);
    tg_fp_env_restore(env);
}

const uint16_t *tg_ew_table(tgrad_op op) {
    if (tgrad_op_arity(op) != 1) return NULL;
    if (!atomic_load_explicit(&built[op], memory_order_acquire)) {
        pthread_mutex_lock(&build_lock);
        if (!atomic_load_explicit(&built[op], memory_order_relaxed)) {
            build(op, tables[op]);
            atomic_store_explicit(&built[op], 1, memory_order_release);
        }
        pthread_mutex_unlock(&build_lock);
    }
    return tables[op];
}
