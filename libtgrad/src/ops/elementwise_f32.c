/* The float32 elementwise ops (elementwise_f32.h; the proofs of each rounding are in
 * docs/numerics.md, "float32 elementwise ops"). Every function here takes and returns float32
 * bits and runs under fp_env.h's IEEE environment, installed by the loops at the bottom. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "elementwise_f32.h"
#include "elementwise_pow.h"
#include "elementwise_grad.h"

/* The slow path's arithmetic: binary128 (113-bit significand) where the build has it. */
#if defined(TGRAD_HAVE_QUADMATH)
#include <quadmath.h>
typedef __float128 xf;
#define XEXP expq
#define XERFC erfcq
#define XTANH tanhq
#define XLOG logq
#define XLOG1P log1pq
#define XSIN sinq
#define XCOS cosq
#define XSQRT1_2 M_SQRT1_2q
#define XK (M_2_SQRTPIq * M_SQRT1_2q) /* sqrt(2/pi) */
#define XA 0.044715Q
#define XWINDOW 0x1p-97Q
#else
#include <float.h>
typedef long double xf; /* binary128 on aarch64 Linux; x87's 64 bits on x86; double on macOS */
#define XEXP expl
#define XERFC erfcl
#define XTANH tanhl
#define XLOG logl
#define XLOG1P log1pl
#define XSIN sinl
#define XCOS cosl
#define XSQRT1_2 0.707106781186547524400844362104849039L /* spelled out: macOS has no M_SQRT1_2l */
#define XK (1.12837916709551257389615890312154517L * XSQRT1_2) /* 2/sqrt(pi) * sqrt(1/2) */
#define XA 0.044715L
#define XWINDOW ((xf)ldexp(1.0, 16 - LDBL_MANT_DIG)) /* 2^-97 for binary128 */
#endif

/* The fast path accepts a double value y when every value within y * 2^-36 rounds to the same
 * float: far wider than the evaluations' proven error (at most 2^-42.5 of the value, the docs'
 * table), so libm may be off by 2^6 times its documented bounds without a wrong byte. */
#define FAST_WINDOW 0x1p-36

enum { NAN32 = 0x7fc00000 };

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x7fffffffu) > 0x7f800000u ? NAN32 : u;
}
static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline bool is_nan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* ---- the slow-path counters (tgrad_debug_f32_slow_path) ------------------------------------- */
#define TG_OP_ONE_(code, NAME, name, arity) +1
enum { NOPS = 1 TGRAD_OP_LIST(TG_OP_ONE_) }; /* codes 1 .. count, dense (registry.c checks) */
#undef TG_OP_ONE_
static _Atomic int64_t counters[NOPS][TGRAD_DEBUG_F32_COUNT];

static inline void count(tgrad_op op, int32_t what, int64_t n) {
    atomic_fetch_add_explicit(&counters[op][what], n, memory_order_relaxed);
}

void tg_ew32_count_device_host(tgrad_op op, int64_t n) {
    if (op > 0 && op < NOPS) count(op, TGRAD_DEBUG_F32_DEVICE_HOST, n);
}

/* ---- deciding the rounding ---------------------------------------------------------------- */
/* y is within w * |y| of the exact result; true (and *out the float) when that interval holds no
 * rounding boundary of float32: its two ends round to the same float. An infinite y (only for an
 * exact result beyond float's range) and a zero y (underflowed: the exact result is below 2^-1074)
 * round as they are. RNE is monotonic, so both ends agreeing decides every value between. */
static bool decide_d(double y, double w, uint32_t *out) {
    if (y == 0 || isinf(y)) {
        *out = bits_of((float)y);
        return true;
    }
    double e = fabs(y) * w;
    uint32_t lo = bits_of((float)(y - e)), hi = bits_of((float)(y + e));
    *out = lo;
    return lo == hi;
}

static bool decide_x(xf y, xf w, uint32_t *out) {
    if (y == 0 || (y - y) != 0) { /* zero, infinite (or NaN) */
        *out = bits_of((float)y);
        return true;
    }
    xf e = (y < 0 ? -y : y) * w;
    uint32_t lo = bits_of((float)(y - e)), hi = bits_of((float)(y + e));
    *out = lo;
    return lo == hi;
}

