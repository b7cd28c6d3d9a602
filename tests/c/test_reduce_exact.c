/* The exact reductions (libtgrad/src/ops/reduce_exact.h) against a slow, obviously correct
 * reference: every finite value's integer significand added into an int64 bin per unit position
 * (value = m 2^(p - 149)), the bins folded into a base-2^32 big integer, and that integer rounded
 * bit by bit. Checked on every kernel (AVX512-BF16, AVX-512F, AVX2 where the CPU runs them;
 * portable; strided), under a hostile floating-point environment, with the data split and merged
 * in any order, on
 * random and adversarial data (window edges, cancellation, subnormals, overflow, specials,
 * signed zeros, ties), plus the accumulator's range (2^40 and 2^100 largest values) and the
 * extrema's rules. Linked from libtgrad's objects (the engine is hidden). Prints "N passed, N failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libtgrad/src/ops/reduce_exact.h"
#include "check.h"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

/* ---- random bits ---- */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

/* ---- the reference ---- */
#define DIGITS 20 /* base 2^32: 640 bits */
typedef struct {
    uint32_t mag[DIGITS]; /* |sum| / 2^-149 */
    int neg, nan, pinf, ninf, all_negzero;
} ref_sum;

static uint32_t get(const void *base, int dtype, int64_t i) {
    return dtype == TG_RDT_BF16 ? ((const uint16_t *)base)[i] : ((const uint32_t *)base)[i];
}

static void reference(const void *base, int dtype, int64_t n, int64_t stride, ref_sum *r) {
    static int64_t bins[320];
    memset(bins, 0, sizeof bins);
    memset(r, 0, sizeof *r);
    r->all_negzero = n > 0;
    int pbits = dtype == TG_RDT_BF16 ? 8 : 24;
    uint32_t sign = dtype == TG_RDT_BF16 ? 0x8000u : 0x80000000u;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = get(base, dtype, i * stride);
        if (b != sign) r->all_negzero = 0;
        uint32_t e = (b & ~sign) >> (pbits - 1), f = b & ((1u << (pbits - 1)) - 1);
        if (e == 255) {
            if (f) r->nan = 1;
            else if (b & sign) r->ninf = 1;
            else r->pinf = 1;
            continue;
        }
        int64_t m = e ? (int64_t)(f | (1u << (pbits - 1))) : (int64_t)f;
        int p = (int)(e ? e : 1) - 1 + (24 - pbits);
        bins[p] += (b & sign) ? -m : m;
    }
    __int128 d[DIGITS] = { 0 };
    for (int p = 0; p < 320; p++) d[p / 32] += (__int128)bins[p] * ((__int128)1 << (p % 32));
    __int128 carry = 0;
    int64_t digit[DIGITS];
    for (int i = 0; i < DIGITS; i++) {
        __int128 t = d[i] + carry;
        __int128 lo = t & 0xFFFFFFFF;
        digit[i] = (int64_t)lo;
        carry = (t - lo) / ((__int128)1 << 32);
    }
    r->neg = carry < 0;
    if (r->neg) { /* negate: 2^(32 DIGITS) - x */
        int64_t c = 1;
        for (int i = 0; i < DIGITS; i++) {
            int64_t v = (int64_t)(~(uint32_t)digit[i]) + c;
            digit[i] = v & 0xFFFFFFFF;
            c = v >> 32;
        }
    }
    for (int i = 0; i < DIGITS; i++) r->mag[i] = (uint32_t)digit[i];
}

static int bit(const uint32_t *m, int i) { return i >= 0 && i < DIGITS * 32 && ((m[i / 32] >> (i % 32)) & 1); }

/* mag 2^L, plus something below its last bit when sticky: rounded to nearest even, bit by bit */
static uint32_t ref_round(const uint32_t *mag, int L, int sticky, int neg, int out) {
    int p = out == TG_RDT_BF16 ? 8 : 24;
    uint32_t sign = neg ? (out == TG_RDT_BF16 ? 0x8000u : 0x80000000u) : 0;
    uint32_t inf = out == TG_RDT_BF16 ? 0x7F80u : 0x7F800000u;
    int t = DIGITS * 32 - 1;
    while (t >= 0 && !bit(mag, t)) t--;
    if (t < 0) return 0xDEAD; /* the callers handle zero */
    int ex = t + L;
    int qe = (ex > -126 ? ex : -126) - (p - 1);
    uint64_t k = 0;
    for (int i = t; i >= qe - L; i--) k = k * 2 + (uint64_t)bit(mag, i);
    int half = bit(mag, qe - L - 1), rest = sticky;
    for (int i = qe - L - 2; i >= 0 && !rest; i--) rest = bit(mag, i);
    if (half && (rest || (k & 1))) k++;
    if (k == (UINT64_C(1) << p)) { k >>= 1; qe++; }
    if (qe + p > 128) return sign | inf;
    if (k < (UINT64_C(1) << (p - 1))) return sign | (uint32_t)k;
    return sign | ((uint32_t)(qe + p - 1 + 127) << (p - 1)) | (uint32_t)(k - (UINT64_C(1) << (p - 1)));
}

