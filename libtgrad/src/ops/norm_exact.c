/* Fixed-size big integers and exact bf16 rounding decisions for the correctly rounded composite
 * ops (norm_exact.h). */
#include <math.h>
#include <string.h>

#include "norm_exact.h"

void tg_big_zero(tg_big *a) { memset(a, 0, sizeof *a); }

static void trim(tg_big *a) {
    while (a->n > 0 && a->w[a->n - 1] == 0) a->n--;
    if (a->n == 0) a->neg = 0;
}

/* |a| vs |b| */
static int cmp_mag(const tg_big *a, const tg_big *b) {
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    for (int32_t i = a->n - 1; i >= 0; i--)
        if (a->w[i] != b->w[i]) return a->w[i] < b->w[i] ? -1 : 1;
    return 0;
}

/* r = |a| + |b| (magnitudes; r may alias) */
static void add_mag(tg_big *r, const tg_big *a, const tg_big *b) {
    int32_t n = a->n > b->n ? a->n : b->n;
    unsigned __int128 c = 0;
    for (int32_t i = 0; i < n; i++) {
        c += (unsigned __int128)a->w[i] + b->w[i];
        r->w[i] = (uint64_t)c;
        c >>= 64;
    }
    if (c && n < TG_BIG_LIMBS) r->w[n++] = (uint64_t)c;
    for (int32_t i = n; i < r->n; i++) r->w[i] = 0;
    r->n = n;
}

/* r = |a| - |b| with |a| >= |b| */
static void sub_mag(tg_big *r, const tg_big *a, const tg_big *b) {
    uint64_t borrow = 0;
    int32_t n = a->n;
    for (int32_t i = 0; i < n; i++) {
        uint64_t bi = i < b->n ? b->w[i] : 0;
        uint64_t d = a->w[i] - bi - borrow;
        borrow = (a->w[i] < bi) || (a->w[i] - bi < borrow);
        r->w[i] = d;
    }
    for (int32_t i = n; i < r->n; i++) r->w[i] = 0;
    r->n = n;
}

void tg_big_add(tg_big *r, const tg_big *a, const tg_big *b) {
    int32_t an = a->neg, bn = b->neg;
    if (an == bn) {
        add_mag(r, a, b);
        r->neg = an;
    } else if (cmp_mag(a, b) >= 0) {
        sub_mag(r, a, b);
        r->neg = an;
    } else {
        sub_mag(r, b, a);
        r->neg = bn;
    }
    trim(r);
}

void tg_big_add_small(tg_big *a, uint64_t v, int32_t shift, int32_t s) {
    if (!v) return;
    tg_big t;
    tg_big_zero(&t);
    int32_t q = shift / 64, k = shift % 64;
    t.w[q] = v << k;
    if (k && q + 1 < TG_BIG_LIMBS) t.w[q + 1] = v >> (64 - k);
    t.n = q + 2 < TG_BIG_LIMBS ? q + 2 : TG_BIG_LIMBS;
    t.neg = s < 0;
    trim(&t);
    tg_big_add(a, a, &t);
}

void tg_big_add_moments(tg_big *s1, tg_big *s2, uint64_t sig, int32_t shift, int32_t neg) {
    tg_big_add_small(s1, sig, shift, neg ? -1 : 1);
    tg_big_add_small(s2, sig * sig, 2 * shift, 1);
}

void tg_big_mul(tg_big *r, const tg_big *a, const tg_big *b) {
    tg_big t;
    tg_big_zero(&t);
    for (int32_t i = 0; i < a->n; i++) {
        unsigned __int128 c = 0;
        for (int32_t j = 0; j < b->n && i + j < TG_BIG_LIMBS; j++) {
            c += (unsigned __int128)a->w[i] * b->w[j] + t.w[i + j];
            t.w[i + j] = (uint64_t)c;
            c >>= 64;
        }
        if (i + b->n < TG_BIG_LIMBS) t.w[i + b->n] = (uint64_t)c;
    }
    t.n = a->n + b->n < TG_BIG_LIMBS ? a->n + b->n : TG_BIG_LIMBS;
    t.neg = a->neg != b->neg;
    trim(&t);
    *r = t;
}

