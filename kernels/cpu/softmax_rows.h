/* The softmax kind's row loops (libtgrad/src/ops/softmax_kernel.h has the contract), plain C for
 * the compiler's vectorizer: softmax_portable.c, softmax_avx512f.c and softmax_avx2.c compile this
 * file with their flags. Branch-free bodies, no libm calls, FP contraction off (meson), so the loops
 * vectorize and every variant computes the same doubles. */
#include <math.h>

#include "ops/softmax_kernel.h"
#include "softmax_round.h"

static inline uint64_t d_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}
static inline double d_of(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* a * b + c: fused where the target has FMA (one rounding, not two: the bound covers both) */
#if defined(__FMA__)
#define MADD(a, b, c) __builtin_fma(a, b, c)
#else
#define MADD(a, b, c) ((a) * (b) + (c))
#endif

/* exp(d) for d <= 0 (0 below -708, where exp(d) < 2^-1021): d = k ln2 + r with the Cody-Waite
 * split of ln2 (k C1 is exact for |k| < 2^21, d - k C1 exact by Sterbenz's lemma), |r| < 0.3466,
 * e^r by its Taylor polynomial of degree 13 (remainder < 0.3466^14/14! < 2^-55.9 relative), 2^k
 * through the exponent bits (k >= -1021: normal). */
static inline double exp_neg(double d) {
    const double L2E = 0x1.71547652b82fep0, SHIFT = 0x1.8p52;
    const double C1 = 0x1.62e42fee00000p-1, C2 = 0x1.a39ef35793c76p-33;
    double dd = d < -708.0 ? -708.0 : d;
    double t = dd * L2E + SHIFT;
    double k = t - SHIFT;
    double r = (dd - k * C1) - k * C2;
    double p = 1.0 / 6227020800.0; /* 1/13!, then Horner down to 1 */
    p = MADD(p, r, 1.0 / 479001600.0);
    p = MADD(p, r, 1.0 / 39916800.0);
    p = MADD(p, r, 1.0 / 3628800.0);
    p = MADD(p, r, 1.0 / 362880.0);
    p = MADD(p, r, 1.0 / 40320.0);
    p = MADD(p, r, 1.0 / 5040.0);
    p = MADD(p, r, 1.0 / 720.0);
    p = MADD(p, r, 1.0 / 120.0);
    p = MADD(p, r, 1.0 / 24.0);
    p = MADD(p, r, 1.0 / 6.0);
    p = MADD(p, r, 0.5);
    p = MADD(p, r, 1.0);
    p = MADD(p, r, 1.0);
    int64_t ki = (int64_t)(d_bits(t) - d_bits(SHIFT)); /* k, from t's low bits */
    double scale = d_of((uint64_t)(ki + 1023) << 52);
    return d < -708.0 ? 0.0 : p * scale;
}

static void sm_load_bf16(const uint16_t *p, int64_t n, double *x) {
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = (uint32_t)p[j] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        x[j] = f;
    }
}

static void sm_load_f32(const float *p, int64_t n, double *x) {
    for (int64_t j = 0; j < n; j++) x[j] = p[j];
}

/* Eight lanes (j mod 8) for max, finite min, finite count and NaN, folded at the end: no
 * reassociation for the vectorizer to need. The max and min compare as x86's max/min do. */
static tg_sm_scan sm_scan(const double *x, int64_t n) {
    double mx[8], mn[8];
    int64_t cnt[8], nan[8];
    for (int l = 0; l < 8; l++) mx[l] = -INFINITY, mn[l] = INFINITY, cnt[l] = 0, nan[l] = 0;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) {
            double v = x[j + l];
            int64_t fin = fabs(v) < INFINITY;
            mx[l] = v > mx[l] ? v : mx[l];
            mn[l] = (fin && v < mn[l]) ? v : mn[l];
            cnt[l] += fin;
            nan[l] |= v != v;
        }
    for (int l = 0; j + l < n; l++) {
        double v = x[j + l];
        int64_t fin = fabs(v) < INFINITY;
        mx[l] = v > mx[l] ? v : mx[l];
        mn[l] = (fin && v < mn[l]) ? v : mn[l];
        cnt[l] += fin;
        nan[l] |= v != v;
    }
    tg_sm_scan r = { -INFINITY, INFINITY, 0, 0 };
    for (int l = 0; l < 8; l++) {
        r.m = mx[l] > r.m ? mx[l] : r.m;
        r.xmin = mn[l] < r.xmin ? mn[l] : r.xmin;
        r.nfinite += cnt[l];
        r.nan |= nan[l] != 0;
    }
    return r;
}

static void sm_exp_rows(const double *x, double m, double *e, int64_t n) {
    for (int64_t j = 0; j < n; j++) e[j] = exp_neg(x[j] - m);
}