/* ---- the transcendental ops: the same formula in double and in the slow type ---------------- */
/* Forms without cancellation (docs/numerics.md): 1 + erf(t) as erfc(-t), 1 + tanh(z) as
 * 2/(1 + e^-2z), so silu and gelu_tanh divide x by 1 + e^(...); sigmoid of a negative x as
 * e^x/(1 + e^x). The constants sqrt(1/2), sqrt(2/pi) and 0.044715 are exact reals in the
 * contract; their roundings in each type are part of the error bound. */
static double exp_d(double x) { return exp(x); }
static xf exp_x(xf x) { return XEXP(x); }
static double tanh_d(double x) { return tanh(x); }
static xf tanh_x(xf x) { return XTANH(x); }
static double sigmoid_d(double x) {
    if (x >= 0) return 1 / (1 + exp(-x));
    double e = exp(x);
    return e / (1 + e);
}
static xf sigmoid_x(xf x) {
    if (x >= 0) return 1 / (1 + XEXP(-x));
    xf e = XEXP(x);
    return e / (1 + e);
}
static double silu_d(double x) { return x / (1 + exp(-x)); }
static xf silu_x(xf x) { return x / (1 + XEXP(-x)); }
static double gelu_d(double x) { return x * 0.5 * erfc(-x * M_SQRT1_2); }
static xf gelu_x(xf x) { return x * (xf)0.5 * XERFC(-x * XSQRT1_2); }
static double gelu_tanh_d(double x) {
    double z = (M_2_SQRTPI * M_SQRT1_2) * (x + 0.044715 * (x * x * x));
    return x / (1 + exp(-2 * z));
}
static xf gelu_tanh_x(xf x) {
    xf z = XK * (x + XA * (x * x * x));
    return x / (1 + XEXP(-2 * z));
}

/* log, log1p, sin, cos: libm's functions as they are, in double and in the slow type (glibc's
 * double ones are within about 1 ulp, sin and cos with an exact range reduction for every float;
 * libquadmath's within a few binary128 ulps). */
static double log_d(double x) { return log(x); }
static xf log_x(xf x) { return XLOG(x); }
static double log1p_d(double x) { return log1p(x); }
static xf log1p_x(xf x) { return XLOG1P(x); }
static double sin_d(double x) { return sin(x); }
static xf sin_x(xf x) { return XSIN(x); }
static double cos_d(double x) { return cos(x); }
static xf cos_x(xf x) { return XCOS(x); }

/* Ziv's strategy: the double value if it decides the rounding, else the slow value (counted); an
 * undecided slow value (never seen: the docs) is rounded as it is and counted apart. */
static uint32_t ziv(tgrad_op op, double (*fd)(double), xf (*fx)(xf), float x) {
    uint32_t r;
    if (decide_d(fd((double)x), FAST_WINDOW, &r)) return r;
    count(op, TGRAD_DEBUG_F32_SLOW, 1);
    if (!decide_x(fx((xf)x), XWINDOW, &r)) count(op, TGRAD_DEBUG_F32_UNDECIDED, 1);
    return r;
}

/* gelu, gelu_tanh and silu are x/2 + c x^2 + O(x^3) near 0 with c > 0; for 0 < |x| < 2^-100 the
 * tail is below half a double ulp of x/2 and no float or float midpoint lies between x/2 (itself
 * possibly a midpoint of the subnormal grid) and the next double above it: that double rounds as
 * the exact value does. */
static inline bool tiny(float x) { return x != 0 && fabsf(x) < 0x1p-100f; }
static inline uint32_t half_and_above(float x) { return bits_of((float)nextafter((double)x * 0.5, INFINITY)); }

