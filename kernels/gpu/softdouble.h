// IEEE 754 binary64 on its bits, in integers: the double of the GPU kernels that compute in double
// (softmax, norms, rope) in a language that has none. A device prelude: the renderer
// (libtgrad/src/gen/emit.c) copies this text, verbatim, into each double kind's kernel in MSL,
// where the kernels' function-call form (tg_dadd, tg_dlt, ...) lands here; in OpenCL C and CUDA the
// same calls are native doubles (libtgrad/src/gen/lang.c). tests/c/test_gpu_softdouble.c compiles
// this text as C and compares every operation with the host's hardware double, bit for bit.
//
// Each result is the correctly rounded (nearest, ties to even) binary64 of the exact result: the
// bits a correct hardware double gives, with signed zeros (x + -x = +0, -0 + -0 = -0), gradual
// underflow (subnormal inputs and results, no flush), overflow to inf and IEEE's invalid
// operations. Every NaN an operation makes is 0x7ff8000000000000 (quiet, positive), whatever NaN
// came in; tg_dneg and tg_dabs change only the sign bit (of a NaN too), tg_dmin returns one of its
// operands, and the float32 conversions keep a NaN's sign and payload, quieted, as hardware does.
//
// One rounding routine (tg_sd_round_bits) serves every operation: each computes its exact result,
// or the exact result with the bits far below the rounding position folded into a sticky bit, as
// an integer of up to 128 bits times a power of two, and rounds it once.
//
// The common subset of C99, MSL 2.3 (C++14), OpenCL C and CUDA: the types uint, int, bool, tg_u64
// and tg_i64 (64-bit integers the renderer typedefs before this text), clz of a non-zero uint,
// 64-bit multiplies (low half only) and divides, structs by value, no pointers, no floating-point
// type or literal, no identifier that is a type or builtin in one of them (half, sign, min, abs).

typedef struct tg_f64 {
    tg_u64 b;                                // the binary64 bits
} tg_f64;

// The double whose bits are these, and back: the value travels as its bits, no conversion.
static inline tg_f64 tg_d_of(tg_u64 bits) {
    tg_f64 d;
    d.b = bits;
    return d;
}

static inline tg_u64 tg_d_bits(tg_f64 d) {
    return d.b;
}

// The bits of +inf, of the magnitude (all but the sign) and of the fraction field.
static inline tg_u64 tg_sd_inf(void) {
    return (tg_u64)0x7ff00000u << 32;
}

static inline tg_u64 tg_sd_abs_mask(void) {
    return ((tg_u64)0x7fffffffu << 32) | (tg_u64)0xffffffffu;
}

static inline tg_u64 tg_sd_frac_mask(void) {
    return ((tg_u64)1u << 52) - (tg_u64)1u;
}

// The NaN every operation returns.
static inline tg_f64 tg_sd_nan(void) {
    return tg_d_of((tg_u64)0x7ff80000u << 32);
}

static inline bool tg_sd_is_nan(tg_u64 u) {
    return (u & tg_sd_abs_mask()) > tg_sd_inf();
}

static inline uint tg_sd_sign(tg_u64 u) {
    return (uint)(u >> 63);
}

// A finite double's value as sig * 2^(exp - 1075): sig the integer significand (implicit bit
// included), exp the biased exponent, 1 for subnormals (whose implicit bit is 0).
static inline tg_u64 tg_sd_sig(tg_u64 u) {
    tg_u64 f = u & tg_sd_frac_mask();
    return ((u >> 52) & (tg_u64)0x7ffu) == (tg_u64)0u ? f : f | ((tg_u64)1u << 52);
}

static inline int tg_sd_exp(tg_u64 u) {
    int e = (int)((u >> 52) & (tg_u64)0x7ffu);
    return e == 0 ? 1 : e;
}

// A 128-bit unsigned integer, two 64-bit halves: exact products and aligned sums live here.
typedef struct tg_sd_u128 {
    tg_u64 hi;
    tg_u64 lo;
} tg_sd_u128;

