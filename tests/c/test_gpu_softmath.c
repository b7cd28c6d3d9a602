/* The GPU kernels' log1p, log, sin and cos in binary64 (kernels/gpu/softmath.h, written in the
 * double kinds' function-call form) against long double references (glibc's log1pl, logl, sinl
 * and cosl: x86-64's 64-bit significand, within about 1 ulp of it, 2^-11 of a double's ulp; or
 * binary128): the same text the renderer pastes into every MSL kernel that needs them, compiled
 * here as C on the host's doubles (the mapping OpenCL C and CUDA use, libtgrad/src/gen/lang.c)
 * and, built with -DTG_SOFT, on kernels/gpu/softdouble.h's too, whose results must have the
 * native ones' bits. Every tg_dk(literal, bits) the functions evaluate must have literal == bits.
 * Build with -ffp-contract=off (a contracted a * b + c is not the text's operations) and -lm.
 *   test_gpu_softmath       2^20 arguments per range (the soft mapping on every 4th): log1p and
 *                           log over every binade (subnormals to the largest double), log1p on
 *                           (-1, 0) and densely on [-0.3, 0.5] and at its paths' thresholds, log
 *                           densely near 1 and at u = k 2^-32 (k near 1 and near 2^32 all of
 *                           them), sin and cos on tiny and subnormal x, densely on |x| <= 0.8,
 *                           then up to 2^32 over binades and next to multiples of pi/2; the
 *                           special values (0, -0, inf, NaN, the domains' edges). About 2 s
 *                           (5 s with -DTG_SOFT) at -O2.
 *   test_gpu_softmath all [E]
 *                           2^E per range (E = 22: suite long, about a minute; the bounds in
 *                           softmath.h were measured with E = 24), the soft mapping on every one
 * Measures the relative error in ulps of the reference's binade (for sin and cos from 0.5 to 2^32,
 * the absolute error in units of 2^-53), prints each range's maximum and its argument, and fails
 * a range whose maximum exceeds the bound softmath.h states. Without a long double of 64 bits or
 * more (LDBL_MANT_DIG < 64: arm64 Apple platforms) only the special values, the constants and the
 * soft mapping's bits are checked. Prints "N passed, N failed". */
#include <float.h>
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

static int passed, failed;


/* A tg_dk whose literal is not its bits: counted (and the first few printed) where evaluated. */
static int dk_bad;

static double dk_checked(double v, uint64_t b, const char *lit) {
    if (bits_of(v) != b) {
        if (dk_bad++ < 8)
            fprintf(stderr, "tg_dk(%s, 0x%016llx): the literal is 0x%016llx\n", lit, (unsigned long long)b,
                    (unsigned long long)bits_of(v));
    }
    return v;
}

/* The native mapping: libtgrad/src/gen/lang.c's, the literal checked against its bits. The
 * functions take native names (nat_*) so that the soft mapping's can keep softmath.h's. */
#include "native_f64.h"
#define tg_dk(v, b) dk_checked(v, b, #v)
#define tg_d_of(u) double_of(u)
#define tg_d_bits(d) bits_of(d)
#define tg_dm_nan nat_dm_nan
#define tg_dm_inf nat_dm_inf
#define tg_dm_log_core nat_dm_log_core
#define tg_dm_log_normal nat_dm_log_normal
#define tg_dm_log1p nat_dm_log1p
#define tg_dm_log nat_dm_log
#define tg_dm_sin_small nat_dm_sin_small
#define tg_dm_cos_small nat_dm_cos_small
#define tg_dm_sincos nat_dm_sincos
#define tg_dm_sin nat_dm_sin
#define tg_dm_cos nat_dm_cos
#include "../../kernels/gpu/softmath.h"
#undef tg_f64
#undef tg_dk
#undef tg_d_of
#undef tg_d_bits
#undef tg_dadd
#undef tg_dsub
#undef tg_dmul
#undef tg_ddiv
#undef tg_dfma
#undef tg_dsqrt
#undef tg_dneg
#undef tg_dabs
#undef tg_dmin
#undef tg_dlt
#undef tg_dle
#undef tg_dgt
#undef tg_dge
#undef tg_deq
#undef tg_dne
#undef tg_d_i64
#undef tg_i64_d
#undef tg_dm_nan
#undef tg_dm_inf
#undef tg_dm_log_core
#undef tg_dm_log_normal
#undef tg_dm_log1p
#undef tg_dm_log
#undef tg_dm_sin_small
#undef tg_dm_cos_small
#undef tg_dm_sincos
#undef tg_dm_sin
#undef tg_dm_cos

#ifdef TG_SOFT
/* The soft mapping: MSL's (softdouble.h, then softmath.h under its own names). */
#define clz(x) ((uint)__builtin_clz(x))
#define tg_dk(v, b) tg_d_of(b)
#include "../../kernels/gpu/softdouble.h"
#include "../../kernels/gpu/softmath.h"
#undef tg_dk
#undef clz
#endif

