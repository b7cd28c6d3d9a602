// The float32 transcendental ops in binary64, as every float32 elementwise kernel libtgrad renders
// for exp, log, log1p, sin, cos, tanh, sigmoid, silu or gelu_tanh computes them. A device prelude:
// the renderer (libtgrad/src/gen/render_gather.c) copies this text, verbatim, after the double
// kinds' head (native doubles in OpenCL C and CUDA, kernels/gpu/softdouble.h and softmath.h in
// MSL) and kernels/gpu/softmax.h (tg_sm_exp_neg).
//
// Each function takes a float32's bits and returns the correctly rounded float32 result's bits
// (the CPU's, libtgrad/src/ops/elementwise_f32.c) where a bound decides them, else bit 32 set:
// the element is undecided and the host recomputes it with the CPU's own code
// (tg_ew32_on_host). So the bytes are the CPU's whatever the device's doubles, if each bound
// holds:
//   - tg_sm_exp_neg(d), d <= 0: relative error below 2^-48 (softmax.h), exactly 0 below -708;
//   - tg_dm_log, tg_dm_log1p: 3 ulp in OpenCL C (its specification; CUDA documents 1), 0.6 ulp
//     in MSL (softmath.h);
//   - tg_dm_sin, tg_dm_cos: 4 ulp in OpenCL C (CUDA documents 2); in MSL, 0.55 ulp for
//     |x| <= 0.8, else an absolute 0.55 2^-53 up to 2^32 and NaN beyond (softmath.h).
// A value q is accepted with the interval q -+ e, e = 2^-40 |q| (and + 2^-52 for sin and cos
// beyond 0.75): each op's own bound (in its comment) is at most 2^-43 |q| or so, a factor of 8
// or more inside, and the interval's ends are rounded once each (2^-53 of them), which that
// factor covers too. The ends' float32 roundings agreeing decides every value between (round to
// nearest even is monotonic). Nothing here depends on how the device treats float32 subnormals:
// a subnormal input, or an interval reaching below 2^-126 but not entirely below 2^-150 (where
// everything rounds to a signed zero), is undecided.
//
// The common subset of OpenCL C 1.2 (cl_khr_fp64), CUDA and MSL: binary64 in the function-call
// form over tg_f64 (softdouble.h's API), uint, bool, tg_u64; no floating literal outside tg_dk, no
// pointers. tests/c/test_gpu_transcendental_f32.c compiles this text as C against the CPU's ops.

// The undecided mark, and the canonical NaN.
static inline tg_u64 tg_tf_undecided(void) {
    return (tg_u64)1u << 32;
}

static inline tg_u64 tg_tf_nan(void) {
    return (tg_u64)0x7fc00000u;
}

// x's bits are a NaN, or a subnormal (nonzero, exponent field 0).
static inline bool tg_tf_is_nan(uint x) {
    return (x & 0x7fffffffu) > 0x7f800000u;
}

static inline bool tg_tf_is_subnormal(uint x) {
    return (x & 0x7f800000u) == 0u && (x & 0x7fffffu) != 0u;
}

// q within e (absolute) of the exact value: its float32 bits when the interval decides them.
// An infinite q stands for a value beyond every float (an exponential of an argument past 708):
// inf of its sign. NaN: undecided. An interval wholly below 2^-150 rounds to a zero of q's sign
// (zero_ok; else undecided: the derivative ops leave a zero's sign to the host).
static inline tg_u64 tg_tf_round_z(tg_f64 q, tg_f64 e, bool zero_ok) {
    const tg_f64 aq = tg_dabs(q);
    const tg_f64 INF = tg_d_of((tg_u64)0x7ff00000u << 32);
    const tg_f64 MIN_NORMAL = tg_dk(1.1754943508222875e-38, 0x3810000000000000ul); // 2^-126
    const tg_f64 ZERO_BELOW = tg_dk(7.006492321624085e-46, 0x3690000000000000ul);  // 2^-150
    const uint sign = (uint)(tg_d_bits(q) >> 32) & 0x80000000u;
    if (tg_dne(q, q))
        return tg_tf_undecided();
    if (tg_deq(aq, INF))
        return (tg_u64)(sign | 0x7f800000u);
    if (tg_dlt(tg_dadd(aq, e), ZERO_BELOW)) // the whole interval rounds to zero
        return zero_ok ? (tg_u64)sign : tg_tf_undecided();
    if (tg_dlt(tg_dsub(aq, e), MIN_NORMAL)) // it reaches the subnormal range: the host's
        return tg_tf_undecided();
    const uint lo = tg_f32_d(tg_dsub(q, e)), hi = tg_f32_d(tg_dadd(q, e));
    return lo == hi ? (tg_u64)lo : tg_tf_undecided();
}

static inline tg_u64 tg_tf_round(tg_f64 q, tg_f64 e) {
    return tg_tf_round_z(q, e, true);
}

