/* Elementwise ops are correctly rounded: every output is the bf16 nearest (ties to even) the op's
 * exact result, on every variant, under any floating-point environment of the caller. Linked from
 * libtgrad's objects (the kernels are hidden in the shared library). Prints "N passed, N failed".
 *
 *   test_elementwise unary      every unary op on all 65,536 inputs against a long double
 *                               reference, with a margin check (below)
 *   test_elementwise specials   the IEEE special cases each op states, and the debug entry point
 *   test_elementwise threads    first use of the tables from 8 threads at once
 *   test_elementwise binary [--stride S] [--threads T] [--op NAME] [--skip NAME]
 *                               every binary op (or one, or all but one) on all a and every S-th
 *                               b (plus special values), against a double reference; S = 1 is
 *                               all 2^32 pairs (the derivative ops 24-31: grad_reference.h's
 *                               binary128 one)
 *
 * Every variant this CPU runs is checked, each under the default environment and under a hostile
 * one (x86: MXCSR DAZ, FTZ and round toward zero; aarch64: FPCR.FZ and round toward zero); the
 * kernels must give the same bytes and leave the caller's environment as they found it.
 *
 * Unary reference: long double (x86-64: a 64-bit significand, 11 bits more than double), with
 * formulations that keep its digits. It decides the rounding only where it lies further from a
 * bf16 midpoint than its own error could reach: the test fails for any input whose reference is
 * within 2^-36 bf16 ulp of a midpoint (glibc's long double functions are accurate to a few ulps of
 * 2^-64, amplified at most ~2^8 by the ops' condition numbers: ~2^-48 ulp), and prints the closest
 * input of each op. Near 0, gelu, gelu_tanh and silu are x/2 + c x^2 with c > 0 where x/2 can be a
 * midpoint exactly; the reference carries c x^2 as a separate tail there and the rounding follows
 * its sign (those inputs are counted, and checked against mpmath in
 * tests/python/test_elementwise_reference.py).
 *
 * Binary reference: double, rounded to bf16 by its own arithmetic (not the kernels' bit trick).
 * double is exact or harmlessly inexact for every pair:
 *  - a * b: two 8-bit significands make a 16-bit product, with an exponent in [-266, 256]:
 *    exact in double;
 *  - a + b, a - b: both are multiples of the smaller operand's ulp; when their exponents differ
 *    by at most 44 the exact sum has at most 53 significant bits: exact. Otherwise the smaller
 *    is below 2^-44 of the larger a, while the bf16 midpoints nearest a are at least 2^-9 a
 *    away: the exact sum and its double rounding (which lies between a and the exact sum) both
 *    fall strictly between those midpoints, and both round to a;
 *  - a / b: the double quotient q' = RN(q) rounds differently from q only if a bf16 midpoint m
 *    lies within half a double ulp of q (|q - m| <= 2^-53 |m|) and q != m. With a = A 2^i,
 *    b = B 2^j (A, B integers below 2^8) and m = M 2^k (M odd, below 2^9):
 *    q - m = (A 2^i - M B 2^(j+k)) / (B 2^j), a nonzero multiple of 2^min(i, j+k) over B 2^j,
 *    so |q - m| / |m| >= 2^-17 > 2^-53 (i >= j+k since A < M B). The same bound makes fp32
 *    (2^-24) enough for the kernels, and covers the midpoints at the underflow (2^-134 between
 *    0 and the smallest subnormal) and overflow (between the largest finite and 2^128) edges;
 *  - maximum, minimum: an input, chosen by IEEE 754-2019's maximum and minimum (NaN
 *    propagates, -0 < +0). */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../libtgrad/src/ops/elementwise.h"
#include "check.h"

/* ---- floating-point environments ------------------------------------------------------------ */
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
static uint64_t env_get(void) { return _mm_getcsr(); }
static void env_set(uint64_t v) { _mm_setcsr((unsigned)v); }
#define ENV_HOSTILE 0xffc0u /* exceptions masked, FTZ, round toward zero, DAZ */
#define HAVE_HOSTILE_ENV 1
#elif defined(__aarch64__)
static uint64_t env_get(void) { uint64_t v; __asm__ volatile("mrs %0, fpcr" : "=r"(v)); return v; }
static void env_set(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v) : "memory"); }
#define ENV_HOSTILE ((1u << 24) | (3u << 22)) /* FZ, round toward zero */
#define HAVE_HOSTILE_ENV 1
#else
static uint64_t env_get(void) { return 0; }
static void env_set(uint64_t v) { (void)v; }
#define ENV_HOSTILE 0u
#define HAVE_HOSTILE_ENV 0
#endif

typedef struct { const tg_ew_variant *v; bool hostile; } run_cfg;
static atomic_int env_leaks; /* calls that returned with another environment than they found */

static void run_unary(run_cfg c, tgrad_op op, const uint16_t *x, uint16_t *y, int64_t n) {
    uint64_t saved = env_get();
    if (c.hostile) env_set(ENV_HOSTILE);
    uint64_t before = env_get();
    tg_ew_unary_on(c.v, op, x, y, n);
    if (env_get() != before) atomic_fetch_add(&env_leaks, 1);
    env_set(saved);
}

static void run_binary(run_cfg c, tgrad_op op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb,
                       uint16_t *y, int64_t n) {
    uint64_t saved = env_get();
    if (c.hostile) env_set(ENV_HOSTILE);
    uint64_t before = env_get();
    tg_ew_binary_on(c.v, op, a, sa, b, sb, y, n);
    if (env_get() != before) atomic_fetch_add(&env_leaks, 1);
    env_set(saved);
}

static float bf16_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#include "grad_reference.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- unary reference: long double --------------------------------------------------------- */
/* The exact value is v + tail, |tail| far below an ulp of v (tail is 0 but near 0, see top);
 * exact: v + tail is the exact value, not an approximation (a midpoint then is a true tie). */
typedef struct { long double v, tail; bool exact; } ref_value;

static const long double PI_L = 3.14159265358979323846264338327950288L;

static ref_value exact(long double v) { return (ref_value){ v, 0, true }; }
static ref_value approx(long double v) { return (ref_value){ v, 0, false }; }
/* x/2 + c x^2 for tiny x (c x^2 cannot be added to x/2 even in long double) */
static bool tiny(long double x) { return x != 0 && fabsl(x) < 0x1p-100L; }
static ref_value half_plus(long double x, long double c) { return (ref_value){ x / 2, c * x * x, false }; }