static uint32_t ref_result(const ref_sum *r, int64_t n_mean, int out) {
    uint32_t sign = out == TG_RDT_BF16 ? 0x8000u : 0x80000000u, inf = out == TG_RDT_BF16 ? 0x7F80u : 0x7F800000u;
    uint32_t qnan = out == TG_RDT_BF16 ? 0x7FC0u : 0x7FC00000u;
    if (n_mean == 0) return qnan;
    if (r->nan || (r->pinf && r->ninf)) return qnan;
    if (r->pinf) return inf;
    if (r->ninf) return sign | inf;
    int zero = 1;
    for (int i = 0; i < DIGITS; i++) zero &= r->mag[i] == 0;
    if (zero) return r->all_negzero ? sign : 0;
    if (n_mean < 0) return ref_round(r->mag, -149, 0, r->neg, out);
    /* mean: q = floor(mag 2^64 / n) by schoolbook division in base 2^32 (n < 2^32 here) */
    uint32_t num[DIGITS] = { 0 }, q[DIGITS];
    for (int i = 0; i + 2 < DIGITS; i++) num[i + 2] = r->mag[i];
    uint64_t rem = 0;
    for (int i = DIGITS - 1; i >= 0; i--) {
        uint64_t cur = (rem << 32) | num[i];
        q[i] = (uint32_t)(cur / (uint64_t)n_mean);
        rem = cur % (uint64_t)n_mean;
    }
    return ref_round(q, -149 - 64, rem != 0, r->neg, out);
}

/* ---- the engine, one way or another ---- */
enum { WAY_BEST, WAY_PORTABLE, WAY_AVX2, WAY_AVX512F, WAY_AVX512BF16, WAY_SPLIT, NWAYS };
static const char *const way_name[NWAYS] = { "best", "portable", "avx2", "avx512f", "avx512bf16", "split+merge" };

static void run_way(int way, const void *base, int dtype, int64_t n, int64_t stride, tg_exact_acc *out) {
    tg_exact_acc_init(out);
    if (way == WAY_PORTABLE) {
        tg_exact_add_portable(out, base, dtype, n, stride);
#if defined(TGRAD_HAVE_X86_VARIANTS)
    } else if (way == WAY_AVX2 && stride == 1 && tg_exact_avx2_available()) { /* each kernel itself */
        if (dtype == TG_RDT_BF16) tg_exact_add_bf16_avx2(out, base, n, NULL, 0);
        else tg_exact_add_f32_avx2(out, base, n, NULL, 0);
    } else if (way == WAY_AVX512F && stride == 1 && tg_exact_avx512f_available()) {
        if (dtype == TG_RDT_BF16) tg_exact_add_bf16_avx512f(out, base, n, NULL, 0);
        else tg_exact_add_f32_avx512f(out, base, n, NULL, 0);
    } else if (way == WAY_AVX512BF16 && stride == 1 && dtype == TG_RDT_BF16 && tg_exact_avx512bf16_available()) {
        tg_exact_add_bf16_avx512bf16(out, base, n, NULL, 0);
#endif
    } else if (way == WAY_SPLIT) { /* random pieces, accumulated alone and merged last to first */
        tg_exact_acc parts[8];
        int np = 0;
        int64_t at = 0;
        while (at < n || np == 0) {
            int64_t len = np == 7 ? n - at : rnd_in(0, n - at);
            tg_exact_acc_init(&parts[np]);
            tg_exact_acc_add(&parts[np], (const char *)base + at * stride * (dtype == TG_RDT_BF16 ? 2 : 4), dtype,
                             len, stride);
            at += len;
            np++;
        }
        for (int i = np - 1; i >= 0; i--) tg_exact_acc_merge(out, &parts[i]);
    } else {
        tg_exact_acc_add(out, base, dtype, n, stride);
    }
}

