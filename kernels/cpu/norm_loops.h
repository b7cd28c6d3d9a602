/* The norms' hot loops (libtgrad/src/ops/norm.c), written without branches so that the compiler
 * vectorizes them: included by norm.c (portable) and by norm_avx512f.c (compiled for AVX-512).
 * Each is exact where it claims to be: the sums feed a rigorous error bound (any summation order
 * satisfies it), and an output is written only where the bound decides its rounding; the other
 * elements are flagged for the caller's exact path. So every variant gives the same bytes. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef NORM_FN
#error "define NORM_FN(name) before including norm_loops.h"
#endif

#define NORM_U 0x1p-53


static inline double NORM_FN(bf)(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* y's bf16 when |y| is a normal bf16 magnitude and no rounding midpoint lies within err of y
 * (|low45 - 2^44| ulps of y to the nearest one; err * 2^53 / |y| bounds err in ulps); else 0xFFFF. */
static inline uint16_t NORM_FN(fast_round)(double y, double err) {
    uint64_t u;
    memcpy(&u, &y, sizeof u);
    uint64_t e = (u >> 52) & 0x7FF, low = u & 0x1FFFFFFFFFFFull;
    uint64_t lb = 0x4330000000000000ull | low; /* 2^52 + low, exact: converts without AVX512-DQ */
    double lowd;
    memcpy(&lowd, &lb, sizeof lowd);
    double dist = fabs((lowd - 0x1p52) - 0x1p44);
    uint64_t t = ((u & 0x7FFFFFFFFFFFFFFFull) + 0xFFFFFFFFFFFull + ((u >> 45) & 1)) >> 45;
    uint16_t r = (uint16_t)(((u >> 48) & 0x8000) | (t - ((uint64_t)(1023 - 127) << 7)));
    int ok = (e >= 1023 - 125) & (e <= 1023 + 126) & (dist * fabs(y) > err * 0x1p53);
    return (uint16_t)(r | (uint16_t)(0u - (uint32_t)!ok)); /* 0xFFFF when undecided */
}

#ifndef NORM_OWN_SUMS
/* sum x^2 (rms) over n values. */
void NORM_FN(norm_sumsq)(const uint16_t *x, int64_t n, double *sumsq) {
    double a[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            double v = NORM_FN(bf)(x[i + k]);
            a[k] += v * v;
        }
    for (int k = 0; i < n; i++, k++) {
        double v = NORM_FN(bf)(x[i]);
        a[k] += v * v;
    }
    *sumsq = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* sum x and sum |x| over n values. */
void NORM_FN(norm_sums)(const uint16_t *x, int64_t n, double *sum, double *sumabs) {
    double a[8] = { 0 }, b[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            double v = NORM_FN(bf)(x[i + k]);
            a[k] += v, b[k] += fabs(v);
        }
    for (int k = 0; i < n; i++, k++) {
        double v = NORM_FN(bf)(x[i]);
        a[k] += v, b[k] += fabs(v);
    }
    *sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    *sumabs = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}

/* sum (x - mu)^2 over n values. */
void NORM_FN(norm_sumdev)(const uint16_t *x, int64_t n, double mu, double *q) {
    double a[8] = { 0 };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            double d = NORM_FN(bf)(x[i + k]) - mu;
            a[k] += d * d;
        }
    for (int k = 0; i < n; i++, k++) {
        double d = NORM_FN(bf)(x[i]) - mu;
        a[k] += d * d;
    }
    *q = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

#endif

/* (w and b: n values each, never NULL) rms outputs: y = x w inv with relative error <= rel; out[i]
 * where decided, else 0xFFFF. Both output loops return the number of elements left 0xFFFF. */
int64_t NORM_FN(norm_rms_out)(const uint16_t *x, const uint16_t *w, int64_t n, double inv, double rel, uint16_t *out) {
    int64_t undecided = 0;
    for (int64_t i = 0; i < n; i++) {
        double y = NORM_FN(bf)(x[i]) * NORM_FN(bf)(w[i]) * inv;
        uint16_t r = NORM_FN(fast_round)(y, fabs(y) * rel);
        out[i] = r;
        undecided += r == 0xFFFF;
    }
    return undecided;
}

/* layer outputs: y = w (x - mu) inv + b with |error| <= |w| inv (|x - mu| c1 + c2) + |y| 2u. */
int64_t NORM_FN(norm_layer_out)(const uint16_t *x, const uint16_t *w, const uint16_t *b, int64_t n, double mu,
                                 double inv, double c1, double c2, uint16_t *out) {
    int64_t undecided = 0;
    for (int64_t i = 0; i < n; i++) {
        double wi = NORM_FN(bf)(w[i]), bi = NORM_FN(bf)(b[i]);
        double dx = NORM_FN(bf)(x[i]) - mu, y = wi * dx * inv + bi;
        double err = fabs(wi) * inv * (fabs(dx) * c1 + c2) + fabs(y) * 2 * NORM_U;
        uint16_t r = NORM_FN(fast_round)(y, err);
        out[i] = r;
        undecided += r == 0xFFFF;
    }
    return undecided;
}