static ref_value ref_unary(tgrad_op op, long double x) {
    const long double inv_sqrt_2pi = 1 / sqrtl(2 * PI_L);
    switch (op) {
    case TGRAD_OP_RELU: return exact(x < 0 ? 0.0L : x); /* -0 stays -0; NaN stays NaN */
    case TGRAD_OP_NEG: return exact(-x);
    case TGRAD_OP_ABS: return exact(fabsl(x));
    case TGRAD_OP_SQUARE: return exact(x * x);
    case TGRAD_OP_EXP: return approx(expl(x));
    case TGRAD_OP_TANH: return approx(tanhl(x));
    case TGRAD_OP_RSQRT: return approx(1 / sqrtl(x));
    case TGRAD_OP_SQRT: return approx(sqrtl(x));
    case TGRAD_OP_LOG: return approx(logl(x));
    case TGRAD_OP_LOG1P: return approx(log1pl(x));
    case TGRAD_OP_SIN: return approx(sinl(x));
    case TGRAD_OP_COS: return approx(cosl(x));
    case TGRAD_OP_SIGMOID: /* e^x / (1 + e^x) below 0: no overflow, no cancellation */
        return approx(x < 0 ? expl(x) / (1 + expl(x)) : 1 / (1 + expl(-x)));
    case TGRAD_OP_SILU:
        if (isinf(x)) return exact(x < 0 ? -0.0L : x);
        if (tiny(x)) return half_plus(x, 0.25L);
        return approx(x < 0 ? x * expl(x) / (1 + expl(x)) : x / (1 + expl(-x)));
    case TGRAD_OP_GELU: /* x Phi(x) = x/2 erfc(-x / sqrt 2) */
        if (isinf(x)) return exact(x < 0 ? -0.0L : x);
        if (tiny(x)) return half_plus(x, inv_sqrt_2pi);
        return approx(x / 2 * erfcl(-x / sqrtl(2.0L)));
    case TGRAD_OP_GELU_TANH: {
        if (isinf(x)) return exact(x < 0 ? -0.0L : x);
        if (tiny(x)) return half_plus(x, inv_sqrt_2pi);
        long double z = sqrtl(2 / PI_L) * (x + 0.044715L * x * x * x);
        /* 0.5 x (1 + tanh z): as written where z >= 0, as x e^2z / (1 + e^2z) below */
        return approx(z >= 0 ? x / 2 * (1 + tanhl(z)) : x * expl(2 * z) / (1 + expl(2 * z)));
    }
    default: return approx(NAN);
    }
}

/* Round v + tail to bf16 (nearest, ties to even) by scaling to the bf16 ulp and splitting off
 * the fraction; *margin receives the distance to the nearest midpoint in ulps (0.5 for an exact
 * value: nothing to decide), *by_tail whether v sat exactly on a midpoint and the tail decided. */
static uint16_t round_ld(ref_value r, double *margin, bool *by_tail) {
    *margin = 0.5, *by_tail = false;
    if (isnan(r.v)) return 0x7fc0u;
    uint16_t sign = signbit(r.v) ? 0x8000u : 0;
    long double a = fabsl(r.v), t = signbit(r.v) ? -r.tail : r.tail;
    if (a >= 0x1p128L) return sign | 0x7f80u;
    int e = -126;
    if (a >= 0x1p-126L) frexpl(a, &e), e -= 1; /* 2^e <= a < 2^(e+1) */
    long double ulp = ldexpl(1.0L, e - 7);
    long double q = a / ulp, fl = floorl(q), frac = q - fl; /* all exact */
    long double up;
    if (frac > 0.5L) up = 1;
    else if (frac < 0.5L) up = 0;
    else if (t != 0) up = t > 0, *by_tail = true;
    else up = fmodl(fl, 2) != 0; /* a tie: to even */
    if (!r.exact) *margin = (double)fabsl(frac - 0.5L);
    float f = (float)((fl + up) * ulp); /* a bf16 value: exact (2^128 becomes inf) */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return sign | (uint16_t)(u >> 16);
}

#define MARGIN_MIN 0x1p-36

static int unary_ops[32], n_unary;
static int binary_ops[32], n_binary;

static void list_ops(void) {
    for (tgrad_op op = 1; op <= tgrad_op_count(); op++) {
        if (tgrad_op_arity(op) == 1) unary_ops[n_unary++] = op;
        else binary_ops[n_binary++] = op;
    }
}

/* Every variant this CPU runs, each under the hostile environment (first: the tables are built
 * at first use, under the caller's environment) and the default one. */
static run_cfg cfgs[32];
static int ncfg;

static void list_cfgs(void) {
    for (int i = 0; i < tg_ew_variant_count(); i++) {
        const tg_ew_variant *v = tg_ew_variant_at(i);
        printf("variant %s: %s\n", v->name, v->available() ? "runs here" : "not on this CPU");
        if (!v->available()) continue;
        if (HAVE_HOSTILE_ENV) cfgs[ncfg++] = (run_cfg){ v, true };
        cfgs[ncfg++] = (run_cfg){ v, false };
    }
}

static int n_cfgs(void) { return ncfg; }
static run_cfg cfg_at(int i) { return cfgs[i]; }

static int test_unary(void) {
    static uint16_t x[65536], want[65536], got[65536];
    for (uint32_t i = 0; i < 65536; i++) x[i] = (uint16_t)i;
    for (int k = 0; k < n_unary; k++) {
        tgrad_op op = unary_ops[k];
        double worst = 1;
        uint16_t worst_x = 0;
        int close = 0, by_tail = 0;
        for (uint32_t i = 0; i < 65536; i++) {
            double margin;
            bool tail;
            want[i] = round_ld(ref_unary(op, (long double)bf16_f32(x[i])), &margin, &tail);
            if (tail) by_tail++;
            else if (margin < worst) worst = margin, worst_x = x[i];
            if (!tail && margin < MARGIN_MIN && close++ < 10)
                fprintf(stderr, "%s(0x%04x): the reference is %.3g ulp from a midpoint: undecided\n", tgrad_op_name(op),
                        x[i], margin);
        }
        CHECK(close == 0);
        printf("%-10s closest to a midpoint: input 0x%04x at 2^%.1f ulp; %d inputs decided by the x^2 tail\n",
               tgrad_op_name(op), worst_x, log2(worst), by_tail);
        for (int c = 0; c < n_cfgs(); c++) {
            run_cfg cfg = cfg_at(c);
            run_unary(cfg, op, x, got, 65536);
            int bad = 0;
            for (uint32_t i = 0; i < 65536; i++) {
                if (got[i] != want[i] && bad++ < 10)
                    fprintf(stderr, "%s %s%s(0x%04x) = 0x%04x, expected 0x%04x\n", cfg.v->name,
                            cfg.hostile ? "hostile env " : "", tgrad_op_name(op), x[i], got[i], want[i]);
            }
            CHECK(bad == 0);
            memcpy(got, x, sizeof got); /* in place gives the same */
            run_unary(cfg, op, got, got, 65536);
            CHECK(memcmp(got, want, sizeof got) == 0);
        }
        /* the table GPU backends will upload is the same function */
        CHECK(memcmp(tg_ew_table(op), want, sizeof want) == 0);
    }
    return 0;
}

/* ---- binary reference: double ------------------------------------------------------------- */
/* double -> bf16, nearest with ties to even: scale the magnitude to units of its bf16 ulp
 * (2^(e-7), at least 2^-133), round to an integer by adding and subtracting 2^52 (which rounds
 * to nearest even in the default environment), scale back (exact) and narrow to float (exact
 * for a bf16 value; 2^128 becomes inf). Written without branches, for the vectorizer. */
static inline uint16_t round_double(double r) {
    uint64_t u;
    memcpy(&u, &r, sizeof u);
    int64_t e = (int64_t)((u >> 52) & 0x7ff);
    e = e < 1023 - 126 ? 1023 - 126 : e;
    uint64_t to_units_bits = (uint64_t)(2 * 1023 + 7 - e) << 52, ulp_bits = (uint64_t)(e - 7) << 52;
    double to_units, ulp;
    memcpy(&to_units, &to_units_bits, sizeof to_units);
    memcpy(&ulp, &ulp_bits, sizeof ulp);
    double q = fabs(r) * to_units;
    double n = (q + 0x1p52) - 0x1p52;
    float f = (float)(n * ulp);
    uint32_t fb;
    memcpy(&fb, &f, sizeof fb);
    uint16_t h = (uint16_t)((fb >> 16) | ((u >> 48) & 0x8000u));
    return r != r ? 0x7fc0u : h;
}

/* IEEE 754-2019 maximum and minimum: NaN propagates, -0 < +0. Selects only, for the vectorizer. */
static inline double ieee_maximum(double x, double y) {
    double m = x > y ? x : y;
    m = x == y ? (signbit(x) ? y : x) : m;
    return x != x || y != y ? NAN : m;
}

