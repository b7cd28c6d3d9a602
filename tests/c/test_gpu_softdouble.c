/* The GPU kernels' software double (kernels/gpu/softdouble.h, binary64 in integers for MSL, which
 * has no double) against the host's hardware double, bit for bit: the same text the renderer
 * pastes into every double kind's Metal kernel, compiled here as C. A NaN result must be a NaN on
 * both sides (which NaN is free); every other result must have the same bits.
 *   test_gpu_softdouble       every pair (and fma's every triple) of the special values, then
 *                             2^22 operands per op (2^23 for fma) drawn to reach every path:
 *                             random bits, exponents a few binades apart (cancellation, the sticky
 *                             alignment), subnormal operands and results, overflow, products,
 *                             quotients and square roots at and next to rounding midpoints, fma's
 *                             addend cancelling the product or far below or above it; the
 *                             conversions on every 4099th float32, doubles at float32's edges and
 *                             midpoints, and integers at 2^53, 2^63 and rounding ties
 *   test_gpu_softdouble all [E]
 *                             2^E operands per op (2^(E+1) for fma; E = 25: suite long, about
 *                             half a minute; 6.2 G cases with E = 27), every float32
 * Prints "N passed, N failed" (compared cases) and the first failures with their operands in hex. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "float_bits.h"

typedef uint32_t uint;
typedef uint64_t tg_u64;
typedef int64_t tg_i64;
#define clz(x) ((uint)__builtin_clz(x))
#include "../../kernels/gpu/softdouble.h"
#undef clz

#define SIGN64 0x8000000000000000u
#define INF64 0x7ff0000000000000u

static uint64_t passed, failed;


static bool is_nan64(uint64_t u) { return (u & ~SIGN64) > INF64; }
static bool is_nan32(uint64_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* How a result is compared: a double or a float32 (NaN-ness only for NaNs), or exact bits. */
typedef enum { OUT_F64, OUT_F32, OUT_EXACT } out_kind;

/* One op's tally; the first few mismatches are printed with their operands. */
typedef struct {
    const char *name;
    out_kind kind;
    uint64_t cases, bad;
} tally;

static void compare(tally *t, const uint64_t *in, int n, uint64_t want, uint64_t got) {
    t->cases++;
    bool ok = want == got || (t->kind == OUT_F64 && is_nan64(want) && is_nan64(got)) ||
              (t->kind == OUT_F32 && is_nan32(want) && is_nan32(got));
    if (ok) {
        passed++;
        return;
    }
    failed++;
    if (t->bad++ >= 8) return;
    fprintf(stderr, "FAIL %s(", t->name);
    for (int i = 0; i < n; i++) fprintf(stderr, "%s0x%016llx", i ? ", " : "", (unsigned long long)in[i]);
    fprintf(stderr, "): host 0x%016llx, soft 0x%016llx\n", (unsigned long long)want, (unsigned long long)got);
}

static void report(const tally *t) {
    printf("%-8s %10llu cases, %llu mismatches\n", t->name, (unsigned long long)t->cases, (unsigned long long)t->bad);
}

/* The positive specials; each is used with both signs. */
static const uint64_t positive_specials[] = {
    0x0000000000000000, 0x0000000000000001, 0x0000000000000002, 0x0000000000000003, 0x0008000000000000,
    0x000fffffffffffff, 0x0010000000000000, 0x0010000000000001, 0x001fffffffffffff, 0x0020000000000000,
    0x3ff0000000000000, 0x3ff0000000000001, 0x3fefffffffffffff, 0x3ff8000000000000, 0x4000000000000000,
    0x4008000000000000, 0x3fe0000000000000, 0x3fd5555555555555, 0x3fe5555555555555, 0x3fb999999999999a,
    0x4330000000000000, 0x4340000000000000, 0x433fffffffffffff, 0x3ca0000000000000, 0x3c90000000000000,
    0x5ff0000000000000, 0x1ff0000000000000, 0x1e60000000000000, 0x7fd0000000000000, 0x7fcfffffffffffff,
    0x7fe0000000000000, 0x7fefffffffffffff, 0x7ff0000000000000, 0x7ff8000000000000, 0x7ff0000000000001,
    0x0350000000000000, 0x3cb0000000000000, 0x43e0000000000000, 0x36a0000000000000, 0x47efffffe0000000,
};
enum { NPOS = sizeof positive_specials / sizeof positive_specials[0], NSPECIAL = 2 * NPOS };
static uint64_t specials[NSPECIAL];

