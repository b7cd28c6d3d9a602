// The elementwise ops on bf16 bits, as every GPU kernel libtgrad renders computes them.
// A device prelude: the renderer (libtgrad/src/gen/) copies this text, verbatim, into each kernel
// that applies an elementwise op (MSL and OpenCL C alike), and tests/c/test_gpu_elementwise.c
// compiles the same text as C and compares it with the CPU's loops on every input (docs/kernels.md).
//
// Integers only: no floating-point instruction, so the bytes cannot depend on a device's fp32
// subnormal handling, rounding of division or fast math. Each result is the correctly rounded
// (nearest even) bf16 of the exact result, with gradual underflow, overflow to inf and every NaN
// made 0x7fc0: the contract of docs/numerics.md, "Elementwise ops". The transcendental ops are
// not here: they read 65,536-entry tables (one per op, indexed by the input's bits).
//
// The common subset of C99, OpenCL C 1.2 and MSL 2.3: the types ushort, uint and int, the
// function clz (count leading zeros of a non-zero uint), no pointers; no identifier that is a
// type or builtin in one of them (OpenCL C reserves half, for one).

// Is h a NaN? (exponent all ones, fraction non-zero)
static inline bool tg_bf_is_nan(ushort h) {
    return (h & 0x7fffu) > 0x7f80u;
}

// A finite bf16's value as sig * 2^(exp - 134): sig is the integer significand (implicit bit
// included; subnormals have exponent 1), exp its biased exponent.
static inline uint tg_bf_sig(ushort h) {
    uint e = ((uint)h >> 7) & 0xffu;
    return e == 0u ? ((uint)h & 0x7fu) : (((uint)h & 0x7fu) | 0x80u);
}

static inline int tg_bf_exp(ushort h) {
    int e = (int)(((uint)h >> 7) & 0xffu);
    return e == 0 ? 1 : e;
}

// The bf16 nearest (ties to even) to (-1)^sign * m * 2^(x - 134), for 0 < m < 2^31 whose lowest
// bit may be a sticky bit standing for a non-zero remainder below it. Overflow gives inf.
static inline ushort tg_bf_round(uint sign, int x, uint m) {
    int len = 32 - (int)clz(m);              // m has len significant bits
    int shift = len - 8;                     // keep 8 (a normal significand) ...
    if (x + shift < 1)                       // ... unless the result is subnormal: exponent 1
        shift = 1 - x;
    uint q;
    int e;
    if (shift <= 0) {                        // exact: no bits dropped
        q = m << (uint)(-shift);
    } else if (shift > 31) {                 // below half the smallest subnormal: zero
        q = 0u;
    } else {
        q = m >> (uint)shift;
        uint rest = m & ((1u << (uint)shift) - 1u);
        uint tie = 1u << (uint)(shift - 1);
        if (rest > tie || (rest == tie && (q & 1u) != 0u))
            q = q + 1u;                      // may carry into the next exponent: still right
    }
    e = x + shift - 1;                       // the field below the implicit bit's
    if (q == 0u)
        return (ushort)(sign << 15);
    if (e >= 0xfe)                           // beyond the largest finite exponent: inf
        return (ushort)((sign << 15) | 0x7f80u);
    uint bits = ((uint)e << 7) + q;          // q's implicit bit adds one to the exponent field
    if (bits >= 0x7f80u)
        bits = 0x7f80u;
    return (ushort)((sign << 15) | bits);
}

