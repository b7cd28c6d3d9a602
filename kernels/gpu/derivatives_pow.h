// The two-operand ops in binary64, as every elementwise kernel libtgrad renders for a float32
// derivative op (sigmoid's, tanh's, rsqrt's, sqrt's, silu's, gelu's and gelu_tanh's: x or y, then
// g) or for pow (float32 or bfloat16) computes them. A device prelude: the renderer
// (libtgrad/src/gen/ew.c) copies this text, verbatim, after kernels/gpu/transcendental_f32.h,
// whose rounding (tg_tf_round_in), exponentials and Phi these use, with the same contract: the
// correctly rounded result's bits where a bound decides them, else bit 32 set (the host
// recomputes the element with the CPU's code). The same language subset.
// tests/c/test_gpu_transcendental_f32.c compiles this text as C against the CPU's ops.

// ---- the derivative ops: (x or y, g), both float32 bits --------------------------------------
// A NaN operand gives NaN (the CPU's). The other unusual operands (an infinity, a zero, a
// subnormal) and every zero result are the host's: the CPU decides them by IEEE's classes and
// signs. So each function below sees two normal floats and bounds a nonzero value.

// u's bits are a normal float32 (nonzero, finite, not subnormal).
static inline bool tg_tf_normal(uint u) {
    const uint e = (u >> 23) & 0xffu;
    return e != 0u && e != 0xffu;
}

// The common first steps: NaN, or undecided unless both are normal.
static inline tg_u64 tg_tf_grad_special(uint ab, uint gb) {
    if (tg_tf_is_nan(ab) || tg_tf_is_nan(gb))
        return tg_tf_nan();
    return tg_tf_undecided();
}

// q within 2^-43 |q| or so, nonzero: the interval 2^-40 |q|.
static inline tg_u64 tg_tf_rel_nz(tg_f64 q) {
    return tg_tf_round_z(q, tg_dmul(tg_dabs(q), tg_dk(9.094947017729282e-13, 0x3d70000000000000ul)), false);
}

// sigmoid_backward(y, g) = g y (1 - y): g y exact (48 bits), 1 - y and the product one rounding
// each (2^-52); y = 1 (a zero) is the host's.
static inline tg_u64 tg_tf_sigmoid_backward(uint yb, uint gb) {
    if (!tg_tf_normal(yb) || !tg_tf_normal(gb) || yb == 0x3f800000u)
        return tg_tf_grad_special(yb, gb);
    const tg_f64 y = tg_d_f32(yb), g = tg_d_f32(gb), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    return tg_tf_rel_nz(tg_dmul(tg_dmul(g, y), tg_dsub(ONE, y)));
}

// tanh_backward(y, g) = g (1 - y^2) = g (1 - y)(1 + y): four roundings (2^-51), no cancellation
// left (a difference's rounding is relative to it); |y| = 1 (a zero) is the host's.
static inline tg_u64 tg_tf_tanh_backward(uint yb, uint gb) {
    if (!tg_tf_normal(yb) || !tg_tf_normal(gb) || (yb & 0x7fffffffu) == 0x3f800000u)
        return tg_tf_grad_special(yb, gb);
    const tg_f64 y = tg_d_f32(yb), g = tg_d_f32(gb), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    return tg_tf_rel_nz(tg_dmul(g, tg_dmul(tg_dsub(ONE, y), tg_dadd(ONE, y))));
}

// rsqrt_backward(y, g) = -g y^3 / 2: g y and y y exact, their product one rounding, the half exact.
static inline tg_u64 tg_tf_rsqrt_backward(uint yb, uint gb) {
    if (!tg_tf_normal(yb) || !tg_tf_normal(gb))
        return tg_tf_grad_special(yb, gb);
    const tg_f64 y = tg_d_f32(yb), g = tg_d_f32(gb);
    const tg_f64 v = tg_dmul(tg_dmul(g, y), tg_dmul(y, y));
    return tg_tf_rel_nz(tg_dmul(tg_dk(-0.5, 0xbfe0000000000000ul), v));
}

// sqrt_backward(y, g) = g / (2 y): one division (2y exact).
static inline tg_u64 tg_tf_sqrt_backward(uint yb, uint gb) {
    if (!tg_tf_normal(yb) || !tg_tf_normal(gb))
        return tg_tf_grad_special(yb, gb);
    const tg_f64 y = tg_d_f32(yb), g = tg_d_f32(gb);
    return tg_tf_rel_nz(tg_ddiv(g, tg_dmul(tg_dk(2.0, 0x4000000000000000ul), y)));
}

