// The float32 elementwise ops on float32 bits, as every GPU kernel libtgrad renders computes them.
// A device prelude: the renderer (libtgrad/src/gen/ew.c) copies this text, verbatim, into each
// float32 elementwise kernel (MSL, OpenCL C and CUDA alike), and tests/c/test_gpu_elementwise_f32.c
// compiles the same text as C and compares it with the CPU's ops (src/ops/elementwise_f32.c).
//
// Integers only, as kernels/gpu/elementwise.h is for bf16: no floating-point instruction, so the
// bytes cannot depend on a device's fp32 subnormal handling (flush to zero), its division or
// square root accuracy, FMA contraction or fast math, and the text needs no double (MSL has
// none). Each result is the correctly rounded (nearest even) float32 of the exact result, with
// gradual underflow, overflow to inf and every NaN made 0x7fc00000: the contract of
// docs/numerics.md, "float32 elementwise ops". The transcendental ops are not here: the GPU
// routes refuse them in float32 (tgrad_unary's typed error).
//
// The common subset of C99, OpenCL C 1.2, MSL 2.3 and CUDA: the types uint, int and tg_u64 (a
// 64-bit unsigned integer the renderer typedefs before this text), clz (of a non-zero uint), no
// pointers; no identifier that is a type or builtin in one of them (half, sign, any, nan).

// Is u a NaN? (exponent all ones, fraction non-zero)
static inline bool tg_f32_is_nan(uint u) {
    return (u & 0x7fffffffu) > 0x7f800000u;
}

// A finite float's value as sig * 2^(exp - 150): sig is the integer significand (implicit bit
// included; subnormals have exponent 1), exp its biased exponent.
static inline uint tg_f32_sig(uint u) {
    uint e = (u >> 23) & 0xffu;
    return e == 0u ? (u & 0x7fffffu) : ((u & 0x7fffffu) | 0x800000u);
}

static inline int tg_f32_exp(uint u) {
    int e = (int)((u >> 23) & 0xffu);
    return e == 0 ? 1 : e;
}

// The number of significant bits of m (0 for 0).
static inline int tg_f32_len64(tg_u64 m) {
    uint hi = (uint)(m >> 32), lo = (uint)m;
    if (hi != 0u)
        return 64 - (int)clz(hi);
    return lo != 0u ? 32 - (int)clz(lo) : 0;
}

// The float nearest (ties to even) to (-1)^sign * m * 2^(x - 150), for 0 < m < 2^63 whose lowest
// bit may be a sticky bit standing for a non-zero remainder below it (the callers keep at least
// two bits below the rounding position). Overflow gives inf.
static inline uint tg_f32_round(uint sign, int x, tg_u64 m) {
    int shift = tg_f32_len64(m) - 24;        // keep 24 bits (a normal significand) ...
    if (x + shift < 1)                       // ... unless the result is subnormal: exponent 1
        shift = 1 - x;
    tg_u64 q;
    if (shift <= 0) {                        // exact: no bits dropped
        q = m << (uint)(-shift);
    } else if (shift > 63) {                 // below half the smallest subnormal: zero
        q = (tg_u64)0u;
    } else {
        q = m >> (uint)shift;
        tg_u64 rest = m & (((tg_u64)1u << (uint)shift) - (tg_u64)1u);
        tg_u64 tie = (tg_u64)1u << (uint)(shift - 1);
        if (rest > tie || (rest == tie && (q & (tg_u64)1u) != (tg_u64)0u))
            q = q + (tg_u64)1u;              // may carry into the next exponent: still right
    }
    int e = x + shift - 1;                   // the field below the implicit bit's
    if (q == (tg_u64)0u)
        return sign << 31;
    if (e >= 0xfe)                           // beyond the largest finite exponent: inf
        return (sign << 31) | 0x7f800000u;
    uint bits = ((uint)e << 23) + (uint)q;   // q's implicit bit adds one to the exponent field
    if (bits >= 0x7f800000u)
        bits = 0x7f800000u;
    return (sign << 31) | bits;
}

