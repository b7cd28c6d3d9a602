/* The elementwise derivative ops, correctly rounded to bf16 or float32 (elementwise_grad.h has the
 * method; docs/numerics.md "Derivative ops" the proofs and special cases). */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "../../../kernels/cpu/fp_env.h"
#include "elementwise_grad.h"
#include "elementwise_round.h"

#define FIRST TGRAD_OP_GELU_BACKWARD
#define NGRAD (TGRAD_OP_SQRT_BACKWARD - TGRAD_OP_GELU_BACKWARD + 1)

/* ---- f'(x) of gelu, gelu_tanh and silu, in three precisions --------------------------------- */
/* Each returns f'(x) for finite x and sets *mag to the sum of its terms' magnitudes, for gelu_tanh
 * plus their sensitivity to its argument z's rounding (2 p q |z| and 2 |b z|): the scale of the
 * evaluation error (the terms cancel near f's minimum, and z's rounding is amplified by exp). Forms without overflow or
 * cancellation inside a term: 1 + erf(t) as erfc(-t), sigmoids as 1/(1 + e) or e/(1 + e) with
 * e = exp(-|u|). f' is negative below its root (-0.75, -0.75, -1.28): a value that underflows
 * to 0 there is -0. */
#define DERIVATIVES(T, S, EXP, ERFC, ABS, K)                                                            \
    static T gelu_d_##S(T x, T *mag) { /* Phi(x) + x phi(x) */                                          \
        T Phi = ERFC(-x * K(0.707106781186547524400844362104849039284835937688)) / 2;                  \
        T b = x * (EXP(-x * x / 2) * K(0.398942280401432677939946059934381868475858631164934657));     \
        T d = Phi + b;                                                                                  \
        *mag = Phi + ABS(b);                                                                            \
        return d == 0 && x < 0 ? -(T)0 : d;                                                            \
    }                                                                                                   \
    static T gelu_tanh_d_##S(T x, T *mag) { /* p (1 + 2 x c (1 + 3 k x^2) (1 - p)), p = sigma(2z) */  \
        const T c = K(0.797884560802865355879892119868763736951717262329869315), k = K(0.044715);      \
        T x2 = x * x, z = c * (x + k * x2 * x), e = EXP(-2 * ABS(z));                                  \
        T p = z >= 0 ? 1 / (1 + e) : e / (1 + e), q = z >= 0 ? e / (1 + e) : 1 / (1 + e);             \
        T b = 2 * x * c * (1 + 3 * k * x2) * p * q;                                                    \
        T d = p + b;                                                                                    \
        *mag = p + ABS(b) + (2 * p * q + ABS(b)) * 2 * ABS(z); /* z's error, through p q */             \
        return d == 0 && x < 0 ? -(T)0 : d;                                                            \
    }                                                                                                   \
    static T silu_d_##S(T x, T *mag) { /* s (1 + x (1 - s)), s = sigma(x) */                          \
        T e = EXP(-ABS(x));                                                                             \
        T s = x >= 0 ? 1 / (1 + e) : e / (1 + e), r = x >= 0 ? e / (1 + e) : 1 / (1 + e);             \
        T b = x * s * r;                                                                                \
        T d = s + b;                                                                                    \
        *mag = s + ABS(b);                                                                              \
        return d == 0 && x < 0 ? -(T)0 : d;                                                            \
    }                                                                                                   \
    static T deriv_##S(tgrad_op op, T x, T *mag) {                                                      \
        if (isinf(x)) {                                                                                 \
            *mag = 0;                                                                                   \
            return x > 0 ? (T)1 : -(T)0; /* the limits */                                               \
        }                                                                                               \
        if (op == TGRAD_OP_GELU_BACKWARD) return gelu_d_##S(x, mag);                                    \
        if (op == TGRAD_OP_GELU_TANH_BACKWARD) return gelu_tanh_d_##S(x, mag);                          \
        return silu_d_##S(x, mag);                                                                      \
    }