static uint64_t state = 0x9e3779b97f4a7c15u;
static uint64_t rnd(void) { /* xorshift64* */
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    return state * 0x2545f4914f6cdd1du;
}
static uint32_t below(uint32_t n) { return (uint32_t)((rnd() >> 32) % n); }

/* A double of a random sign and fraction whose biased exponent is e, clamped to 0 .. 2046. */
static uint64_t with_exp(int e) {
    e = e < 0 ? 0 : e > 2046 ? 2046 : e;
    return (rnd() & 0x800fffffffffffffu) | ((uint64_t)e << 52);
}
static int exp_of(uint64_t u) { return (int)((u >> 52) & 0x7ff); }
/* A random odd integer of exactly n bits (1 <= n <= 63). */
static uint64_t odd_bits(int n) { return (rnd() >> (64 - n)) | ((uint64_t)1 << (n - 1)) | 1u; }
/* m * 2^e as a double (rounded by the host where m has more than 53 bits or the value is subnormal). */
static uint64_t scaled(uint64_t m, int e) { return bits_of(ldexp((double)m, e)) | (rnd() & SIGN64); }
/* Half an ulp of a normal positive double y. */
static double half_ulp(double y) { return ldexp(1.0, ilogb(y) - 53); }

/* Two operands drawn to reach one path of add, sub, mul, div, min and the comparisons. */
static void draw_pair(uint32_t k, uint64_t *a, uint64_t *b) {
    int e = 1 + (int)below(2046), r = (int)below(141) - 70, x = below(2) ? 0 : 2046;
    switch (k % 12) {
    case 0: *a = rnd(), *b = rnd(); break;                                        /* anything */
    case 1: *a = with_exp(e), *b = with_exp(e + (int)below(121) - 60); break;      /* near binades */
    case 2: *a = with_exp((int)below(3)), *b = with_exp((int)below(60)); break;    /* subnormals */
    case 3: *a = with_exp(e), *b = with_exp(1023 - e + r + x); break;              /* products near under/overflow */
    case 4: *a = with_exp(e), *b = *a ^ (rnd() & SIGN64) ^ (rnd() & 7); break;     /* cancellation, q near 1 */
    case 5: {                                    /* sums at a tie: b half an ulp of a (or a little below) */
        int eb = e - 53 - (int)below(3);
        *a = with_exp(e);
        *b = ((uint64_t)(eb > 0 ? eb : 0) << 52) | (rnd() & SIGN64) | (below(2) ? 0 : rnd() & 0xff);
        break;
    }
    case 6: {                                    /* products of 54 or 55 bits: at or next to a tie */
        int i = 1 + (int)below(53), j = 54 - i + (int)below(2);
        *a = scaled(odd_bits(i), (int)below(1200) - 600);
        *b = scaled(odd_bits(j > 53 ? 53 : j), (int)below(1200) - 600);
        break;
    }
    case 7: {                                    /* products whose lowest bit is at or near 2^-1075 */
        int ea = (int)below(400) - 700;
        *a = scaled(odd_bits(1 + (int)below(30)), ea);
        *b = scaled(odd_bits(1 + (int)below(30)), -1076 + (int)below(8) - ea);
        break;
    }
    case 8: {                                    /* exact quotients whose lowest bit is near 2^-1075 */
        uint64_t q = odd_bits(1 + (int)below(26)), d = odd_bits(1 + (int)below(26));
        int ea = (int)below(900) - 1000;
        *a = scaled(q * d, ea), *b = scaled(d, ea + 1076 - (int)below(8));
        break;
    }
    case 9: {                                    /* quotients near a midpoint: a ~ (y + ulp/2) d */
        double y = double_of(with_exp(1023 + (int)below(40) - 20) & ~SIGN64);
        double d = double_of(with_exp(1023 + (int)below(40) - 20));
        *a = bits_of(fma(y, d, half_ulp(y) * d)) ^ (rnd() & 1), *b = bits_of(d);
        break;
    }
    case 10: *a = specials[below(NSPECIAL)], *b = with_exp((int)below(2047)); break;
    default: *a = with_exp(e), *b = with_exp(e + 1023 - r - x); break;             /* quotients near under/overflow */
    }
    if (below(2)) {                                                              /* either order */
        uint64_t t = *a;
        *a = *b, *b = t;
    }
}