// q within 2^-43 |q| or so of the exact value (the ops' common case): the interval 2^-40 |q|.
static inline tg_u64 tg_tf_rel(tg_f64 q) {
    return tg_tf_round(q, tg_dmul(tg_dabs(q), tg_dk(9.094947017729282e-13, 0x3d70000000000000ul)));
}

// exp: e^x for x <= 0 (2^-48), 1 / e^-x above (2^-48 and the quotient's rounding 2^-53); inf
// past 708 (1/0: e^x is beyond every float there), 0 below -708 (tg_sm_exp_neg's 0: e^x is below
// 2^-1000).
static inline tg_u64 tg_tf_exp(uint xb) {
    if (tg_tf_is_nan(xb))
        return tg_tf_nan();
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    const tg_f64 x = tg_d_f32(xb), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    if (tg_dle(x, tg_dk(0.0, 0x0000000000000000ul)))
        return tg_tf_rel(tg_sm_exp_neg(x));
    return tg_tf_rel(tg_ddiv(ONE, tg_sm_exp_neg(tg_dneg(x))));
}

// log: NaN below 0, -inf at +-0, +inf at +inf, 0 at 1 (exact); else the device's log (3 ulp).
static inline tg_u64 tg_tf_log(uint xb) {
    if (tg_tf_is_nan(xb) || xb > 0x80000000u)
        return tg_tf_nan();
    if ((xb & 0x7fffffffu) == 0u)
        return (tg_u64)0xff800000u;
    if (xb == 0x7f800000u)
        return (tg_u64)0x7f800000u;
    if (xb == 0x3f800000u)
        return (tg_u64)0u;
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    return tg_tf_rel(tg_dm_log(tg_d_f32(xb)));
}

// log1p: NaN below -1, -inf at -1, x itself at +-0 and +inf; else the device's log1p (3 ulp).
static inline tg_u64 tg_tf_log1p(uint xb) {
    if (tg_tf_is_nan(xb) || xb > 0xbf800000u)
        return tg_tf_nan();
    if (xb == 0xbf800000u)
        return (tg_u64)0xff800000u;
    if ((xb & 0x7fffffffu) == 0u || xb == 0x7f800000u)
        return (tg_u64)xb;
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    return tg_tf_rel(tg_dm_log1p(tg_d_f32(xb)));
}

// sin (cos: cos_not_sin): NaN at +-inf, sin(+-0) = +-0. The device's value (4 ulp; in MSL 0.55
// ulp up to 0.8, an absolute 0.55 2^-53 beyond, NaN past 2^32: undecided) with 2^-52 more beyond
// 0.75.
static inline tg_u64 tg_tf_sincos(uint xb, bool cos_not_sin) {
    if (tg_tf_is_nan(xb) || (xb & 0x7fffffffu) == 0x7f800000u)
        return tg_tf_nan();
    if (!cos_not_sin && (xb & 0x7fffffffu) == 0u)
        return (tg_u64)xb;
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    const tg_f64 x = tg_d_f32(xb);
    const tg_f64 q = cos_not_sin ? tg_dm_cos(x) : tg_dm_sin(x);
    const tg_f64 e = tg_dmul(tg_dabs(q), tg_dk(9.094947017729282e-13, 0x3d70000000000000ul)); // 2^-40 |q|
    if (tg_dle(tg_dabs(x), tg_dk(0.75, 0x3fe8000000000000ul)))
        return tg_tf_round(q, e);
    return tg_tf_round(q, tg_dadd(e, tg_dk(2.220446049250313e-16, 0x3cb0000000000000ul))); // + 2^-52
}

static inline tg_u64 tg_tf_sin(uint xb) {
    return tg_tf_sincos(xb, false);
}

static inline tg_u64 tg_tf_cos(uint xb) {
    return tg_tf_sincos(xb, true);
}

// tanh. |x| < 1/16: x P(x^2), P tanh's Taylor series to x^14 (the first term left out is below
// 2^-74 of the result; the rounded coefficients and Horner's roundings below 2^-50). Else
// (1 - e) / (1 + e) with e = e^(-2|x|) <= e^(-1/8) (2^-48): 1 - e loses at most e / (1 - e) < 8.5
// times e's error, so below 2^-44 with the three roundings; +-1 at +-inf (e = 0).
static inline tg_u64 tg_tf_tanh(uint xb) {
    if (tg_tf_is_nan(xb))
        return tg_tf_nan();
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    const tg_f64 x = tg_d_f32(xb), ax = tg_dabs(x), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    if (tg_dlt(ax, tg_dk(0.0625, 0x3fb0000000000000ul))) {
        const tg_f64 t = tg_dmul(x, x);
        tg_f64 p = tg_dk(-0.0014558343870513183, 0xbf57da36452b75e3ul);       // -929569/638512875
        p = tg_dfma(p, t, tg_dk(0.003592128036572481, 0x3f6d6d3d0e157de0ul));  // 21844/6081075
        p = tg_dfma(p, t, tg_dk(-0.008863235529902197, 0xbf8226e355e6c23dul)); // -1382/155925
        p = tg_dfma(p, t, tg_dk(0.021869488536155203, 0x3f9664f4882c10faul));  // 62/2835
        p = tg_dfma(p, t, tg_dk(-0.05396825396825397, 0xbfaba1ba1ba1ba1cul));  // -17/315
        p = tg_dfma(p, t, tg_dk(0.13333333333333333, 0x3fc1111111111111ul));   // 2/15
        p = tg_dfma(p, t, tg_dk(-0.3333333333333333, 0xbfd5555555555555ul));   // -1/3
        p = tg_dfma(p, t, ONE);
        return tg_tf_rel(tg_dmul(x, p));
    }
    const tg_f64 e = tg_sm_exp_neg(tg_dmul(tg_dk(-2.0, 0xc000000000000000ul), ax));
    const tg_f64 q = tg_ddiv(tg_dsub(ONE, e), tg_dadd(ONE, e));
    return tg_tf_rel(tg_dlt(x, tg_dk(0.0, 0x0000000000000000ul)) ? tg_dneg(q) : q);
}