#define KD(v) v
#define KL(v) v##L
DERIVATIVES(double, d, exp, erfc, fabs, KD)
DERIVATIVES(long double, l, expl, erfcl, fabsl, KL)
#if defined(TGRAD_HAVE_QUADMATH)
#define KQ(v) v##Q
DERIVATIVES(xf, q, expq, erfcq, fabsq, KQ)
#define XREL 0x1p-96Q
#else
DERIVATIVES(xf, q, expl, erfcl, fabsl, KL)
#define XREL ((xf)ldexp(1.0, 17 - LDBL_MANT_DIG)) /* 2^-96 for binary128 */
#endif

#if defined(TGRAD_HAVE_QUADMATH)
xf tg_ew_grad_deriv_q(tgrad_op op, xf x, xf *mag) { return deriv_q(op, x, mag); }
#endif

/* ---- helpers -------------------------------------------------------------------------------- */
static inline float f32_of(uint32_t u) {
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}
static inline uint32_t bits_of(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}
static inline double widen(uint16_t h) { return (double)f32_of((uint32_t)h << 16); }

/* double -> bf16 bits, nearest even (IEEE environment): the magnitude in units of its bf16 ulp
 * (2^(e-7), at least 2^-133) is q, rounded to the integer t by adding and subtracting 2^52; *d
 * receives q - t (exact: +-0.5 on a midpoint). The bits are put together with integers (t counts
 * units, its implicit bit adds one to the exponent field, a carry moves to the next binade or to
 * inf): no float conversion, whose subnormal results cost a microcode assist each. */
static inline uint16_t round_units(double v, double *d) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    int64_t e = (int64_t)((u >> 52) & 0x7ff);
    e = e < 1023 - 126 ? 1023 - 126 : e;
    uint64_t to_units_bits = (uint64_t)(2 * 1023 + 7 - e) << 52;
    double to_units;
    memcpy(&to_units, &to_units_bits, sizeof to_units);
    double q = fabs(v) * to_units, t = (q + 0x1p52) - 0x1p52;
    *d = q - t;
    uint64_t field = e > 1023 + 127 ? 0x7f80u : ((uint64_t)(e - 1023 + 126) << 7) + (uint64_t)(t < 512 ? t : 0);
    field = field > 0x7f80u ? 0x7f80u : field;
    return v != v ? 0x7fc0u : (uint16_t)(field | ((u >> 48) & 0x8000u));
}

/* The exact value s + e (|e| <= half a double ulp of s, s != 0 when e != 0) to bf16: s rounds as
 * the value does unless s is a midpoint, where e's direction decides. */
static inline uint16_t round_pair_bf16(double s, double e) {
    double d;
    uint16_t r = round_units(s, &d);
    if (e != 0 && fabs(d) == 0.5 && fabs(s) < 0x1p128) { /* from 2^128 up every value rounds to inf */
        bool up = !signbit(e) == !signbit(s); /* away from zero */
        if (up && d > 0) r++;                /* t was rounded down in magnitude */
        else if (!up && d < 0) r--;
    }
    return r;
}

/* The exact value s + e (|e| <= half an xf ulp of s) to the format: within (s, next) or
 * (previous, s) it rounds as that open interval does. */
static uint32_t round_pair_xf(const fmt *F, xf s, xf e) {
    bool neg = signbit(s) != 0;
    xf m = XFABS(s);
    if (e == 0) return round_xf(F, neg, m);
    if ((signbit(e) != 0) == neg) return round_xf_sticky(F, neg, m, true);
    return round_xf_sticky(F, neg, XNEXTAFTER(m, 0), true);
}

/* the IEEE double's rounding to the format, for the special cases (NaN canonical) */
static uint32_t round_ieee(const fmt *F, double v) {
    if (v != v) return F->nan;
    return round_double(F, signbit(v), fabs(v));
}