/* Three operands drawn to reach one path of fma. */
static void draw_triple(uint32_t k, uint64_t *a, uint64_t *b, uint64_t *c) {
    int ea = 1 + (int)below(2046), eb = 2046 - ea + (int)below(1200) - 600, ep = ea + eb - 1023;
    *a = with_exp(ea), *b = with_exp(eb);
    switch (k % 10) {
    case 0: *a = rnd(), *b = rnd(), *c = rnd(); break;                           /* anything */
    case 1: *c = with_exp(ep + (int)below(129) - 64); break;                     /* c near the product */
    case 2:                                                        /* c = -round(ab) +- a few ulps: cancellation */
        *c = bits_of(-(double_of(*a) * double_of(*b))) ^ (rnd() & 7) ^ (below(4) ? 0 : SIGN64);
        break;
    case 3: {                                                      /* products at a tie, a far smaller c decides */
        int i = 1 + (int)below(53), j = 54 - i;
        *a = scaled(odd_bits(i), (int)below(400) - 200);
        *b = scaled(odd_bits(j > 53 ? 53 : j), (int)below(400) - 200);
        ep = exp_of(*a) + exp_of(*b) - 1023;
        *c = below(4) ? with_exp(ep - 54 - (int)below(120)) : with_exp((int)below(2));
        break;
    }
    case 4: *c = with_exp(ep - 54 - (int)below(1100)); break;                    /* c far below, subnormal */
    case 5: *c = with_exp(ep + 54 + (int)below(400)); break;                     /* c far above */
    case 6: *b = with_exp(1023 - ea + (int)below(120) - 100), *c = with_exp((int)below(4)); break; /* tiny products */
    case 7: *b = with_exp(3069 - ea - (int)below(8)), *c = with_exp(2040 + (int)below(7)); break; /* overflow */
    case 8: *c = specials[below(NSPECIAL)]; break;
    default: *a = with_exp((int)below(3)), *c = with_exp(ep + (int)below(60) - 30); break; /* subnormal a */
    }
}

/* ---- the host's reference ---- */
static uint64_t host_add(uint64_t a, uint64_t b) { return bits_of(double_of(a) + double_of(b)); }
static uint64_t host_sub(uint64_t a, uint64_t b) { return bits_of(double_of(a) - double_of(b)); }
static uint64_t host_mul(uint64_t a, uint64_t b) { return bits_of(double_of(a) * double_of(b)); }
static uint64_t host_div(uint64_t a, uint64_t b) { return bits_of(double_of(a) / double_of(b)); }
/* C's fmin, with softdouble.h's choices where C leaves them open: -0 for fmin(-0, +0) and
 * fmin(+0, -0), and a signaling NaN yields the other operand like a quiet one (glibc's a NaN). */
static uint64_t host_min(uint64_t a, uint64_t b) {
    double x = double_of(a), y = double_of(b);
    if (isnan(x) || isnan(y)) return isnan(x) ? b : a;
    if (x == 0 && y == 0) return a | b;
    return bits_of(fmin(x, y));
}
/* The six comparisons as six bits. */
static uint64_t host_cmp(uint64_t a, uint64_t b) {
    double x = double_of(a), y = double_of(b);
    return (uint64_t)((x < y) | (x <= y) << 1 | (x > y) << 2 | (x >= y) << 3 | (x == y) << 4 | (x != y) << 5);
}