static inline uint tg_f32_add(uint a, uint b) {
    if (tg_f32_is_nan(a) || tg_f32_is_nan(b))
        return 0x7fc00000u;
    uint sa = a >> 31, sb = b >> 31;
    uint ma = a & 0x7fffffffu, mb = b & 0x7fffffffu;
    if (ma == 0x7f800000u || mb == 0x7f800000u) {   // an infinity: inf - inf is NaN
        if (ma == 0x7f800000u && mb == 0x7f800000u && sa != sb)
            return 0x7fc00000u;
        return ma == 0x7f800000u ? a : b;
    }
    if (ma == 0u && mb == 0u)                // -0 + -0 is -0; any other sum of zeros is +0
        return (sa & sb) << 31;
    if (ma == 0u)
        return b;
    if (mb == 0u)
        return a;
    uint hi = ma >= mb ? a : b, lo = ma >= mb ? b : a;   // |hi| >= |lo|
    int xh = tg_f32_exp(hi), d = xh - tg_f32_exp(lo);
    tg_u64 aligned_hi = (tg_u64)tg_f32_sig(hi) << 32;   // exact, with 32 bits to spare below
    // The smaller operand, aligned. More than 32 binades below the larger (which is then normal,
    // its significand at least 2^55 in these units) it is under 2^24 units, while the nearest
    // rounding boundary to the larger is at least 2^30 units away: it cannot change the result.
    tg_u64 aligned_lo = d <= 32 ? (tg_u64)tg_f32_sig(lo) << (uint)(32 - d) : (tg_u64)0u;
    uint sh = hi >> 31, sl = lo >> 31;
    tg_u64 m = sh == sl ? aligned_hi + aligned_lo : aligned_hi - aligned_lo;
    if (m == (tg_u64)0u)                     // x + (-x) is +0 when rounding to nearest
        return 0u;
    return tg_f32_round(sh, xh - 32, m);
}

static inline uint tg_f32_sub(uint a, uint b) {
    return tg_f32_add(a, b ^ 0x80000000u);
}

static inline uint tg_f32_mul(uint a, uint b) {
    if (tg_f32_is_nan(a) || tg_f32_is_nan(b))
        return 0x7fc00000u;
    uint s = (a ^ b) >> 31;
    uint ma = a & 0x7fffffffu, mb = b & 0x7fffffffu;
    if (ma == 0x7f800000u || mb == 0x7f800000u)   // inf * 0 is NaN
        return ma == 0u || mb == 0u ? 0x7fc00000u : ((s << 31) | 0x7f800000u);
    if (ma == 0u || mb == 0u)
        return s << 31;
    // sig_a * sig_b * 2^(xa + xb - 300): exact (48 bits at most)
    return tg_f32_round(s, tg_f32_exp(a) + tg_f32_exp(b) - 150, (tg_u64)tg_f32_sig(a) * (tg_u64)tg_f32_sig(b));
}

static inline uint tg_f32_div(uint a, uint b) {
    if (tg_f32_is_nan(a) || tg_f32_is_nan(b))
        return 0x7fc00000u;
    uint s = (a ^ b) >> 31;
    uint ma = a & 0x7fffffffu, mb = b & 0x7fffffffu;
    if ((ma == 0x7f800000u && mb == 0x7f800000u) || (ma == 0u && mb == 0u))
        return 0x7fc00000u;
    if (ma == 0x7f800000u || mb == 0u)
        return (s << 31) | 0x7f800000u;
    if (ma == 0u || mb == 0x7f800000u)
        return s << 31;
    uint na = tg_f32_sig(a), nb = tg_f32_sig(b);
    int xa = tg_f32_exp(a), xb = tg_f32_exp(b);
    while (na < 0x800000u) {                 // normalize subnormals: significands in [2^23, 2^24)
        na = na << 1;
        xa = xa - 1;
    }
    while (nb < 0x800000u) {
        nb = nb << 1;
        xb = xb - 1;
    }
    // na / nb in (1/2, 2): 40 fraction bits give a quotient of 40 or 41 bits; the remainder's
    // sticky bit goes below it, where no rounding boundary can lie (16 or more bits dropped).
    tg_u64 num = (tg_u64)na << 40;
    tg_u64 q = num / (tg_u64)nb;
    tg_u64 sticky = num - q * (tg_u64)nb != (tg_u64)0u ? (tg_u64)1u : (tg_u64)0u;
    return tg_f32_round(s, xa - xb + 150 - 41, (q << 1) | sticky);
}

// floor(sqrt(v)) for v < 2^56, digit by digit, and whether it is exact (v a perfect square).
typedef struct tg_f32_root {
    tg_u64 root;
    uint exact;
} tg_f32_root;

static inline tg_f32_root tg_f32_isqrt(tg_u64 v) {
    tg_u64 rem = v, root = (tg_u64)0u, bit = (tg_u64)1u << 54;   // the highest power of four it may need
    while (bit > rem)
        bit = bit >> 2;
    while (bit != (tg_u64)0u) {
        if (rem >= root + bit) {
            rem = rem - (root + bit);
            root = (root >> 1) + bit;
        } else {
            root = root >> 1;
        }
        bit = bit >> 2;
    }
    tg_f32_root r;
    r.root = root;
    r.exact = rem == (tg_u64)0u ? 1u : 0u;
    return r;
}

