/* The reference of the derivative ops (codes 24-31) for tests/c/test_elementwise.c's binary sweep,
 * independent of libtgrad's evaluation (elementwise_grad.c: a long double table, double products,
 * TwoSum) and more precise: binary128 (libquadmath; long double where that is binary128, as on
 * aarch64 Linux) values in other algebraic forms, placed exactly
 * on a grid, and integer rounding.
 *
 * op(a, g) = g h(a), h the derivative factor (gelu'(x), y (1 - y), 1 - y^2, -y^3/2, 1/(2y)). For a
 * finite non-zero g = m 2^k (m the integer significand, 1 .. 255) and a finite non-zero h, the
 * rounding of g h(a) is that of V 2^k with V = m |h(a)|. The reference finds, for each a and m, V's
 * place on the 9-bit grid of its binade (2^E <= V < 2^(E+1), units 2^(E-8)): the index T (256 ..
 * 511) of the grid point at or below V and whether V lies strictly above it (sticky). Every bf16
 * rounding of V 2^k, normal (8 bits: T's guard bit and the sticky) or subnormal (fewer), overflow
 * included, is decided by (E, T, sticky): integer arithmetic per pair.
 *  - gelu', gelu_tanh', silu' (transcendental for x != 0) as base + delta (base 1, 1/2 or 0: near
 *    0 and for large x, m f'(x) lies next to the grid point m base, and delta's sign says on which
 *    side when it is below 2^-80 of it): V in binary128 with an error bound from
 *    the terms' magnitudes (2^-90 of them); V must lie further than that from the grid, else the
 *    pair is undecided (counted; the test fails on any). f'(0) = 1/2 is exact.
 *  - y (1 - y) = y - y^2, 1 - y^2: V = |P + Q| with P, Q exact products (<= 24 bits). When neither
 *    is below 2^-80 of the other the sum is exact in binary128 (<= 105 bits); otherwise the larger
 *    one, with <= 24 bits, is 2^-15 of its grid spacing or more from any grid point unless on one,
 *    and the smaller (< 2^-80 of it) only says from which side.
 *  - y^3/2: 32 bits, exact. 1/(2y): a binary128 quotient; it lands exactly on a grid point only
 *    when the quotient is exact (else it is >= 2^-17 of the value away, far beyond 2^-113).
 * Zero, infinite and NaN operands (and h's limits at x = +-inf: 1 and -0) follow IEEE
 * multiplication of g and h(a); relu_backward is a select: x > 0 gives g, else +0, NaN gives NaN. */
#ifndef TGRAD_TESTS_GRAD_REFERENCE_H
#define TGRAD_TESTS_GRAD_REFERENCE_H

#include <float.h>
#include <math.h>

#if defined(TGRAD_HAVE_QUADMATH)
#include <quadmath.h>
typedef __float128 q128;
#define QL(x) x##Q
#define Q_PI M_PIq
#define TGRAD_GRAD_REFERENCE 1
#elif LDBL_MANT_DIG == 113 /* aarch64 Linux: long double is binary128, with libm's functions */
typedef long double q128;
#define QL(x) x##L
#define Q_PI 3.141592653589793238462643383279502884L
#define sqrtq sqrtl
#define expq expl
#define erfq erfl
#define erfcq erfcl
#define tanhq tanhl
#define coshq coshl
#define fabsq fabsl
#define TGRAD_GRAD_REFERENCE 1
#endif

#if defined(TGRAD_GRAD_REFERENCE)
typedef struct { int16_t E; uint16_t T; bool sticky, ok; } grid_place;

static bool is_grad_op(tgrad_op op) { return op >= TGRAD_OP_GELU_BACKWARD && op <= TGRAD_OP_SQRT_BACKWARD; }

/* f'(x) = base + delta for finite x, base 1 (x >= 1), 1/2 (|x| < 1) or 0 (x <= -1), delta in
 * binary128 from forms that keep its digits (near 0 and for large x, m f'(x) lies next to the grid
 * point m base, and only delta says on which side); *scale the terms' magnitudes */