// sigmoid: 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below: e's 2^-48 and two roundings.
static inline tg_u64 tg_tf_sigmoid(uint xb) {
    if (tg_tf_is_nan(xb))
        return tg_tf_nan();
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    const tg_f64 x = tg_d_f32(xb), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    if (tg_dge(x, tg_dk(0.0, 0x0000000000000000ul)))
        return tg_tf_rel(tg_ddiv(ONE, tg_dadd(ONE, tg_sm_exp_neg(tg_dneg(x)))));
    const tg_f64 e = tg_sm_exp_neg(x);
    return tg_tf_rel(tg_ddiv(e, tg_dadd(ONE, e)));
}

// silu: x / (1 + e^-x) for x >= 0, x (e^x / (1 + e^x)) below (the CPU's -0 below -120, where
// |x| e^x < 2^-166): e's 2^-48 and three roundings. A tiny x gives x / 2, undecided only where
// that is a float32 midpoint (the exact value lies just beyond it).
static inline tg_u64 tg_tf_silu(uint xb) {
    if (tg_tf_is_nan(xb))
        return tg_tf_nan();
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    const tg_f64 x = tg_d_f32(xb), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    if (tg_dlt(x, tg_dk(-120.0, 0xc05e000000000000ul)))
        return (tg_u64)0x80000000u;
    if (tg_dge(x, tg_dk(0.0, 0x0000000000000000ul)))
        return tg_tf_rel(tg_ddiv(x, tg_dadd(ONE, tg_sm_exp_neg(tg_dneg(x)))));
    const tg_f64 e = tg_sm_exp_neg(x);
    return tg_tf_rel(tg_dmul(x, tg_ddiv(e, tg_dadd(ONE, e))));
}

// gelu_tanh: x / (1 + e^(-2z)), z = sqrt(2/pi) (x + 0.044715 x^3) (the CPU's -0 below -12). z
// carries 6 roundings (the constants' two among them, no cancellation: x and x^3 share a sign),
// which e^(-2z) turns into a relative |2z| 6 2^-53. For x >= 0, E = e^(-2z) <= 1 enters as 1 + E,
// which keeps E |2z| 6 2^-53 <= 6 2^-53 / e of it: with exp's 2^-48 and three roundings, below
// 2^-47. Below 0, x E / (1 + E) with E = e^(2z) keeps all of it: below 2^-47 + |z| 2^-49, and the
// interval is 2^-40 + |z| 2^-45 (|z| < 72 here).
static inline tg_u64 tg_tf_gelu_tanh(uint xb) {
    if (tg_tf_is_nan(xb))
        return tg_tf_nan();
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    const tg_f64 x = tg_d_f32(xb), ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    if (tg_dlt(x, tg_dk(-12.0, 0xc028000000000000ul)))
        return (tg_u64)0x80000000u;
    const tg_f64 K = tg_dk(0.7978845608028654, 0x3fe9884533d43651ul); // sqrt(2/pi)
    const tg_f64 A = tg_dk(0.044715, 0x3fa6e4e26d4801f7ul);
    const tg_f64 z = tg_dmul(K, tg_dadd(x, tg_dmul(A, tg_dmul(tg_dmul(x, x), x))));
    if (tg_dge(x, tg_dk(0.0, 0x0000000000000000ul)))
        return tg_tf_rel(tg_ddiv(x, tg_dadd(ONE, tg_sm_exp_neg(tg_dmul(tg_dk(-2.0, 0xc000000000000000ul), z)))));
    const tg_f64 e = tg_sm_exp_neg(tg_dmul(tg_dk(2.0, 0x4000000000000000ul), z));
    const tg_f64 q = tg_dmul(x, tg_ddiv(e, tg_dadd(ONE, e)));
    const tg_f64 w = tg_dadd(tg_dk(9.094947017729282e-13, 0x3d70000000000000ul), // 2^-40 + |z| 2^-45
                             tg_dmul(tg_dabs(z), tg_dk(2.842170943040401e-14, 0x3d20000000000000ul)));
    return tg_tf_round(q, tg_dmul(tg_dabs(q), w));
}

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