static uint32_t op_exp(float x) {
    if (x != x) return NAN32;
    if (x < -104) return 0; /* e^x < 2^-150 (ln 2^-150 = -103.97...): rounds to +0 */
    return ziv(TGRAD_OP_EXP, exp_d, exp_x, x);
}
static uint32_t op_tanh(float x) { return x != x ? NAN32 : ziv(TGRAD_OP_TANH, tanh_d, tanh_x, x); }
static uint32_t op_sigmoid(float x) {
    if (x != x) return NAN32;
    if (x < -104) return 0; /* below e^x */
    return ziv(TGRAD_OP_SIGMOID, sigmoid_d, sigmoid_x, x);
}
static uint32_t op_silu(float x) {
    if (x != x) return NAN32;
    if (x < -120) return 0x80000000u; /* |x| e^x < 2^-166 and falling: -0 (the limit at -inf) */
    if (tiny(x)) return half_and_above(x);
    return ziv(TGRAD_OP_SILU, silu_d, silu_x, x);
}
static uint32_t op_gelu(float x) {
    if (x != x) return NAN32;
    if (x < -15) return 0x80000000u; /* |gelu(x)| < e^(-x^2/2)/sqrt(2 pi) < 2^-162 */
    if (tiny(x)) return half_and_above(x);
    return ziv(TGRAD_OP_GELU, gelu_d, gelu_x, x);
}
static uint32_t op_gelu_tanh(float x) {
    if (x != x) return NAN32;
    if (x < -12) return 0x80000000u; /* |x| e^(2z) < 2^-200 and falling */
    if (tiny(x)) return half_and_above(x);
    return ziv(TGRAD_OP_GELU_TANH, gelu_tanh_d, gelu_tanh_x, x);
}

/* log, log1p: -inf at 0 (log) or -1 (log1p), NaN below; log(1) = 0 and log1p(±0) = ±0 are
 * exact, and no other float has a rational log (Lindemann), so Ziv decides every other input
 * or counts it. sin, cos: NaN at ±inf; sin(±0) = ±0, cos(±0) = 1 exactly; tiny |x| rounds to x
 * (sin) or 1 (cos) in double already, decided since x and 1 are floats, not midpoints. */
static uint32_t op_log(float x) {
    if (x != x || x < 0) return NAN32;
    if (x == 0) return 0xff800000u;
    if (isinf(x)) return 0x7f800000u;
    return ziv(TGRAD_OP_LOG, log_d, log_x, x);
}
static uint32_t op_log1p(float x) {
    if (x != x || x < -1) return NAN32;
    if (x == -1) return 0xff800000u;
    if (x == 0 || isinf(x)) return bits_of(x);
    return ziv(TGRAD_OP_LOG1P, log1p_d, log1p_x, x);
}
static uint32_t op_sin(float x) {
    if (x != x || isinf(x)) return NAN32;
    if (x == 0) return bits_of(x);
    return ziv(TGRAD_OP_SIN, sin_d, sin_x, x);
}
static uint32_t op_cos(float x) {
    if (x != x || isinf(x)) return NAN32;
    return ziv(TGRAD_OP_COS, cos_d, cos_x, x);
}
/* sqrt: IEEE double sqrt, rounded again to float: innocuous (53 >= 2 * 24 + 2, Figueroa), and
 * sqrt(-0) = -0 kept. */
static uint32_t op_sqrt(float x) { return bits_of((float)sqrt((double)x)); }

/* Is 1/sqrt(x) above the midpoint m (a float midpoint: 25 significant bits)? m^2 (50 bits) is
 * exact in double, m^2 * x exact as p + e (fma); 1/sqrt(x) = m is impossible (x = 1/m^2 would need
 * m's odd 25-bit significand squared to be a power of two). */
static bool rsqrt_above(double m, float x) {
    double m2 = m * m, p = m2 * (double)x, e = fma(m2, (double)x, -p);
    return p < 1 || (p == 1 && e < 0);
}

/* rsqrt: 1/sqrt(x) in double (error < 2^-52), then the exact test against the two midpoints
 * around its float; a correction (never seen) is counted as a slow path. */
static uint32_t op_rsqrt(float x) {
    uint32_t u = bits_of(x);
    if (u == NAN32 || (x < 0)) return NAN32;
    if (x == 0) return u ? 0xff800000u : 0x7f800000u; /* rsqrt(-0) = -inf, rsqrt(+0) = +inf */
    if (isinf(x)) return 0;
    float r = (float)(1 / sqrt((double)x)); /* 2^-64 .. 2^74.5: normal, finite */
    float up = nextafterf(r, INFINITY), down = nextafterf(r, 0);
    if (rsqrt_above(((double)r + up) * 0.5, x)) {
        count(TGRAD_OP_RSQRT, TGRAD_DEBUG_F32_SLOW, 1);
        r = up;
    } else if (!rsqrt_above(((double)r + down) * 0.5, x)) {
        count(TGRAD_OP_RSQRT, TGRAD_DEBUG_F32_SLOW, 1);
        r = down;
    }
    return bits_of(r);
}