/* ---- the smooth ops' slow path (both formats) ------------------------------------------------ */
/* g f'(x) in xf, decided within XREL of the terms' magnitude; f'(0) = 1/2 exactly. */
static uint32_t slow_smooth(const fmt *F, tgrad_op op, float x, float g, tg_pow_counts *c) {
    c->slow++;
    if (x == 0) return round_double(F, signbit(g), fabs((double)g) * 0.5); /* exact */
    /* near 0, f'(x) = 1/2 + c x + O(x^2) with c > 0: g/2 (exact, on the format's grid or a
     * midpoint) and a tail of g x's sign far below its grid, which decides a midpoint */
    if (fabsf(x) < 0x1p-60f) return round_pair_xf(F, (xf)g * 0.5, (x > 0) == (g > 0) ? 1 : -1);
    xf mag, d = deriv_q(op, (xf)x, &mag);
    /* f' is non-zero for a finite x (an underflowed d keeps the sign): inf g gives inf */
    if (isinf(g)) return ((signbit(g) != 0) != (signbit(d) != 0) ? F->sign : 0) | (isinf(x) && d == 0 ? F->nan : F->inf);
    xf v = (xf)g * d, w = XFABS((xf)g) * (mag * XREL + XFABS(d) * XREL);
    bool neg = signbit(v);
    xf a = XFABS(v);
    uint32_t lo = round_xf(F, neg, a - w > 0 ? a - w : 0), hi = round_xf(F, neg, a + w);
    if (a - w <= 0 || lo != hi) c->undecided++;
    return round_xf(F, neg, a);
}

/* ---- bf16 ------------------------------------------------------------------------------------ */
/* Tables of f'(x) for the 65,536 x (double, from a long double evaluation) and of each x's
 * acceptance bound on |q - t| (round_units' units): a product whose distance to a midpoint is
 * within the evaluation's error goes to the slow path. */
typedef struct {
    double d[65536], accept[65536];
} smooth_table;
static smooth_table tables[3];
static atomic_int built[3];
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

/* The error of d: the long double evaluation within 2^-50 of mag (glibc's expl and erfcl are
 * within a few 2^-64 ulp, amplified by at most 2^9 by erfc's and exp's arguments where a product
 * can reach bf16's range), the rounding to double 2^-53 of |d|, the product's 2^-53: in units of
 * a result below 2^9 units, below 2^9 (2^-50 mag/|d| + 2^-52), accepted with a factor 2^4 to spare. */
static __attribute__((noinline)) void build_table(tgrad_op op, smooth_table *t) {
    for (uint32_t i = 0; i < 65536; i++) {
        long double x = (long double)widen((uint16_t)i), mag = 0;
        long double d = x != x ? (long double)NAN : deriv_l(op, x, &mag);
        t->d[i] = (double)d;
        double rel = d == 0 || x != x ? 0 : (double)(mag / fabsl(d)) * 0x1p-50 + 0x1p-52;
        t->accept[i] = x == 0 ? 0.5 : 0.5 - 0x1p13 * rel; /* f'(0) = 1/2 exactly: ties are true ties */
    }
}

static const smooth_table *table_of(tgrad_op op) {
    int k = op - FIRST;
    if (!atomic_load_explicit(&built[k], memory_order_acquire)) {
        pthread_mutex_lock(&build_lock);
        if (!atomic_load_explicit(&built[k], memory_order_relaxed)) {
            build_table(op, &tables[k]);
            atomic_store_explicit(&built[k], 1, memory_order_release);
        }
        pthread_mutex_unlock(&build_lock);
    }
    return &tables[k];
}

static _Atomic int64_t bf16_counts[NGRAD][3];

static void smooth_bf16(tgrad_op op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y,
                        int64_t n, tg_pow_counts *c) {
    const smooth_table *T = table_of(op);
    const fmt F = format(8);
    for (int64_t i = 0; i < n; i++) {
        uint16_t x = a[i * sa], g = b[i * sb];
        double d;
        uint16_t r = round_units(widen(g) * T->d[x], &d);
        if ((g & 0x7fffu) == 0x7f80u && (x & 0x7fffu) < 0x7f80u) /* f'(x) != 0 (its sign is d's): inf */
            r = (uint16_t)(0x7f80u | ((g ^ (signbit(T->d[x]) ? 0x8000u : 0)) & 0x8000u));
        else if (fabs(d) > T->accept[x]) r = (uint16_t)slow_smooth(&F, op, (float)widen(x), (float)widen(g), c);
        y[i] = r;
    }
    c->evaluated += n;
}