/* The way, in the default floating-point environment (even `way`s of the list) or a hostile one
 * (odd: MXCSR with FTZ, DAZ and round toward zero), so that each kernel runs under both. */
static void engine(int way, int hostile, const void *base, int dtype, int64_t n, int64_t stride, tg_exact_acc *out) {
#if defined(__x86_64__)
    unsigned saved = _mm_getcsr();
    if (hostile) _mm_setcsr(0x1f80u | 0x8040u | 0x6000u);
    run_way(way, base, dtype, n, stride, out);
    _mm_setcsr(saved);
#else
    (void)hostile;
    run_way(way, base, dtype, n, stride, out);
#endif
}

static int reported;
/* Every way, every output dtype, sum and mean, against the reference. */
static void check_all(const char *what, const void *base, int dtype, int64_t n, int64_t stride) {
    ref_sum r;
    reference(base, dtype, n, stride, &r);
    for (int way = 0; way < 2 * NWAYS; way++) {
        tg_exact_acc a;
        engine(way / 2, way & 1, base, dtype, n, stride, &a);
        for (int out = TG_RDT_BF16; out <= TG_RDT_F32; out++) {
            uint32_t want_sum = ref_result(&r, -1, out), want_mean = ref_result(&r, n, out);
            uint32_t got_sum = tg_exact_acc_round(&a, out), got_mean = tg_exact_acc_round_div(&a, n, out);
            int ok = got_sum == want_sum && got_mean == want_mean;
            CHECK(ok);
            if (!ok && reported++ < 20)
                fprintf(stderr, "  %s: dtype %d n %lld stride %lld way %s%s out %d: sum %#x (want %#x) mean %#x (want %#x)\n",
                        what, dtype, (long long)n, (long long)stride, way_name[way / 2], way & 1 ? " hostile-env" : "",
                        out, got_sum, want_sum, got_mean, want_mean);
        }
    }
}

/* ---- data ---- */
static uint16_t bf16_of(int sign, int e, uint32_t frac) { return (uint16_t)((sign << 15) | (e << 7) | (frac & 0x7F)); }
static uint32_t f32_of(int sign, int e, uint32_t frac) { return ((uint32_t)sign << 31) | ((uint32_t)e << 23) | (frac & 0x7FFFFF); }

/* Exponents drawn from [top - spread, top], a few zeros, sometimes subnormals */
static void fill(void *buf, int dtype, int64_t n, int top, int spread, int zeros_pct) {
    for (int64_t i = 0; i < n; i++) {
        int e = (int)rnd_in(top - spread, top);
        if (e < 0) e = 0;
        if (e > 254) e = 254;
        int s = (int)(rnd() & 1);
        uint32_t f = (uint32_t)rnd();
        if ((int64_t)(rnd() % 100) < zeros_pct) e = 0, f = 0;
        if (dtype == TG_RDT_BF16) ((uint16_t *)buf)[i] = bf16_of(s, e, f);
        else ((uint32_t *)buf)[i] = f32_of(s, e, f);
    }
}

static void test_random(void *buf, int64_t cap) {
    static const int64_t sizes[] = { 0, 1, 2, 31, 32, 33, 63, 64, 4095, 4096, 4097, 8192, 12289 };
    static const int spreads[] = { 0, 5, 13, 14, 20, 27, 28, 40, 60, 300 };
    static const int tops[] = { 1, 20, 33, 34, 35, 60, 127, 200, 254 };
    int cases = 0;
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
            for (size_t pi = 0; pi < sizeof spreads / sizeof *spreads; pi++)
                for (size_t ti = 0; ti < sizeof tops / sizeof *tops; ti++) {
                    int64_t n = sizes[si];
                    if ((rnd() & 3) && n > 64) continue; /* a quarter of the big ones */
                    fill(buf, dtype, n, tops[ti], spreads[pi], (int)(rnd() % 3) * 10);
                    check_all("random", buf, dtype, n, 1);
                    cases++;
                }
    /* strides: 2, -1, 0, 3 over the same buffer */
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++)
        for (int k = 0; k < 20; k++) {
            int64_t n = rnd_in(1, 6000);
            fill(buf, dtype, 3 * n, (int)rnd_in(30, 200), (int)rnd_in(0, 40), 10);
            size_t es = dtype == TG_RDT_BF16 ? 2 : 4;
            check_all("stride 2", buf, dtype, n, 2);
            check_all("stride 3", buf, dtype, n, 3);
            check_all("stride -1", (char *)buf + (size_t)(n - 1) * es, dtype, n, -1);
            check_all("stride 0", buf, dtype, n, 0);
            cases += 4;
        }
    (void)cap;
    printf("random: %d cases\n", cases);
}