// sqrt: -0 is -0, any other negative NaN; the integer square root of the significand scaled to
// 53 or 54 bits gives 26 or 27 bits and a sticky remainder (a square root is never a midpoint).
static inline uint tg_f32_sqrt(uint u) {
    if (tg_f32_is_nan(u) || (u > 0x80000000u))
        return 0x7fc00000u;
    if ((u & 0x7fffffffu) == 0u || u == 0x7f800000u)
        return u;
    uint n = tg_f32_sig(u);
    int x = tg_f32_exp(u) - 150;             // u = n * 2^x
    while (n < 0x800000u) {
        n = n << 1;
        x = x - 1;
    }
    tg_u64 rem = (tg_u64)n << 28;            // n * 2^28 * 2^(x - 28), x - 28 made even below
    if ((x & 1) != 0) {
        rem = rem << 1;
        x = x - 1;
    }
    tg_f32_root q = tg_f32_isqrt(rem);       // floor(sqrt(n * 2^28 [* 2]))
    // sqrt(u) = sqrt(scaled) * 2^((x - 28) / 2), x - 28 even; root's lowest bits then a sticky bit
    tg_u64 m = (q.root << 1) | (q.exact != 0u ? (tg_u64)0u : (tg_u64)1u);
    return tg_f32_round(0u, (x - 28) / 2 + 150 - 1, m);
}

// rsqrt (1/sqrt(u)): -0 is -inf, +0 +inf, +inf +0, a negative or NaN NaN. For u = n 2^e (n
// normalized, e made even by doubling n), 1/sqrt(u) = sqrt(2^78 / n) 2^(-39 - e/2): the integer
// quotient Q = floor(2^78 / n) by two 64-bit divisions, then its integer square root (27 or 28
// bits) with a sticky bit for either remainder (floor(sqrt(floor(y))) = floor(sqrt(y))). The
// result is never a midpoint (that needs the square of an odd 25-bit significand to be a power of
// two), so the sticky bit decides every rounding.
static inline uint tg_f32_rsqrt(uint u) {
    if (tg_f32_is_nan(u) || u > 0x80000000u)
        return 0x7fc00000u;
    if ((u & 0x7fffffffu) == 0u)
        return (u & 0x80000000u) | 0x7f800000u;
    if (u == 0x7f800000u)
        return 0u;
    uint n = tg_f32_sig(u);
    int e = tg_f32_exp(u) - 150;             // u = n * 2^e
    while (n < 0x800000u) {
        n = n << 1;
        e = e - 1;
    }
    tg_u64 nn = (tg_u64)n;
    if ((e & 1) != 0) {
        nn = nn << 1;
        e = e - 1;
    }
    const tg_u64 top = (tg_u64)1u << 46;     // 2^78 = 2^46 * 2^32, divided in two steps
    tg_u64 q1 = top / nn, r1 = top - q1 * nn;
    tg_u64 t = r1 << 32, q2 = t / nn, r2 = t - q2 * nn;
    tg_f32_root q = tg_f32_isqrt((q1 << 32) + q2);   // floor(sqrt(Q))
    tg_u64 m = (q.root << 1) | (q.exact != 0u && r2 == (tg_u64)0u ? (tg_u64)0u : (tg_u64)1u);
    return tg_f32_round(0u, 110 - e / 2, m);
}

// The bits in an order where -0 < +0 and negatives sort by magnitude reversed (NaN aside).
static inline int tg_f32_key(uint u) {
    return (u >> 31) != 0u ? -(int)(u & 0x7fffffffu) - 1 : (int)u;
}

static inline uint tg_f32_maximum(uint a, uint b) {
    if (tg_f32_is_nan(a) || tg_f32_is_nan(b))
        return 0x7fc00000u;
    return tg_f32_key(a) >= tg_f32_key(b) ? a : b;
}

static inline uint tg_f32_minimum(uint a, uint b) {
    if (tg_f32_is_nan(a) || tg_f32_is_nan(b))
        return 0x7fc00000u;
    return tg_f32_key(a) <= tg_f32_key(b) ? a : b;
}

// relu keeps -0 (not below 0); a negative number becomes +0.
static inline uint tg_f32_relu(uint u) {
    if (tg_f32_is_nan(u))
        return 0x7fc00000u;
    return u > 0x80000000u ? 0u : u;
}

// relu's derivative: g where x > 0 (+inf and subnormals included), else +0; a NaN in either NaN.
static inline uint tg_f32_relu_backward(uint x, uint g) {
    if (tg_f32_is_nan(x) || tg_f32_is_nan(g))
        return 0x7fc00000u;
    return (x & 0x80000000u) == 0u && x != 0u ? g : 0u;
}

static inline uint tg_f32_neg(uint u) {
    return tg_f32_is_nan(u) ? 0x7fc00000u : u ^ 0x80000000u;
}

static inline uint tg_f32_abs(uint u) {
    return tg_f32_is_nan(u) ? 0x7fc00000u : u & 0x7fffffffu;
}

static inline uint tg_f32_square(uint u) {
    return tg_f32_mul(u, u);
}