static double sm_sum_below(const double *x, double m, const double *e, int64_t n, int64_t *ties) {
    double a[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
    int64_t c[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) {
            a[l] += x[j + l] < m ? e[j + l] : 0.0;
            c[l] += x[j + l] == m;
        }
    for (int l = 0; j + l < n; l++) {
        a[l] += x[j + l] < m ? e[j + l] : 0.0;
        c[l] += x[j + l] == m;
    }
    *ties = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* The fused entries (softmax_kernel.h) as their two passes; the AVX-512 variant
 * (kernels/cpu/softmax_avx512.h) fuses them in one, with the same doubles. */
static inline tg_sm_scan sm_load_scan_bf16(const uint16_t *p, int64_t n, double *x) {
    sm_load_bf16(p, n, x);
    return sm_scan(x, n);
}
static inline tg_sm_scan sm_load_scan_f32(const float *p, int64_t n, double *x) {
    sm_load_f32(p, n, x);
    return sm_scan(x, n);
}
static inline double sm_exp_sum(const double *x, double m, double *e, int64_t n, int64_t *ties) {
    sm_exp_rows(x, m, e, n);
    return sm_sum_below(x, m, e, n, ties);
}

/* The rounding of q to bf16 (BITS = 45 bits below its 8-bit significand) or float32 (BITS = 29)
 * straight from q's bits, when q -+ thr double ulps holds no midpoint: q's bits below the kept
 * ones are farther than thr from the midpoint pattern 2^(BITS-1). Only for a result in the output's
 * normal range (its exponent between -126 and 127) or q = 0 (an exact result below 2^-1021 rounds
 * to zero); everything else is flagged. The bound's window is under w 2^53 ulps of q's binade (q <
 * 2^(E+1)), and a binade's edge is a representable value, not a boundary. */
#define SM_FAST(BITS, REBIAS)                                                                             \
    do {                                                                                                  \
        uint64_t b = d_bits(q), mb = b & UINT64_C(0x7fffffffffffffff), ex = mb >> 52;                    \
        int64_t low = (int64_t)(mb & ((UINT64_C(1) << (BITS)) - 1)) - (INT64_C(1) << ((BITS) - 1));      \
        int64_t dist = low < 0 ? -low : low;                                                              \
        uint64_t r = ((mb + (UINT64_C(1) << ((BITS) - 1)) - 1 + ((mb >> (BITS)) & 1)) >> (BITS)) - (REBIAS); \
        int64_t zero = mb == 0;                                                                           \
        int64_t ok = ((int64_t)(ex >= 1023 - 126) & (int64_t)(ex <= 1023 + 127) & (int64_t)(dist > thr)) | zero; \
        bits = (uint32_t)(r & (uint64_t)(zero - 1)) | (uint32_t)((b >> 63) << ((BITS) == 45 ? 15 : 31));  \
        flag[j] = (uint8_t)(1 - ok);                                                                      \
        bad += 1 - ok;                                                                                    \
    } while (0)
#define SM_REBIAS_BF16 ((UINT64_C(1023) - 127) << 7)
#define SM_REBIAS_F32 ((UINT64_C(1023) - 127) << 23)

static int64_t sm_out_softmax(const double *e, int64_t n, double inv, int64_t thr, int32_t out_dtype, void *out,
                              uint8_t *flag) {
    int64_t bad = 0;
    if (out_dtype == 1) {
        uint16_t *o = out;
        for (int64_t j = 0; j < n; j++) {
            double q = e[j] * inv;
            uint32_t bits;
            SM_FAST(45, SM_REBIAS_BF16);
            o[j] = (uint16_t)bits;
        }
    } else {
        uint32_t *o = out;
        for (int64_t j = 0; j < n; j++) {
            double q = e[j] * inv;
            uint32_t bits;
            SM_FAST(29, SM_REBIAS_F32);
            o[j] = bits;
        }
    }
    return bad;
}

static int64_t sm_out_log_softmax(const double *x, int64_t n, double m, double L, int64_t thr, int32_t out_dtype,
                                  void *out, uint8_t *flag) {
    int64_t bad = 0;
    if (out_dtype == 1) {
        uint16_t *o = out;
        for (int64_t j = 0; j < n; j++) {
            double q = (x[j] - m) - L;
            uint32_t bits;
            SM_FAST(45, SM_REBIAS_BF16);
            o[j] = (uint16_t)bits;
        }
    } else {
        uint32_t *o = out;
        for (int64_t j = 0; j < n; j++) {
            double q = (x[j] - m) - L;
            uint32_t bits;
            SM_FAST(29, SM_REBIAS_F32);
            o[j] = bits;
        }
    }
    return bad;
}

#define TG_SM_VARIANT(ident, vname)                                                                             \
    const tg_sm_variant ident = { .name = vname, .available = available, .load_bf16 = sm_load_bf16,   \
                                  .load_f32 = sm_load_f32, .scan = sm_scan, .exp_rows = sm_exp_rows, .sum_below = sm_sum_below, \
                                  .out_softmax = sm_out_softmax, .out_log_softmax = sm_out_log_softmax, \
                                  .load_scan_bf16 = sm_load_scan_bf16, .load_scan_f32 = sm_load_scan_f32, .exp_sum = sm_exp_sum }