static inline tg_sd_u128 tg_sd_u128_of(tg_u64 hi, tg_u64 lo) {
    tg_sd_u128 r;
    r.hi = hi;
    r.lo = lo;
    return r;
}

// The number of significant bits (0 for 0), by clz on 32-bit halves (there is no 64-bit clz).
static inline int tg_sd_len64(tg_u64 m) {
    uint hi = (uint)(m >> 32), lo = (uint)m;
    if (hi != 0u)
        return 64 - (int)clz(hi);
    return lo != 0u ? 32 - (int)clz(lo) : 0;
}

static inline int tg_sd_len128(tg_sd_u128 m) {
    return m.hi != (tg_u64)0u ? 64 + tg_sd_len64(m.hi) : tg_sd_len64(m.lo);
}

// m << s for 0 <= s < 128; callers shift only into zero bits.
static inline tg_sd_u128 tg_sd_shl(tg_sd_u128 m, int s) {
    if (s == 0)
        return m;
    if (s >= 64)
        return tg_sd_u128_of(m.lo << (uint)(s - 64), (tg_u64)0u);
    return tg_sd_u128_of((m.hi << (uint)s) | (m.lo >> (uint)(64 - s)), m.lo << (uint)s);
}

// m >> s for any s >= 0, the bits shifted out ORed into bit 0 (jammed). When bits are lost the
// result is odd and the true value m / 2^s lies within one unit of it, so no even number lies on
// or between them: rounding two or more bits up, where every tie and every kept value is even,
// treats both alike (tg_sd_round_bits's need). A sum keeps this if its other operand is even.
static inline tg_sd_u128 tg_sd_shr_jam(tg_sd_u128 m, int s) {
    tg_sd_u128 r;
    tg_u64 lost;
    if (s == 0)
        return m;
    if (s >= 128) {
        r = tg_sd_u128_of((tg_u64)0u, (tg_u64)0u);
        lost = m.hi | m.lo;
    } else if (s >= 64) {
        r = tg_sd_u128_of((tg_u64)0u, m.hi >> (uint)(s - 64));
        lost = m.lo | (s > 64 ? m.hi << (uint)(128 - s) : (tg_u64)0u);
    } else {
        r = tg_sd_u128_of(m.hi >> (uint)s, (m.lo >> (uint)s) | (m.hi << (uint)(64 - s)));
        lost = m.lo << (uint)(64 - s);
    }
    if (lost != (tg_u64)0u)
        r.lo = r.lo | (tg_u64)1u;
    return r;
}

// a + b (callers keep the sum below 2^128), with the low half's carry.
static inline tg_sd_u128 tg_sd_add128(tg_sd_u128 a, tg_sd_u128 b) {
    tg_u64 lo = a.lo + b.lo;
    return tg_sd_u128_of(a.hi + b.hi + (lo < a.lo ? (tg_u64)1u : (tg_u64)0u), lo);
}

// a - b for a >= b.
static inline tg_sd_u128 tg_sd_sub128(tg_sd_u128 a, tg_sd_u128 b) {
    return tg_sd_u128_of(a.hi - b.hi - (a.lo < b.lo ? (tg_u64)1u : (tg_u64)0u), a.lo - b.lo);
}

static inline bool tg_sd_less128(tg_sd_u128 a, tg_sd_u128 b) {
    return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo);
}

// a * b exactly, from four 32 x 32-bit products (the GPU languages share no 64-bit high multiply).
static inline tg_sd_u128 tg_sd_mul64(tg_u64 a, tg_u64 b) {
    tg_u64 m32 = (tg_u64)0xffffffffu;
    tg_u64 a0 = a & m32, a1 = a >> 32, b0 = b & m32, b1 = b >> 32;
    tg_u64 p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    tg_u64 mid = (p00 >> 32) + (p01 & m32) + (p10 & m32);   // below 3 * 2^32: no overflow
    return tg_sd_u128_of(p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32), (mid << 32) | (p00 & m32));
}