static inline double ieee_minimum(double x, double y) {
    double m = x < y ? x : y;
    m = x == y ? (signbit(x) ? x : y) : m;
    return x != x || y != y ? NAN : m;
}

/* The exhaustive sweep's cost is mostly its reference: an AVX2 clone where gcc makes one (not
 * under ThreadSanitizer, whose runtime is not up yet when the clones' resolver runs) */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define REF_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define REF_CLONES
#endif

#define REF_ROW(name, expr)                                                                        \
    REF_CLONES static void name(uint16_t a, const uint16_t *b, uint16_t *out, int64_t n) {         \
        const double x = (double)bf16_f32(a);                                                      \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const double y = (double)bf16_f32(b[i]);                                               \
            out[i] = round_double(expr);                                                           \
        }                                                                                          \
    }
REF_ROW(ref_add, x + y)
REF_ROW(ref_sub, x - y)
REF_ROW(ref_mul, x * y)
REF_ROW(ref_div, x / y)
REF_ROW(ref_maximum, ieee_maximum(x, y))
REF_ROW(ref_minimum, ieee_minimum(x, y))

/* pow: long double powl (x86-64: 64 bits, accurate to about 1 ulp of them) rounded by round_ld;
 * where that lies within 2^-44 bf16 ulp of a midpoint the reference does not decide: exact when
 * the exponent is a non-negative integer and |a|'s odd part to it fits 128 bits (the exact
 * midpoints 7^3 = 343, 3^2 2^-134 ...), else the pair is counted as undecided and left to
 * tests/python/test_pow.py's exact references (Fraction, mpmath). */
static atomic_llong pow_undecided;

static uint16_t ref_pow_exact(long double x, long double y, bool *ok) {
    *ok = false;
    if (x == 0 || isinf(x) || isinf(y)) return 0;
    uint16_t sign = (x < 0 && fmodl(y, 2) != 0) ? 0x8000u : 0;
    long double base = fabsl(x);
    for (int k = 0; y != floorl(y); k++) { /* y = n / 2^k: |x|^y = (|x|^(1/2^k))^n, exact roots only */
        long double r = sqrtl(base);
        if (k == 8 || r * r != base) return 0;
        base = r, y *= 2;
    }
    int e;
    long double m = frexpl(base, &e); /* base = m 2^e, m in [0.5, 1): at most 8 bits */
    unsigned __int128 sig = 1, odd = (unsigned __int128)ldexpl(m, 8);
    long long low = e - 8; /* base = odd 2^low */
    if (fabsl(y) > 4096) return 0;
    if (y < 0) {
        if (m != 0.5L) return 0; /* 1 / odd^n is not dyadic */
        odd = 1, low = e - 1;
    }
    for (int i = 0; i < (int)fabsl(y) && odd != 1; i++) {
        if (sig > ((unsigned __int128)1 << 119)) return 0;
        sig *= odd;
    }
    int bits = 0;
    for (unsigned __int128 t = sig; t; t >>= 1) bits++;
    long long exp2 = low * (long long)y; /* value = sig 2^exp2 */
    long long top = exp2 + bits - 1;
    *ok = true;
    if (top > 127) return sign | 0x7f80u;
    long long unit = (top < -126 ? -126 : top) - 7, shift = unit - exp2;
    unsigned __int128 q = 0;
    if (shift <= 0) {
        q = sig << (-shift);
    } else if (shift < 128) {
        q = sig >> shift;
        unsigned __int128 rest = sig - (q << shift), half = (unsigned __int128)1 << (shift - 1);
        if (rest > half || (rest == half && (q & 1))) q++;
    }
    unsigned long long field = (unsigned long long)((top < -126 ? -126 : top) + 126) * 128u + (unsigned long long)q;
    return sign | (uint16_t)(field >= 0x7f80u ? 0x7f80u : field);
}

/* pow of a zero or infinite base, by C99 F.9.4.4's table rather than powl: glibc's x87 powl gets
 * pow(-inf, -2^63) wrong (+inf; the exponent is an even integer, the answer +0). */
static uint16_t ref_pow_edge(long double x, long double y) {
    bool odd = y == floorl(y) && fabsl(y) < 0x1p64L && fmodl(y, 2) != 0;
    uint16_t sign = (odd && signbit(x)) ? 0x8000u : 0;
    bool big = (x == 0) == (y < 0); /* 0 to a negative, inf to a positive: inf */
    return sign | (big ? 0x7f80u : 0);
}

static uint16_t ref_pow(uint16_t a, uint16_t b) {
    long double x = bf16_f32(a), y = bf16_f32(b);
    if (y == 0 || x == 1) return 0x3f80u; /* C99 F.9.4.4: even for a NaN */
    if (x != x || y != y) return 0x7fc0u;
    if (x == 0 || isinf(x)) return ref_pow_edge(x, y);
    long double v = powl(x, y);
    double margin;
    bool tail, ok;
    uint16_t r = round_ld(approx(v), &margin, &tail);
    if (margin >= 0x1p-44 || isnan(v) || isinf(v) || v == 0) return r;
    uint16_t e = ref_pow_exact(x, y, &ok);
    if (ok) return e;
    atomic_fetch_add(&pow_undecided, 1);
    return 0xffffu; /* matches no result: the caller skips it */
}

static void ref_pow_row(uint16_t a, const uint16_t *b, uint16_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = ref_pow(a, b[i]);
}

static void ref_row(tgrad_op op, uint16_t a, const uint16_t *b, uint16_t *out, int64_t n) {
    if (is_grad_op(op)) {
        ref_grad_row(op, a, b, out, n);
        return;
    }
    switch (op) {
    case TGRAD_OP_POW: ref_pow_row(a, b, out, n); break;
    case TGRAD_OP_ADD: ref_add(a, b, out, n); break;
    case TGRAD_OP_SUB: ref_sub(a, b, out, n); break;
    case TGRAD_OP_MUL: ref_mul(a, b, out, n); break;
    case TGRAD_OP_DIV: ref_div(a, b, out, n); break;
    case TGRAD_OP_MAXIMUM: ref_maximum(a, b, out, n); break;
    case TGRAD_OP_MINIMUM: ref_minimum(a, b, out, n); break;
    default: memset(out, 0xff, (size_t)n * sizeof *out);
    }
}

/* Zeros, the subnormal and normal edges, one, the largest finite values, infinities, NaNs of
 * both signs with several payloads: as b in the sampled sweep. */
static const uint16_t special_values[] = {
    0x0000, 0x8000, 0x0001, 0x8001, 0x0002, 0x0003, 0x007f, 0x807f, 0x0080, 0x8080, 0x0081, 0x00ff,
    0x3f80, 0xbf80, 0x3f81, 0x3fff, 0x4000, 0x3f00, 0x4040, 0x7f00, 0x7f7f, 0xff7f, 0x7f7e, 0x7f80,
    0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffff, 0x7fff, 0x0100, 0x3380, 0x4b80, 0x1f80, 0x5f80,
};

typedef struct {
    tgrad_op op;
    const uint16_t *b;
    int64_t nb;
    int t, threads;      /* this thread takes every threads-th block of rows, from the t-th */
    const run_cfg *cfgs; /* each row's reference is computed once, for all of these */
    int ncfgs;
    bool broadcast;      /* also the a-broadcast and b-broadcast forms */
    int64_t bad[32];     /* per configuration */
} sweep_job;

