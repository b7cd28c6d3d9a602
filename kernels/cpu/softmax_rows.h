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
    double p = 1.0 / 6227020800.0;           /* 1/13! */
    p = p * r + 1.0 / 479001600.0;           /* 1/12! */
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    int64_t ki = (int64_t)(d_bits(t) - d_bits(SHIFT)); /* k, from t's low bits */
    double scale = d_of((uint64_t)(ki + 1023) << 52);
    return d < -708.0 ? 0.0 : p * scale;
}

static void sm_exp_rows(const double *x, double m, double *e, int64_t n) {
    for (int64_t j = 0; j < n; j++) e[j] = exp_neg(x[j] - m);
}

static double sm_sum(const double *e, int64_t n) {
    double a[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) a[l] += e[j + l];
    for (int l = 0; j + l < n; l++) a[l] += e[j + l];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static int64_t sm_out_softmax(const double *e, int64_t n, double inv, double w, int32_t out_dtype, void *out,
                              uint8_t *flag) {
    int64_t bad = 0;
    if (out_dtype == 1) {
        uint16_t *o = out;
        for (int64_t j = 0; j < n; j++) {
            double q = e[j] * inv, ew = q * w;
            uint32_t lo = tg_sm_round_bf16(q - ew), hi = tg_sm_round_bf16(q + ew);
            flag[j] = lo != hi;
            bad += lo != hi;
            o[j] = (uint16_t)lo;
        }
    } else {
        uint32_t *o = out;
        for (int64_t j = 0; j < n; j++) {
            double q = e[j] * inv, ew = q * w;
            uint32_t lo = tg_sm_round_f32(q - ew), hi = tg_sm_round_f32(q + ew);
            flag[j] = lo != hi;
            bad += lo != hi;
            o[j] = lo;
        }
    }
    return bad;
}

static int64_t sm_out_log_softmax(const double *x, int64_t n, double m, double L, double w, int32_t out_dtype,
                                  void *out, uint8_t *flag) {
    int64_t bad = 0;
    if (out_dtype == 1) {
        uint16_t *o = out;
        for (int64_t j = 0; j < n; j++) {
            double y = (x[j] - m) - L, a = fabs(y), ew = a < INFINITY ? a * w : 0.0;
            uint32_t lo = tg_sm_round_bf16(y - ew), hi = tg_sm_round_bf16(y + ew);
            flag[j] = lo != hi;
            bad += lo != hi;
            o[j] = (uint16_t)lo;
        }
    } else {
        uint32_t *o = out;
        for (int64_t j = 0; j < n; j++) {
            double y = (x[j] - m) - L, a = fabs(y), ew = a < INFINITY ? a * w : 0.0;
            uint32_t lo = tg_sm_round_f32(y - ew), hi = tg_sm_round_f32(y + ew);
            flag[j] = lo != hi;
            bad += lo != hi;
            o[j] = lo;
        }
    }
    return bad;
}

#define TG_SM_VARIANT(ident, vname)                                                                             \
    const tg_sm_variant ident = { .name = vname, .available = available, .exp_rows = sm_exp_rows, .sum = sm_sum, \
                                  .out_softmax = sm_out_softmax, .out_log_softmax = sm_out_log_softmax }