/* One block whose values sit exactly at the SIMD kernels' window edges: the largest exponent E,
 * then values at E - d for d around 13, 27 (AVX512-BF16), 27 (AVX-512F float32) and 43
 * (AVX-512F bf16), each alone and mixed, for E around the kernels' lower limits and the top. */
static void test_window_edges(void *buf) {
    static const int Es[] = { 1, 2, 27, 28, 29, 33, 34, 35, 44, 45, 47, 48, 61, 62, 100, 254 };
    static const int offs[] = { 0, 1, 12, 13, 14, 15, 26, 27, 28, 29, 40, 42, 43, 44, 45 };
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++)
        for (size_t ei = 0; ei < sizeof Es / sizeof *Es; ei++)
            for (size_t oi = 0; oi < sizeof offs / sizeof *offs; oi++)
                for (int n = 33; n <= 4096 + 33; n += 2048) {
                    int E = Es[ei];
                    for (int i = 0; i < n; i++) {
                        int e = i == n / 2 ? E : (rnd() & 1) ? E - offs[oi] : (int)rnd_in(E - offs[oi], E);
                        if (dtype == TG_RDT_BF16) ((uint16_t *)buf)[i] = bf16_of((int)(rnd() & 1), e < 0 ? 0 : e, (uint32_t)rnd());
                        else ((uint32_t *)buf)[i] = f32_of((int)(rnd() & 1), e < 0 ? 0 : e, (uint32_t)rnd());
                    }
                    check_all("window edges", buf, dtype, n, 1);
                }
}

