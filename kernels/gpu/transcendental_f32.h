// The float32 transcendental ops in binary64, as every float32 elementwise kernel libtgrad renders
// for exp, log, log1p, sin, cos, tanh, sigmoid, silu, gelu or gelu_tanh computes them, and the
// rounding the two-operand ops of kernels/gpu/derivatives_pow.h share. A device prelude: the
// renderer (libtgrad/src/gen/ew.c, tg_gen_emit_prelude) copies this text, verbatim, after the
// double kinds' head (native doubles in OpenCL C and CUDA, kernels/gpu/softdouble.h and
// softmath.h in MSL) and kernels/gpu/softmax.h (tg_sm_exp_neg), then derivatives_pow.h.
//
// Each function takes a float32's bits and returns the correctly rounded float32 result's bits
// (the CPU's, libtgrad/src/ops/elementwise_f32.c) where a bound decides them, else bit 32 set:
// the element is undecided and the host recomputes it with the CPU's own code
// (tg_ew_on_host). So the bytes are the CPU's whatever the device's doubles, if each bound
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

// q within e (absolute) of the exact value: its float32 (bf16 != 0: bfloat16) bits when the
// interval decides them. An infinite q stands for a value beyond every float (an exponential of
// an argument past 708): inf of its sign. NaN: undecided. An interval wholly below 2^-150 rounds
// to a zero of q's sign (zero_ok; else undecided: the derivative ops leave a zero's sign to the
// host); one reaching below 2^-126 otherwise is undecided (float32's and bfloat16's subnormals).
static inline tg_u64 tg_tf_round_in(tg_f64 q, tg_f64 e, bool zero_ok, uint bf16) {
    const tg_f64 aq = tg_dabs(q);
    const tg_f64 INF = tg_d_of((tg_u64)0x7ff00000u << 32);
    const tg_f64 MIN_NORMAL = tg_dk(1.1754943508222875e-38, 0x3810000000000000ul); // 2^-126
    const tg_f64 ZERO_BELOW = tg_dk(7.006492321624085e-46, 0x3690000000000000ul);  // 2^-150
    const uint sign32 = (uint)(tg_d_bits(q) >> 32) & 0x80000000u;
    const uint sign = bf16 != 0u ? sign32 >> 16 : sign32;
    if (tg_dne(q, q))
        return tg_tf_undecided();
    if (tg_deq(aq, INF))
        return (tg_u64)(sign | (bf16 != 0u ? 0x7f80u : 0x7f800000u));
    if (tg_dlt(tg_dadd(aq, e), ZERO_BELOW)) // the whole interval rounds to zero
        return zero_ok ? (tg_u64)sign : tg_tf_undecided();
    if (tg_dlt(tg_dsub(aq, e), MIN_NORMAL)) // it reaches the subnormal range: the host's
        return tg_tf_undecided();
    const uint lo = tg_sm_round(tg_dsub(q, e), bf16), hi = tg_sm_round(tg_dadd(q, e), bf16);
    return lo == hi ? (tg_u64)lo : tg_tf_undecided();
}

static inline tg_u64 tg_tf_round_z(tg_f64 q, tg_f64 e, bool zero_ok) {
    return tg_tf_round_in(q, e, zero_ok, 0u);
}