static tg_f64 D(uint64_t u) { return tg_d_of(u); }
static uint64_t soft_add(uint64_t a, uint64_t b) { return tg_d_bits(tg_dadd(D(a), D(b))); }
static uint64_t soft_sub(uint64_t a, uint64_t b) { return tg_d_bits(tg_dsub(D(a), D(b))); }
static uint64_t soft_mul(uint64_t a, uint64_t b) { return tg_d_bits(tg_dmul(D(a), D(b))); }
static uint64_t soft_div(uint64_t a, uint64_t b) { return tg_d_bits(tg_ddiv(D(a), D(b))); }
static uint64_t soft_min(uint64_t a, uint64_t b) { return tg_d_bits(tg_dmin(D(a), D(b))); }
static uint64_t soft_cmp(uint64_t a, uint64_t b) {
    tg_f64 x = D(a), y = D(b);
    return (uint64_t)(tg_dlt(x, y) | tg_dle(x, y) << 1 | tg_dgt(x, y) << 2 | tg_dge(x, y) << 3 |
                      tg_deq(x, y) << 4 | tg_dne(x, y) << 5);
}

typedef struct {
    const char *name;
    out_kind kind;
    uint64_t (*host)(uint64_t, uint64_t);
    uint64_t (*soft)(uint64_t, uint64_t);
} binary_op;

static const binary_op binaries[] = {
    { "add", OUT_F64, host_add, soft_add }, { "sub", OUT_F64, host_sub, soft_sub },
    { "mul", OUT_F64, host_mul, soft_mul }, { "div", OUT_F64, host_div, soft_div },
    { "min", OUT_F64, host_min, soft_min }, { "compare", OUT_EXACT, host_cmp, soft_cmp },
};

static void check_binary(const binary_op *op, uint64_t draws) {
    tally t = { op->name, op->kind, 0, 0 };
    uint64_t in[2];
    for (int i = 0; i < NSPECIAL; i++)
        for (int j = 0; j < NSPECIAL; j++) {
            in[0] = specials[i], in[1] = specials[j];
            compare(&t, in, 2, op->host(in[0], in[1]), op->soft(in[0], in[1]));
        }
    for (uint64_t n = 0; n < draws; n++) {
        draw_pair((uint32_t)n, &in[0], &in[1]);
        compare(&t, in, 2, op->host(in[0], in[1]), op->soft(in[0], in[1]));
    }
    report(&t);
}

static void check_fma(uint64_t draws) {
    tally t = { "fma", OUT_F64, 0, 0 };
    uint64_t in[3];
    for (int i = 0; i < NSPECIAL; i++)
        for (int j = 0; j < NSPECIAL; j++)
            for (int k = 0; k < NSPECIAL; k++) {
                in[0] = specials[i], in[1] = specials[j], in[2] = specials[k];
                compare(&t, in, 3, bits_of(fma(double_of(in[0]), double_of(in[1]), double_of(in[2]))),
                        tg_d_bits(tg_dfma(D(in[0]), D(in[1]), D(in[2]))));
            }
    for (uint64_t n = 0; n < draws; n++) {
        draw_triple((uint32_t)n, &in[0], &in[1], &in[2]);
        compare(&t, in, 3, bits_of(fma(double_of(in[0]), double_of(in[1]), double_of(in[2]))),
                tg_d_bits(tg_dfma(D(in[0]), D(in[1]), D(in[2]))));
    }
    report(&t);
}

/* An operand drawn to reach one path of sqrt, neg and abs. */
static uint64_t draw_single(uint32_t k) {
    switch (k % 7) {
    case 0: return rnd();
    case 1: return with_exp((int)below(2047)) & ~SIGN64;
    case 2: return with_exp((int)below(3)) & ~SIGN64;                            /* subnormals */
    case 3: {                                                                    /* squares and neighbours */
        double y = double_of(scaled(odd_bits(1 + (int)below(26)), (int)below(1400) - 700));
        return bits_of(y * y) + (uint64_t)below(5) - 2;
    }
    case 4: {                                                                    /* roots near a midpoint */
        double y = double_of(with_exp(1 + (int)below(2046)) & ~SIGN64);
        return (bits_of(fma(y, y, 2 * y * half_ulp(y))) + (uint64_t)below(5) - 2) & ~SIGN64;
    }
    case 5: return specials[below(NSPECIAL)];
    default: return scaled(odd_bits(1 + (int)below(53)), (int)below(160) - 1140) & ~SIGN64; /* subnormal squares */
    }
}