/* One function: native, reference, soft. */
typedef struct {
    const char *name;
    double (*nat)(double);
    long double (*ref)(long double);
#ifdef TG_SOFT
    tg_f64 (*soft)(tg_f64);
#endif
} func;

enum { F_LOG1P, F_LOG, F_SIN, F_COS, NFUNC };

static const func funcs[NFUNC] = {
#ifdef TG_SOFT
    { "log1p", nat_dm_log1p, log1pl, tg_dm_log1p },
    { "log", nat_dm_log, logl, tg_dm_log },
    { "sin", nat_dm_sin, sinl, tg_dm_sin },
    { "cos", nat_dm_cos, cosl, tg_dm_cos },
#else
    { "log1p", nat_dm_log1p, log1pl },
    { "log", nat_dm_log, logl },
    { "sin", nat_dm_sin, sinl },
    { "cos", nat_dm_cos, cosl },
#endif
};

/* The bounds softmath.h states: relative, in ulps, or absolute, in units of 2^-53. */
#define BOUND_LOG1P 0.6
#define BOUND_LOG 0.6
#define BOUND_TRIG_REL 0.55
#define BOUND_TRIG_ABS 0.55

static bool have_ref;    /* a long double with at least 64 bits of significand */
static unsigned soft_every = 4;
#ifdef TG_SOFT
static uint64_t soft_cases, soft_bad;
#endif

/* One range's tally: its bound, maximum error and the argument that reached it. */
typedef struct {
    const char *what;
    int f;
    bool abs;
    double bound;
    uint64_t n;
    double max;
    double argmax;
} range;

/* |y - ref| in ulps of ref's binade (2^-1074 at least), or in units of 2^-53; NaN counts as inf. */
static double err_of(double y, long double ref, bool abs) {
    if (!isfinite(y))
        return INFINITY;
    long double d = fabsl((long double)y - ref);
    if (abs)
        return (double)ldexpl(d, 53);
    if (ref == 0)
        return y == 0 ? 0 : INFINITY;
    int e;
    frexpl(ref, &e);          /* |ref| in [2^(e-1), 2^e): ulp 2^(e-53) */
    int ue = e - 53 < -1074 ? -1074 : e - 53;
    return (double)ldexpl(d, -ue);
}

static void soft_compare(int f, double x, double y) {
#ifdef TG_SOFT
    soft_cases++;
    uint64_t s = tg_d_bits(funcs[f].soft(tg_d_of(bits_of(x))));
    if (s != bits_of(y) && soft_bad++ < 8)
        fprintf(stderr, "%s(%a = 0x%016llx): native 0x%016llx, soft 0x%016llx\n", funcs[f].name, x,
                (unsigned long long)bits_of(x), (unsigned long long)bits_of(y), (unsigned long long)s);
#else
    (void)f, (void)x, (void)y;
#endif
}

static void measure(range *r, double x) {
    double y = funcs[r->f].nat(x);
    if (r->n % soft_every == 0)
        soft_compare(r->f, x, y);
    r->n++;
    if (!have_ref)
        return;
    double e = err_of(y, funcs[r->f].ref((long double)x), r->abs);
    if (!(e <= r->max))
        r->max = isnan(e) ? INFINITY : e, r->argmax = x;
}

static void report(const range *r) {
    bool ok = !have_ref || r->max <= r->bound;
    if (have_ref)
        printf("%-6s %-44s %9llu args, max %.4f %s at %a (bound %.2f)%s\n", funcs[r->f].name, r->what,
               (unsigned long long)r->n, r->max, r->abs ? "2^-53" : "ulp", r->argmax, r->bound,
               ok ? "" : "  FAILED");
    if (ok)
        passed++;
    else
        failed++;
}

/* splitmix64 */
static uint64_t rng_state = 0x5eed50f7a7b5ull;

static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A double in [0, 1) with 53 random bits; one with exponent field in [lo, hi] and a random fraction. */
static double unit(void) {
    return (double)(rnd() >> 11) * 0x1p-53;
}

static double binade(unsigned lo, unsigned hi) {
    uint64_t e = lo + rnd() % (hi - lo + 1);
    return double_of(e << 52 | (rnd() & 0xfffffffffffffull));
}

static double neg_if(double x, uint64_t coin) {
    return (coin & 1) ? -x : x;
}

/* Is x in the domain where f's bound holds? */
static bool in_domain(int f, double x) {
    return f == F_LOG1P ? x > -1.0 && x < INFINITY : f == F_LOG ? x > 0.0 && x < INFINITY : fabs(x) <= 0x1p32;
}