// g s (1 + t), s = sigmoid(a), c = 1 - s, t = k c: silu's and gelu_tanh's derivatives. s and c
// without cancellation (1 / (1 + e) and e / (1 + e), e = e^-|a| within 2^-48): s within
// c 2^-48 + 2^-52 relative and c within s 2^-48 + 2^-52, plus what a's own relative error ra
// does through the exponential, s c |a| ra to each. t is within k's rk and c's. 1 + t may cancel,
// so d = s (1 + t) gets an absolute bound, in terms of mag = s (1 + |t|) (the CPU's "terms'
// magnitude"): below mag (2^-45 + 2 rk) + 2 s |a| ra (|t| + c (1 + |t|)). The interval is 16 times
// that (2^-41 for the first term), times |g|, plus 2^-50 |q| for the last product.
static inline tg_u64 tg_tf_smooth_grad(tg_f64 a, tg_f64 k, tg_f64 rk, tg_f64 ra, tg_f64 g) {
    const tg_f64 ONE = tg_dk(1.0, 0x3ff0000000000000ul), ZERO = tg_dk(0.0, 0x0000000000000000ul);
    const tg_f64 THIRTY_TWO = tg_dk(32.0, 0x4040000000000000ul);
    const bool pos = tg_dge(a, ZERO);
    const tg_f64 e = tg_sm_exp_neg(pos ? tg_dneg(a) : a), den = tg_dadd(ONE, e);
    const tg_f64 s = pos ? tg_ddiv(ONE, den) : tg_ddiv(e, den);
    const tg_f64 c = pos ? tg_ddiv(e, den) : tg_ddiv(ONE, den);
    const tg_f64 t = tg_dmul(k, c), at = tg_dabs(t);
    const tg_f64 q = tg_dmul(g, tg_dmul(s, tg_dadd(ONE, t)));
    const tg_f64 mag = tg_dmul(s, tg_dadd(ONE, at));
    const tg_f64 through_a = tg_dmul(tg_dmul(tg_dmul(s, tg_dabs(a)), ra), tg_dadd(at, tg_dmul(c, tg_dadd(ONE, at))));
    const tg_f64 d_err = tg_dadd(tg_dmul(mag, tg_dadd(tg_dk(4.547473508864641e-13, 0x3d60000000000000ul), // 2^-41
                                                      tg_dmul(THIRTY_TWO, rk))),
                                 tg_dmul(THIRTY_TWO, through_a));
    const tg_f64 err = tg_dadd(tg_dmul(tg_dabs(g), d_err),
                               tg_dmul(tg_dabs(q), tg_dk(8.881784197001252e-16, 0x3cd0000000000000ul))); // 2^-50
    return tg_tf_round_z(q, err, false);
}

// silu_backward(x, g) = g silu'(x) = g s (1 + x c), s = sigmoid(x): a = x exact, k = x exact.
static inline tg_u64 tg_tf_silu_backward(uint xb, uint gb) {
    if (!tg_tf_normal(xb) || !tg_tf_normal(gb))
        return tg_tf_grad_special(xb, gb);
    const tg_f64 x = tg_d_f32(xb), ZERO = tg_dk(0.0, 0x0000000000000000ul);
    return tg_tf_smooth_grad(x, x, ZERO, ZERO, tg_d_f32(gb));
}

// gelu_tanh_backward(x, g) = g s (1 + 2 x z' c), s = sigmoid(2z), z = K (x + A x^3), z' = K (1 + 3 A
// x^2): 2z carries 6 roundings, the constants' two among them (ra = 6 2^-53 < 2^-50), and k = 2 x
// z' 7 (rk < 2^-50).
static inline tg_u64 tg_tf_gelu_tanh_backward(uint xb, uint gb) {
    if (!tg_tf_normal(xb) || !tg_tf_normal(gb))
        return tg_tf_grad_special(xb, gb);
    const tg_f64 x = tg_d_f32(xb), g = tg_d_f32(gb), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    const tg_f64 K = tg_dk(0.7978845608028654, 0x3fe9884533d43651ul); // sqrt(2/pi)
    const tg_f64 A = tg_dk(0.044715, 0x3fa6e4e26d4801f7ul);
    const tg_f64 TWO = tg_dk(2.0, 0x4000000000000000ul);
    const tg_f64 xx = tg_dmul(x, x);
    const tg_f64 z2 = tg_dmul(TWO, tg_dmul(K, tg_dadd(x, tg_dmul(A, tg_dmul(xx, x)))));
    const tg_f64 dz = tg_dmul(K, tg_dadd(ONE, tg_dmul(tg_dmul(tg_dk(3.0, 0x4008000000000000ul), A), xx)));
    const tg_f64 R = tg_dk(8.881784197001252e-16, 0x3cd0000000000000ul); // 2^-50
    return tg_tf_smooth_grad(z2, tg_dmul(tg_dmul(TWO, x), dz), R, R, g);
}

// ---- pow(a, b), float32 or bfloat16 (its bits widened) ----------------------------------------
// b's kind (b normal): 0 not an integer, 1 an even integer, 2 an odd one.
static inline uint tg_tf_int_kind(uint b) {
    const int e = (int)((b >> 23) & 0xffu) - 127;
    if (e < 0)
        return 0u;
    if (e >= 24) // every float32 from 2^24 up is an even integer
        return 1u;
    const uint m = (b & 0x7fffffu) | 0x800000u, frac = (uint)(23 - e); // bits below the point
    if ((m & ((1u << frac) - 1u)) != 0u)
        return 0u;
    return ((m >> frac) & 1u) != 0u ? 2u : 1u;
}