static void report(const sweep_job *J, int c, uint16_t a, uint16_t b, const char *form, uint16_t got, uint16_t want) {
    fprintf(stderr, "%s %s%s(0x%04x, 0x%04x)%s = 0x%04x, expected 0x%04x\n", J->cfgs[c].v->name,
            J->cfgs[c].hostile ? "hostile env " : "", tgrad_op_name(J->op), a, b, form, got, want);
}

/* The b-broadcast form over a block of rows (as: its a values): for each b, the block's a against
 * it, checked against the block's reference, column j (pow's reference, long double powl, is most
 * of the sweep's time: the form used to compute it again, on one thread). */
static void sweep_b_broadcast(sweep_job *J, const uint16_t *as, uint32_t rows, const uint16_t *want_block,
                              uint16_t *got) {
    for (int64_t j = 0; j < J->nb; j++) {
        for (int c = 0; c < J->ncfgs; c++) {
            run_binary(J->cfgs[c], J->op, as, 1, &J->b[j], 0, got, rows);
            for (uint32_t r = 0; r < rows; r++) {
                const uint16_t want = want_block[(int64_t)r * J->nb + j];
                if (got[r] != want && want != 0xffffu && J->bad[c]++ < 5)
                    report(J, c, as[r], J->b[j], " (b broadcast)", got[r], want);
            }
        }
    }
}

/* Rows in blocks whose references (rows x nb) fit 8 MiB, dealt to the threads in turn (the
 * negative bases' half of pow is mostly NaN, and cheap): each row against every b, as a row and
 * with a broadcast; then, with the broadcast forms, the block's a against each b broadcast. */
static void *sweep(void *arg) {
    sweep_job *J = arg;
    uint32_t block = J->broadcast ? 65536u / (uint32_t)J->threads : 1;
    while (block > 1 && (int64_t)block * J->nb > ((int64_t)4 << 20)) block /= 2;
    size_t most = (size_t)(J->nb > block ? J->nb : block);
    uint16_t *row_a = malloc((size_t)J->nb * 2), *got = malloc(most * 2), *as = malloc((size_t)block * 2),
             *want = malloc((size_t)block * (size_t)J->nb * 2);
    for (uint32_t a0 = (uint32_t)J->t * block; a0 < 65536u; a0 += (uint32_t)J->threads * block) {
        uint32_t rows = 65536u - a0 < block ? 65536u - a0 : block;
        for (uint32_t r = 0; r < rows; r++) {
            const uint16_t scalar = (uint16_t)(a0 + r);
            uint16_t *w = want + (int64_t)r * J->nb;
            as[r] = scalar;
            for (int64_t i = 0; i < J->nb; i++) row_a[i] = scalar;
            ref_row(J->op, scalar, J->b, w, J->nb);
            for (int c = 0; c < J->ncfgs; c++) {
                for (int form = 0; form < 1 + J->broadcast; form++) {
                    run_binary(J->cfgs[c], J->op, form ? &scalar : row_a, form ? 0 : 1, J->b, 1, got, J->nb);
                    if (memcmp(got, w, (size_t)J->nb * 2) == 0) continue;
                    for (int64_t i = 0; i < J->nb; i++)
                        if (got[i] != w[i] && w[i] != 0xffffu && J->bad[c]++ < 5)
                            report(J, c, scalar, J->b[i], form ? " (a broadcast)" : "", got[i], w[i]);
                }
            }
        }
        if (J->broadcast) sweep_b_broadcast(J, as, rows, want, got);
    }
    free(row_a), free(got), free(as), free(want);
    return NULL;
}

static void sweep_threads(tgrad_op op, const uint16_t *b, int64_t nb, const run_cfg *cfgs, int ncfgs, bool broadcast,
                          int threads, int64_t *bad) {
    sweep_job jobs[64];
    pthread_t tid[64];
    for (int t = 0; t < threads; t++) {
        jobs[t] = (sweep_job){ .op = op, .b = b, .nb = nb, .t = t, .threads = threads, .cfgs = cfgs,
                               .ncfgs = ncfgs, .broadcast = broadcast };
        pthread_create(&tid[t], NULL, sweep, &jobs[t]);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        for (int c = 0; c < ncfgs; c++) bad[c] += jobs[t].bad[c];
    }
}

static int test_binary(int64_t stride, int threads, const char *only, const char *skip) {
    uint16_t *b = malloc(65536 * 2 + sizeof special_values);
    int64_t nb = 0;
    for (int64_t v = 0; v < 65536; v += stride) b[nb++] = (uint16_t)v;
    if (stride > 1)
        for (size_t i = 0; i < sizeof special_values / 2; i++) b[nb++] = special_values[i];
    /* all pairs: every variant under the hostile environment (the kernels install their own; the
     * sampled sweep checks both environments and the broadcast forms) */
    run_cfg sweep_cfgs[32];
    int nsweep = 0;
    for (int c = 0; c < n_cfgs(); c++)
        if (stride > 1 || cfg_at(c).hostile || !HAVE_HOSTILE_ENV) sweep_cfgs[nsweep++] = cfg_at(c);
    int matched = 0;
    for (int k = 0; k < n_binary; k++) {
        tgrad_op op = binary_ops[k];
        if (skip && !strcmp(skip, tgrad_op_name(op))) { matched++; continue; }
        if (only && strcmp(only, tgrad_op_name(op)) != 0) continue;
        if (only) matched++;
        double t0 = now_s();
        ref_grad_prepare(op);
        long long undecided_before = atomic_load(&grad_undecided);
        int64_t bad[32] = { 0 };
        /* the derivative ops run one portable evaluation whatever the variant (tg_ew_binary_on
         * dispatches them before it): all pairs on the first variant under the hostile
         * environment; the sampled sweep runs them on every variant and both environments */
        int ncheck = stride == 1 && is_grad_op(op) ? 1 : nsweep;
        sweep_threads(op, b, nb, sweep_cfgs, ncheck, stride > 1, threads, bad);
        for (int c = 0; c < ncheck; c++) {
            printf("%-8s %-9s %s: %lld pairs, %lld wrong\n", tgrad_op_name(op), sweep_cfgs[c].v->name,
                   sweep_cfgs[c].hostile ? "hostile env" : "default env", (long long)(65536 * nb), (long long)bad[c]);
            CHECK(bad[c] == 0);
        }
        if (op == TGRAD_OP_POW)
            printf("pow: %lld pair evaluations the reference left undecided (skipped; tests/python/test_pow.py)\n",
                   (long long)atomic_load(&pow_undecided));
        if (is_grad_op(op)) {
            long long undecided = atomic_load(&grad_undecided) - undecided_before;
            if (op <= TGRAD_OP_SILU_BACKWARD)
                printf("%s: the closest m |f'(x)| to its 9-bit grid: 2^%.1f units\n", tgrad_op_name(op),
                       log2(atomic_load(&grad_closest[op - TGRAD_OP_GELU_BACKWARD])));
            printf("%s: %lld pairs the reference left undecided\n", tgrad_op_name(op), undecided);
            CHECK(undecided == 0);
        }
        printf("%-8s %.1f s (%d threads)\n", tgrad_op_name(op), now_s() - t0, threads);
        fflush(stdout);
    }
    if (only || skip) CHECK(matched == (only != NULL) + (skip != NULL)); /* a misspelt name fails, not passes */
    free(b);
    return 0;
}

/* ---- the stated special cases --------------------------------------------------------------- */
enum {
    PZ = 0x0000, NZ = 0x8000, ONE = 0x3f80, MONE = 0xbf80, HALF = 0x3f00, TWO = 0x4000, PINF = 0x7f80,
    NINF = 0xff80, QNAN = 0x7fc0, MAXF = 0x7f7f, SUB1 = 0x0001, NSUB1 = 0x8001,
};
typedef struct { tgrad_op op; uint16_t a, b, want; const char *why; } special;

