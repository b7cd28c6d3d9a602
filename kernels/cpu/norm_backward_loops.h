/* The hot loops of the norms' backward (libtgrad/src/ops/norm_backward.c), written without
 * branches so that the compiler vectorizes them: included by norm_backward.c (portable) and by
 * norm_backward_avx512f.c (compiled for AVX-512). The sums feed a rigorous error bound that any
 * summation order satisfies, and an output is written only where the bound decides its rounding
 * (the rest are flagged TG_NB_UNDECIDED for the caller's exact path), so every variant gives the
 * same bytes. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/norm_backward.h"

#ifndef NB_FN
#error "define NB_FN(name) before including norm_backward_loops.h"
#endif

#define NB_U 0x1p-53
#define NB_LANES 8

void NB_FN(nb_load_bf16)(const uint16_t *src, int64_t n, double *to) {
    for (int64_t j = 0; j < n; j++) {
        uint32_t u = (uint32_t)src[j] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        to[j] = f;
    }
}

void NB_FN(nb_load_f32)(const float *src, int64_t n, double *to) {
    for (int64_t j = 0; j < n; j++) to[j] = src[j];
}

void NB_FN(nb_mul)(const double *a, const double *b, int64_t n, double *to) {
    for (int64_t j = 0; j < n; j++) to[j] = a[j] * b[j]; /* g w: exact (two 24-bit significands) */
}

static inline double NB_FN(fold)(const double *p) {
    double s = 0;
    for (int k = 0; k < NB_LANES; k++) s += p[k];
    return s;
}

/* s[0] = sum x^2, s[1] = sum gw x, s[2] = sum |gw x| (rms); NB_LANES partial sums each. */
void NB_FN(nb_rms_sums)(const double *x, const double *gw, int64_t n, double s[3]) {
    double a[3][NB_LANES] = { { 0 } };
    int64_t j = 0;
    for (; j + NB_LANES <= n; j += NB_LANES)
        for (int k = 0; k < NB_LANES; k++) {
            double p = gw[j + k] * x[j + k];
            a[0][k] += x[j + k] * x[j + k], a[1][k] += p, a[2][k] += fabs(p);
        }
    for (; j < n; j++) {
        double p = gw[j] * x[j];
        a[0][0] += x[j] * x[j], a[1][0] += p, a[2][0] += fabs(p);
    }
    for (int i = 0; i < 3; i++) s[i] = NB_FN(fold)(a[i]);
}

/* s = sum x, sum |x|, sum gw, sum |gw| (layer's first pass). */
void NB_FN(nb_layer_sums)(const double *x, const double *gw, int64_t n, double s[4]) {
    double a[4][NB_LANES] = { { 0 } };
    int64_t j = 0;
    for (; j + NB_LANES <= n; j += NB_LANES)
        for (int k = 0; k < NB_LANES; k++)
            a[0][k] += x[j + k], a[1][k] += fabs(x[j + k]), a[2][k] += gw[j + k], a[3][k] += fabs(gw[j + k]);
    for (; j < n; j++) a[0][0] += x[j], a[1][0] += fabs(x[j]), a[2][0] += gw[j], a[3][0] += fabs(gw[j]);
    for (int i = 0; i < 4; i++) s[i] = NB_FN(fold)(a[i]);
}

/* s = sum (x - mu)^2, sum gw (x - mu), sum |gw (x - mu)| (layer's second pass). */
void NB_FN(nb_layer_devs)(const double *x, const double *gw, int64_t n, double mu, double s[3]) {
    double a[3][NB_LANES] = { { 0 } };
    int64_t j = 0;
    for (; j + NB_LANES <= n; j += NB_LANES)
        for (int k = 0; k < NB_LANES; k++) {
            double d = x[j + k] - mu, p = gw[j + k] * d;
            a[0][k] += d * d, a[1][k] += p, a[2][k] += fabs(p);
        }
    for (; j < n; j++) {
        double d = x[j] - mu, p = gw[j] * d;
        a[0][0] += d * d, a[1][0] += p, a[2][0] += fabs(p);
    }
    for (int i = 0; i < 3; i++) s[i] = NB_FN(fold)(a[i]);
}

/* The rounding of v to bf16 when v - e and v + e round alike: both of one sign with magnitudes in
 * [2^-126, 2^129) (a normal bf16, or inf), rounded to nearest even at bit 45 of their bits as
 * tg_bf16_from_double does; else TG_NB_UNDECIDED (the caller retries with tg_nb_round). */
static inline uint32_t NB_FN(decide_bf16)(double v, double e) {
    double lo = v - e, hi = v + e;
    uint64_t ul, uh;
    memcpy(&ul, &lo, sizeof ul);
    memcpy(&uh, &hi, sizeof uh);
    uint64_t al = ul & 0x7FFFFFFFFFFFFFFFull, ah = uh & 0x7FFFFFFFFFFFFFFFull;
    uint64_t kl = (al + 0xFFFFFFFFFFFull + ((al >> 45) & 1)) >> 45, kh = (ah + 0xFFFFFFFFFFFull + ((ah >> 45) & 1)) >> 45;
    uint64_t k = kl - ((uint64_t)(1023 - 127) << 7);
    int ok = (kl == kh) & (((ul ^ uh) >> 63) == 0) & (al >= 0x3810000000000000ull) & (ah >= 0x3810000000000000ull) &
             (al < 0x4800000000000000ull) & (ah < 0x4800000000000000ull);
    uint32_t bits = (uint32_t)((ul >> 48) & 0x8000u) | (uint32_t)(k >= 0x7F80 ? 0x7F80 : k);
    return ok ? bits : TG_NB_UNDECIDED;
}

/* float32: both ends' conversions alike and not a zero. */
static inline uint32_t NB_FN(decide_f32)(double v, double e) {
    float lo = (float)(v - e), hi = (float)(v + e);
    uint32_t bl, bh;
    memcpy(&bl, &lo, sizeof bl);
    memcpy(&bh, &hi, sizeof bh);
    return (bl == bh) & ((bl & 0x7FFFFFFFu) != 0) ? bl : TG_NB_UNDECIDED;
}

/* Each element's value v_i = rinv t_i, t_i = (gw_i - a) - (x_i - mu) c, its bound e_i
 * (docs/numerics.md: et_i from the row's constants, then rinv (et + rho (|t| + et)), the ends'
 * roundings and 2^-1000), and its bits where the bound decides them. rms: mu = a = ea = delta = 0. */
#define NB_VALUES_BODY(decide)                                                                                       \
    for (int64_t i = 0; i < n; i++) {                                                                                \
        double dv = x[i] - K->mu, ga = gw[i] - K->a, xc = dv * K->c, t = ga - xc, vi = K->rinv * t;                  \
        double et = (K->ea + K->delta * (fabs(K->c) + K->ec) + fabs(dv) * K->ec +                                    \
                     NB_U * (fabs(ga) + 2 * fabs(xc) + fabs(t))) * 1.02;                                              \
        double ei = (K->rinv * (et + K->rho * (fabs(t) + et)) + 4 * NB_U * fabs(vi)) * 1.1 + 0x1p-1000;              \
        v[i] = vi, e[i] = ei, bits[i] = decide(vi, ei);                                                              \
    }

void NB_FN(nb_values)(const tg_nb_consts *K, const double *x, const double *gw, int64_t n, int32_t bf16, double *v,
                      double *e, uint32_t *bits) {
    if (bf16) NB_VALUES_BODY(NB_FN(decide_bf16))
    else NB_VALUES_BODY(NB_FN(decide_f32))
}
#undef NB_VALUES_BODY