static uint16_t sigmoid_bf16(double yy, double gg) { /* g y - g y y, both products exact */
    if (!isfinite(yy) || !isfinite(gg) || gg == 0 || yy == 0 || yy == 1) return round_units(gg * (yy * (1 - yy)), &(double){ 0 });
    double P = gg * yy, Q = P * yy, s = P - Q, bb = s - P, e = (P - (s - bb)) + (-Q - bb);
    return round_pair_bf16(s, e);
}

static uint16_t tanh_bf16(double yy, double gg) { /* g - g y y */
    if (!isfinite(yy) || !isfinite(gg) || gg == 0 || fabs(yy) == 1) return round_units(gg * (1 - yy * yy), &(double){ 0 });
    double Q = gg * yy * yy, s = gg - Q, bb = s - gg, e = (gg - (s - bb)) + (-Q - bb);
    return round_pair_bf16(s, e);
}

static inline uint16_t relu_bf16(uint16_t x, uint16_t g) {
    if ((x & 0x7fffu) > 0x7f80u || (g & 0x7fffu) > 0x7f80u) return 0x7fc0u;
    return (x & 0x8000u) == 0 && x != 0 ? g : 0;
}

void tg_ew_grad_bf16(tgrad_op op, const uint16_t *a, int64_t sa, const uint16_t *b, int64_t sb, uint16_t *y,
                     int64_t n) {
    tg_fp_env env = tg_fp_env_ieee();
    tg_pow_counts c = { 0, 0, 0 };
    double d;
    switch (op) {
    case TGRAD_OP_GELU_BACKWARD:
    case TGRAD_OP_GELU_TANH_BACKWARD:
    case TGRAD_OP_SILU_BACKWARD: smooth_bf16(op, a, sa, b, sb, y, n, &c); break;
    case TGRAD_OP_SIGMOID_BACKWARD:
        for (int64_t i = 0; i < n; i++) y[i] = sigmoid_bf16(widen(a[i * sa]), widen(b[i * sb]));
        break;
    case TGRAD_OP_TANH_BACKWARD:
        for (int64_t i = 0; i < n; i++) y[i] = tanh_bf16(widen(a[i * sa]), widen(b[i * sb]));
        break;
    case TGRAD_OP_RELU_BACKWARD:
        for (int64_t i = 0; i < n; i++) y[i] = relu_bf16(a[i * sa], b[i * sb]);
        break;
    case TGRAD_OP_RSQRT_BACKWARD: /* g y y y: 32 bits, exact in double (|.| in 2^-532 .. 2^512) */
        for (int64_t i = 0; i < n; i++) {
            double yy = widen(a[i * sa]);
            y[i] = round_units(widen(b[i * sb]) * yy * yy * yy * -0.5, &d);
        }
        break;
    case TGRAD_OP_SQRT_BACKWARD: /* a quotient of 8-bit significands: one double division suffices */
        for (int64_t i = 0; i < n; i++) y[i] = round_units(widen(b[i * sb]) / (2 * widen(a[i * sa])), &d);
        break;
    default: break;
    }
    tg_fp_env_restore(env);
    if (op >= FIRST && op < FIRST + NGRAD) {
        atomic_fetch_add_explicit(&bf16_counts[op - FIRST][0], c.evaluated, memory_order_relaxed);
        atomic_fetch_add_explicit(&bf16_counts[op - FIRST][1], c.slow, memory_order_relaxed);
        atomic_fetch_add_explicit(&bf16_counts[op - FIRST][2], c.undecided, memory_order_relaxed);
    }
}

int64_t tg_ew_grad_bf16_count(tgrad_op op, int32_t what) {
    if (op < FIRST || op >= FIRST + NGRAD || what < 0 || what > 2) return 0;
    return atomic_load_explicit(&bf16_counts[op - FIRST][what], memory_order_relaxed);
}