static inline ushort tg_bf_add(ushort a, ushort b) {
    if (tg_bf_is_nan(a) || tg_bf_is_nan(b))
        return (ushort)0x7fc0u;
    uint sa = (uint)a >> 15, sb = (uint)b >> 15;
    uint ma = (uint)a & 0x7fffu, mb = (uint)b & 0x7fffu;
    if (ma == 0x7f80u || mb == 0x7f80u) {    // an infinity: inf - inf is NaN
        if (ma == 0x7f80u && mb == 0x7f80u && sa != sb)
            return (ushort)0x7fc0u;
        return ma == 0x7f80u ? a : b;
    }
    if (ma == 0u && mb == 0u)                // -0 + -0 is -0; any other sum of zeros is +0
        return (ushort)((sa & sb) << 15);
    if (ma == 0u)
        return b;
    if (mb == 0u)
        return a;
    ushort hi = ma >= mb ? a : b, lo = ma >= mb ? b : a;  // |hi| >= |lo|
    int xh = tg_bf_exp(hi), d = xh - tg_bf_exp(lo);
    uint aligned_hi = tg_bf_sig(hi) << 20;          // exact, with 20 bits to spare below
    // The smaller operand, aligned. More than 20 binades below the larger (which is then normal,
    // its significand at least 2^27 in these units) it is under 2^7 units, while the nearest
    // rounding boundary to the larger is 2^18 units away: it cannot change the result.
    uint aligned_lo = d <= 20 ? tg_bf_sig(lo) << (uint)(20 - d) : 0u;
    uint sh = (uint)hi >> 15, sl = (uint)lo >> 15;
    uint m = sh == sl ? aligned_hi + aligned_lo : aligned_hi - aligned_lo;
    if (m == 0u)                             // x + (-x) is +0 when rounding to nearest
        return (ushort)0u;
    return tg_bf_round(sh, xh - 20, m);
}

static inline ushort tg_bf_sub(ushort a, ushort b) {
    return tg_bf_add(a, (ushort)(b ^ 0x8000u));
}

static inline ushort tg_bf_mul(ushort a, ushort b) {
    if (tg_bf_is_nan(a) || tg_bf_is_nan(b))
        return (ushort)0x7fc0u;
    uint s = ((uint)a ^ (uint)b) >> 15;
    uint ma = (uint)a & 0x7fffu, mb = (uint)b & 0x7fffu;
    if (ma == 0x7f80u || mb == 0x7f80u)      // inf * 0 is NaN
        return ma == 0u || mb == 0u ? (ushort)0x7fc0u : (ushort)((s << 15) | 0x7f80u);
    if (ma == 0u || mb == 0u)
        return (ushort)(s << 15);
    // sig_a * sig_b * 2^(xa + xb - 268): exact (16 bits at most)
    return tg_bf_round(s, tg_bf_exp(a) + tg_bf_exp(b) - 134, tg_bf_sig(a) * tg_bf_sig(b));
}

// a / b * 2^adj, the exact quotient rounded once (adj: 0 for div, -1 for sqrt's derivative).
static inline ushort tg_bf_div_scaled(ushort a, ushort b, int adj) {
    if (tg_bf_is_nan(a) || tg_bf_is_nan(b))
        return (ushort)0x7fc0u;
    uint s = ((uint)a ^ (uint)b) >> 15;
    uint ma = (uint)a & 0x7fffu, mb = (uint)b & 0x7fffu;
    if ((ma == 0x7f80u && mb == 0x7f80u) || (ma == 0u && mb == 0u))
        return (ushort)0x7fc0u;
    if (ma == 0x7f80u || mb == 0u)
        return (ushort)((s << 15) | 0x7f80u);
    if (ma == 0u || mb == 0x7f80u)
        return (ushort)(s << 15);
    uint na = tg_bf_sig(a), nb = tg_bf_sig(b);
    int xa = tg_bf_exp(a), xb = tg_bf_exp(b);
    while (na < 0x80u) {                     // normalize subnormals: significands in [2^7, 2^8)
        na = na << 1;
        xa = xa - 1;
    }
    while (nb < 0x80u) {
        nb = nb << 1;
        xb = xb - 1;
    }
    // na / nb in (1/2, 2): 23 fraction bits give a quotient of 22 or 23 bits; the remainder's
    // sticky bit goes below it, where no rounding boundary can lie.
    uint num = na << 23;
    uint q = num / nb;
    uint sticky = num - q * nb != 0u ? 1u : 0u;
    return tg_bf_round(s, xa - xb + 134 - 24 + adj, (q << 1) | sticky);
}

static inline ushort tg_bf_div(ushort a, ushort b) {
    return tg_bf_div_scaled(a, b, 0);
}