static q128 ref_deriv(tgrad_op op, q128 x, q128 *base, q128 *scale) {
    const q128 pi = Q_PI;
    *base = x >= 1 ? 1 : x > -1 ? QL(0.5) : 0;
    if (op == TGRAD_OP_GELU_BACKWARD) { /* Phi(x) + x phi(x) */
        q128 u = x / sqrtq(2), b = x * expq(-x * x / 2) / sqrtq(2 * pi);
        q128 p = x >= 1 ? -erfcq(u) / 2 : x > -1 ? erfq(u) / 2 : erfcq(-u) / 2; /* Phi - base */
        *scale = *base + fabsq(p) + fabsq(b);
        return p + b;
    }
    if (op == TGRAD_OP_GELU_TANH_BACKWARD) { /* (1 + tanh z)/2 + x/2 sech^2(z) z' */
        q128 c = sqrtq(2 / pi), k = QL(0.044715), z = c * (x + k * x * x * x);
        q128 p = x >= 1 ? -1 / (1 + expq(2 * z)) : x > -1 ? tanhq(z) / 2 : 1 / (1 + expq(-2 * z));
        q128 ch = coshq(z), b = x / 2 / (ch * ch) * c * (1 + 3 * k * x * x);
        *scale = *base + (fabsq(p) + fabsq(b)) * (1 + 2 * fabsq(z));
        return p + b;
    }
    /* silu: s + x s (1 - s), s = sigma(x) = 1/2 + tanh(x/2)/2 */
    q128 e = expq(-fabsq(x)), s = x >= 0 ? 1 / (1 + e) : e / (1 + e), r = x >= 0 ? e / (1 + e) : 1 / (1 + e);
    q128 p = x >= 1 ? -r : x > -1 ? tanhq(x / 2) / 2 : s, b = x * s * r;
    *scale = *base + fabsq(p) + fabsq(b);
    return p + b;
}

/* V > 0's place on its binade's 9-bit grid (exact when V is exact), from its bits; *frac the
 * distance to the nearest grid point in grid units (approximate), for the margin check */
static grid_place place_frac(q128 V, double *frac) {
    unsigned __int128 u;
    memcpy(&u, &V, sizeof u);
    int be = (int)((u >> 112) & 0x7fff);
    unsigned __int128 sig = u & (((unsigned __int128)1 << 112) - 1);
    int E;
    if (be) {
        sig |= (unsigned __int128)1 << 112, E = be - 16383;
    } else { /* subnormal binary128: normalize (never for the values here, kept for safety) */
        int lz = 0;
        while (!(sig >> (112 - lz) & 1)) lz++;
        sig <<= lz, E = -16382 - lz;
    }
    unsigned __int128 rest = sig & (((unsigned __int128)1 << 104) - 1);
    unsigned __int128 above = ((unsigned __int128)1 << 104) - rest;
    *frac = (double)(rest < above ? rest : above) * 0x1p-104; /* to the nearer grid point */
    return (grid_place){ (int16_t)(E < -30000 ? -30000 : E), (uint16_t)(sig >> 104), rest != 0, true };
}

static grid_place place_of(q128 V) {
    double frac;
    return place_frac(V, &frac);
}

/* |P + Q| for exact P, Q (<= 24 significant bits each, not both zero) */
static grid_place place_of_sum(q128 P, q128 Q) {
    q128 aP = fabsq(P), aQ = fabsq(Q);
    if ((aP == 0 || aQ == 0) || (aQ >= aP * QL(0x1p-80) && aP >= aQ * QL(0x1p-80))) return place_of(fabsq(P + Q));
    q128 big = aP > aQ ? P : Q, small = aP > aQ ? Q : P;
    grid_place g = place_of(fabsq(big));
    if (g.sticky) return g; /* strictly between grid points: the small part cannot cross one */
    g.sticky = true;
    if ((small > 0) == (big > 0)) return g; /* just above the grid point */
    if (g.T > 256) g.T--;                    /* just below it */
    else g.E--, g.T = 511;
    return g;
}

static q128 ref_deriv_table[3][65536], ref_base_table[3][65536], ref_scale_table[3][65536];
static bool ref_tables_built[3];