static void test_adversarial(void *buf) {
    uint16_t *h = buf;
    uint32_t *w = buf;
    /* 1e30 + 1 - 1e30 and friends */
    uint16_t big = 0x7149 /* ~1e30 */, one = 0x3F80, mbig = 0xF149;
    uint16_t c1[] = { big, one, mbig };
    check_all("1e30+1-1e30 bf16", c1, TG_RDT_BF16, 3, 1);
    uint32_t c2[] = { 0x7149F2CA, 0x3F800000, 0xF149F2CA, 0x00000001 };
    check_all("1e30+1-1e30+tiny f32", c2, TG_RDT_F32, 4, 1);
    /* cancellation in a long block: x_i and -x_i scattered, plus one tiny value */
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++) {
        int64_t n = 9001;
        fill(buf, dtype, n, 200, 60, 0);
        for (int64_t i = 0; i + 1 < n; i += 2) {
            if (dtype == TG_RDT_BF16) h[i + 1] = h[i] ^ 0x8000;
            else w[i + 1] = w[i] ^ 0x80000000u;
        }
        if (dtype == TG_RDT_BF16) h[n - 1] = 0x0001;
        else w[n - 1] = 0x00000001;
        check_all("cancellation", buf, dtype, n, 1);
    }
    /* subnormals only; subnormals summing into normals */
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++) {
        fill(buf, dtype, 5000, 0, 0, 0);
        check_all("subnormals", buf, dtype, 5000, 1);
        for (int i = 0; i < 5000; i++) {
            if (dtype == TG_RDT_BF16) h[i] = 0x007F;
            else w[i] = 0x007FFFFF;
        }
        check_all("subnormals to normal", buf, dtype, 5000, 1);
    }
    /* overflow: many largest values; just below overflow; the rounding edge at 2^128 */
    for (int64_t i = 0; i < 5000; i++) h[i] = 0x7F7F;
    check_all("bf16 max x5000", h, TG_RDT_BF16, 5000, 1);
    for (int64_t i = 0; i < 5000; i++) h[i] = (i & 1) ? 0x7F7F : 0xFF7F;
    check_all("bf16 +max -max", h, TG_RDT_BF16, 5000, 1);
    uint16_t edge[] = { 0x7F7F, 0x7B80 }; /* 255 2^120 + 2^120: 2^128 exactly */
    check_all("bf16 to 2^128", edge, TG_RDT_BF16, 2, 1);
    uint32_t fedge[] = { 0x7F7FFFFF, 0x73000000 }; /* f32 max + half an ulp: a tie, rounds to inf */
    check_all("f32 max + half ulp", fedge, TG_RDT_F32, 2, 1);
    uint32_t fedge2[] = { 0x7F7FFFFF, 0x72FFFFFF }; /* just below the tie: stays max */
    check_all("f32 max + below half ulp", fedge2, TG_RDT_F32, 2, 1);
    /* specials */
    uint16_t s1[] = { 0x3F80, 0x7F80, 0x4000 }, s2[] = { 0x7F80, 0xFF80 }, s3[] = { 0x7FC1, 0x3F80 },
             s4[] = { 0xFF80, 0xFF80, 0x7F7F }, s5[] = { 0xFFFF };
    check_all("+inf", s1, TG_RDT_BF16, 3, 1);
    check_all("+inf -inf", s2, TG_RDT_BF16, 2, 1);
    check_all("nan payload", s3, TG_RDT_BF16, 2, 1);
    check_all("-inf", s4, TG_RDT_BF16, 3, 1);
    check_all("negative nan", s5, TG_RDT_BF16, 1, 1);
    for (int64_t i = 0; i < 6000; i++) h[i] = (uint16_t)(0x3C00 + (i % 200));
    h[4500] = 0x7FA0;
    check_all("nan in a long row", h, TG_RDT_BF16, 6000, 1);
    /* signed zeros */
    uint16_t z1[] = { 0x8000 }, z2[] = { 0x8000, 0x8000 }, z3[] = { 0x8000, 0x0000 }, z4[] = { 0x3F80, 0xBF80 },
             z5[] = { 0x8000, 0x3F80, 0xBF80 };
    check_all("-0", z1, TG_RDT_BF16, 1, 1);
    check_all("-0 -0", z2, TG_RDT_BF16, 2, 1);
    check_all("-0 +0", z3, TG_RDT_BF16, 2, 1);
    check_all("1 - 1", z4, TG_RDT_BF16, 2, 1);
    check_all("-0 + 1 - 1", z5, TG_RDT_BF16, 3, 1);
    check_all("empty", z1, TG_RDT_BF16, 0, 1);
    for (int64_t i = 0; i < 5000; i++) h[i] = 0x8000;
    check_all("-0 x5000", h, TG_RDT_BF16, 5000, 1);
    h[4999] = 0;
    check_all("-0 x4999, +0", h, TG_RDT_BF16, 5000, 1);
    for (int64_t i = 0; i < 5000; i++) w[i] = 0x80000000u;
    check_all("f32 -0 x5000", w, TG_RDT_F32, 5000, 1);
    /* all equal; ties: 1 + 2^-8 + 2^-9... sums on a bf16 midpoint */
    for (int64_t i = 0; i < 7777; i++) h[i] = 0x3DCD;
    check_all("all equal", h, TG_RDT_BF16, 7777, 1);
    uint16_t t1[] = { 0x3F80, 0x3B80 }, t2[] = { 0x3F81, 0x3B80 }, t3[] = { 0x3F80, 0x3B80, 0x0001 },
             t4[] = { 0x3F80, 0x3B80, 0x8001 };
    check_all("tie to even down", t1, TG_RDT_BF16, 2, 1);
    check_all("tie to even up", t2, TG_RDT_BF16, 2, 1);
    check_all("tie broken up by a subnormal", t3, TG_RDT_BF16, 3, 1);
    check_all("tie broken down by a subnormal", t4, TG_RDT_BF16, 3, 1);
    /* huge spreads: each value a random exponent over the whole range */
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++)
        for (int k = 0; k < 10; k++) {
            fill(buf, dtype, 5000, 254, 254, 5);
            check_all("huge spread", buf, dtype, 5000, 1);
        }
}

/* 2^40 and 2^100 copies of the largest bf16 and float32 values, built by doubling merges, then
 * cancelled: the accumulator does not wrap (the sum stays +inf-bound and then exactly zero). */