// The magnitude bits nearest (ties to even) to m * 2^x, m != 0, in the binary format of p-bit
// significands (implicit bit included) whose smallest subnormal is 2^xmin and whose exponent field
// inf_field means inf: binary64 is (53, -1074, 2047), binary32 (24, -149, 255). m's lowest bit may
// be a sticky bit (tg_sd_shr_jam) when the rounding position is two or more bits above it. m is
// first cut to 62 bits with a sticky bit (9 or more bits stay below a double's rounding position),
// then rounded like elementwise_f32.h's tg_f32_round. Overflow gives inf, underflow gradual or 0.
static inline tg_u64 tg_sd_round_bits(int x, tg_sd_u128 m, int p, int xmin, int inf_field) {
    int len = tg_sd_len128(m);
    if (len > 62) {
        m = tg_sd_shr_jam(m, len - 62);
        x = x + len - 62;
        len = 62;
    }
    tg_u64 v = m.lo;
    int shift = len - p;                     // keep p bits (a normal significand) ...
    if (x + shift < xmin)                    // ... unless the result is subnormal
        shift = xmin - x;
    tg_u64 q;
    if (shift <= 0) {                        // exact: no bits dropped
        q = v << (uint)(-shift);
    } else if (shift > 62) {                 // v < 2^62 is below half the smallest subnormal: 0
        q = (tg_u64)0u;
    } else {
        q = v >> (uint)shift;
        tg_u64 rest = v & (((tg_u64)1u << (uint)shift) - (tg_u64)1u);
        tg_u64 tie = (tg_u64)1u << (uint)(shift - 1);
        if (rest > tie || (rest == tie && (q & (tg_u64)1u) != (tg_u64)0u))
            q = q + (tg_u64)1u;              // may carry into the next exponent: still right
    }
    tg_u64 inf = (tg_u64)inf_field << (uint)(p - 1);
    int e = x + shift - xmin;                // the field below the implicit bit's, >= 0
    if (q == (tg_u64)0u)
        return (tg_u64)0u;
    if (e >= inf_field - 1)                  // beyond the largest finite exponent
        return inf;
    tg_u64 bits = ((tg_u64)e << (uint)(p - 1)) + q;   // q's implicit bit adds one to the field
    return bits >= inf ? inf : bits;
}

// The double nearest to (-1)^sign * m * 2^x (m != 0, as tg_sd_round_bits).
static inline tg_f64 tg_sd_round(uint sign, int x, tg_sd_u128 m) {
    return tg_d_of(((tg_u64)sign << 63) | tg_sd_round_bits(x, m, 53, -1074, 2047));
}

// (-1)^sa ma 2^xa + (-1)^sb mb 2^xb rounded once, for non-zero ma and mb of at most 106 bits (a
// significand or the product of two). Both move up to bit 125, so each has 20 or more zero bits
// below it; the smaller is shifted right by the exponent difference d with a sticky bit. Bits are
// lost only when d > 20, and then the larger is at least 2^125 and the result at least 2^124: the
// sticky bit lies far below the rounding position, and the larger's zero low bits keep the result
// odd, on the true value's side of every boundary (tg_sd_shr_jam). Nothing else is inexact.
static inline tg_f64 tg_sd_sum(uint sa, int xa, tg_sd_u128 ma, uint sb, int xb, tg_sd_u128 mb) {
    int ka = 126 - tg_sd_len128(ma), kb = 126 - tg_sd_len128(mb);
    ma = tg_sd_shl(ma, ka);
    mb = tg_sd_shl(mb, kb);
    xa = xa - ka;
    xb = xb - kb;
    if (xb > xa || (xb == xa && tg_sd_less128(ma, mb))) {   // make a the larger in magnitude
        uint s = sa;
        int x = xa;
        tg_sd_u128 m = ma;
        sa = sb, xa = xb, ma = mb;
        sb = s, xb = x, mb = m;
    }
    mb = tg_sd_shr_jam(mb, xa - xb);
    if (sa == sb)
        return tg_sd_round(sa, xa, tg_sd_add128(ma, mb));   // below 2^127
    if (ma.hi == mb.hi && ma.lo == mb.lo)    // x + (-x) is +0 when rounding to nearest
        return tg_d_of((tg_u64)0u);
    return tg_sd_round(sa, xa, tg_sd_sub128(ma, mb));
}

