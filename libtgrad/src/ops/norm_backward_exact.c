/* The exact decisions of rms_norm_backward and layer_norm_backward (norm_backward.h): every input
 * is an integer multiple of 2^-149, so the row's sums and each element's numerator T_i are big
 * integers (norm_exact.h), and dx_i = T_i c / (2^98 R^(3/2)) is compared with a rounding
 * midpoint m = M 2^-150 through squares: sign(T_i) against sign(m), then T_i^2 c^2 2^104 against
 * M^2 R^3 (docs/numerics.md, "rms_norm_backward, layer_norm_backward: the exact decision"). Every
 * quantity stays below 2^2,800 for rows up to 2^40 elements (TG_BIG_LIMBS: 3,072 bits). */
#include <math.h>
#include <string.h>

#include "../../../kernels/cpu/softmax_round.h"
#include "norm_backward.h"

uint32_t tg_nb_round(double v, int32_t dt) { return tg_sm_round(v, dt); }

#define int_of tg_exact_int_of

static void big_small(tg_big *a, uint64_t v) {
    tg_big_zero(a);
    tg_big_add_small(a, v, 0, 1);
}

static void negate(tg_big *a) { a->neg = a->n ? !a->neg : 0; }

/* GW_j = g_j w_j 2^298 (the product of two significands: < 2^48) */
static void big_gw(tg_big *a, const tg_nb_row *R, int64_t j) {
    uint64_t sg, sw;
    int32_t hg, hw, ng, nw;
    int_of(R->g[j], &sg, &hg, &ng);
    int_of(R->w[j], &sw, &hw, &nw);
    tg_big_zero(a);
    tg_big_add_small(a, sg * sw, hg + hw, ng != nw ? -1 : 1);
}

/* a += GW_j X_j (scale 2^447): three significands, up to 72 bits, added as two words */
static void add_gwx(tg_big *a, const tg_nb_row *R, int64_t j) {
    uint64_t s[3];
    int32_t h[3], ng[3];
    int_of(R->g[j], &s[0], &h[0], &ng[0]);
    int_of(R->w[j], &s[1], &h[1], &ng[1]);
    int_of(R->x[j], &s[2], &h[2], &ng[2]);
    unsigned __int128 p = (unsigned __int128)(s[0] * s[1]) * s[2];
    int sign = (ng[0] ^ ng[1] ^ ng[2]) ? -1 : 1;
    tg_big_add_small(a, (uint64_t)p, h[0] + h[1] + h[2], sign);
    tg_big_add_small(a, (uint64_t)(p >> 64), h[0] + h[1] + h[2] + 64, sign);
}

static void prepare(tg_nb_exact *E) {
    if (E->ready) return;
    const tg_nb_row *R = E->row;
    tg_big sxx, sg, e, nb, t;
    tg_big_zero(&E->sx), tg_big_zero(&sxx), tg_big_zero(&sg), tg_big_zero(&E->sgw);
    for (int64_t j = 0; j < R->n; j++) {
        uint64_t sig;
        int32_t sh, neg;
        int_of(R->x[j], &sig, &sh, &neg);
        tg_big_add_moments(&E->sx, &sxx, sig, sh, neg);
        add_gwx(&sg, R, j);
        big_gw(&t, R, j);
        tg_big_add(&E->sgw, &E->sgw, &t);
    }
    tg_big_from_double(&e, R->eps, 400);
    big_small(&nb, (uint64_t)R->n);
    tg_big_mul(&e, &e, &nb); /* N E */
    if (R->layer) {
        tg_big_mul(&e, &e, &nb); /* N^2 E */
        tg_big_mul(&sxx, &sxx, &nb);
        tg_big_mul(&t, &E->sx, &E->sx);
        negate(&t);
        tg_big_add(&sxx, &sxx, &t); /* N SXX - SX^2 */
        tg_big_mul(&E->k, &sg, &nb);
        tg_big_mul(&t, &E->sx, &E->sgw);
        negate(&t);
        tg_big_add(&E->k, &E->k, &t); /* N SG - SX SGW */
    } else {
        E->k = sg;
    }
    tg_big_shl(&E->r, &sxx, 102);
    tg_big_add(&E->r, &E->r, &e);
    tg_big_mul(&E->r3, &E->r, &E->r);
    tg_big_mul(&E->r3, &E->r3, &E->r);
    E->ready = true;
}