/* ---- the bit ops and the arithmetic ------------------------------------------------------- */
static inline uint32_t op_relu(uint32_t u) { return is_nan32(u) ? NAN32 : (u > 0x80000000u ? 0u : u); }
static inline uint32_t op_neg(uint32_t u) { return is_nan32(u) ? NAN32 : u ^ 0x80000000u; }
static inline uint32_t op_abs(uint32_t u) { return is_nan32(u) ? NAN32 : u & 0x7fffffffu; }
/* A total order on the bits (NaN aside), as int32: -0 below +0. Its own inverse. */
static inline uint32_t order_key(uint32_t u) { return u ^ ((uint32_t)((int32_t)u >> 31) & 0x7fffffffu); }
static inline uint32_t op_max(uint32_t a, uint32_t b) {
    int32_t ka = (int32_t)order_key(a), kb = (int32_t)order_key(b);
    return is_nan32(a) || is_nan32(b) ? NAN32 : order_key((uint32_t)(ka > kb ? ka : kb));
}
static inline uint32_t op_min(uint32_t a, uint32_t b) {
    int32_t ka = (int32_t)order_key(a), kb = (int32_t)order_key(b);
    return is_nan32(a) || is_nan32(b) ? NAN32 : order_key((uint32_t)(ka < kb ? ka : kb));
}
/* One rounding from double: exact for products and squares (48 bits), for quotients and sums
 * innocuous double rounding (53 >= 2 * 24 + 2; the docs cover subnormal results). */
static inline uint32_t op_add(uint32_t a, uint32_t b) { return bits_of((float)((double)float_of(a) + float_of(b))); }
static inline uint32_t op_sub(uint32_t a, uint32_t b) { return bits_of((float)((double)float_of(a) - float_of(b))); }
static inline uint32_t op_mul(uint32_t a, uint32_t b) { return bits_of((float)((double)float_of(a) * float_of(b))); }
static inline uint32_t op_div(uint32_t a, uint32_t b) { return bits_of((float)((double)float_of(a) / float_of(b))); }
static inline uint32_t op_square(uint32_t u) { return op_mul(u, u); }

/* ---- loops -------------------------------------------------------------------------------- */
#define UNARY_LOOP(name, fn)                                                        \
    static void name(const uint32_t *x, uint32_t *y, int64_t n) {                 \
        for (int64_t i = 0; i < n; i++) y[i] = fn(x[i]);                          \
    }
UNARY_LOOP(relu_loop, op_relu)
UNARY_LOOP(neg_loop, op_neg)
UNARY_LOOP(abs_loop, op_abs)
UNARY_LOOP(square_loop, op_square)

static void sqrt_loop(const uint32_t *x, uint32_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = op_sqrt(float_of(x[i]));
}

static uint32_t (*transcendental(tgrad_op op))(float) {
    switch (op) {
    case TGRAD_OP_GELU: return op_gelu;
    case TGRAD_OP_GELU_TANH: return op_gelu_tanh;
    case TGRAD_OP_SILU: return op_silu;
    case TGRAD_OP_SIGMOID: return op_sigmoid;
    case TGRAD_OP_TANH: return op_tanh;
    case TGRAD_OP_EXP: return op_exp;
    case TGRAD_OP_RSQRT: return op_rsqrt;
    case TGRAD_OP_LOG: return op_log;
    case TGRAD_OP_LOG1P: return op_log1p;
    case TGRAD_OP_SIN: return op_sin;
    case TGRAD_OP_COS: return op_cos;
    default: return NULL;
    }
}

void tg_ew32_unary(tgrad_op op, const uint32_t *x, uint32_t *y, int64_t n) {
    tg_fp_env env = tg_fp_env_ieee();
    uint32_t (*f)(float) = transcendental(op);
    if (f) {
        count(op, TGRAD_DEBUG_F32_EVALUATED, n);
        for (int64_t i = 0; i < n; i++) y[i] = f(float_of(x[i]));
    } else {
        switch (op) {
        case TGRAD_OP_RELU: relu_loop(x, y, n); break;
        case TGRAD_OP_NEG: neg_loop(x, y, n); break;
        case TGRAD_OP_ABS: abs_loop(x, y, n); break;
        case TGRAD_OP_SQUARE: square_loop(x, y, n); break;
        case TGRAD_OP_SQRT: sqrt_loop(x, y, n); break;
        default: break;
        }
    }
    tg_fp_env_restore(env);
}