static void check_unary(uint64_t draws) {
    tally ts = { "sqrt", OUT_F64, 0, 0 }, tn = { "neg", OUT_EXACT, 0, 0 }, ta = { "abs", OUT_EXACT, 0, 0 };
    for (uint64_t n = 0; n < draws + NSPECIAL; n++) {
        uint64_t u = n < NSPECIAL ? specials[n] : draw_single((uint32_t)n);
        compare(&ts, &u, 1, bits_of(sqrt(double_of(u))), tg_d_bits(tg_dsqrt(D(u))));
        compare(&tn, &u, 1, bits_of(-double_of(u)), tg_d_bits(tg_dneg(D(u))));
        compare(&ta, &u, 1, bits_of(fabs(double_of(u))), tg_d_bits(tg_dabs(D(u))));
    }
    report(&ts), report(&tn), report(&ta);
}

/* float32 to double on every stride-th pattern (and its negation) and the float specials. */
static void check_d_f32(uint64_t stride) {
    static const uint32_t fspecials[] = { 0x00000000, 0x00000001, 0x007fffff, 0x00800000, 0x3f800000, 0x7f7fffff,
                                          0x7f800000, 0x7fc00000, 0x7f800001, 0x7fbfffff, 0x00400000, 0x3effffff };
    tally t = { "d_f32", OUT_F64, 0, 0 };
    for (uint64_t n = 0; n < 2 * (sizeof fspecials / sizeof fspecials[0]); n++) {
        uint32_t f = fspecials[n / 2] ^ (uint32_t)(n % 2) << 31;
        float x;
        memcpy(&x, &f, sizeof x);
        uint64_t in = f;
        compare(&t, &in, 1, bits_of((double)x), tg_d_bits(tg_d_f32(f)));
    }
    for (uint64_t u = 0; u <= 0xffffffffu; u += stride) {
        uint32_t f = (uint32_t)u;
        float x;
        memcpy(&x, &f, sizeof x);
        compare(&t, &u, 1, bits_of((double)x), tg_d_bits(tg_d_f32(f)));
    }
    report(&t);
}

/* A double drawn at float32's edges and midpoints. */
static uint64_t draw_for_f32(uint32_t k) {
    switch (k % 6) {
    case 0: return rnd();
    case 1: return with_exp(1023 - 150 + (int)below(30) - 10);                   /* float subnormals, 0 */
    case 2: return with_exp(1023 + 124 + (int)below(6));                          /* overflow edge */
    case 3: {                                                      /* float32 midpoints, +-1 ulp of double */
        uint32_t f = (uint32_t)rnd();
        float x;
        memcpy(&x, &f, sizeof x);
        if (!isfinite(x)) return rnd();
        double h = (f & 0x7f800000u) == 0 ? ldexp(1.0, -150) : ldexp(1.0, ilogb(x) - 24);
        return bits_of((double)x + copysign(h, x)) + (uint64_t)below(3) - 1;
    }
    case 4: return specials[below(NSPECIAL)];
    default: return with_exp(1023 + (int)below(260) - 130);                      /* anywhere in range */
    }
}

static void check_f32_d(uint64_t draws) {
    tally t = { "f32_d", OUT_F32, 0, 0 };
    for (uint64_t n = 0; n < draws + NSPECIAL; n++) {
        uint64_t u = n < NSPECIAL ? specials[n] : draw_for_f32((uint32_t)n);
        float x = (float)double_of(u);
        uint32_t f;
        memcpy(&f, &x, sizeof f);
        compare(&t, &u, 1, f, tg_f32_d(D(u)));
    }
    report(&t);
}