/* T_i (norm_backward.h) */
static void numerator(tg_nb_exact *E, int64_t i, tg_big *T) {
    const tg_nb_row *R = E->row;
    tg_big a, b, nb;
    big_gw(&a, R, i);
    tg_big_from_double(&b, R->x[i], 149); /* X_i */
    if (R->layer) {
        tg_big sx = E->sx, sgw = E->sgw;
        big_small(&nb, (uint64_t)R->n);
        negate(&sgw), negate(&sx);
        tg_big_mul(&a, &a, &nb);
        tg_big_add(&a, &a, &sgw); /* N GW_i - SGW */
        tg_big_mul(&b, &b, &nb);
        tg_big_add(&b, &b, &sx); /* N X_i - SX */
    }
    tg_big_mul(&a, &a, &E->r);
    tg_big_mul(&b, &b, &E->k);
    tg_big_shl(&b, &b, 102);
    negate(&b);
    tg_big_add(T, &a, &b);
}

typedef struct cmp_ctx {
    const tg_nb_exact *E;
    int sign;     /* of T_i */
    tg_big lhs;   /* T_i^2 c^2 2^104 */
} cmp_ctx;

static int sgn(double v) { return v > 0 ? 1 : (v < 0 ? -1 : 0); }

/* sign(dx_i - mid) */
static int cmp_mid(double mid, void *ctx) {
    cmp_ctx *C = ctx;
    int sm = sgn(mid);
    if (C->sign != sm || sm == 0) return C->sign > sm ? 1 : (C->sign < sm ? -1 : 0);
    tg_big m, rhs;
    tg_big_from_double(&m, mid, 150);
    tg_big_mul(&rhs, &m, &m);
    tg_big_mul(&rhs, &rhs, &C->E->r3);
    int c = tg_big_cmp(&C->lhs, &rhs);
    return C->sign > 0 ? c : -c;
}

/* ---- the keys of the result dtype: bits ordered as integers, inf included ---- */
static int32_t key_of(uint32_t b, int32_t dt) {
    if (dt == TGRAD_DTYPE_BF16) return tg_bf16_key((uint16_t)b);
    return (b & 0x80000000u) ? -(int32_t)(b & 0x7FFFFFFFu) : (int32_t)b;
}

static uint32_t bits_of(int32_t k, int32_t dt) {
    if (dt == TGRAD_DTYPE_BF16) return tg_bf16_of_key(k);
    return k >= 0 ? (uint32_t)k : (0x80000000u | (uint32_t)-k);
}

static double f32_key_value(int32_t k) {
    uint32_t m = (uint32_t)(k < 0 ? -k : k);
    float f;
    memcpy(&f, &m, sizeof f);
    double v = m >= 0x7F800000u ? 0x1p128 : (double)f;
    return k < 0 ? -v : v;
}

static double key_mid(int32_t k, int32_t dt) {
    if (dt == TGRAD_DTYPE_BF16) return tg_bf16_key_midpoint(k);
    return (f32_key_value(k) + f32_key_value(k + 1)) * 0.5; /* exact: 25 significant bits */
}

static int32_t round_exact(int32_t klo, int32_t khi, int32_t dt, cmp_ctx *C) {
    while (klo < khi) {
        int32_t m = (int32_t)(((int64_t)klo + khi) >> 1); /* floor: f32 keys span more than int32 */
        int c = cmp_mid(key_mid(m, dt), C);
        if (c < 0) khi = m;
        else if (c > 0) klo = m + 1;
        else return ((m < 0 ? -m : m) & 1) ? m + 1 : m; /* a tie: the even neighbour */
    }
    return klo;
}

uint32_t tg_nb_exact_element(tg_nb_exact *E, int64_t i, double lo, double hi) {
    const tg_nb_row *R = E->row;
    int32_t dt = R->dt;
    uint32_t neg0 = dt == TGRAD_DTYPE_BF16 ? 0x8000u : 0x80000000u;
    prepare(E);
    if (E->r.n == 0) return dt == TGRAD_DTYPE_BF16 ? 0x7FC0u : 0x7FC00000u; /* 0 / 0 */
    cmp_ctx C = { .E = E };
    numerator(E, i, &C.lhs);
    C.sign = C.lhs.n == 0 ? 0 : (C.lhs.neg ? -1 : 1);
    if (C.sign == 0) return 0; /* an exact zero: +0 */
    tg_big_mul(&C.lhs, &C.lhs, &C.lhs);
    tg_big_shl(&C.lhs, &C.lhs, 104);
    if (!R->layer) {
        tg_big nb;
        big_small(&nb, (uint64_t)R->n);
        tg_big_mul(&C.lhs, &C.lhs, &nb);
    }
    int32_t klo = key_of(tg_nb_round(isfinite(lo) ? lo : -INFINITY, dt), dt);
    int32_t khi = key_of(tg_nb_round(isfinite(hi) ? hi : INFINITY, dt), dt);
    if (klo > khi) klo = key_of(tg_nb_round(-INFINITY, dt), dt), khi = key_of(tg_nb_round(INFINITY, dt), dt);
    int32_t k = round_exact(klo, khi, dt, &C);
    if (k == 0) return C.sign < 0 ? neg0 : 0;
    return bits_of(k, dt);
}