// The bits in an order where -0 < +0 and negatives sort by magnitude reversed (NaN aside).
static inline int tg_bf_key(ushort h) {
    int v = (int)h;
    return v >= 0x8000 ? 0x7fff - v : v;
}

static inline ushort tg_bf_maximum(ushort a, ushort b) {
    if (tg_bf_is_nan(a) || tg_bf_is_nan(b))
        return (ushort)0x7fc0u;
    return tg_bf_key(a) >= tg_bf_key(b) ? a : b;
}

static inline ushort tg_bf_minimum(ushort a, ushort b) {
    if (tg_bf_is_nan(a) || tg_bf_is_nan(b))
        return (ushort)0x7fc0u;
    return tg_bf_key(a) <= tg_bf_key(b) ? a : b;
}

// relu keeps -0 (not below 0); a negative number becomes +0.
static inline ushort tg_bf_relu(ushort h) {
    if (tg_bf_is_nan(h))
        return (ushort)0x7fc0u;
    return h > 0x8000u ? (ushort)0u : h;
}

// relu's derivative: g where x > 0 (+inf and subnormals included), else +0; a NaN in either 0x7fc0.
static inline ushort tg_bf_relu_backward(ushort x, ushort g) {
    if (tg_bf_is_nan(x) || tg_bf_is_nan(g))
        return (ushort)0x7fc0u;
    return (x & 0x8000u) == 0u && x != 0u ? g : (ushort)0u;
}

// rsqrt's derivative from its output y: -g y^3 / 2, exact in integers (sig_g sig_y^3 < 2^32),
// rounded once; the IEEE product's special cases (inf times zero NaN, zeros signed).
static inline ushort tg_bf_rsqrt_backward(ushort y, ushort g) {
    if (tg_bf_is_nan(y) || tg_bf_is_nan(g))
        return (ushort)0x7fc0u;
    uint s = (((uint)y ^ (uint)g) >> 15) ^ 1u;  // sign(g) sign(y)^3, negated
    uint my = (uint)y & 0x7fffu, mg = (uint)g & 0x7fffu;
    if (my == 0x7f80u || mg == 0x7f80u)
        return my == 0u || mg == 0u ? (ushort)0x7fc0u : (ushort)((s << 15) | 0x7f80u);
    if (my == 0u || mg == 0u)
        return (ushort)(s << 15);
    uint sy = tg_bf_sig(y);
    uint m = tg_bf_sig(g) * sy * sy * sy;
    // m * 2^(xg - 134) * 2^(3 (xy - 134)) / 2 = m * 2^(x - 134)
    int x = tg_bf_exp(g) + 3 * tg_bf_exp(y) - 3 * 134 - 1;
    if (m >= 0x80000000u) {                  // 32 bits: one down, its bit kept as a sticky bit
        m = (m >> 1) | (m & 1u);
        x = x + 1;
    }
    return tg_bf_round(s, x, m);
}

// sqrt's derivative from its output y: g / (2 y), the exact quotient rounded once.
static inline ushort tg_bf_sqrt_backward(ushort y, ushort g) {
    return tg_bf_div_scaled(g, y, -1);
}