// a + b: NaN for inf - inf; zeros by IEEE's sign rules; otherwise tg_sd_sum of the significands.
static inline tg_f64 tg_dadd(tg_f64 a, tg_f64 b) {
    if (tg_sd_is_nan(a.b) || tg_sd_is_nan(b.b))
        return tg_sd_nan();
    uint sa = tg_sd_sign(a.b), sb = tg_sd_sign(b.b);
    tg_u64 ma = a.b & tg_sd_abs_mask(), mb = b.b & tg_sd_abs_mask(), inf = tg_sd_inf();
    if (ma == inf || mb == inf) {
        if (ma == inf && mb == inf && sa != sb)
            return tg_sd_nan();
        return ma == inf ? a : b;
    }
    if (ma == (tg_u64)0u && mb == (tg_u64)0u)   // -0 + -0 is -0; any other sum of zeros +0
        return tg_d_of((tg_u64)(sa & sb) << 63);
    if (ma == (tg_u64)0u)
        return b;
    if (mb == (tg_u64)0u)
        return a;
    return tg_sd_sum(sa, tg_sd_exp(a.b) - 1075, tg_sd_u128_of((tg_u64)0u, tg_sd_sig(a.b)),
                     sb, tg_sd_exp(b.b) - 1075, tg_sd_u128_of((tg_u64)0u, tg_sd_sig(b.b)));
}

// a - b is a + (-b) exactly, in every case (a NaN b stays a NaN).
static inline tg_f64 tg_dsub(tg_f64 a, tg_f64 b) {
    return tg_dadd(a, tg_d_of(b.b ^ ((tg_u64)1u << 63)));
}

// a * b: the 106-bit product of the significands is exact; one rounding. inf * 0 is NaN.
static inline tg_f64 tg_dmul(tg_f64 a, tg_f64 b) {
    if (tg_sd_is_nan(a.b) || tg_sd_is_nan(b.b))
        return tg_sd_nan();
    uint s = tg_sd_sign(a.b ^ b.b);
    tg_u64 ma = a.b & tg_sd_abs_mask(), mb = b.b & tg_sd_abs_mask(), inf = tg_sd_inf();
    if (ma == inf || mb == inf) {
        if (ma == (tg_u64)0u || mb == (tg_u64)0u)
            return tg_sd_nan();
        return tg_d_of(((tg_u64)s << 63) | inf);
    }
    if (ma == (tg_u64)0u || mb == (tg_u64)0u)
        return tg_d_of((tg_u64)s << 63);
    return tg_sd_round(s, tg_sd_exp(a.b) + tg_sd_exp(b.b) - 2150, tg_sd_mul64(tg_sd_sig(a.b), tg_sd_sig(b.b)));
}