static const special specials[] = {
    { TGRAD_OP_RELU, NZ, 0, NZ, "relu(-0) = -0 (-0 is not below 0; torch agrees)" },
    { TGRAD_OP_RELU, 0xffc1, 0, QNAN, "relu(NaN) = NaN, canonical" },
    { TGRAD_OP_RELU, NINF, 0, PZ, "relu(-inf) = +0" },
    { TGRAD_OP_RELU, NSUB1, 0, PZ, "relu(-subnormal) = +0" },
    { TGRAD_OP_RELU, SUB1, 0, SUB1, "relu keeps subnormals" },
    { TGRAD_OP_NEG, 0xffff, 0, QNAN, "neg(NaN) = canonical NaN (torch flips the sign)" },
    { TGRAD_OP_NEG, PZ, 0, NZ, "neg(+0) = -0" },
    { TGRAD_OP_ABS, NZ, 0, PZ, "abs(-0) = +0" },
    { TGRAD_OP_ABS, 0xffc0, 0, QNAN, "abs(-NaN) = canonical NaN" },
    { TGRAD_OP_SQUARE, NZ, 0, PZ, "square(-0) = +0" },
    { TGRAD_OP_SQUARE, SUB1, 0, PZ, "square underflows to +0" },
    { TGRAD_OP_SQUARE, MAXF, 0, PINF, "square overflows to inf" },
    { TGRAD_OP_RSQRT, PZ, 0, PINF, "rsqrt(+0) = +inf" },
    { TGRAD_OP_RSQRT, NZ, 0, NINF, "rsqrt(-0) = -inf (IEEE 754 rSqrt; torch agrees)" },
    { TGRAD_OP_RSQRT, MONE, 0, QNAN, "rsqrt(-1) = NaN" },
    { TGRAD_OP_RSQRT, NINF, 0, QNAN, "rsqrt(-inf) = NaN" },
    { TGRAD_OP_RSQRT, PINF, 0, PZ, "rsqrt(+inf) = +0" },
    { TGRAD_OP_RSQRT, 0x4080, 0, HALF, "rsqrt(4) = 0.5 exactly" },
    { TGRAD_OP_EXP, NINF, 0, PZ, "exp(-inf) = +0" },
    { TGRAD_OP_EXP, PINF, 0, PINF, "exp(+inf) = +inf" },
    { TGRAD_OP_EXP, NZ, 0, ONE, "exp(-0) = 1" },
    { TGRAD_OP_EXP, 0x42b2, 0, PINF, "exp(89) overflows to inf" },
    { TGRAD_OP_EXP, 0xc2b8, 0, 0x0001, "exp(-92) = 1.1e-40: gradual underflow to the smallest subnormal" },
    { TGRAD_OP_EXP, 0xc2c0, 0, PZ, "exp(-96) underflows to +0" },
    { TGRAD_OP_EXP, QNAN, 0, QNAN, "exp(NaN) = NaN" },
    { TGRAD_OP_SIGMOID, NINF, 0, PZ, "sigmoid(-inf) = +0" },
    { TGRAD_OP_SIGMOID, PINF, 0, ONE, "sigmoid(+inf) = 1" },
    { TGRAD_OP_SIGMOID, NZ, 0, HALF, "sigmoid(-0) = 0.5" },
    { TGRAD_OP_TANH, NINF, 0, MONE, "tanh(-inf) = -1" },
    { TGRAD_OP_TANH, PINF, 0, ONE, "tanh(+inf) = 1" },
    { TGRAD_OP_TANH, NZ, 0, NZ, "tanh(-0) = -0" },
    { TGRAD_OP_TANH, 0xffff, 0, QNAN, "tanh(NaN) = canonical NaN (torch returns the input)" },
    { TGRAD_OP_TANH, NSUB1, 0, NSUB1, "tanh(x) rounds to x for a subnormal x" },
    { TGRAD_OP_GELU, NINF, 0, NZ, "gelu(-inf) = -0, the limit (torch: NaN)" },
    { TGRAD_OP_GELU, PINF, 0, PINF, "gelu(+inf) = +inf" },
    { TGRAD_OP_GELU, NZ, 0, NZ, "gelu(-0) = -0" },
    { TGRAD_OP_GELU, SUB1, 0, SUB1, "gelu(2^-133) = 2^-134 + 2^-266/sqrt(2 pi): above the midpoint, up" },
    { TGRAD_OP_GELU, 0x0003, 0, 0x0002, "gelu(3 * 2^-133): above 1.5 units, up to 2" },
    { TGRAD_OP_GELU, 0x0005, 0, 0x0003, "gelu(5 * 2^-133): above 2.5 units, up to 3 (not to even)" },
    { TGRAD_OP_GELU, NSUB1, 0, NZ, "gelu(-2^-133) = -2^-134 + tiny: toward zero, -0" },
    { TGRAD_OP_GELU, 0x8003, 0, 0x8001, "gelu(-3 * 2^-133): below 1.5 units in magnitude, down to 1" },
    { TGRAD_OP_GELU, 0xc1a0, 0, NZ, "gelu(-20) = -5.5e-88: underflows to -0" },
    { TGRAD_OP_GELU_TANH, NINF, 0, NZ, "gelu_tanh(-inf) = -0, the limit (torch: NaN)" },
    { TGRAD_OP_GELU_TANH, PINF, 0, PINF, "gelu_tanh(+inf) = +inf" },
    { TGRAD_OP_GELU_TANH, 0x0005, 0, 0x0003, "gelu_tanh(5 * 2^-133): up to 3" },
    { TGRAD_OP_SILU, NINF, 0, NZ, "silu(-inf) = -0, the limit (torch: NaN)" },
    { TGRAD_OP_SILU, PINF, 0, PINF, "silu(+inf) = +inf" },
    { TGRAD_OP_SILU, 0x8005, 0, 0x8002, "silu(-5 * 2^-133) = -2.5 units + tiny: down to 2 in magnitude" },
    { TGRAD_OP_SILU, 0xc2c8, 0, NZ, "silu(-100) = -3.7e-42: rounds to -0" },
    { TGRAD_OP_SQRT, NZ, 0, NZ, "sqrt(-0) = -0 (IEEE 754)" },
    { TGRAD_OP_SQRT, MONE, 0, QNAN, "sqrt(-1) = NaN" },
    { TGRAD_OP_SQRT, NINF, 0, QNAN, "sqrt(-inf) = NaN" },
    { TGRAD_OP_SQRT, PINF, 0, PINF, "sqrt(+inf) = +inf" },
    { TGRAD_OP_SQRT, 0x4080, 0, TWO, "sqrt(4) = 2 exactly" },
    { TGRAD_OP_SQRT, 0x0002, 0, 0x1e80, "sqrt(2^-132) = 2^-66 (a subnormal's root is normal)" },
    { TGRAD_OP_LOG, PZ, 0, NINF, "log(+0) = -inf" },
    { TGRAD_OP_LOG, NZ, 0, NINF, "log(-0) = -inf (IEEE 754)" },
    { TGRAD_OP_LOG, MONE, 0, QNAN, "log(-1) = NaN" },
    { TGRAD_OP_LOG, NSUB1, 0, QNAN, "log(-subnormal) = NaN" },
    { TGRAD_OP_LOG, ONE, 0, PZ, "log(1) = +0" },
    { TGRAD_OP_LOG, PINF, 0, PINF, "log(+inf) = +inf" },
    { TGRAD_OP_LOG, 0x402e, 0, 0x3f80, "log(2.71875) = 1.0001: 1" },
    { TGRAD_OP_LOG1P, MONE, 0, NINF, "log1p(-1) = -inf" },
    { TGRAD_OP_LOG1P, 0xc000, 0, QNAN, "log1p(-2) = NaN" },
    { TGRAD_OP_LOG1P, NZ, 0, NZ, "log1p(-0) = -0" },
    { TGRAD_OP_LOG1P, SUB1, 0, SUB1, "log1p(x) rounds to x for a subnormal x" },
    { TGRAD_OP_LOG1P, PINF, 0, PINF, "log1p(+inf) = +inf" },
    { TGRAD_OP_SIN, NZ, 0, NZ, "sin(-0) = -0" },
    { TGRAD_OP_SIN, PINF, 0, QNAN, "sin(+inf) = NaN" },
    { TGRAD_OP_SIN, NINF, 0, QNAN, "sin(-inf) = NaN" },
    { TGRAD_OP_SIN, NSUB1, 0, NSUB1, "sin(x) rounds to x for a subnormal x" },
    { TGRAD_OP_COS, NZ, 0, ONE, "cos(-0) = 1" },
    { TGRAD_OP_COS, PINF, 0, QNAN, "cos(+inf) = NaN" },
    { TGRAD_OP_COS, SUB1, 0, ONE, "cos(2^-133) rounds to 1" },
    { TGRAD_OP_POW, QNAN, PZ, ONE, "pow(NaN, 0) = 1 (C99 F.9.4.4)" },
    { TGRAD_OP_POW, ONE, QNAN, ONE, "pow(1, NaN) = 1" },
    { TGRAD_OP_POW, MONE, PINF, ONE, "pow(-1, inf) = 1" },
    { TGRAD_OP_POW, TWO, QNAN, QNAN, "pow(2, NaN) = NaN" },
    { TGRAD_OP_POW, 0xc100, 0x3eab, QNAN, "pow(-8, 0.333984) = NaN (a negative base to a non-integer)" },
    { TGRAD_OP_POW, 0xc000, 0x4040, 0xc100, "pow(-2, 3) = -8" },
    { TGRAD_OP_POW, 0xc000, TWO, 0x4080, "pow(-2, 2) = 4" },
    { TGRAD_OP_POW, NZ, 0xbf80, NINF, "pow(-0, -1) = -inf" },
    { TGRAD_OP_POW, NZ, 0xc000, PINF, "pow(-0, -2) = +inf" },
    { TGRAD_OP_POW, NZ, 0x4040, NZ, "pow(-0, 3) = -0" },
    { TGRAD_OP_POW, NZ, HALF, PZ, "pow(-0, 0.5) = +0" },
    { TGRAD_OP_POW, NINF, 0x4040, NINF, "pow(-inf, 3) = -inf" },
    { TGRAD_OP_POW, NINF, 0xbf80, NZ, "pow(-inf, -1) = -0" },
    { TGRAD_OP_POW, NINF, HALF, PINF, "pow(-inf, 0.5) = +inf" },
    { TGRAD_OP_POW, NINF, 0xdf00, PZ, "pow(-inf, -2^63) = +0 (an even exponent; glibc's powl says inf)" },
    { TGRAD_OP_POW, NINF, 0x5f00, PINF, "pow(-inf, 2^63) = +inf" },
    { TGRAD_OP_POW, NZ, 0xdf00, PINF, "pow(-0, -2^63) = +inf" },
    { TGRAD_OP_POW, NINF, NINF, PZ, "pow(-inf, -inf) = +0" },
    { TGRAD_OP_POW, NZ, PINF, PZ, "pow(-0, inf) = +0" },
    { TGRAD_OP_POW, HALF, PINF, PZ, "pow(0.5, inf) = +0" },
    { TGRAD_OP_POW, HALF, NINF, PINF, "pow(0.5, -inf) = +inf" },
    { TGRAD_OP_POW, TWO, NINF, PZ, "pow(2, -inf) = +0" },
    { TGRAD_OP_POW, 0x40e0, 0x4040, 0x43ac, "pow(7, 3) = 343, a midpoint: to even, 344" },
    { TGRAD_OP_POW, 0x4244, 0x3fc0, 0x43ac, "pow(49, 1.5) = 343, a midpoint reached by a root: 344" },
    { TGRAD_OP_POW, 0x4080, HALF, TWO, "pow(4, 0.5) = 2" },
    { TGRAD_OP_POW, TWO, 0x4300, PINF, "pow(2, 128) overflows to inf" },
    { TGRAD_OP_POW, TWO, 0xc306, PZ, "pow(2, -134) = 2^-134, a tie between 0 and 2^-133: to even, +0" },
    { TGRAD_OP_POW, 0x4040, 0x4000, 0x4110, "pow(3, 2) = 9" },
    { TGRAD_OP_POW, 0x4040, 0xc040, 0x3d18, "pow(3, -3) = 1/27" },
    { TGRAD_OP_GELU_BACKWARD, PZ, 0x0003, 0x0002, "gelu_backward(0, 3 * 2^-133) = 1.5 units exactly: a tie, to even, 2" },
    { TGRAD_OP_GELU_BACKWARD, SUB1, 0x0003, 0x0002, "gelu_backward(2^-133, 3 * 2^-133): 1.5 units + tiny: up, 2" },
    { TGRAD_OP_GELU_BACKWARD, SUB1, 0x0001, 0x0001, "gelu_backward(2^-133, 2^-133): 2^-134 + tiny: up to 2^-133" },
    { TGRAD_OP_GELU_BACKWARD, NSUB1, 0x0001, PZ, "gelu_backward(-2^-133, 2^-133): 2^-134 - tiny: down to +0" },
    { TGRAD_OP_GELU_BACKWARD, PINF, 0x4040, 0x4040, "gelu_backward(+inf, g) = g (gelu'(+inf) = 1)" },
    { TGRAD_OP_GELU_BACKWARD, NINF, 0x4040, NZ, "gelu_backward(-inf, 3) = -0 (gelu'(-inf) = -0, the limit)" },
    { TGRAD_OP_GELU_BACKWARD, NINF, PINF, QNAN, "gelu_backward(-inf, inf) = NaN (-0 * inf)" },
    { TGRAD_OP_GELU_BACKWARD, 0xc2c8, PINF, NINF, "gelu_backward(-100, inf) = -inf (gelu'(-100) < 0, not 0)" },
    { TGRAD_OP_GELU_BACKWARD, 0xc2c8, ONE, NZ, "gelu_backward(-100, 1) = -1e-2173: -0" },
    { TGRAD_OP_GELU_BACKWARD, 0x3fb3, MAXF, PINF, "gelu_backward(1.4, max) = 1.13 max: overflows to inf" },
    { TGRAD_OP_GELU_BACKWARD, ONE, QNAN, QNAN, "gelu_backward(1, NaN) = NaN" },
    { TGRAD_OP_GELU_BACKWARD, QNAN, PZ, QNAN, "gelu_backward(NaN, 0) = NaN" },
    { TGRAD_OP_GELU_BACKWARD, ONE, NZ, NZ, "gelu_backward(1, -0) = -0" },
    { TGRAD_OP_GELU_TANH_BACKWARD, NINF, 0x4040, NZ, "gelu_tanh_backward(-inf, 3) = -0" },
    { TGRAD_OP_GELU_TANH_BACKWARD, PINF, MONE, MONE, "gelu_tanh_backward(+inf, -1) = -1" },
    { TGRAD_OP_GELU_TANH_BACKWARD, PZ, 0x0005, 0x0002, "gelu_tanh_backward(0, 5 * 2^-133) = 2.5 units: a tie, to even, 2" },
    { TGRAD_OP_SILU_BACKWARD, NSUB1, 0x8005, 0x8002, "silu_backward(-2^-133, -5 * 2^-133): -2.5 units + tiny toward 0: -2" },
    { TGRAD_OP_SILU_BACKWARD, SUB1, 0x8005, 0x8003, "silu_backward(2^-133, -5 * 2^-133): -2.5 units - tiny: -3" },
    { TGRAD_OP_SILU_BACKWARD, 0xc2c8, PINF, NINF, "silu_backward(-100, inf) = -inf" },
    { TGRAD_OP_SIGMOID_BACKWARD, HALF, ONE, 0x3e80, "sigmoid_backward(0.5, 1) = 0.25" },
    { TGRAD_OP_SIGMOID_BACKWARD, ONE, 0x4040, PZ, "sigmoid_backward(1, 3) = +0" },
    { TGRAD_OP_SIGMOID_BACKWARD, ONE, MONE, NZ, "sigmoid_backward(1, -1) = -0 (g y (1 - y) with 1 - y = +0)" },
    { TGRAD_OP_SIGMOID_BACKWARD, NZ, ONE, NZ, "sigmoid_backward(-0, 1) = -0" },
    { TGRAD_OP_SIGMOID_BACKWARD, PINF, ONE, NINF, "sigmoid_backward(inf, 1) = -inf" },
    { TGRAD_OP_SIGMOID_BACKWARD, ONE, PINF, QNAN, "sigmoid_backward(1, inf) = NaN (inf * 0)" },
    { TGRAD_OP_SIGMOID_BACKWARD, 0x5f30, 0x4040, NINF, "sigmoid_backward(1.27e19, 3) = -4.8e38: overflows" },
    { TGRAD_OP_SIGMOID_BACKWARD, 0x0003, HALF, 0x0001, "sigmoid_backward(3 * 2^-133, 0.5) = 1.5 units - tiny: down to 1, not to even 2" },
    { TGRAD_OP_TANH_BACKWARD, ONE, 0x4040, PZ, "tanh_backward(1, 3) = +0" },
    { TGRAD_OP_TANH_BACKWARD, MONE, MONE, NZ, "tanh_backward(-1, -1) = -0" },
    { TGRAD_OP_TANH_BACKWARD, PZ, 0x4040, 0x4040, "tanh_backward(0, 3) = 3" },
    { TGRAD_OP_TANH_BACKWARD, NINF, ONE, NINF, "tanh_backward(-inf, 1) = -inf" },
    { TGRAD_OP_TANH_BACKWARD, HALF, ONE, 0x3f40, "tanh_backward(0.5, 1) = 0.75" },
    { TGRAD_OP_RELU_BACKWARD, ONE, 0x4040, 0x4040, "relu_backward(1, 3) = 3" },
    { TGRAD_OP_RELU_BACKWARD, PZ, 0x4040, PZ, "relu_backward(+0, 3) = +0 (0 is not > 0)" },
    { TGRAD_OP_RELU_BACKWARD, NZ, 0x4040, PZ, "relu_backward(-0, 3) = +0" },
    { TGRAD_OP_RELU_BACKWARD, MONE, PINF, PZ, "relu_backward(-1, inf) = +0 (a select, not a product)" },
    { TGRAD_OP_RELU_BACKWARD, SUB1, NZ, NZ, "relu_backward(2^-133, -0) = -0 (g itself)" },
    { TGRAD_OP_RELU_BACKWARD, 0xffc1, ONE, QNAN, "relu_backward(NaN, 1) = NaN (torch gives 1)" },
    { TGRAD_OP_RELU_BACKWARD, MONE, QNAN, QNAN, "relu_backward(-1, NaN) = NaN (torch gives 0)" },
    { TGRAD_OP_RSQRT_BACKWARD, ONE, ONE, 0xbf00, "rsqrt_backward(1, 1) = -0.5" },
    { TGRAD_OP_RSQRT_BACKWARD, PZ, ONE, NZ, "rsqrt_backward(+0, 1) = -0" },
    { TGRAD_OP_RSQRT_BACKWARD, PINF, PZ, QNAN, "rsqrt_backward(inf, 0) = NaN" },
    { TGRAD_OP_RSQRT_BACKWARD, PINF, ONE, NINF, "rsqrt_backward(inf, 1) = -inf" },
    { TGRAD_OP_SQRT_BACKWARD, ONE, ONE, HALF, "sqrt_backward(1, 1) = 0.5" },
    { TGRAD_OP_SQRT_BACKWARD, PZ, ONE, PINF, "sqrt_backward(+0, 1) = +inf" },
    { TGRAD_OP_SQRT_BACKWARD, NZ, ONE, NINF, "sqrt_backward(-0, 1) = -inf" },
    { TGRAD_OP_SQRT_BACKWARD, PZ, PZ, QNAN, "sqrt_backward(0, 0) = NaN" },
    { TGRAD_OP_SQRT_BACKWARD, PINF, ONE, PZ, "sqrt_backward(inf, 1) = +0" },
    { TGRAD_OP_SQRT_BACKWARD, TWO, 0x0003, 0x0001, "sqrt_backward(2, 3 * 2^-133) = 0.75 units: 1" },
    { TGRAD_OP_ADD, NZ, PZ, PZ, "-0 + +0 = +0" },
    { TGRAD_OP_ADD, NZ, NZ, NZ, "-0 + -0 = -0" },
    { TGRAD_OP_ADD, PINF, NINF, QNAN, "inf + -inf = NaN" },
    { TGRAD_OP_ADD, MAXF, MAXF, PINF, "overflow to inf" },
    { TGRAD_OP_ADD, SUB1, SUB1, 0x0002, "subnormals add exactly (no flush)" },
    { TGRAD_OP_ADD, ONE, 0x3b80, ONE, "1 + 2^-8 is a tie: to even, 1" },
    { TGRAD_OP_ADD, 0x3f81, 0x3b80, 0x3f82, "(1 + 2^-7) + 2^-8 is a tie: to even, up" },
    { TGRAD_OP_SUB, ONE, ONE, PZ, "x - x = +0" },
    { TGRAD_OP_SUB, NZ, PZ, NZ, "-0 - +0 = -0" },
    { TGRAD_OP_SUB, PINF, PINF, QNAN, "inf - inf = NaN" },
    { TGRAD_OP_SUB, 0x0080, 0x0001, 0x007f, "2^-126 - 2^-133: a subnormal result, kept" },
    { TGRAD_OP_MUL, NZ, ONE, NZ, "-0 * 1 = -0" },
    { TGRAD_OP_MUL, PINF, PZ, QNAN, "inf * 0 = NaN" },
    { TGRAD_OP_MUL, SUB1, HALF, PZ, "2^-134 is a tie between 0 and 2^-133: to even, 0" },
    { TGRAD_OP_MUL, 0x0003, HALF, 0x0002, "1.5 units: a tie, to even, 2" },
    { TGRAD_OP_MUL, 0x0080, HALF, 0x0040, "2^-126 * 0.5: gradual underflow, exact" },
    { TGRAD_OP_MUL, MAXF, TWO, PINF, "overflow to inf" },
    { TGRAD_OP_DIV, ONE, PZ, PINF, "1 / +0 = +inf" },
    { TGRAD_OP_DIV, ONE, NZ, NINF, "1 / -0 = -inf" },
    { TGRAD_OP_DIV, PZ, PZ, QNAN, "0 / 0 = NaN" },
    { TGRAD_OP_DIV, PINF, PINF, QNAN, "inf / inf = NaN" },
    { TGRAD_OP_DIV, ONE, PINF, PZ, "1 / inf = +0" },
    { TGRAD_OP_DIV, SUB1, TWO, PZ, "2^-134: a tie, to even, 0" },
    { TGRAD_OP_DIV, 0x4040, 0x4040, ONE, "3 / 3 = 1" },
    { TGRAD_OP_MAXIMUM, NZ, PZ, PZ, "maximum(-0, +0) = +0 (IEEE 754-2019; torch depends on the order)" },
    { TGRAD_OP_MAXIMUM, PZ, NZ, PZ, "maximum(+0, -0) = +0" },
    { TGRAD_OP_MAXIMUM, ONE, 0x7f81, QNAN, "maximum(x, NaN) = NaN, canonical" },
    { TGRAD_OP_MAXIMUM, 0xffc0, ONE, QNAN, "maximum(NaN, x) = NaN" },
    { TGRAD_OP_MAXIMUM, NINF, MONE, MONE, "maximum(-inf, -1) = -1" },
    { TGRAD_OP_MINIMUM, PZ, NZ, NZ, "minimum(+0, -0) = -0" },
    { TGRAD_OP_MINIMUM, NZ, PZ, NZ, "minimum(-0, +0) = -0" },
    { TGRAD_OP_MINIMUM, PINF, QNAN, QNAN, "minimum(inf, NaN) = NaN" },
    { TGRAD_OP_MINIMUM, NSUB1, SUB1, NSUB1, "minimum(-2^-133, 2^-133) = -2^-133" },
};