/* An integer at the edges and rounding ties of the conversion to double. */
static int64_t draw_int(uint32_t k) {
    uint64_t sign = below(2) ? ~(uint64_t)0 : 1;                                 /* times -1 or 1, modular */
    int s = 1 + (int)below(10);
    switch (k % 5) {
    case 0: return (int64_t)rnd();
    case 1: return (int64_t)(rnd() >> below(64));
    case 2: return (int64_t)((((uint64_t)1 << (53 + below(10))) + below(9) - 4) * sign);
    case 3: {                                                      /* at a tie (bit 54 or above set), +-1 */
        uint64_t v = ((odd_bits(53) << s) | ((uint64_t)1 << (s - 1))) + below(3) - 1;
        return (int64_t)(v * sign);
    }
    default: {
        static const uint64_t edges[] = { 0, 1, 0x7fffffffffffffff, 0x8000000000000000, 0x8000000000000001,
                                          0x7ffffffffffffc00, 0x7ffffffffffffdff, 0x7ffffffffffffe00,
                                          0x20000000000001, 0x1fffffffffffff, 0x40000000000003 };
        return (int64_t)edges[below(sizeof edges / sizeof edges[0])];
    }
    }
}

/* A double drawn for the truncation to an integer: |a| < 2^63, near 1 and near 2^63. */
static uint64_t draw_for_i64(uint32_t k) {
    switch (k % 4) {
    case 0: return with_exp(1023 + (int)below(63));
    case 1: return with_exp(1023 + 52 + (int)below(11));
    case 2: return with_exp(1023 - 3 + (int)below(4));
    default: return with_exp((int)below(1086));
    }
}

static void check_ints(uint64_t draws) {
    tally ti = { "d_i64", OUT_F64, 0, 0 }, tt = { "i64_d", OUT_EXACT, 0, 0 };
    for (uint64_t n = 0; n < draws; n++) {
        int64_t v = draw_int((uint32_t)n);
        uint64_t in = (uint64_t)v;
        compare(&ti, &in, 1, bits_of((double)v), tg_d_bits(tg_d_i64(v)));
        uint64_t u = draw_for_i64((uint32_t)n);
        compare(&tt, &u, 1, (uint64_t)(int64_t)double_of(u), (uint64_t)tg_i64_d(D(u)));
    }
    /* outside C's range: softdouble.h saturates, a NaN is 0 */
    static const uint64_t outside[][2] = {
        { 0x43e0000000000000, 0x7fffffffffffffff }, { 0xc3e0000000000000, 0x8000000000000000 },
        { 0xc3e0000000000001, 0x8000000000000000 }, { 0x7ff0000000000000, 0x7fffffffffffffff },
        { 0xfff0000000000000, 0x8000000000000000 }, { 0x7fefffffffffffff, 0x7fffffffffffffff },
        { 0x7ff8000000000000, 0 }, { 0xfff0000000000001, 0 },
    };
    for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++)
        compare(&tt, &outside[i][0], 1, outside[i][1], (uint64_t)tg_i64_d(D(outside[i][0])));
    report(&ti), report(&tt);
}

int main(int argc, char **argv) {
    bool all = argc > 1 && strcmp(argv[1], "all") == 0;
    int e = all && argc > 2 ? atoi(argv[2]) : all ? 25 : 22;
    if (e < 10 || e > 32) {
        fprintf(stderr, "usage: test_gpu_softdouble [all [E]] (10 <= E <= 32)\n");
        return 2;
    }
    uint64_t draws = (uint64_t)1 << e;
    for (int i = 0; i < NSPECIAL; i++) specials[i] = positive_specials[i / 2] ^ (i % 2 ? SIGN64 : 0);
    for (size_t i = 0; i < sizeof binaries / sizeof binaries[0]; i++) check_binary(&binaries[i], draws);
    check_fma(2 * draws);
    check_unary(draws);
    check_d_f32(all ? 1 : 4099);
    check_f32_d(draws);
    check_ints(draws);
    printf("%llu passed, %llu failed\n", (unsigned long long)passed, (unsigned long long)failed);
    return failed != 0;
}