// a * b + c rounded once (IEEE's fusedMultiplyAdd): the exact product and c summed by tg_sd_sum,
// so cancellation, a far smaller c (a sticky bit) and a far larger one are all exact or sticky.
static inline tg_f64 tg_dfma(tg_f64 a, tg_f64 b, tg_f64 c) {
    if (tg_sd_is_nan(a.b) || tg_sd_is_nan(b.b) || tg_sd_is_nan(c.b))
        return tg_sd_nan();
    uint sp = tg_sd_sign(a.b ^ b.b), sc = tg_sd_sign(c.b);
    tg_u64 ma = a.b & tg_sd_abs_mask(), mb = b.b & tg_sd_abs_mask(), mc = c.b & tg_sd_abs_mask();
    tg_u64 inf = tg_sd_inf();
    if (ma == inf || mb == inf) {            // an infinite product: inf * 0 is NaN, inf - inf too
        if (ma == (tg_u64)0u || mb == (tg_u64)0u || (mc == inf && sc != sp))
            return tg_sd_nan();
        return tg_d_of(((tg_u64)sp << 63) | inf);
    }
    if (mc == inf)
        return c;
    if (ma == (tg_u64)0u || mb == (tg_u64)0u) {   // a zero product: c + (-1)^sp 0
        if (mc == (tg_u64)0u)
            return tg_d_of((tg_u64)(sp & sc) << 63);
        return c;
    }
    int xp = tg_sd_exp(a.b) + tg_sd_exp(b.b) - 2150;
    tg_sd_u128 prod = tg_sd_mul64(tg_sd_sig(a.b), tg_sd_sig(b.b));
    if (mc == (tg_u64)0u)                    // p + 0 = p (non-zero): its own rounding, its sign
        return tg_sd_round(sp, xp, prod);
    return tg_sd_sum(sp, xp, prod, sc, tg_sd_exp(c.b) - 1075, tg_sd_u128_of((tg_u64)0u, tg_sd_sig(c.b)));
}

// A finite non-zero double's significand moved up to 53 bits (subnormals normalized), its
// exponent lowered to match: value = m * 2^x.
typedef struct tg_sd_norm {
    tg_u64 m;
    int x;
} tg_sd_norm;

static inline tg_sd_norm tg_sd_normalize(tg_u64 u) {
    tg_sd_norm n;
    n.m = tg_sd_sig(u);
    int k = 53 - tg_sd_len64(n.m);
    n.m = n.m << (uint)k;
    n.x = tg_sd_exp(u) - 1075 - k;
    return n;
}

// a / b: NaN for 0/0 and inf/inf. The significands' quotient na / nb (both in [2^52, 2^53), so in
// (1/2, 2)) by long division, 11 bits a step (the remainder is below nb < 2^53, so shifted by 11 it
// fits): q = floor(na 2^55 / nb) has 55 or 56 bits, and the remainder's sticky bit goes below it.
static inline tg_f64 tg_ddiv(tg_f64 a, tg_f64 b) {
    if (tg_sd_is_nan(a.b) || tg_sd_is_nan(b.b))
        return tg_sd_nan();
    uint s = tg_sd_sign(a.b ^ b.b);
    tg_u64 ma = a.b & tg_sd_abs_mask(), mb = b.b & tg_sd_abs_mask(), inf = tg_sd_inf();
    if ((ma == inf && mb == inf) || (ma == (tg_u64)0u && mb == (tg_u64)0u))
        return tg_sd_nan();
    if (ma == inf || mb == (tg_u64)0u)
        return tg_d_of(((tg_u64)s << 63) | inf);
    if (ma == (tg_u64)0u || mb == inf)
        return tg_d_of((tg_u64)s << 63);
    tg_sd_norm na = tg_sd_normalize(a.b), nb = tg_sd_normalize(b.b);
    tg_u64 q = na.m / nb.m, r = na.m - q * nb.m;
    for (int i = 0; i < 5; i++) {
        r = r << 11;
        tg_u64 d = r / nb.m;
        q = (q << 11) + d;
        r = r - d * nb.m;
    }
    tg_u64 m = (q << 1) | (r != (tg_u64)0u ? (tg_u64)1u : (tg_u64)0u);
    return tg_sd_round(s, na.x - nb.x - 56, tg_sd_u128_of((tg_u64)0u, m));
}