static void test_range(void) {
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++)
        for (int doublings = 40; doublings <= 100; doublings += 60) {
            uint32_t maxv = dtype == TG_RDT_BF16 ? 0x7F7F : 0x7F7FFFFF, minv = dtype == TG_RDT_BF16 ? 0xFF7F : 0xFF7FFFFF;
            tg_exact_acc p, m;
            tg_exact_acc_init(&p);
            tg_exact_acc_init(&m);
            tg_exact_acc_add(&p, &maxv, dtype, 1, 1);
            tg_exact_acc_add(&m, &minv, dtype, 1, 1);
            for (int i = 0; i < doublings; i++) {
                tg_exact_acc c = p;
                tg_exact_acc_merge(&p, &c);
                c = m;
                tg_exact_acc_merge(&m, &c);
            }
            CHECK(tg_exact_acc_round(&p, TG_RDT_F32) == 0x7F800000u);
            CHECK(tg_exact_acc_round(&m, TG_RDT_F32) == 0xFF800000u);
            /* the mean of 2^40 copies is the value itself */
            if (doublings == 40) {
                CHECK(tg_exact_acc_round_div(&p, INT64_C(1) << 40, dtype) == maxv);
                CHECK(tg_exact_acc_round_div(&m, INT64_C(1) << 40, dtype) == minv);
            }
            uint16_t one = 0x3F80;
            tg_exact_acc_add(&p, &one, TG_RDT_BF16, 1, 1);
            tg_exact_acc_merge(&p, &m);
            CHECK(tg_exact_acc_round(&p, TG_RDT_BF16) == 0x3F80u);
        }
}

/* tg_exact_rows: each row's sum and mean as the one-array calls give them (which the tests above
 * check), for contiguous, strided and reversed rows of both dtypes; rows that mix the kernel's
 * fast blocks with the portable fallback (a NaN, a tiny value, a wide spread). */
static void test_rows(void *buf) {
    static uint32_t out[64];
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++)
        for (int k = 0; k < 12; k++) {
            int64_t rows = rnd_in(1, 20), n = k < 3 ? k : rnd_in(1, 500), stride = (k % 3 == 1) ? 2 : 1;
            int64_t row_stride = k % 4 == 3 ? -(n * stride) : n * stride + rnd_in(0, 5);
            size_t es = dtype == TG_RDT_BF16 ? 2 : 4;
            int64_t span = rows * (row_stride < 0 ? -row_stride : row_stride) + n * stride; /* <= 21,100 */
            fill(buf, dtype, span, (int)rnd_in(40, 200), (int)rnd_in(0, 35), 5);
            if (k % 5 == 0 && span > 3) {
                if (dtype == TG_RDT_BF16) ((uint16_t *)buf)[span / 2] = 0x7FC0;
                else ((uint32_t *)buf)[span / 2] = 0x00000003;
            }
            const char *base = (const char *)buf + (row_stride < 0 ? (size_t)(rows - 1) * (size_t)-row_stride * es : 0);
            for (int mean = 0; mean < 2; mean++)
                for (int o = TG_RDT_BF16; o <= TG_RDT_F32; o++) {
                    tg_exact_rows(base, dtype, rows, row_stride, n, stride, mean, o, out);
                    for (int64_t r = 0; r < rows; r++) {
                        tg_exact_acc a;
                        tg_exact_acc_init(&a);
                        tg_exact_add_portable(&a, base + r * row_stride * (int64_t)es, dtype, n, stride);
                        CHECK(out[r] == (mean ? tg_exact_acc_round_div(&a, n, o) : tg_exact_acc_round(&a, o)));
                    }
                }
        }
}

/* tg_exact_cols: each column's sum and mean as tg_exact_add_portable gives it over the column's
 * stride, for chunks of 64 columns and blocks of 4096 rows (sizes around both), column strides 1,
 * 2 and -1, and columns holding a NaN, an inf, only -0.0, only zeros, a tiny value, a wide spread. */
