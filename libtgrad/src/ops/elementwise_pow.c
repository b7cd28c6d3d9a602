/* pow, correctly rounded to bf16 or float32 (elementwise_pow.h has the method; docs/numerics.md,
 * "pow", the proofs). bf16 and float32 share their exponent range (normal from 2^-126, largest
 * below 2^128), so one rounding serves both, told apart by the significand's bits p (8 or 24).
 * Rounding is integer arithmetic on an exact (significand, exponent) pair, never a conversion
 * that could round twice. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "elementwise_grad.h"
#include "elementwise_pow.h"
#include "elementwise_round.h"

/* glibc's pow is within 0.52 double ulp (2^-52.9) of a^b; 2^-40 leaves a factor 2^12 for other
 * libms (all documented below 1 ulp). */
#define FAST_WINDOW 0x1p-40

/* The value d (>= 0) is within w d of |a^b|: true, with *out its rounding, when the whole interval
 * rounds to one value (RNE is monotonic, so its two ends decide). 0 and inf stand for themselves. */
static bool decide_double(const fmt *F, bool neg, double d, double w, uint32_t *out) {
    if (d == 0 || isinf(d)) {
        *out = round_double(F, neg, d);
        return true;
    }
    *out = round_double(F, neg, d - d * w);
    return *out == round_double(F, neg, d + d * w);
}

static bool decide_xf(const fmt *F, bool neg, xf v, xf w, uint32_t *out) {
    if (v == 0 || v - v != 0) {
        *out = round_xf(F, neg, v);
        return true;
    }
    *out = round_xf(F, neg, v - v * w);
    return *out == round_xf(F, neg, v + v * w);
}

/* |v| = m 2^g with m odd, for a finite non-zero float v. */
static void split(float v, uint32_t *m, int64_t *g) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u &= 0x7fffffffu;
    uint32_t e = u >> 23, s = e ? (u & 0x7fffffu) | 0x800000u : u;
    int t = __builtin_ctz(s);
    *m = s >> t, *g = (e ? (int64_t)e - 150 : -149) + t;
}

/* |a|^b exactly as sig 2^e when it is a dyadic rational whose odd part is below 2^64; |a| = m 2^g,
 * |b| = Y 2^f (m, Y odd). With f < 0, |a|^b = (|a|^(2^f))^(Y) is dyadic only when |a| is a
 * (2^-f)-th power of a dyadic (a rational's root is rational only if exact, and then dyadic);
 * with a negative exponent, only when the base is a power of two (1/m^k is not dyadic for odd
 * m > 1). */
static bool exact_pow(uint32_t m, int64_t g, uint32_t Y, int64_t f, bool b_neg, uint64_t *sig, int64_t *e) {
    for (; f < 0; f++) {
        if (g & 1) return false;
        uint32_t r = (uint32_t)sqrt((double)m); /* m < 2^24: the root is exact or off by one */
        while ((uint64_t)r * r > m) r--;
        while ((uint64_t)(r + 1) * (r + 1) <= m) r++;
        if ((uint64_t)r * r != m) return false;
        m = r, g /= 2;
    }
    if (f > 24) return false; /* |b| >= 2^25: a power of two's result is far out of range (decided in double) */
    int64_t n = (int64_t)Y << f;
    if (b_neg) {
        if (m != 1) return false;
        *sig = 1, *e = -g * n;
        return true;
    }
    uint64_t s = 1;
    for (int64_t i = 0; i < n && m != 1; i++) {
        if (s > UINT64_MAX / m) return false;
        s *= m;
    }
    *sig = s, *e = g * n;
    return true;
}