static void test_specials(void) {
    for (tgrad_op op = TGRAD_OP_GELU_BACKWARD; op <= TGRAD_OP_SILU_BACKWARD; op++) ref_grad_prepare(op);
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        const special *s = &specials[i];
        for (int c = 0; c < n_cfgs(); c++) {
            run_cfg cfg = cfg_at(c);
            uint16_t got = 0x1234;
            if (tgrad_op_arity(s->op) == 1) run_unary(cfg, s->op, &s->a, &got, 1);
            else run_binary(cfg, s->op, &s->a, 1, &s->b, 1, &got, 1);
            if (got != s->want)
                fprintf(stderr, "%s%s: %s(0x%04x, 0x%04x) = 0x%04x, expected 0x%04x: %s\n", cfg.v->name,
                        cfg.hostile ? " (hostile env)" : "", tgrad_op_name(s->op), s->a, s->b, got, s->want, s->why);
            CHECK(got == s->want);
        }
        /* the references agree with the statement (so a wrong reference would show here too) */
        uint16_t ref;
        if (tgrad_op_arity(s->op) == 1) {
            double margin;
            bool tail;
            ref = round_ld(ref_unary(s->op, (long double)bf16_f32(s->a)), &margin, &tail);
        } else {
            ref_row(s->op, s->a, &s->b, &ref, 1);
        }
        if (ref != s->want) fprintf(stderr, "reference: %s = 0x%04x, stated 0x%04x\n", s->why, ref, s->want);
        CHECK(ref == s->want);
    }
    /* every NaN in gives the canonical NaN out, whatever its sign and payload */
    for (int k = 0; k < n_unary; k++) {
        const uint16_t nans[] = { 0x7f81, 0x7fc0, 0x7fff, 0xff81, 0xffc0, 0xffff };
        uint16_t out[6];
        tg_ew_unary(unary_ops[k], nans, out, 6);
        for (int i = 0; i < 6; i++) CHECK(out[i] == QNAN);
    }
}