// (-1)^s (A 2^pa +- B 2^pb) rounded once (sub != 0: minus), for 0 < A < 2^16, 0 < B < 2^24 and
// a non-zero result: both are put in one frame where the one whose top bit is higher sits below
// 2^29 (exact: its bits start at most 24 below its top); the other keeps what fits and its lost
// bits become a sticky bit whose direction the operation gives. Bits are lost only more than
// 5 binades below the larger's top, so no cancellation meets them (the exact difference keeps
// more than 27 bits there). The sum stays below 2^30, so m below 2^31, as tg_bf_round needs.
static inline ushort tg_bf_round_two(uint s, uint A, int pa, uint B, int pb, uint sub) {
    int ta = pa + 32 - (int)clz(A), tb = pb + 32 - (int)clz(B);
    int f = (ta > tb ? ta : tb) - 29;       // the frame's unit: 2^f
    int da = f - pa, db = f - pb;
    uint X = da <= 0 ? A << (uint)(-da) : (da > 31 ? 0u : A >> (uint)da);
    uint Y = db <= 0 ? B << (uint)(-db) : (db > 31 ? 0u : B >> (uint)db);
    uint lx = da > 0 && (da > 31 ? A : A & ((1u << (uint)da) - 1u)) != 0u ? 1u : 0u;
    uint ly = db > 0 && (db > 31 ? B : B & ((1u << (uint)db) - 1u)) != 0u ? 1u : 0u;
    uint m;
    if (sub == 0u) {
        m = ((X + Y) << 1) | lx | ly;       // a sum: any lost bits only add
    } else if (X > Y || (X == Y && lx != 0u)) {
        uint d = X - Y;                     // exact: d + (lost of X) - (lost of Y)
        m = lx != 0u ? (d << 1) | 1u : ly != 0u ? ((d - 1u) << 1) | 1u : d << 1;
    } else {
        uint d = Y - X;
        s = s ^ 1u;
        m = ly != 0u ? (d << 1) | 1u : lx != 0u ? ((d - 1u) << 1) | 1u : d << 1;
    }
    return tg_bf_round(s, f - 1 + 134, m);
}

// sigmoid's derivative from its output y: g y (1 - y) = g y - g y^2, two exact products whose
// exact difference (a sum for a negative y) is rounded once. The special cases are the IEEE
// product g (y (1 - y)): y = +-0 gives g * y, y = 1 gives g * +0, y = +-inf gives g * -inf.
static inline ushort tg_bf_sigmoid_backward(ushort y, ushort g) {
    if (tg_bf_is_nan(y) || tg_bf_is_nan(g))
        return (ushort)0x7fc0u;
    uint sy = (uint)y >> 15, sg = (uint)g >> 15;
    uint my = (uint)y & 0x7fffu, mg = (uint)g & 0x7fffu;
    if (my == 0x7f80u)                       // y (1 - y) = -inf
        return mg == 0u ? (ushort)0x7fc0u : (ushort)(((sg ^ 1u) << 15) | 0x7f80u);
    if (my == 0u)                            // y (1 - y) = y: a zero
        return mg == 0x7f80u ? (ushort)0x7fc0u : (ushort)((sg ^ sy) << 15);
    if ((uint)y == 0x3f80u)                  // y (1 - y) = +0
        return mg == 0x7f80u ? (ushort)0x7fc0u : (ushort)(sg << 15);
    uint neg = sy != 0u || (uint)y > 0x3f80u ? 1u : 0u;  // y (1 - y) < 0: y < 0 or y > 1
    if (mg == 0x7f80u)
        return (ushort)(((sg ^ neg) << 15) | 0x7f80u);
    if (mg == 0u)
        return (ushort)((sg ^ neg) << 15);
    uint G = tg_bf_sig(g), Y = tg_bf_sig(y);
    int eg = tg_bf_exp(g) - 134, ey = tg_bf_exp(y) - 134;
    // |g y| = G Y 2^(eg + ey) with g y's sign sg ^ sy; g y^2 = G Y^2 2^(eg + 2 ey) with g's
    return tg_bf_round_two(sg ^ sy, G * Y, eg + ey, G * Y * Y, eg + 2 * ey, sy ^ 1u);
}

// tanh's derivative from its output y: g (1 - y^2) = g - g y^2, rounded once; the special cases
// are the IEEE product g (1 - y^2): |y| = 1 gives g * +0, y = +-inf gives g * -inf.
static inline ushort tg_bf_tanh_backward(ushort y, ushort g) {
    if (tg_bf_is_nan(y) || tg_bf_is_nan(g))
        return (ushort)0x7fc0u;
    uint sg = (uint)g >> 15;
    uint my = (uint)y & 0x7fffu, mg = (uint)g & 0x7fffu;
    if (my == 0x7f80u)                       // 1 - y^2 = -inf
        return mg == 0u ? (ushort)0x7fc0u : (ushort)(((sg ^ 1u) << 15) | 0x7f80u);
    if (my == 0x3f80u)                       // 1 - y^2 = +0
        return mg == 0x7f80u ? (ushort)0x7fc0u : (ushort)(sg << 15);
    uint neg = my > 0x3f80u ? 1u : 0u;       // 1 - y^2 < 0: |y| > 1
    if (mg == 0x7f80u)
        return (ushort)(((sg ^ neg) << 15) | 0x7f80u);
    if (mg == 0u)
        return (ushort)((sg ^ neg) << 15);
    if (my == 0u)                            // g - 0: g itself
        return g;
    uint G = tg_bf_sig(g), Y = tg_bf_sig(y);
    int eg = tg_bf_exp(g) - 134, ey = tg_bf_exp(y) - 134;
    return tg_bf_round_two(sg, G, eg, G * Y * Y, eg + 2 * ey, 1u);
}