static uint32_t pow_bits(const fmt *F, float a, float b, tg_pow_counts *c) {
    if (b == 0 || a == 1) return F->one; /* even for a NaN */
    if (a != a || b != b) return F->nan;
    bool b_int = false, b_odd = false;
    uint32_t Y = 0;
    int64_t f = 0;
    if (!isinf(b)) {
        split(b, &Y, &f);
        b_int = f >= 0, b_odd = f == 0;
    }
    if (isinf(b)) {
        float m = fabsf(a);
        if (m == 1) return F->one; /* (-1)^±inf */
        return (m > 1) == (b > 0) ? F->inf : 0;
    }
    if (a == 0 || isinf(a)) { /* 0^b and inf^b: 0 or inf, signed for a negative base and an odd b */
        uint32_t s = signbit(a) && b_odd ? F->sign : 0;
        return s | ((a == 0) == (b < 0) ? F->inf : 0);
    }
    if (a < 0 && !b_int) return F->nan;
    bool neg = a < 0 && b_odd;
    double base = fabs((double)a);
    uint32_t out;
    c->evaluated++;
    if (decide_double(F, neg, pow(base, (double)b), FAST_WINDOW, &out)) return out;
    c->slow++;
    uint32_t m;
    int64_t g, e;
    uint64_t sig;
    split(a, &m, &g);
    if (exact_pow(m, g, Y, f, b < 0, &sig, &e)) return round_sig(F, neg, sig, e, false);
    if (!decide_xf(F, neg, XPOW((xf)base, (xf)b), XWINDOW, &out)) c->undecided++;
    return out;
}

static inline float widen_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static inline float float_of(uint32_t u) {
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static _Atomic int64_t bf16_counts[4]; /* evaluated, slow, undecided, left to the host by a GPU kernel */

void tg_ew_pow_count_device_host(int64_t n) {
    atomic_fetch_add_explicit(&bf16_counts[TGRAD_DEBUG_F32_DEVICE_HOST], n, memory_order_relaxed);
}


void tg_ew_pow_bf16(const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y, int64_t n) {
    tg_fp_env env = tg_fp_env_ieee();
    fmt F = format(8);
    tg_pow_counts c = { 0, 0, 0 };
    for (int64_t i = 0; i < n; i++) y[i] = (uint16_t)pow_bits(&F, widen_bf16(a[i * sa]), widen_bf16(b[i * sb]), &c);
    tg_fp_env_restore(env);
    atomic_fetch_add_explicit(&bf16_counts[0], c.evaluated, memory_order_relaxed);
    atomic_fetch_add_explicit(&bf16_counts[1], c.slow, memory_order_relaxed);
    atomic_fetch_add_explicit(&bf16_counts[2], c.undecided, memory_order_relaxed);
}

tg_pow_counts tg_ew_pow_f32(const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb, uint32_t *y, int64_t n) {
    tg_fp_env env = tg_fp_env_ieee();
    fmt F = format(24);
    tg_pow_counts c = { 0, 0, 0 };
    for (int64_t i = 0; i < n; i++) y[i] = pow_bits(&F, float_of(a[i * sa]), float_of(b[i * sb]), &c);
    tg_fp_env_restore(env);
    return c;
}

TGRAD_API tgrad_status tgrad_debug_bf16_slow_path(tgrad_op op, int64_t *counts, int32_t count) {
    if (tgrad_op_arity(op) == 0)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_bf16_slow_path: %d is not an op code", (int)op);
    if (!counts || count < 1 || count > TGRAD_DEBUG_F32_COUNT)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_bf16_slow_path: counts is NULL or count %d is not 1 .. %d",
                       (int)count, TGRAD_DEBUG_F32_COUNT);
    for (int32_t i = 0; i < count; i++) /* but pow, a bf16 kernel decides every element (DEVICE_HOST: 0) */
        counts[i] = op == TGRAD_OP_POW ? atomic_load_explicit(&bf16_counts[i], memory_order_relaxed)
                    : i >= TGRAD_DEBUG_F32_DEVICE_HOST ? 0
                                                       : tg_ew_grad_bf16_count(op, i);
    return TGRAD_OK;
}