/* ---- float32 --------------------------------------------------------------------------------- */
/* g f'(x): f'(x) in double within 2^-40 of mag (glibc's exp and erfc within 2 ulp, x's
 * arguments' roundings amplified by at most 2^9 where a product reaches float32's range), the
 * product within 2^-53: accepted when the interval rounds to one value. */
static uint32_t smooth_f32(const fmt *F, tgrad_op op, float x, float g, tg_pow_counts *c) {
    c->evaluated++;
    if (x != x || g != g) return F->nan;
    double mag, d = deriv_d(op, (double)x, &mag);
    double v = (double)g * d;
    if (isinf(g) && !isinf(x)) return slow_smooth(F, op, x, g, c); /* f'(x) != 0: inf */
    if (v != v) return F->nan;
    if (v == 0 || isinf(v) || isinf(x)) return round_ieee(F, v); /* exact classes */
    if (x == 0) return round_ieee(F, v);                                         /* g / 2: exact */
    double w = fabs((double)g) * (mag * 0x1p-40 + fabs(d) * 0x1p-52), m = fabs(v);
    if (m - w > 0) {
        uint32_t lo = round_double(F, signbit(v), m - w), hi = round_double(F, signbit(v), m + w);
        if (lo == hi) return lo;
    }
    return slow_smooth(F, op, x, g, c);
}

static uint32_t sigmoid_f32(const fmt *F, float y, float g) { /* g y exact in double; g y y in xf */
    if (!isfinite(y) || !isfinite(g) || g == 0 || y == 0 || y == 1) return round_ieee(F, (double)g * ((double)y * (1 - (double)y)));
    xf P = (xf)((double)g * y), Q = P * y, s = P - Q, bb = s - P, e = (P - (s - bb)) + (-Q - bb);
    return round_pair_xf(F, s, e);
}

static uint32_t tanh_f32(const fmt *F, float y, float g) {
    if (!isfinite(y) || !isfinite(g) || g == 0 || fabsf(y) == 1) return round_ieee(F, (double)g * (1 - (double)y * y));
    xf G = g, Q = (xf)((double)g * y) * y, s = G - Q, bb = s - G, e = (G - (s - bb)) + (-Q - bb);
    return round_pair_xf(F, s, e);
}

static uint32_t rsqrt_f32(const fmt *F, float y, float g) { /* 96 bits: exact in binary128 */
    if (!isfinite(y) || !isfinite(g) || g == 0 || y == 0) return round_ieee(F, (double)g * y * y * y * -0.5);
    xf v = (xf)((double)g * y) * ((double)y * y) * -0.5;
    return round_xf(F, signbit(v), XFABS(v));
}

tg_pow_counts tg_ew_grad_f32(tgrad_op op, const uint32_t *a, int64_t sa, const uint32_t *b, int64_t sb, uint32_t *y,
                             int64_t n) {
    tg_fp_env env = tg_fp_env_ieee();
    const fmt F = format(24);
    tg_pow_counts c = { 0, 0, 0 };
    for (int64_t i = 0; i < n; i++) {
        uint32_t ab = a[i * sa], gb = b[i * sb];
        float x = f32_of(ab), g = f32_of(gb);
        uint32_t r = 0;
        switch (op) {
        case TGRAD_OP_GELU_BACKWARD:
        case TGRAD_OP_GELU_TANH_BACKWARD:
        case TGRAD_OP_SILU_BACKWARD: r = smooth_f32(&F, op, x, g, &c); break;
        case TGRAD_OP_SIGMOID_BACKWARD: r = sigmoid_f32(&F, x, g); break;
        case TGRAD_OP_TANH_BACKWARD: r = tanh_f32(&F, x, g); break;
        case TGRAD_OP_RELU_BACKWARD:
            r = x != x || g != g ? F.nan : x > 0 ? gb : 0;
            break;
        case TGRAD_OP_RSQRT_BACKWARD: r = rsqrt_f32(&F, x, g); break;
        case TGRAD_OP_SQRT_BACKWARD: r = round_ieee(&F, (double)g / (2 * (double)x)); break;
        default: break;
        }
        y[i] = r;
    }
    tg_fp_env_restore(env);
    return c;
}