void tg_big_shl(tg_big *r, const tg_big *a, int32_t k) {
    tg_big t;
    tg_big_zero(&t);
    int32_t q = k / 64, s = k % 64;
    for (int32_t i = a->n - 1; i >= 0; i--) {
        if (i + q < TG_BIG_LIMBS) t.w[i + q] |= a->w[i] << s;
        if (s && i + q + 1 < TG_BIG_LIMBS) t.w[i + q + 1] |= a->w[i] >> (64 - s);
    }
    t.n = a->n + q + 1 < TG_BIG_LIMBS ? a->n + q + 1 : TG_BIG_LIMBS;
    t.neg = a->neg;
    trim(&t);
    *r = t;
}

int tg_big_cmp(const tg_big *a, const tg_big *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int c = cmp_mag(a, b);
    return a->neg ? -c : c;
}

void tg_big_from_double(tg_big *a, double d, int32_t scale) {
    tg_big_zero(a);
    if (d == 0) return;
    int e;
    double f = frexp(fabs(d), &e); /* |d| = f * 2^e, f in [0.5, 1) */
    uint64_t m = (uint64_t)ldexp(f, 53);
    int32_t sh = e - 53 + scale;
    while (sh < 0 && !(m & 1)) m >>= 1, sh++; /* the caller's scale makes it an integer */
    tg_big_add_small(a, m, sh < 0 ? 0 : sh, d < 0 ? -1 : 1);
}

void tg_exact_int_of(double x, uint64_t *sig, int32_t *shift, int32_t *neg) {
    float f = (float)x; /* exact */
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    uint32_t e = (b >> 23) & 0xFFu, m = b & 0x7FFFFFu;
    *sig = e ? (uint64_t)(m | 0x800000u) : m;
    *shift = e ? (int32_t)e - 1 : 0;
    *neg = (int32_t)(b >> 31);
}

uint16_t tg_bf16_from_double(double y) {
    uint64_t u;
    memcpy(&u, &y, sizeof u);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
    double a = fabs(y);
    if (a != a) return 0x7FC0;
    if (a < 0x1p-126) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p133)); /* 128: the smallest normal */
    uint64_t v = u & 0x7FFFFFFFFFFFFFFFull;
    if (v >= 0x47F0000000000000ull) return sign | 0x7F80; /* >= 2^128 or inf */
    uint64_t t = (v + 0xFFFFFFFFFFFull + ((v >> 45) & 1)) >> 45;
    t -= (uint64_t)(1023 - 127) << 7;
    return (uint16_t)(sign | (t >= 0x7F80 ? 0x7F80 : t));
}

static double key_value(int32_t k) {
    int32_t m = k < 0 ? -k : k;
    double v;
    if (m >= 0x7F80) v = 0x1p128;
    else {
        int32_t e = m >> 7, f = m & 0x7F;
        v = e ? ldexp(128 + f, e - 134) : ldexp(f, -133);
    }
    return k < 0 ? -v : v;
}

double tg_bf16_key_midpoint(int32_t k) { return (key_value(k) + key_value(k + 1)) * 0.5; }

int32_t tg_bf16_round_exact(int32_t klo, int32_t khi, tg_midpoint_cmp cmp, void *ctx) {
    while (klo < khi) {
        int32_t m = klo + (khi - klo) / 2;
        int c = cmp(tg_bf16_key_midpoint(m), ctx);
        if (c < 0) khi = m;
        else if (c > 0) klo = m + 1;
        else return ((m < 0 ? -m : m) & 1) ? m + 1 : m; /* a tie: the even neighbour */
    }
    return klo;
}

tgrad_status tg_norm_check_eps(double eps, const char *fn) {
    if (eps == 0 || (eps >= 0x1p-256 && eps <= 0x1p64)) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "%s: eps %g is not 0 or a number in [2^-256, 2^64]", fn, eps);
}