/* the quad f'(x) tables (single-threaded, before any sweep) */
static void ref_grad_prepare(tgrad_op op) {
    if (op < TGRAD_OP_GELU_BACKWARD || op > TGRAD_OP_SILU_BACKWARD || ref_tables_built[op - TGRAD_OP_GELU_BACKWARD]) return;
    int k = op - TGRAD_OP_GELU_BACKWARD;
    for (uint32_t i = 0; i < 65536; i++) {
        float x = bf16_f32((uint16_t)i);
        q128 s = 0, base = 0;
        ref_deriv_table[k][i] = isfinite(x) ? ref_deriv(op, x, &base, &s) : 0;
        if (isinf(x) && x > 0) base = 1; /* the limit f'(+inf) = 1 (f'(-inf) = -0 is a special h) */
        ref_base_table[k][i] = base, ref_scale_table[k][i] = s;
    }
    ref_tables_built[k] = true;
}

/* h(a)'s class for the special cases: NaN, +-0, +-inf, or +-1 for a finite non-zero h */
static double h_class(tgrad_op op, uint16_t a) {
    double y = bf16_f32(a);
    if (y != y) return NAN;
    switch (op) {
    case TGRAD_OP_GELU_BACKWARD:
    case TGRAD_OP_GELU_TANH_BACKWARD:
    case TGRAD_OP_SILU_BACKWARD: {
        if (isinf(y)) return y > 0 ? 1 : -0.0;
        int k = op - TGRAD_OP_GELU_BACKWARD;
        q128 d = ref_base_table[k][a] + ref_deriv_table[k][a];
        return d > 0 ? 1 : -1; /* never 0 for a finite x; an underflowed d is a negative tiny */
    }
    case TGRAD_OP_SIGMOID_BACKWARD:
        if (isinf(y)) return -INFINITY;
        if (y == 0) return y;
        if (y == 1) return 0.0;
        return y > 0 && y < 1 ? 1 : -1;
    case TGRAD_OP_TANH_BACKWARD:
        if (isinf(y)) return -INFINITY;
        if (fabs(y) == 1) return 0.0;
        return fabs(y) < 1 ? 1 : -1;
    case TGRAD_OP_RSQRT_BACKWARD:
        if (isinf(y)) return y > 0 ? -INFINITY : INFINITY;
        if (y == 0) return -y;
        return y > 0 ? -1 : 1;
    case TGRAD_OP_SQRT_BACKWARD:
        if (isinf(y)) return y > 0 ? 0.0 : -0.0;
        if (y == 0) return signbit(y) ? -INFINITY : INFINITY;
        return y > 0 ? 1 : -1;
    default: return NAN;
    }
}

static atomic_llong grad_undecided;
static _Atomic double grad_closest[3] = { 1, 1, 1 }; /* each smooth op's V closest to the grid, in units */

/* V = m |h(a)| placed on the grid (a finite, h(a) finite non-zero, 1 <= m <= 255) */
static grid_place place_m(tgrad_op op, uint16_t a, uint32_t m) {
    q128 y = bf16_f32(a), M = m;
    switch (op) {
    case TGRAD_OP_GELU_BACKWARD:
    case TGRAD_OP_GELU_TANH_BACKWARD:
    case TGRAD_OP_SILU_BACKWARD: {
        int k = op - TGRAD_OP_GELU_BACKWARD;
        q128 base = ref_base_table[k][a], delta = ref_deriv_table[k][a], d = base + delta;
        if (d == 0) return (grid_place){ -30000, 256, true, true }; /* below 2^-16000: rounds to 0 */
        if (base != 0 && fabsq(delta) < base * QL(0x1p-80)) return place_of_sum(M * base, M * delta); /* its side */
        double frac;
        grid_place g = place_frac(M * fabsq(d), &frac);
        /* f'(0) = 1/2 is exact; below 2^-300, V 2^k < 2^-164 rounds to 0 wherever V lies */
        if (y == 0 || fabsq(d) < QL(0x1p-300)) return g;
        double tol = (double)(ref_scale_table[k][a] / fabsq(d)) * 0x1p-90 * 512;
        double was = atomic_load(&grad_closest[k]);
        while (frac < was && !atomic_compare_exchange_weak(&grad_closest[k], &was, frac)) {}
        if (frac <= tol) g.ok = false;
        return g;
    }
    case TGRAD_OP_SIGMOID_BACKWARD: return place_of_sum(M * y, -(M * y) * y);
    case TGRAD_OP_TANH_BACKWARD: return place_of_sum(M, -(M * y) * y);
    case TGRAD_OP_RSQRT_BACKWARD: return place_of(fabsq(M * y * y * y / 2));
    case TGRAD_OP_SQRT_BACKWARD: return place_of(M / fabsq(2 * y));
    default: return (grid_place){ 0, 0, false, false };
    }
}