/* The neighbours of t in f's domain, j ulps either way, for |j| <= w. */
static void around(range *r, double t, int w) {
    double lo = t, hi = t;
    measure(r, t);
    for (int j = 0; j < w; j++) {
        lo = nextafter(lo, -INFINITY), hi = nextafter(hi, INFINITY);
        if (in_domain(r->f, lo))
            measure(r, lo);
        if (in_domain(r->f, hi))
            measure(r, hi);
    }
}

static void run_log1p(uint64_t n) {
    range all = { "x over every binade, 2^-1074 .. 2^1024", F_LOG1P, false, BOUND_LOG1P, 0, 0, 0 };
    for (uint64_t i = 0; i < n; i++)
        measure(&all, binade(0, 2046));
    report(&all);
    range neg = { "x in (-1, 0), every binade", F_LOG1P, false, BOUND_LOG1P, 0, 0, 0 };
    for (uint64_t i = 0; i < n; i++)
        measure(&neg, -binade(0, 1022));
    around(&neg, -1.0 + 0x1p-53, 1000);
    report(&neg);
    range dense = { "x in [-0.3, 0.5], the paths' thresholds", F_LOG1P, false, BOUND_LOG1P, 0, 0, 0 };
    for (uint64_t i = 0; i < n; i++)
        measure(&dense, -0.3 + 0.8 * unit());
    /* the direct path's edges, 1 + x at sqrt 2, sqrt 1/2, 2 and 1/2, and the tiny path's edge */
    const double edges[] = { -0.29, 0.41, 0x1.a827999fcef34p-2, -0x1.2bec333018866p-2,
                             1.0, -0.5, 0x1p-54, -0x1p-54 };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        around(&dense, edges[i], 2000);
    report(&dense);
}

static void run_log(uint64_t n) {
    range all = { "x over every binade, subnormals to max", F_LOG, false, BOUND_LOG, 0, 0, 0 };
    for (uint64_t i = 0; i < n; i++)
        measure(&all, binade(0, 2046));
    around(&all, 0x1p-1074, 1000);
    around(&all, 0x1p-1022, 1000);
    around(&all, DBL_MAX, 1000);
    report(&all);
    range one = { "x = 1 + d, |d| in 2^-60 .. 2^-1", F_LOG, false, BOUND_LOG, 0, 0, 0 };
    for (uint64_t i = 0; i < n; i++) {
        uint64_t c = rnd();
        measure(&one, 1.0 + neg_if(ldexp(1.0 + unit(), -(int)(c % 60) - 2), c >> 8));
    }
    around(&one, 1.0, 20000);
    around(&one, 0x1.6a09e667f3bcdp+0, 2000);
    around(&one, 0x1.6a09e667f3bcdp-1, 2000);
    report(&one);
    range u32 = { "u = k 2^-32, k in [1, 2^32]", F_LOG, false, BOUND_LOG, 0, 0, 0 };
    for (uint64_t i = 0; i < n; i++)
        measure(&u32, (double)((rnd() >> 32) + 1) * 0x1p-32);
    for (uint64_t k = 1; k <= 65536; k++)
        measure(&u32, (double)k * 0x1p-32), measure(&u32, (double)(0x100000001ull - k) * 0x1p-32);
    report(&u32);
}

static void run_trig(int f, uint64_t n) {
    range tiny = { "|x| < 2^-26, subnormals too", f, false, BOUND_TRIG_REL, 0, 0, 0 };
    for (uint64_t i = 0; i < n / 4; i++)
        measure(&tiny, neg_if(binade(0, 1023 - 27), rnd()));
    around(&tiny, 0x1p-27, 1000);
    around(&tiny, -0x1p-27, 1000);
    report(&tiny);
    range small = { "|x| <= 0.8, uniform and over binades", f, false, BOUND_TRIG_REL, 0, 0, 0 };
    for (uint64_t i = 0; i < n; i++)
        measure(&small, 0.8 * (2.0 * unit() - 1.0));
    for (uint64_t i = 0; i < n; i++) {
        uint64_t c = rnd();
        measure(&small, neg_if(ldexp(1.0 + unit(), -(int)(c % 27) - 2), c >> 8));
    }
    around(&small, 0x1.921fb54442d18p-1, 5000);
    around(&small, -0x1.921fb54442d18p-1, 5000);
    around(&small, 0.8, 1000);
    around(&small, -0.8, 1000);
    report(&small);
    range big = { "0.5 <= |x| <= 2^32, over binades", f, true, BOUND_TRIG_ABS, 0, 0, 0 };
    for (uint64_t i = 0; i < n; i++) {
        double x = binade(1022, 1023 + 31);
        measure(&big, neg_if(x, rnd()));
    }
    around(&big, 0x1p32, 1000);
    around(&big, -0x1p32, 1000);
    report(&big);
    range near = { "|x| <= 2^32 next to multiples of pi/2", f, true, BOUND_TRIG_ABS, 0, 0, 0 };
    const long double PIO2 = 1.570796326794896619231321691639751442L;
    for (uint64_t i = 0; i < n / 16; i++) {
        uint64_t c = rnd();
        uint64_t k = (c >> 32) % 2734261102u + 1;   /* k pi/2 <= 2^32 */
        if (c & 2)
            k >>= (c >> 4) % 31;                     /* small multiples as often */
        around(&near, neg_if((double)((long double)(k ? k : 1) * PIO2), c), 4);
    }
    report(&near);
}