// |a|^b = e^t, t = b log|a|: t within |t| 2^-49.4 (the device's log, 3 ulp, and the product's
// rounding), which e^t turns into a relative |t| 2^-49.4, with exp's 2^-48 and the quotient's
// 2^-53 (t > 0: 1 / e^-t); the interval is 2^-40 + |t| 2^-46. Past |t| = 708, inf or 0 (e^t
// beyond every float, or below 2^-1000). The sign: a negative a and an odd b. A negative a and a
// non-integer b: NaN. a^0 = 1^b = 1, even for a NaN; a^1 and a^2 exactly (a square has 48 bits at
// most), rounded as they are. The host's: another NaN, an infinity, a zero, a subnormal, a = -1;
// and whatever the interval leaves undecided (an exact power on a midpoint, such as a^3).
static inline tg_u64 tg_tf_pow_in(uint ab, uint bb, uint bf16) {
    if ((bb & 0x7fffffffu) == 0u || ab == 0x3f800000u) // a^0 = 1^b = 1, NaNs too (IEEE's pow)
        return (tg_u64)(bf16 != 0u ? 0x3f80u : 0x3f800000u);
    if (!tg_tf_normal(ab) || !tg_tf_normal(bb) || ab == 0xbf800000u)
        return tg_tf_undecided();
    const uint kind = tg_tf_int_kind(bb);
    const bool neg = (ab >> 31) != 0u;
    if (neg && kind == 0u)
        return (tg_u64)(bf16 != 0u ? 0x7fc0u : 0x7fc00000u);
    const tg_f64 x = tg_d_f32(ab & 0x7fffffffu), y = tg_d_f32(bb), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    if (bb == 0x3f800000u || bb == 0x40000000u) // a^1 and a^2: exact in double (48 bits at most)
        return tg_tf_round_in(bb == 0x3f800000u ? tg_d_f32(ab) : tg_dmul(x, x), tg_dk(0.0, 0x0000000000000000ul), true,
                              bf16);
    const tg_f64 t = tg_dmul(y, tg_dm_log(x));
    const tg_f64 m = tg_dle(t, tg_dk(0.0, 0x0000000000000000ul)) ? tg_sm_exp_neg(t)
                                                                   : tg_ddiv(ONE, tg_sm_exp_neg(tg_dneg(t)));
    const tg_f64 q = neg && kind == 2u ? tg_dneg(m) : m;
    const tg_f64 w = tg_dadd(tg_dk(9.094947017729282e-13, 0x3d70000000000000ul), // 2^-40 + |t| 2^-46
                             tg_dmul(tg_dabs(t), tg_dk(1.4210854715202004e-14, 0x3d10000000000000ul)));
    return tg_tf_round_in(q, tg_dmul(tg_dabs(q), w), true, bf16);
}

static inline tg_u64 tg_tf_pow(uint ab, uint bb) {
    return tg_tf_pow_in(ab, bb, 0u);
}

// bf16 operands (their bits in the low 16), a bf16 result.
static inline tg_u64 tg_tf_pow_bf16(uint ab, uint bb) {
    return tg_tf_pow_in(ab << 16, bb << 16, 1u);
}

// gelu_backward(x, g) = g (Phi(x) + x phi(x)), phi(x) = e^(-x^2 / 2) / sqrt(2 pi) within 2^-47 with
// x's product: d = Phi + x phi may cancel (x near -0.75), so its bound is absolute: Phi's, x phi's
// 2^-47, the sum's 2^-52; the interval is |g| 4 times that, and 2^-50 |q|.
static inline tg_u64 tg_tf_gelu_backward(uint xb, uint gb) {
    if (!tg_tf_normal(xb) || !tg_tf_normal(gb))
        return tg_tf_grad_special(xb, gb);
    const tg_f64 x = tg_d_f32(xb), g = tg_d_f32(gb), HALF = tg_dk(0.5, 0x3fe0000000000000ul);
    const tg_f64 phi = tg_tf_phi(x);
    const tg_f64 dens = tg_dmul(tg_sm_exp_neg(tg_dneg(tg_dmul(tg_dmul(x, x), HALF))),
                                tg_dk(0.3989422804014327, 0x3fd9884533d43651ul)); // 1 / sqrt(2 pi)
    const tg_f64 xd = tg_dmul(x, dens), d = tg_dadd(phi, xd), q = tg_dmul(g, d);
    const tg_f64 d_err = tg_dadd(tg_dadd(tg_tf_phi_err(x, phi),
                                         tg_dmul(tg_dabs(xd), tg_dk(7.105427357601002e-15, 0x3d00000000000000ul))), // 2^-47
                                 tg_dmul(tg_dabs(d), tg_dk(2.220446049250313e-16, 0x3cb0000000000000ul)));        // 2^-52
    const tg_f64 err = tg_dadd(tg_dmul(tg_dmul(tg_dabs(g), d_err), tg_dk(4.0, 0x4010000000000000ul)),
                               tg_dmul(tg_dabs(q), tg_dk(8.881784197001252e-16, 0x3cd0000000000000ul)));
    return tg_tf_round_z(q, err, false);
}
