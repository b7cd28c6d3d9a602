// The exact reductions, as every GPU kernel libtgrad renders for the reduce kind computes them.
// A device prelude: the renderer (libtgrad/src/gen/render_reduce.c) copies this text, verbatim,
// into each reduction kernel (MSL, OpenCL C and CUDA alike), and tests/c/test_gpu_reduce.c
// compiles the same text as C and compares it with the CPU's engine (src/ops/reduce_exact.c).
//
// Integers only, as the CPU engine: a sum is the exact fixed-point integer of its values (384 bits
// of two's complement, least significant bit 2^-149, twelve 32-bit limbs), rounded once at the
// end, so the bytes cannot depend on the device's floating point, on the number of threads, or on
// the order in which partial sums are combined. docs/numerics.md, "Reductions: the contract".
//
// Every value enters as float32 bits (a bf16 value h as h << 16, the same number). Loops over the
// limbs have constant bounds and index arrays by their loop variable only, so compilers unroll
// them and keep the limbs in registers (no local memory; the cuda tier checks ptxas's report).
//
// The common subset of C99, OpenCL C 1.2, MSL 2.3 and CUDA: the types uint, int and tg_u64 (a
// 64-bit unsigned integer the renderer typedefs before this text), clz, structs passed by value,
// no pointers; no identifier that is a type or builtin in one of them (half, sign, any, nan).

// The accumulator: q, the sum of the finite values in units of 2^-149 (two's complement,
// little-endian limbs); flags: 1 a NaN was added, 2 +inf, 4 -inf, 8 at least one value, 16 a
// value other than -0.0.
typedef struct tg_acc {
    uint q[12];
    uint flags;
} tg_acc;

static inline tg_acc tg_acc_zero(void) {
    tg_acc a;
    for (int i = 0; i < 12; i++)
        a.q[i] = 0u;
    a.flags = 0u;
    return a;
}

// a + b, exactly (flags combined).
static inline tg_acc tg_acc_merge(tg_acc a, tg_acc b) {
    uint c = 0u;
    for (int i = 0; i < 12; i++) {
        uint r = a.q[i] + b.q[i];
        uint c1 = r < b.q[i] ? 1u : 0u;
        uint r2 = r + c;
        c1 += r2 < c ? 1u : 0u;
        a.q[i] = r2;
        c = c1;
    }
    a.flags |= b.flags;
    return a;
}

// Adds (-1)^neg * m * 2^(p - 149), 0 < m < 2^24, 0 <= p <= 253: a negative value as the two's
// complement (every limb inverted, plus one).
static inline tg_acc tg_acc_add_scaled(tg_acc a, uint m, int p, uint neg) {
    int w = p >> 5;
    int s = p & 31;
    uint lo = m << s;
    uint hi = s == 0 ? 0u : m >> (32 - s);
    uint inv = neg != 0u ? 0xffffffffu : 0u;
    uint c = neg != 0u ? 1u : 0u;
    for (int i = 0; i < 12; i++) {
        uint x = (i == w ? lo : (i == w + 1 ? hi : 0u)) ^ inv;
        uint r = a.q[i] + x;
        uint c1 = r < x ? 1u : 0u;
        uint r2 = r + c;
        c1 += r2 < c ? 1u : 0u;
        a.q[i] = r2;
        c = c1;
    }
    return a;
}

// Adds the float32 value of bits b (a bf16 value: its bits << 16).
static inline tg_acc tg_acc_add(tg_acc a, uint b) {
    uint mag = b & 0x7fffffffu;
    a.flags |= b != 0x80000000u ? 24u : 8u;
    if (mag > 0x7f800000u) {
        a.flags |= 1u;
        return a;
    }
    if (mag == 0x7f800000u) {
        a.flags |= (b >> 31) != 0u ? 4u : 2u;
        return a;
    }
    if (mag == 0u)
        return a;
    uint e = mag >> 23;
    uint m = (mag & 0x7fffffu) | (e != 0u ? 0x800000u : 0u);
    int p = e != 0u ? (int)e - 1 : 0;
    return tg_acc_add_scaled(a, m, p, b >> 31);
}

// The 512-bit magnitude of a quotient and where its last bit lies.
typedef struct tg_wide {
    uint q[16];
} tg_wide;

// Bits [pos, pos + width) of w, width <= 25, 0 <= pos < 512: each limb shifted into place and
// or-ed in (no limb is picked by a run-time index, which compilers would turn into local memory).
static inline uint tg_wide_bits(tg_wide w, int pos, int width) {
    uint v = 0u;
    for (int i = 0; i < 16; i++) {
        int sh = 32 * i - pos; // where the limb's bit 0 lands
        v |= sh >= 32 || sh <= -32 ? 0u : (sh >= 0 ? w.q[i] << sh : w.q[i] >> (-sh));
    }
    return v & ((1u << width) - 1u);
}

// Is any bit below position pos set?
static inline uint tg_wide_any_below(tg_wide w, int pos) {
    uint nz = 0u;
    for (int i = 0; i < 16; i++) {
        int below = pos - 32 * i; // how many of the limb's bits lie below pos
        nz |= below >= 32 ? w.q[i] : (below <= 0 ? 0u : (w.q[i] & ((1u << below) - 1u)));
    }
    return nz != 0u ? 1u : 0u;
}