// sqrt: -0 is -0, +inf +inf, any other negative NaN. For a = n 2^x (n normalized, then doubled to
// make x even), sqrt(a) = sqrt(n 2^58) 2^((x - 58) / 2); the integer square root of the 112-bit
// n 2^58 is taken digit by digit (two radicand bits a step, the remainder at most twice the root,
// below 2^57), a 56-bit root and a sticky bit for a non-zero remainder. A square root is never a
// rounding midpoint, so that sticky bit decides every rounding.
static inline tg_f64 tg_dsqrt(tg_f64 a) {
    if (tg_sd_is_nan(a.b) || a.b > ((tg_u64)1u << 63))
        return tg_sd_nan();
    if ((a.b & tg_sd_abs_mask()) == (tg_u64)0u || a.b == tg_sd_inf())
        return a;
    tg_sd_norm n = tg_sd_normalize(a.b);
    if ((n.x & 1) != 0) {
        n.m = n.m << 1;                      // below 2^54: 27 pairs of radicand bits
        n.x = n.x - 1;
    }
    tg_u64 root = (tg_u64)0u, rem = (tg_u64)0u;
    for (int i = 0; i < 56; i++) {
        int pos = 52 - 2 * i;                // n's bits pos + 1 and pos; then the 2^58's zeros
        rem = (rem << 2) | (pos >= 0 ? (n.m >> (uint)pos) & (tg_u64)3u : (tg_u64)0u);
        tg_u64 trial = (root << 2) | (tg_u64)1u;   // (2 root + 1)^2 - (2 root)^2
        if (rem >= trial) {
            rem = rem - trial;
            root = (root << 1) | (tg_u64)1u;
        } else {
            root = root << 1;
        }
    }
    tg_u64 m = (root << 1) | (rem != (tg_u64)0u ? (tg_u64)1u : (tg_u64)0u);
    return tg_sd_round(0u, (n.x - 58) / 2 - 1, tg_sd_u128_of((tg_u64)0u, m));
}

// -a and C's fabs: the sign bit alone, flipped or cleared (a NaN's too), as the hardware does.
static inline tg_f64 tg_dneg(tg_f64 a) {
    return tg_d_of(a.b ^ ((tg_u64)1u << 63));
}

static inline tg_f64 tg_dabs(tg_f64 a) {
    return tg_d_of(a.b & tg_sd_abs_mask());
}

// A key whose signed integer order is the doubles' order (NaN aside): -0 and +0 both 0.
static inline tg_i64 tg_sd_key(tg_u64 u) {
    tg_i64 mag = (tg_i64)(u & tg_sd_abs_mask());
    return tg_sd_sign(u) != 0u ? -mag : mag;
}

// IEEE's comparisons: false with a NaN operand (tg_dne true), -0 == +0.
static inline bool tg_dlt(tg_f64 a, tg_f64 b) {
    return !tg_sd_is_nan(a.b) && !tg_sd_is_nan(b.b) && tg_sd_key(a.b) < tg_sd_key(b.b);
}

static inline bool tg_dle(tg_f64 a, tg_f64 b) {
    return !tg_sd_is_nan(a.b) && !tg_sd_is_nan(b.b) && tg_sd_key(a.b) <= tg_sd_key(b.b);
}

static inline bool tg_dgt(tg_f64 a, tg_f64 b) {
    return tg_dlt(b, a);
}

static inline bool tg_dge(tg_f64 a, tg_f64 b) {
    return tg_dle(b, a);
}

static inline bool tg_deq(tg_f64 a, tg_f64 b) {
    return !tg_sd_is_nan(a.b) && !tg_sd_is_nan(b.b) && tg_sd_key(a.b) == tg_sd_key(b.b);
}

static inline bool tg_dne(tg_f64 a, tg_f64 b) {
    return !tg_deq(a, b);
}