static inline tg_u64 tg_tf_round(tg_f64 q, tg_f64 e) {
    return tg_tf_round_in(q, e, true, 0u);
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

// ---- gelu: x Phi(x), Phi(x) = erfc(-x / sqrt(2)) / 2 ------------------------------------------
// erf's Taylor sum at t = z^2 (the signed one at -z^2, that of the terms' magnitudes at z^2):
// sum over k <= 34 of t^k / (k! (2k + 1)), by Horner from the rounded coefficients (no division);
// for |t| < 2.25 the first term left out is below 2^-90 of the sum. The coefficients' roundings
// and Horner's 68 (fma: one each) keep it within 70 2^-53 < 2^-46 of the magnitudes' sum.
static inline tg_f64 tg_tf_erf_sum(tg_f64 t) {
    tg_f64 p = tg_dk(4.908923964523423e-41, 0x37911ae81077a49eul); // 1 / (34! 69)
    p = tg_dfma(p, t, tg_dk(1.7188560628017835e-39, 0x37e2b778acc3dedful)); // 1 / (33! 67)
    p = tg_dfma(p, t, tg_dk(5.846755007468836e-38, 0x3833e53defc4e233ul)); // 1 / (32! 65)
    p = tg_dfma(p, t, tg_dk(1.930357208815108e-36, 0x388486eea20c2656ul)); // 1 / (31! 63)
    p = tg_dfma(p, t, tg_dk(6.180307588222796e-35, 0x38d4899fcdef0a8dul)); // 1 / (30! 61)
    p = tg_dfma(p, t, tg_dk(1.9169428621097826e-33, 0x3923e81bb5701ac5ul)); // 1 / (29! 59)
    p = tg_dfma(p, t, tg_dk(5.754191643982172e-32, 0x3972ac65385f79acul)); // 1 / (28! 57)
    p = tg_dfma(p, t, tg_dk(1.669761793417372e-30, 0x39c0eef30fa10d2cul)); // 1 / (27! 55)
    p = tg_dfma(p, t, tg_dk(4.6784835155184856e-29, 0x3a0da7460554e5dbul)); // 1 / (26! 53)
    p = tg_dfma(p, t, tg_dk(1.2641078988989164e-27, 0x3a5909c9de3a31c5ul)); // 1 / (25! 51)
    p = tg_dfma(p, t, tg_dk(3.289260349175752e-26, 0x3aa45c0a838efe59ul)); // 1 / (24! 49)
    p = tg_dfma(p, t, tg_dk(8.230149299214221e-25, 0x3aefd6bebd65107aul)); // 1 / (23! 47)
    p = tg_dfma(p, t, tg_dk(1.977064753877905e-23, 0x3b37e6b81382cd42ul)); // 1 / (22! 45)
    p = tg_dfma(p, t, tg_dk(4.5518467589282e-22, 0x3b813246abce1bddul)); // 1 / (21! 43)
    p = tg_dfma(p, t, tg_dk(1.0025164934907719e-20, 0x3bc7abd72258fb6eul)); // 1 / (20! 41)
    p = tg_dfma(p, t, tg_dk(2.107855191442136e-19, 0x3c0f1b4073b34a68ul)); // 1 / (19! 39)
    p = tg_dfma(p, t, tg_dk(4.221407288807088e-18, 0x3c5377c2110f2083ul)); // 1 / (18! 37)
    p = tg_dfma(p, t, tg_dk(8.032735012415773e-17, 0x3c97271cbe5863ecul)); // 1 / (17! 35)
    p = tg_dfma(p, t, tg_dk(1.4483264643598138e-15, 0x3cda173a167fba4dul)); // 1 / (16! 33)
    p = tg_dfma(p, t, tg_dk(2.466827010264457e-14, 0x3d1bc6250fb14231ul)); // 1 / (15! 31)
    p = tg_dfma(p, t, tg_dk(3.9554295164585257e-13, 0x3d5bd577e658d020ul)); // 1 / (14! 29)
    p = tg_dfma(p, t, tg_dk(5.9477940136376354e-12, 0x3d9a289ee7e40f74ul)); // 1 / (13! 27)
    p = tg_dfma(p, t, tg_dk(8.35070279514724e-11, 0x3dd6f448e13e85e1ul)); // 1 / (12! 25)
    p = tg_dfma(p, t, tg_dk(1.0892221037148573e-09, 0x3e12b67310aa9f3aul)); // 1 / (11! 23)
    p = tg_dfma(p, t, tg_dk(1.3122532963802806e-08, 0x3e4c2e3054870b38ul)); // 1 / (10! 21)
    p = tg_dfma(p, t, tg_dk(1.4503852223150468e-07, 0x3e83777c55568ccdul)); // 1 / (9! 19)
    p = tg_dfma(p, t, tg_dk(1.4589169000933706e-06, 0x3eb87a00187a0018ul)); // 1 / (8! 17)
    p = tg_dfma(p, t, tg_dk(1.3227513227513228e-05, 0x3eebbd779334ef0bul)); // 1 / (7! 15)
    p = tg_dfma(p, t, tg_dk(0.00010683760683760684, 0x3f1c01c01c01c01cul)); // 1 / (6! 13)
    p = tg_dfma(p, t, tg_dk(0.0007575757575757576, 0x3f48d3018d3018d3ul)); // 1 / (5! 11)
    p = tg_dfma(p, t, tg_dk(0.004629629629629629, 0x3f72f684bda12f68ul)); // 1 / (4! 9)
    p = tg_dfma(p, t, tg_dk(0.023809523809523808, 0x3f98618618618618ul)); // 1 / (3! 7)
    p = tg_dfma(p, t, tg_dk(0.1, 0x3fb999999999999aul)); // 1 / (2! 5)
    p = tg_dfma(p, t, tg_dk(0.3333333333333333, 0x3fd5555555555555ul)); // 1 / (1! 3)
    p = tg_dfma(p, t, tg_dk(1.0, 0x3ff0000000000000ul)); // 1 / (0! 1)
    return p;
}

// Phi(x). z = |x| / sqrt(2) (within 2^-52). z < 1.5: (1 -+ erf(z)) / 2, erf(z) = (2 / sqrt(pi)) z
// S(-z^2). Else erfc(z) = e^(-x^2 / 2) K / sqrt(pi) (x^2 / 2 exact), K = 1 / (z + 1/2 / (z + 1 /
// (z + 3/2 / (z + ...)))) (Laplace's continued fraction) evaluated from 100 levels down (fewer
// for a larger z: each depth's truncation is below 2^-53 from its z on), and each level's
// roundings shrink by r / (z + r) < 0.85 on their way up (11 2^-53 in all); Phi = erfc / 2, or
// 1 - erfc / 2.
static inline tg_f64 tg_tf_phi(tg_f64 x) {
    const tg_f64 ONE = tg_dk(1.0, 0x3ff0000000000000ul), HALF = tg_dk(0.5, 0x3fe0000000000000ul);
    const tg_f64 z = tg_dmul(tg_dabs(x), tg_dk(0.7071067811865476, 0x3fe6a09e667f3bcdul));
    const bool pos = tg_dge(x, tg_dk(0.0, 0x0000000000000000ul));
    if (tg_dlt(z, tg_dk(1.5, 0x3ff8000000000000ul))) {
        const tg_f64 erf = tg_dmul(tg_dmul(tg_dk(1.1283791670955126, 0x3ff20dd750429b6dul), z),
                                   tg_tf_erf_sum(tg_dneg(tg_dmul(z, z))));
        return tg_dmul(HALF, pos ? tg_dadd(ONE, erf) : tg_dsub(ONE, erf));
    }
    // the depth: 100 levels from z = 1.5, 60 from 2, 40 from 3, 24 from 5 (each truncated below 2^-53)
    const int depth = tg_dlt(z, tg_dk(2.0, 0x4000000000000000ul))   ? 100
                      : tg_dlt(z, tg_dk(3.0, 0x4008000000000000ul)) ? 60
                      : tg_dlt(z, tg_dk(5.0, 0x4014000000000000ul)) ? 40
                                                                    : 24;
    tg_f64 r = tg_dk(0.0, 0x0000000000000000ul);
    for (int k = depth; k >= 1; k--)
        r = tg_ddiv(tg_dmul(tg_d_i64((tg_i64)k), HALF), tg_dadd(z, r));
    const tg_f64 g = tg_sm_exp_neg(tg_dneg(tg_dmul(tg_dmul(x, x), HALF)));
    const tg_f64 half_erfc = tg_dmul(HALF, tg_ddiv(tg_dmul(g, tg_dk(0.5641895835477563, 0x3fe20dd750429b6dul)),
                                                   tg_dadd(z, r)));
    return pos ? tg_dsub(ONE, half_erfc) : half_erfc;
}

// phi = tg_tf_phi(x)'s absolute error bound. z < 1.5: erf's error is below (2 / sqrt(pi)) z S(z^2)
// 2^-46 (the magnitudes' sum) plus 5 2^-53 (z's rounding through erf' <= 1.13), halved, with the
// last two roundings: below M 2^-47 + 2^-51, given as M 2^-45 + 2^-50. Else erfc within 2^-44.6
// relative (the fraction's 11 2^-53 and z's 2 2^-53 through K, exp's 2^-48, four roundings): phi
// (x < 0) or 1 - phi times 2^-43, and then 2^-52 for 1 - erfc / 2.
static inline tg_f64 tg_tf_phi_err(tg_f64 x, tg_f64 phi) {
    const tg_f64 ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    const tg_f64 z = tg_dmul(tg_dabs(x), tg_dk(0.7071067811865476, 0x3fe6a09e667f3bcdul));
    if (tg_dlt(z, tg_dk(1.5, 0x3ff8000000000000ul))) {
        const tg_f64 M = tg_dmul(tg_dmul(tg_dk(1.1283791670955126, 0x3ff20dd750429b6dul), z), tg_tf_erf_sum(tg_dmul(z, z)));
        return tg_dadd(tg_dmul(M, tg_dk(2.842170943040401e-14, 0x3d20000000000000ul)), // 2^-45
                       tg_dk(8.881784197001252e-16, 0x3cd0000000000000ul));            // 2^-50
    }
    if (tg_dlt(x, tg_dk(0.0, 0x0000000000000000ul))) // phi = erfc / 2: relative
        return tg_dmul(phi, tg_dk(1.1368683772161603e-13, 0x3d40000000000000ul)); // 2^-43
    return tg_dadd(tg_dmul(tg_dsub(ONE, phi), tg_dk(1.1368683772161603e-13, 0x3d40000000000000ul)),
                   tg_dk(2.220446049250313e-16, 0x3cb0000000000000ul)); // 2^-43, 2^-52
}

// gelu (the CPU's -0 below -15): x Phi(x), within |x| E + 2^-50 |q|.
static inline tg_u64 tg_tf_gelu(uint xb) {
    if (tg_tf_is_nan(xb))
        return tg_tf_nan();
    if (tg_tf_is_subnormal(xb))
        return tg_tf_undecided();
    const tg_f64 x = tg_d_f32(xb);
    if (tg_dlt(x, tg_dk(-15.0, 0xc02e000000000000ul)))
        return (tg_u64)0x80000000u;
    const tg_f64 phi = tg_tf_phi(x), q = tg_dmul(x, phi);
    const tg_f64 e = tg_dadd(tg_dmul(tg_dabs(x), tg_tf_phi_err(x, phi)),
                             tg_dmul(tg_dabs(q), tg_dk(8.881784197001252e-16, 0x3cd0000000000000ul)));
    return tg_tf_round(q, e);
}