// g f'(x) for gelu's, gelu_tanh's and silu's derivatives, f'(x) read from the op's table (one entry
// of 8 ushorts per x, bound by the launcher: libtgrad/src/ops/elementwise_grad_table.c builds it):
// f'(x) in the open interval (M, M + b) 2^(e - 1024), M = m0 + m1 2^16 + m2 2^32 + m3 2^48 >= 2^62
// (b = 0: exactly M 2^(e - 1024)); flags bit 15 f's sign, bit 0 f' is a zero (x = -inf), bit 1
// f' is too small for any g to reach half the smallest subnormal. G M (72 bits) in 16-bit limbs,
// exact; the value lies in (G M, G (M + b)): upper = 0 rounds its lower end, upper = 1 its upper
// end (G M + G b - 1 with a sticky bit); where both agree the value is decided, which
// tests/c/test_gpu_elementwise.c shows for all 2^32 pairs (the kernels round the lower end). The
// special cases are the IEEE product's: inf g gives inf but at f' = -0 (NaN), a zero signed.
static inline ushort tg_bf_table_grad(ushort x, ushort g, ushort m0, ushort m1, ushort m2, ushort m3, ushort b,
                                      ushort e, ushort flags, uint upper) {
    if (tg_bf_is_nan(x) || tg_bf_is_nan(g))
        return (ushort)0x7fc0u;
    uint s = ((uint)g ^ (uint)flags) >> 15;
    uint mg = (uint)g & 0x7fffu;
    if (mg == 0x7f80u)
        return ((uint)flags & 1u) != 0u ? (ushort)0x7fc0u : (ushort)((s << 15) | 0x7f80u);
    if (mg == 0u || ((uint)flags & 3u) != 0u)
        return (ushort)(s << 15);
    uint G = tg_bf_sig(g);
    uint add = upper != 0u && b != 0u ? G * (uint)b - 1u : 0u;
    uint p0 = G * (uint)m0 + add;            // each limb's product below 2^24, add below 2^24
    uint p1 = G * (uint)m1 + (p0 >> 16);
    uint p2 = G * (uint)m2 + (p1 >> 16);
    uint p3 = G * (uint)m3 + (p2 >> 16);     // G M = p3 2^48 + the limbs' low halves below
    uint top = (p3 << 6) | ((p2 & 0xffffu) >> 10);  // G M >> 42: from 2^20 to below 2^30
    uint rest = (p2 & 0x3ffu) | (p1 & 0xffffu) | (p0 & 0xffffu);
    uint sticky = rest != 0u || b != 0u ? 1u : 0u;
    // (G M / 2^41) 2^(xg - 134) 2^(e - 1024) = m 2^(xg + e - 983 - 134)
    return tg_bf_round(s, tg_bf_exp(g) + (int)e - 983, (top << 1) | sticky);
}

static inline ushort tg_bf_neg(ushort h) {
    return tg_bf_is_nan(h) ? (ushort)0x7fc0u : (ushort)(h ^ 0x8000u);
}

static inline ushort tg_bf_abs(ushort h) {
    return tg_bf_is_nan(h) ? (ushort)0x7fc0u : (ushort)(h & 0x7fffu);
}

static inline ushort tg_bf_square(ushort h) {
    return tg_bf_mul(h, h);
}