// C's fmin: a NaN operand yields the other (two NaNs: b), otherwise the smaller; of two zeros the
// negative one (fmin(-0, +0) = fmin(+0, -0) = -0, as IEEE 754-2019's minimumNumber).
static inline tg_f64 tg_dmin(tg_f64 a, tg_f64 b) {
    if (tg_sd_is_nan(a.b))
        return b;
    if (tg_sd_is_nan(b.b))
        return a;
    if (tg_dlt(b, a) || (tg_deq(a, b) && tg_sd_sign(b.b) != 0u))
        return b;
    return a;
}

// The float32 whose bits are f, exactly (its 24-bit significand fits: the rounding is exact). A
// NaN stays a NaN of its sign and payload, quieted (hardware's conversion).
static inline tg_f64 tg_d_f32(uint f) {
    tg_u64 sign = (tg_u64)(f >> 31) << 63;
    uint m = f & 0x7fffffffu;
    if (m > 0x7f800000u)
        return tg_d_of(sign | ((tg_u64)0x7ff80000u << 32) | ((tg_u64)(m & 0x7fffffu) << 29));
    if (m == 0x7f800000u)
        return tg_d_of(sign | tg_sd_inf());
    if (m == 0u)
        return tg_d_of(sign);
    uint e = m >> 23;
    uint sig = e == 0u ? m : (m & 0x7fffffu) | 0x800000u;
    int x = (e == 0u ? 1 : (int)e) - 150;
    return tg_sd_round(f >> 31, x, tg_sd_u128_of((tg_u64)0u, (tg_u64)sig));
}

// The float32 bits nearest a (ties to even): tg_sd_round_bits in binary32's format, so gradual
// underflow and overflow to inf as a float32 division would give. A NaN keeps its sign and the top
// 22 bits of its payload, quieted (hardware's conversion).
static inline uint tg_f32_d(tg_f64 a) {
    uint s = tg_sd_sign(a.b) << 31;
    tg_u64 m = a.b & tg_sd_abs_mask();
    if (m > tg_sd_inf())
        return s | 0x7fc00000u | (uint)((m >> 29) & (tg_u64)0x3fffffu);
    if (m == tg_sd_inf())
        return s | 0x7f800000u;
    if (m == (tg_u64)0u)
        return s;
    tg_sd_u128 sig = tg_sd_u128_of((tg_u64)0u, tg_sd_sig(a.b));
    return s | (uint)tg_sd_round_bits(tg_sd_exp(a.b) - 1075, sig, 24, -149, 255);
}

// The double nearest v (ties to even): |v| has up to 64 bits (2^63 for the most negative).
static inline tg_f64 tg_d_i64(tg_i64 v) {
    if (v == 0)
        return tg_d_of((tg_u64)0u);
    uint s = v < 0 ? 1u : 0u;
    tg_u64 mag = s != 0u ? (tg_u64)0u - (tg_u64)v : (tg_u64)v;   // modular: no overflow at -2^63
    return tg_sd_round(s, 0, tg_sd_u128_of((tg_u64)0u, mag));
}

// C's cast to a 64-bit integer: truncation toward zero, exact for |a| < 2^63 (and a = -2^63).
// Outside, where C leaves it undefined, saturated: a >= 2^63 and +inf give 2^63 - 1, a < -2^63 and
// -inf give -2^63, and a NaN gives 0.
static inline tg_i64 tg_i64_d(tg_f64 a) {
    if (tg_sd_is_nan(a.b))
        return 0;
    uint s = tg_sd_sign(a.b);
    int e = (int)((a.b >> 52) & (tg_u64)0x7ffu);
    if (e < 1023)                            // |a| < 1
        return 0;
    if (e >= 1086)                           // |a| >= 2^63
        return s != 0u ? -(tg_i64)0x7fffffffffffffff - 1 : (tg_i64)0x7fffffffffffffff;
    tg_u64 sig = (a.b & tg_sd_frac_mask()) | ((tg_u64)1u << 52);
    tg_u64 t = e >= 1075 ? sig << (uint)(e - 1075) : sig >> (uint)(1075 - e);   // below 2^63
    return s != 0u ? -(tg_i64)t : (tg_i64)t;
}