static void test_cols(void *buf) {
    static uint32_t out[1200];
    static const int64_t shapes[][2] = { { 1, 1 }, { 3, 70 }, { 4097, 3 }, { 100, 130 }, { 9, 64 }, { 0, 3 }, { 5000, 2 }, { 3, 1100 }, { 300, 40 } };
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
            for (int cs = -1; cs <= 2; cs++) {
                if (cs == 0) continue;
                int64_t rows = shapes[si][0], cols = shapes[si][1], acs = cs < 0 ? 1 : cs;
                int64_t rs = cols * acs + 1; /* a padded row; rows * rs <= 28,679 fits the buffer */
                size_t es = dtype == TG_RDT_BF16 ? 2 : 4;
                fill(buf, dtype, rows * rs + 1, (int)rnd_in(40, 200), (int)rnd_in(0, 50), 10);
                for (int64_t c = 0; c < cols && rows > 0; c += 7) { /* special columns */
                    int kind = (int)(c / 7 % 5);
                    for (int64_t r = 0; r < rows; r++) {
                        int64_t at = r * rs + c * acs;
                        uint32_t v = kind == 0 ? (r == rows / 2 ? 0x7FC00000u : 0x3F800000u)
                                   : kind == 1 ? (r == 0 ? 0xFF800000u : 0x40000000u)
                                   : kind == 2 ? 0x80000000u
                                   : kind == 3 ? (r & 1) * 0x80000000u
                                               : (r == 1 ? 0x00000005u : 0x7E000000u);
                        if (dtype == TG_RDT_BF16) ((uint16_t *)buf)[at] = (uint16_t)(v >> 16 | (kind == 4 && r == 1));
                        else ((uint32_t *)buf)[at] = v;
                    }
                }
                const char *base = (const char *)buf + (cs < 0 ? (size_t)(cols - 1) * es : 0);
                for (int mean = 0; mean < 2; mean++)
                    for (int o = TG_RDT_BF16; o <= TG_RDT_F32; o++) {
                        /* the portable loops (forced) and the CPU's kernel, alternately */
                        EXPECT(tgrad_set_cpu_isa((mean + o) & 1 ? "portable" : "auto"), TGRAD_OK);
                        tg_exact_cols(base, dtype, rows, rs, cols, cs < 0 ? -1 : acs, mean, o, out);
                        EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
                        for (int64_t c = 0; c < cols; c++) {
                            tg_exact_acc a;
                            tg_exact_acc_init(&a);
                            tg_exact_add_portable(&a, base + (cs < 0 ? -c : c * acs) * (int64_t)es, dtype, rows, rs);
                            CHECK(out[c] == (mean ? tg_exact_acc_round_div(&a, rows, o) : tg_exact_acc_round(&a, o)));
                        }
                    }
            }
}

/* ---- extrema ---- */
static int64_t ref_extremum(const void *base, int dtype, int64_t n, int64_t stride, int want_max) {
    uint32_t sign = dtype == TG_RDT_BF16 ? 0x8000u : 0x80000000u, inf = dtype == TG_RDT_BF16 ? 0x7F80u : 0x7F800000u;
    int64_t best = -1;
    double bv = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = get(base, dtype, i * stride);
        if ((b & ~sign) > inf) return i;
        uint32_t f = dtype == TG_RDT_BF16 ? b << 16 : b;
        float v;
        memcpy(&v, &f, 4);
        if (best < 0 || (want_max ? v > bv : v < bv)) best = i, bv = v;
    }
    return best;
}

static void test_extrema(void *buf) {
    int cases = 0;
    for (int dtype = TG_RDT_BF16; dtype <= TG_RDT_F32; dtype++)
        for (int k = 0; k < 300; k++) {
            int64_t n = k < 20 ? k + 1 : rnd_in(1, 10000);
            int spread = (int)rnd_in(0, 8);
            fill(buf, dtype, n, (int)rnd_in(100, 140), spread, (int)rnd_in(0, 50)); /* many ties, zeros */
            if (k % 7 == 0) { /* a NaN or two, an inf */
                int64_t at = rnd_in(0, n - 1);
                if (dtype == TG_RDT_BF16) ((uint16_t *)buf)[at] = 0x7FC1;
                else ((uint32_t *)buf)[at] = 0xFFC00001u;
            }
            if (k % 5 == 0) {
                int64_t at = rnd_in(0, n - 1);
                if (dtype == TG_RDT_BF16) ((uint16_t *)buf)[at] = (rnd() & 1) ? 0x7F80 : 0xFF80;
                else ((uint32_t *)buf)[at] = (rnd() & 1) ? 0x7F800000u : 0xFF800000u;
            }
            for (int want_max = 0; want_max < 2; want_max++)
                for (int64_t stride = -1; stride <= 2; stride++) {
                    if (stride == 0 && n > 1) continue;
                    int64_t m = stride == 2 ? n / 2 : n;
                    if (m == 0) continue;
                    const char *b = (const char *)buf + (stride < 0 ? (m - 1) * (dtype == TG_RDT_BF16 ? 2 : 4) : 0);
                    uint32_t vb = 0xDEADBEEF;
                    int64_t idx = -7;
                    CHECK(tg_extrema(b, dtype, m, stride == 0 ? 1 : stride, want_max, &vb, &idx) == 0);
                    int64_t want = ref_extremum(b, dtype, m, stride == 0 ? 1 : stride, want_max);
                    CHECK(idx == want && vb == get(b, dtype, want * (stride == 0 ? 1 : stride)));
                    cases++;
                }
        }
    /* the stated rules, literally */
    uint16_t z[] = { 0x8000, 0x0000 }, z2[] = { 0x0000, 0x8000 }, tie[] = { 0x3F80, 0x4000, 0x4000 };
    uint32_t vb;
    int64_t idx;
    CHECK(tg_extrema(z, TG_RDT_BF16, 2, 1, 1, &vb, &idx) == 0 && idx == 0 && vb == 0x8000);
    CHECK(tg_extrema(z2, TG_RDT_BF16, 2, 1, 1, &vb, &idx) == 0 && idx == 0 && vb == 0x0000);
    CHECK(tg_extrema(z, TG_RDT_BF16, 2, 1, 0, &vb, &idx) == 0 && idx == 0 && vb == 0x8000);
    CHECK(tg_extrema(tie, TG_RDT_BF16, 3, 1, 1, &vb, &idx) == 0 && idx == 1 && vb == 0x4000);
    uint16_t nn[] = { 0x3F80, 0x7FC0, 0x7F80, 0xFFC0 };
    CHECK(tg_extrema(nn, TG_RDT_BF16, 4, 1, 0, &vb, &idx) == 0 && idx == 1 && vb == 0x7FC0);
    idx = 42;
    CHECK(tg_extrema(nn, TG_RDT_BF16, 0, 1, 1, &vb, &idx) == -1 && idx == 42);
    CHECK(tg_extrema(NULL, TG_RDT_BF16, 3, 1, 1, &vb, &idx) == -1);
    CHECK(tg_extrema(nn, 7, 3, 1, 1, &vb, &idx) == -1);
    printf("extrema: %d cases\n", cases);
}