/* the bf16 rounding of V 2^k, V placed by p, with the sign */
static uint16_t round_placed(grid_place p, int k, uint16_t sign) {
    int top = p.E + k;
    if (top >= 128) return sign | 0x7f80u;
    if (top >= -126) {
        uint32_t R = p.T >> 1, guard = p.T & 1, up = guard && (p.sticky || (R & 1));
        uint32_t field = ((uint32_t)(top + 126) << 7) + R + up;
        return sign | (uint16_t)(field >= 0x7f80u ? 0x7f80u : field);
    }
    int s = -(top + 125); /* >= 2: V 2^k = T 2^-s units of 2^-133 (plus the sticky) */
    if (s > 12) return sign;
    uint32_t q = p.T >> s, rest = p.T & ((1u << s) - 1), half = 1u << (s - 1);
    uint32_t up = rest > half || (rest == half && (p.sticky || (q & 1)));
    return sign | (uint16_t)(q + up);
}

static uint16_t ieee_product_bf16(double g, double h) {
    double v = g * h;
    if (v != v) return 0x7fc0u;
    uint16_t sign = signbit(v) ? 0x8000u : 0;
    return sign | (isinf(v) ? 0x7f80u : 0); /* only zero or infinite here */
}

/* op(a, b[i]) for i < n; a row of many b places a's 255 m once */
static void ref_grad_row(tgrad_op op, uint16_t a, const uint16_t *b, uint16_t *out, int64_t n) {
    if (op == TGRAD_OP_RELU_BACKWARD) {
        bool xnan = (a & 0x7fffu) > 0x7f80u, pos = (a & 0x8000u) == 0 && a != 0;
        for (int64_t i = 0; i < n; i++)
            out[i] = xnan || (b[i] & 0x7fffu) > 0x7f80u ? 0x7fc0u : pos ? b[i] : 0;
        return;
    }
    double h = h_class(op, a);
    grid_place places[256];
    bool placed[256] = { false };
    bool special_h = h != h || h == 0 || isinf(h);
    for (int64_t i = 0; i < n; i++) {
        uint16_t gb = b[i];
        double g = bf16_f32(gb);
        if (special_h || g == 0 || !isfinite(g)) {
            out[i] = ieee_product_bf16(g, h);
            continue;
        }
        uint32_t eg = (gb >> 7) & 0xffu, m = eg ? (gb & 0x7fu) | 0x80u : gb & 0x7fu;
        int k = eg ? (int)eg - 134 : -133;
        if (!placed[m]) places[m] = place_m(op, a, m), placed[m] = true;
        if (!places[m].ok) {
            if (atomic_fetch_add(&grad_undecided, 1) < 3)
                fprintf(stderr, "%s(0x%04x, 0x%04x): the reference cannot decide\n", tgrad_op_name(op), a, gb);
            out[i] = 0xffffu;
            continue;
        }
        out[i] = round_placed(places[m], k, (uint16_t)(((signbit(g) != 0) != (signbit(h) != 0)) ? 0x8000u : 0));
    }
}

#else
static bool is_grad_op(tgrad_op op) { return op >= TGRAD_OP_GELU_BACKWARD && op <= TGRAD_OP_SQRT_BACKWARD; }
static atomic_llong grad_undecided;
static _Atomic double grad_closest[3];
static void ref_grad_prepare(tgrad_op op) { (void)op; }
/* no binary128 here: every pair is left undecided (skipped), and counted */
static void ref_grad_row(tgrad_op op, uint16_t a, const uint16_t *b, uint16_t *out, int64_t n) {
    (void)op, (void)a, (void)b;
    memset(out, 0xff, (size_t)n * sizeof *out);
    atomic_fetch_add(&grad_undecided, n);
}
#endif

#endif