static void test_debug_entry(void) {
    const uint16_t a[3] = { ONE, NZ, 0x4040 }, b[3] = { TWO, PZ, 0x4040 };
    uint16_t out[3] = { 1, 2, 3 }, want[3];
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_ADD, a, b, out, 3), TGRAD_OK);
    tg_ew_binary(TGRAD_OP_ADD, a, b, want, 3);
    CHECK(memcmp(out, want, sizeof out) == 0 && out[0] == 0x4040);
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_EXP, a, NULL, out, 3), TGRAD_OK);
    tg_ew_unary(TGRAD_OP_EXP, a, want, 3);
    CHECK(memcmp(out, want, sizeof out) == 0);
    /* refusals leave out untouched */
    const uint16_t before[3] = { 7, 8, 9 };
    memcpy(out, before, sizeof out);
    EXPECT(tgrad_debug_elementwise(0, a, b, out, 3), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_elementwise(tgrad_op_count() + 1, a, b, out, 3), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_ADD, a, b, out, -1), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_ADD, a, NULL, out, 3), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_EXP, a, b, out, 3), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_EXP, NULL, NULL, out, 3), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_EXP, a, NULL, NULL, 3), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(memcmp(out, before, sizeof out) == 0);
    EXPECT(tgrad_debug_elementwise(TGRAD_OP_MUL, NULL, NULL, NULL, 0), TGRAD_OK);
    /* tables exist for unary ops only */
    CHECK(tg_ew_table(TGRAD_OP_ADD) == NULL && tg_ew_table(0) == NULL && tg_ew_table(TGRAD_OP_RELU) != NULL);
}