/* ---- the debug entry points' argument checks ---- */
static void test_debug_abi(void) {
    uint16_t x[] = { 0x3F80, 0x4000 };
    uint32_t out = 0x12345678;
    int64_t idx = 99;
    EXPECT(tgrad_debug_exact_sum(x, 1, 2, 1, 0, 1, &out), TGRAD_OK);
    CHECK(out == 0x4040);
    EXPECT(tgrad_debug_exact_sum(x, 1, 2, 1, 1, 2, &out), TGRAD_OK);
    CHECK(out == 0x3FC00000u);
    out = 7;
    EXPECT(tgrad_debug_exact_sum(x, 0, 2, 1, 0, 1, &out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_exact_sum(x, 1, -1, 1, 0, 1, &out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_exact_sum(NULL, 1, 2, 1, 0, 1, &out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_exact_sum(x, 1, 2, 1, 0, 3, &out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_exact_sum(x, 1, 2, 1, 2, 1, &out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_exact_sum(x, 1, 2, 1, 0, 1, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(out == 7);
    EXPECT(tgrad_debug_exact_sum(NULL, 1, 0, 1, 1, 1, &out), TGRAD_OK);
    CHECK(out == 0x7FC0);
    EXPECT(tgrad_debug_extrema(x, 1, 2, 1, 1, &out, &idx), TGRAD_OK);
    CHECK(out == 0x4000 && idx == 1);
    out = 7;
    EXPECT(tgrad_debug_extrema(x, 1, 0, 1, 1, &out, &idx), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_extrema(x, 2, -2, 1, 1, &out, &idx), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_extrema(x, 3, 2, 1, 1, &out, &idx), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_extrema(x, 1, 2, 1, 2, &out, &idx), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_extrema(x, 1, 2, 1, 1, NULL, &idx), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_extrema(x, 1, 2, 1, 1, &out, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_extrema(NULL, 1, 2, 1, 1, &out, &idx), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(out == 7 && idx == 1);
}

int main(void) {
    int64_t cap = 3 * 12289 + 64;
    void *buf = malloc((size_t)cap * 4);
    if (!buf) return 2;
#if defined(TGRAD_HAVE_X86_VARIANTS)
    printf("AVX512-BF16 kernel: %s; AVX-512F kernels: %s; AVX2 kernels: %s\n",
           tg_exact_avx512bf16_available() ? "checked" : "not on this CPU",
           tg_exact_avx512f_available() ? "checked" : "not on this CPU", tg_exact_avx2_available() ? "checked" : "not on this CPU");
#endif
    test_random(buf, cap);
    test_window_edges(buf);
    test_adversarial(buf);
    test_range();
    test_rows(buf);
    test_cols(buf);
    test_extrema(buf);
    test_debug_abi();
    free(buf);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