/* Exact results at the special values and the domains' edges. */
static void specials(void) {
    const uint64_t NAN64 = 0x7ff8000000000000ull, INF = 0x7ff0000000000000ull, NINF = 0xfff0000000000000ull;
    const uint64_t NEG0 = 0x8000000000000000ull, ONE = 0x3ff0000000000000ull;
    const struct {
        int f;
        double x;
        uint64_t want;
    } cases[] = {
        { F_LOG1P, 0.0, 0 }, { F_LOG1P, -0.0, NEG0 }, { F_LOG1P, INFINITY, INF },
        { F_LOG1P, -1.0, NINF }, { F_LOG1P, -1.5, NAN64 }, { F_LOG1P, -INFINITY, NAN64 },
        { F_LOG1P, NAN, NAN64 }, { F_LOG1P, -NAN, NAN64 }, { F_LOG1P, 0x1p-1074, 1 },
        { F_LOG1P, -0x1p-1074, NEG0 | 1 },
        { F_LOG, 0.0, NINF }, { F_LOG, -0.0, NINF }, { F_LOG, 1.0, 0 }, { F_LOG, INFINITY, INF },
        { F_LOG, -1.0, NAN64 }, { F_LOG, -0x1p-1074, NAN64 }, { F_LOG, -INFINITY, NAN64 },
        { F_LOG, NAN, NAN64 },
        { F_SIN, 0.0, 0 }, { F_SIN, -0.0, NEG0 }, { F_SIN, 0x1p-1074, 1 }, { F_SIN, -0x1p-1074, NEG0 | 1 },
        { F_SIN, INFINITY, NAN64 }, { F_SIN, -INFINITY, NAN64 }, { F_SIN, NAN, NAN64 },
        { F_SIN, 0x1.0000000000001p32, NAN64 }, { F_SIN, -0x1.0000000000001p32, NAN64 },
        { F_SIN, 1e300, NAN64 },
        { F_COS, 0.0, ONE }, { F_COS, -0.0, ONE }, { F_COS, 0x1p-1074, ONE }, { F_COS, INFINITY, NAN64 },
        { F_COS, -INFINITY, NAN64 }, { F_COS, NAN, NAN64 }, { F_COS, 0x1.0000000000001p32, NAN64 },
        { F_COS, -0x1.0000000000001p32, NAN64 },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double y = funcs[cases[i].f].nat(cases[i].x);
        soft_compare(cases[i].f, cases[i].x, y);
        if (bits_of(y) != cases[i].want) {
            bad++;
            fprintf(stderr, "%s(%a): 0x%016llx, expected 0x%016llx\n", funcs[cases[i].f].name, cases[i].x,
                    (unsigned long long)bits_of(y), (unsigned long long)cases[i].want);
        }
    }
    printf("special values: %d of %d wrong\n", bad, (int)(sizeof cases / sizeof cases[0]));
    if (bad == 0)
        passed++;
    else
        failed++;
}

int main(int argc, char **argv) {
    bool all = argc > 1 && strcmp(argv[1], "all") == 0;
    int e = all && argc > 2 ? atoi(argv[2]) : all ? 22 : 20;
    if (e < 10 || e > 30) {
        fprintf(stderr, "usage: test_gpu_softmath [all [E]] (10 <= E <= 30)\n");
        return 2;
    }
    uint64_t n = (uint64_t)1 << e;
    soft_every = all ? 1 : 4;
    have_ref = LDBL_MANT_DIG >= 64;
    if (!have_ref)
        printf("no 64-bit long double (LDBL_MANT_DIG %d): the errors are not measured\n", LDBL_MANT_DIG);
    specials();
    run_log1p(n);
    run_log(n);
    run_trig(F_SIN, n);
    run_trig(F_COS, n);
    printf("tg_dk constants: %d literal(s) not their bits\n", dk_bad);
    if (dk_bad == 0)
        passed++;
    else
        failed++;
#ifdef TG_SOFT
    printf("soft mapping (softdouble.h): %llu of %llu results not the native bits\n",
           (unsigned long long)soft_bad, (unsigned long long)soft_cases);
    if (soft_bad == 0)
        passed++;
    else
        failed++;
#endif
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