// The nonzero magnitude w * 2^L (plus a nonzero remainder below its last bit when sticky),
// rounded to nearest even in bf16 (out_bf16 != 0, bits in the low 16) or float32: gradual
// underflow, overflow to infbits.
static inline uint tg_round_wide(tg_wide w, int L, uint sticky, uint neg, uint out_bf16) {
    int p = out_bf16 != 0u ? 8 : 24;
    uint sgn = neg != 0u ? (out_bf16 != 0u ? 0x8000u : 0x80000000u) : 0u;
    uint infbits = out_bf16 != 0u ? 0x7f80u : 0x7f800000u;
    int t = 0;
    for (int i = 0; i < 16; i++)
        t = w.q[i] != 0u ? i * 32 + 31 - (int)clz(w.q[i]) : t;
    int ex = t + L; // the value lies in [2^ex, 2^(ex + 1))
    if (ex > 127)
        return sgn | infbits;
    int qe = (ex > -126 ? ex : -126) - (p - 1); // the exponent of the result's last bit
    int shift = qe - L;
    uint kept;
    if (shift <= 0) {
        kept = tg_wide_bits(w, 0, p) << (-shift); // exact: fewer than p bits
    } else {
        kept = tg_wide_bits(w, shift, p + 1);
        uint halfbit = tg_wide_bits(w, shift - 1, 1);
        uint rest = sticky | tg_wide_any_below(w, shift - 1);
        if (halfbit != 0u && (rest != 0u || (kept & 1u) != 0u))
            kept += 1u;
    }
    // ((F - 1) << (p - 1)) + kept encodes normal and subnormal values alike, carries included
    int f = qe + (p - 1) + 127;
    uint bits = ((uint)(f - 1) << (p - 1)) + kept;
    return sgn | (bits >= infbits ? infbits : bits);
}

// The exact sum / n (n >= 1; a sum: n = 1), rounded once to bf16 or float32; n = 0: NaN (the mean
// of nothing). NaN if a NaN or both infinities were added (canonical 0x7fc0 / 0x7fc00000), else
// +-infbits if one was; a zero result is -0.0 when every value added was -0.0 (one at least), else
// +0.0.
static inline uint tg_acc_round(tg_acc a, uint n, uint out_bf16) {
    uint nanbits = out_bf16 != 0u ? 0x7fc0u : 0x7fc00000u;
    uint infbits = out_bf16 != 0u ? 0x7f80u : 0x7f800000u;
    uint sgn = out_bf16 != 0u ? 0x8000u : 0x80000000u;
    if (n == 0u || (a.flags & 1u) != 0u || (a.flags & 6u) == 6u)
        return nanbits;
    if ((a.flags & 2u) != 0u)
        return infbits;
    if ((a.flags & 4u) != 0u)
        return sgn | infbits;
    uint neg = a.q[11] >> 31;
    // the magnitude, shifted up by 128 bits: num = |sum| * 2^128
    tg_wide num;
    for (int i = 0; i < 4; i++)
        num.q[i] = 0u;
    uint c = neg;
    uint nz = 0u;
    for (int i = 0; i < 12; i++) {
        uint v = neg != 0u ? ~a.q[i] : a.q[i];
        uint r = v + c;
        c = r < c ? 1u : 0u;
        num.q[i + 4] = r;
        nz |= r;
    }
    if (nz == 0u)
        return (a.flags & 24u) == 8u ? sgn : 0u;
    // q = floor(num / n), the remainder as the sticky bit: q has at least 97 significant bits.
    // Long division from the top limb; num and q shift by a limb per step, so that every array
    // index is a constant once the inner loops unroll (the outer one need not).
    tg_wide q;
    for (int i = 0; i < 16; i++)
        q.q[i] = 0u;
    tg_u64 r = 0u;
    for (int step = 0; step < 16; step++) {
        tg_u64 cur = (r << 32) | (tg_u64)num.q[15];
        r = cur % (tg_u64)n;
        for (int i = 15; i > 0; i--) {
            num.q[i] = num.q[i - 1];
            q.q[i] = q.q[i - 1];
        }
        num.q[0] = 0u;
        q.q[0] = (uint)(cur / (tg_u64)n);
    }
    return tg_round_wide(q, -149 - 128, r != 0u ? 1u : 0u, neg, out_bf16);
}

// An extremum candidate: state 0 none, 1 a number, 2 a NaN; key orders the values (-0.0 and +0.0
// alike); index is its position among the reduced elements; bits its float32 bits.
typedef struct tg_ext {
    int key;
    int index;
    uint bits;
    uint state;
} tg_ext;

static inline tg_ext tg_ext_none(void) {
    tg_ext e;
    e.key = 0;
    e.index = 0;
    e.bits = 0u;
    e.state = 0u;
    return e;
}

static inline tg_ext tg_ext_of(uint b, int index) {
    tg_ext e;
    uint mag = b & 0x7fffffffu;
    e.key = (b >> 31) != 0u ? -(int)mag : (int)mag;
    e.index = index;
    e.bits = b;
    e.state = mag > 0x7f800000u ? 2u : 1u;
    return e;
}

// The winner of two candidates, whatever their order: the first NaN, else the larger (want_max)
// or smaller key, the earlier index between equal keys.
static inline tg_ext tg_ext_pick(tg_ext a, tg_ext b, uint want_max) {
    if (b.state == 0u)
        return a;
    if (a.state == 0u)
        return b;
    if (a.state != b.state)
        return a.state == 2u ? a : b;
    if (a.state == 2u || a.key == b.key)
        return b.index < a.index ? b : a;
    if (want_max != 0u)
        return b.key > a.key ? b : a;
    return b.key < a.key ? b : a;
}