/* First use from many threads at once: each table is built once, and every thread reads it
 * whole (run under ThreadSanitizer too). */
enum { RACERS = 8 };
static uint16_t raced[RACERS][32][65536], race_x[65536];

static void *race(void *arg) {
    int t = (int)(intptr_t)arg;
    for (int k = 0; k < n_unary; k++) {
        int op = unary_ops[(k + t) % n_unary]; /* threads start on different ops */
        tg_ew_unary(op, race_x, raced[t][(k + t) % n_unary], 65536);
    }
    return NULL;
}

static void test_threads(void) {
    for (uint32_t i = 0; i < 65536; i++) race_x[i] = (uint16_t)i;
    pthread_t tid[RACERS];
    for (int t = 0; t < RACERS; t++) pthread_create(&tid[t], NULL, race, (void *)(intptr_t)t);
    for (int t = 0; t < RACERS; t++) pthread_join(tid[t], NULL);
    for (int k = 0; k < n_unary; k++) {
        for (int t = 1; t < RACERS; t++) CHECK(memcmp(raced[t][k], raced[0][k], sizeof raced[0][k]) == 0);
        CHECK(memcmp(raced[0][k], tg_ew_table(unary_ops[k]), 65536 * 2) == 0);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int64_t stride = 1;
    const char *only = NULL, *skip = NULL;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--stride")) stride = strtoll(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--op")) only = argv[i + 1];
        else if (!strcmp(argv[i], "--skip")) skip = argv[i + 1];
    }
    if (stride < 1 || threads < 1 || threads > 64) {
        fprintf(stderr, "bad --stride or --threads\n");
        return 2;
    }
    list_ops();
    list_cfgs();
    if (!strcmp(mode, "unary")) {
        if (LDBL_MANT_DIG < 64) {
            printf("long double has %d bits here: not a more precise reference; skipped\n", LDBL_MANT_DIG);
            return 77;
        }
        test_unary();
    } else if (!strcmp(mode, "specials")) {
        test_specials();
        test_debug_entry();
    } else if (!strcmp(mode, "threads")) {
        test_threads();
    } else if (!strcmp(mode, "binary")) {
        test_binary(stride, threads, only, skip);
    } else {
        fprintf(stderr, "usage: %s unary | specials | threads | binary [--stride S] [--threads T] [--op NAME] [--skip NAME]\n", argv[0]);
        return 2;
    }
    CHECK(atomic_load(&env_leaks) == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