#define BINARY_LOOP(name, fn)                                                                      \
    static void name(const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb, uint32_t *y, int64_t n) { \
        if (sa && sb)                                                                              \
            for (int64_t i = 0; i < n; i++) y[i] = fn(a[i], b[i]);                                 \
        else if (sb)                                                                               \
            for (int64_t i = 0, s = a[0]; i < n; i++) y[i] = fn((uint32_t)s, b[i]);                \
        else if (sa)                                                                               \
            for (int64_t i = 0, s = b[0]; i < n; i++) y[i] = fn(a[i], (uint32_t)s);                \
        else                                                                                       \
            for (int64_t i = 0, r = fn(a[0], b[0]); i < n; i++) y[i] = (uint32_t)r;                \
    }
BINARY_LOOP(add_loop, op_add)
BINARY_LOOP(sub_loop, op_sub)
BINARY_LOOP(mul_loop, op_mul)
BINARY_LOOP(div_loop, op_div)
BINARY_LOOP(max_loop, op_max)
BINARY_LOOP(min_loop, op_min)

void tg_ew32_binary(tgrad_op op, const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb, uint32_t *y,
                    int64_t n) {
    tg_fp_env env = tg_fp_env_ieee();
    switch (op) {
    case TGRAD_OP_ADD: add_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_SUB: sub_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_MUL: mul_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_DIV: div_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_MAXIMUM: max_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_MINIMUM: min_loop(a, sa, b, sb, y, n); break;
    case TGRAD_OP_POW: {
        tg_pow_counts c = tg_ew_pow_f32(a, sa, b, sb, y, n);
        count(op, TGRAD_DEBUG_F32_EVALUATED, c.evaluated);
        count(op, TGRAD_DEBUG_F32_SLOW, c.slow);
        count(op, TGRAD_DEBUG_F32_UNDECIDED, c.undecided);
        break;
    }
    default:
        if (tg_ew_is_grad(op)) { /* the derivative ops (elementwise_grad.c) */
            tg_pow_counts c = tg_ew_grad_f32(op, a, sa, b, sb, y, n);
            count(op, TGRAD_DEBUG_F32_EVALUATED, c.evaluated);
            count(op, TGRAD_DEBUG_F32_SLOW, c.slow);
            count(op, TGRAD_DEBUG_F32_UNDECIDED, c.undecided);
        }
        break;
    }
    tg_fp_env_restore(env);
}

/* ---- testing aids ------------------------------------------------------------------------- */
TGRAD_API tgrad_status tgrad_debug_elementwise_f32(tgrad_op op, const uint32_t *a, const uint32_t *b, uint32_t *out,
                                                   int64_t n) {
    int32_t arity = tgrad_op_arity(op);
    if (arity == 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_elementwise_f32: %d is not an op code", (int)op);
    if (n < 0) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_elementwise_f32: n = %lld < 0", (long long)n);
    if (arity == 1 && b)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_elementwise_f32: %s is unary, b must be NULL", tgrad_op_name(op));
    if (n > 0 && (!a || !out || (arity == 2 && !b)))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_elementwise_f32: NULL array with n = %lld", (long long)n);
    if (arity == 1) tg_ew32_unary(op, a, out, n);
    else tg_ew32_binary(op, a, 1, b, 1, out, n);
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_debug_f32_slow_path(tgrad_op op, int64_t *counts, int32_t count_) {
    if (tgrad_op_arity(op) == 0 || op >= NOPS)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_f32_slow_path: %d is not an op code", (int)op);
    if (!counts || count_ < 1 || count_ > TGRAD_DEBUG_F32_COUNT)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_f32_slow_path: counts is NULL or count %d is not 1 .. %d",
                       (int)count_, TGRAD_DEBUG_F32_COUNT);
    for (int32_t i = 0; i < count_; i++) counts[i] = atomic_load_explicit(&counters[op][i], memory_order_relaxed);
    return TGRAD_OK;
}
