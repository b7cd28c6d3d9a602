// log1p, log, sin and cos in binary64, written in the double kinds' function-call form (tg_f64,
// tg_dadd, tg_dfma, tg_dk(literal, bits), ...), for the kernels that need them where the language
// has no libm on double: MSL, whose doubles are kernels/gpu/softdouble.h's. A device prelude: the
// renderer (libtgrad/src/gen/emit.c) copies this text, verbatim, after softdouble.h into each
// double kind's MSL kernel: log_softmax and logsumexp (log1p), the normal draws (log, sin, cos),
// rope (sin, cos). tests/c/test_gpu_softmath.c compiles the same text as C against long double
// references, on the host's doubles and on softdouble.h's.
//
// Every operation here is one IEEE binary64 operation rounded to nearest (fma rounded once), which
// softdouble.h gives bit for bit, so each function's bits are the same on any correct double,
// native or soft; no libm. Every NaN returned is 0x7ff8000000000000 (none comes from arithmetic).
//
// The contracts (error in ulps of the exact value's binade; measured: `test_gpu_softmath all 24`,
// 2^24 arguments per range, against long double):
//   tg_dm_log1p(x)  x > -1: relative error below 0.6 ulp (measured 0.553); tiny and subnormal x
//                   give x; -1 gives -inf, +inf gives +inf, x < -1 or NaN gives NaN.
//   tg_dm_log(x)    x > 0, subnormals too: relative error below 0.6 ulp (measured 0.550), near 1
//                   as everywhere; 0 gives -inf, +inf gives +inf, x < 0 or NaN gives NaN.
//   tg_dm_sin(x), tg_dm_cos(x)
//                   |x| <= 0.8: relative error below 0.55 ulp (measured 0.537); |x| <= 2^32:
//                   absolute error below 0.55 2^-53 (measured 0.535 2^-53); |x| > 2^32, inf or
//                   NaN: NaN (the callers' "undecided", which the host recomputes).
// In each function's comment: the truncation of its series (Taylor's, whose terms bound the rest)
// and its roundings, in ulps of the result (a rounding of v costs at most 2^-53 |v|; an ulp of the
// result is at least 2^-53 of it).
//
// The common subset of C99, MSL 2.3 (C++14), OpenCL C 1.2 and CUDA: the types tg_f64 (with the
// function-call API), uint, int, bool, tg_u64 and tg_i64 (64-bit integers the renderer typedefs
// before this text); no floating-point type or literal outside tg_dk, no operator on a tg_f64 (in
// MSL it is a struct), no pointers, no identifier that is a type or builtin in one of them.

// The NaN every function returns outside its domain, and +inf.
static inline tg_f64 tg_dm_nan(void) {
    return tg_d_of((tg_u64)0x7ff80000u << 32);
}

static inline tg_f64 tg_dm_inf(void) {
    return tg_d_of((tg_u64)0x7ff00000u << 32);
}

// kd ln2 + log1p(f) + c, for an integer kd (|kd| < 2^11), -0.2929 <= f <= 0.4143 (exact) and a
// correction |c| <= 2^-52 below f's own rounding.
//   log1p(f) = 2 atanh(s) with s = f / (2 + f), |s| <= 0.17158, written f - H + s (H + R) with
//   H = f^2 / 2 and R = 2 atanh(s) / s - 2 = sum_{n>=1} 2 s^2n / (2n+1) (an identity: f - H + s H
//   = 2s). R: its Taylor series to n = 10 by Horner; the first term left out, 2 s^23 / 23, is below
//   2^-60.4 of the result, the whole tail below 0.006 ulp.
//   Exact: s + sl = f / (2 + f) within 2^-104 (2 + f = d + dl, and the division's remainder by
//   fma), H = h + hl (fma), h + R = t + te, kd ln2 + f - h = b + ae + be (ln2's high part has 42
//   bits: kd LN2_HI is exact; Fast2Sum twice: |kd LN2_HI| >= |f| unless kd = 0, |kd LN2_HI + f| >
//   |h|). Rounded: s t (|s t| <= 0.0522 |result|, the worst at f = 0.4142 where kd = 0): 0.052
//   ulp; R (z's rounding, Horner's, the product's: 3.4 2^-53 of |s R| <= 0.0099 |result|): 0.034
//   ulp; the rest's, below 2^-40 ulp; the final addition, 0.5 ulp. Below 0.6 ulp.
static inline tg_f64 tg_dm_log_core(tg_f64 kd, tg_f64 f, tg_f64 c) {
    const tg_f64 TWO = tg_dk(2.0, 0x4000000000000000ul);
    const tg_f64 LN2_HI = tg_dk(0.6931471805598903, 0x3fe62e42fefa3800ul);   // ln 2 to 42 bits
    const tg_f64 LN2_LO = tg_dk(5.497923018708371e-14, 0x3d2ef35793c76730ul); // ln 2 - LN2_HI
    const tg_f64 d = tg_dadd(TWO, f);
    const tg_f64 dl = tg_dsub(f, tg_dsub(d, TWO));                            // 2 + f = d + dl
    const tg_f64 s = tg_ddiv(f, d);
    const tg_f64 sl = tg_ddiv(tg_dsub(tg_dfma(tg_dneg(s), d, f), tg_dmul(s, dl)), d); // f/(2+f) - s
    const tg_f64 z = tg_dfma(tg_dadd(s, s), sl, tg_dmul(s, s));
    tg_f64 p = tg_dk(0.09523809523809523, 0x3fb8618618618618ul);             // 2/21
    p = tg_dfma(p, z, tg_dk(0.10526315789473684, 0x3fbaf286bca1af28ul));      // 2/19
    p = tg_dfma(p, z, tg_dk(0.11764705882352941, 0x3fbe1e1e1e1e1e1eul));      // 2/17
    p = tg_dfma(p, z, tg_dk(0.13333333333333333, 0x3fc1111111111111ul));      // 2/15
    p = tg_dfma(p, z, tg_dk(0.15384615384615385, 0x3fc3b13b13b13b14ul));      // 2/13
    p = tg_dfma(p, z, tg_dk(0.18181818181818182, 0x3fc745d1745d1746ul));      // 2/11
    p = tg_dfma(p, z, tg_dk(0.2222222222222222, 0x3fcc71c71c71c71cul));       // 2/9
    p = tg_dfma(p, z, tg_dk(0.2857142857142857, 0x3fd2492492492492ul));       // 2/7
    p = tg_dfma(p, z, tg_dk(0.4, 0x3fd999999999999aul));                     // 2/5
    p = tg_dfma(p, z, tg_dk(0.6666666666666666, 0x3fe5555555555555ul));       // 2/3
    const tg_f64 R = tg_dmul(p, z);
    const tg_f64 hf = tg_dmul(f, tg_dk(0.5, 0x3fe0000000000000ul));
    const tg_f64 h = tg_dmul(hf, f);
    const tg_f64 hl = tg_dfma(hf, f, tg_dneg(h));                             // f^2/2 = h + hl
    const tg_f64 t = tg_dadd(h, R);
    const tg_f64 te = tg_dsub(R, tg_dsub(t, h));                              // h + R = t + te
    const tg_f64 kh = tg_dmul(kd, LN2_HI);
    const tg_f64 a = tg_dadd(kh, f);
    const tg_f64 ae = tg_dsub(f, tg_dsub(a, kh));                             // kh + f = a + ae
    const tg_f64 b = tg_dsub(a, h);
    const tg_f64 be = tg_dsub(tg_dsub(a, b), h);                              // a - h = b + be
    // the correction: ae + be - hl + c + kd LN2_LO + (s + sl)(h + hl + R) - s t
    tg_f64 lo = tg_dfma(sl, t, tg_dmul(kd, LN2_LO));
    lo = tg_dadd(lo, tg_dfma(s, tg_dadd(hl, te), tg_dsub(c, hl)));
    lo = tg_dadd(lo, tg_dadd(ae, be));
    return tg_dadd(b, tg_dfma(s, t, lo));
}

// kbias ln2 + log(x) + c for a positive normal x: x = 2^k m with m in [sqrt(1/2), sqrt(2)) from
// its bits (sqrt(2)'s double is above sqrt(2), and half of it above sqrt(1/2)), f = m - 1 exact
// (Sterbenz), then tg_dm_log_core.
static inline tg_f64 tg_dm_log_normal(tg_f64 x, tg_i64 kbias, tg_f64 c) {
    const tg_u64 xb = tg_d_bits(x);
    const tg_u64 frac = xb & (((tg_u64)1u << 52) - (tg_u64)1u);
    const bool upper = frac >= (((tg_u64)0x6a09eu << 32) | (tg_u64)0x667f3bcdu); // 1.frac >= sqrt 2
    const tg_i64 k = (tg_i64)(xb >> 52) - (tg_i64)1023 + kbias + (upper ? (tg_i64)1 : (tg_i64)0);
    const tg_f64 m = tg_d_of(frac | ((upper ? (tg_u64)1022u : (tg_u64)1023u) << 52));
    return tg_dm_log_core(tg_d_i64(k), tg_dsub(m, tg_dk(1.0, 0x3ff0000000000000ul)), c);
}

// log(1 + x). Below 2^-54 in magnitude it is x rounded (x^2/2 is under a quarter of x's ulp; -0
// stays -0); on [-0.29, 0.41) the core takes f = x; elsewhere 1 + x = u + e exactly (TwoSum),
// u >= 2^-53 is normal and log(u + e) = log(u) + e/u within 2^-106 (|e/u| <= 2^-53).
static inline tg_f64 tg_dm_log1p(tg_f64 x) {
    const tg_f64 ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    const tg_f64 ZERO = tg_dk(0.0, 0x0000000000000000ul);
    if (!tg_dgt(x, tg_dneg(ONE)) || !tg_dlt(x, tg_dm_inf())) {
        if (tg_deq(x, tg_dneg(ONE)))
            return tg_dneg(tg_dm_inf());
        return tg_deq(x, tg_dm_inf()) ? x : tg_dm_nan();
    }
    if (tg_dlt(tg_dabs(x), tg_dk(5.551115123125783e-17, 0x3c90000000000000ul))) // 2^-54
        return x;
    if (tg_dge(x, tg_dk(-0.29, 0xbfd28f5c28f5c28ful)) && tg_dlt(x, tg_dk(0.41, 0x3fda3d70a3d70a3dul)))
        return tg_dm_log_core(ZERO, x, ZERO);
    const tg_f64 u = tg_dadd(ONE, x);
    const tg_f64 xv = tg_dsub(u, ONE);
    const tg_f64 e = tg_dadd(tg_dsub(ONE, tg_dsub(u, xv)), tg_dsub(x, xv));
    return tg_dm_log_normal(u, (tg_i64)0, tg_ddiv(e, u));
}

// log(x). A subnormal x is scaled by 2^54 first.
static inline tg_f64 tg_dm_log(tg_f64 x) {
    const tg_f64 ZERO = tg_dk(0.0, 0x0000000000000000ul);
    if (!tg_dgt(x, ZERO) || !tg_dlt(x, tg_dm_inf())) {
        if (tg_deq(x, ZERO))
            return tg_dneg(tg_dm_inf());
        return tg_deq(x, tg_dm_inf()) ? x : tg_dm_nan();
    }
    const tg_f64 TWO54 = tg_dk(18014398509481984.0, 0x4350000000000000ul);
    if ((tg_d_bits(x) >> 52) == (tg_u64)0u)
        return tg_dm_log_normal(tg_dmul(x, TWO54), (tg_i64)-54, ZERO);
    return tg_dm_log_normal(x, (tg_i64)0, ZERO);
}

// sin(r + rl) for |r| <= pi/4 + 2^-20 (the reduced angle; |r| >= 2^-27 unreduced) and |rl| <=
// ulp(r)/2: r + r^3 S1 + r^5 Q(r^2) + rl cos(r), S1 = -1/6 = S1H + S1L, Q Taylor's from 1/5! to
// 1/17!: the first term left out, r^19/19!, is below 2^-62.4 of the result (0.003 ulp).
//   Exact: r^3 = v + vl within 2^-104 of it (z = r^2 and v = z r with their fma remainders),
//   v S1H = th + tl (fma), r + th = sh + se (Fast2Sum: |r| > |th|). Rounded: the correction, whose
//   biggest term r^5 Q is below 0.0039 of the result: its fma, three additions and r^5 Q's own
//   (v z's, Horner's: 2.1 2^-53), 0.024 ulp; rl cos(r) to 2^-64 |r|; the final addition, 0.5
//   ulp. Below 0.53 ulp.
static inline tg_f64 tg_dm_sin_small(tg_f64 r, tg_f64 rl) {
    const tg_f64 S1H = tg_dk(-0.16666666666666666, 0xbfc5555555555555ul);
    const tg_f64 S1L = tg_dk(-9.25185853854297e-18, 0xbc65555555555555ul);    // -1/6 - S1H
    const tg_f64 z = tg_dmul(r, r);
    const tg_f64 zl = tg_dfma(r, r, tg_dneg(z));
    const tg_f64 v = tg_dmul(z, r);
    const tg_f64 vl = tg_dfma(zl, r, tg_dfma(z, r, tg_dneg(v)));
    tg_f64 q = tg_dk(2.8114572543455206e-15, 0x3ce952c77030ad4aul);          // 1/17!
    q = tg_dfma(q, z, tg_dk(-7.647163731819816e-13, 0xbd6ae7f3e733b81ful));   // -1/15!
    q = tg_dfma(q, z, tg_dk(1.6059043836821613e-10, 0x3de6124613a86d09ul));   // 1/13!
    q = tg_dfma(q, z, tg_dk(-2.505210838544172e-08, 0xbe5ae64567f544e4ul));   // -1/11!
    q = tg_dfma(q, z, tg_dk(2.7557319223985893e-06, 0x3ec71de3a556c734ul));   // 1/9!
    q = tg_dfma(q, z, tg_dk(-0.0001984126984126984, 0xbf2a01a01a01a01aul));   // -1/7!
    q = tg_dfma(q, z, tg_dk(0.008333333333333333, 0x3f81111111111111ul));     // 1/5!
    const tg_f64 th = tg_dmul(v, S1H);
    const tg_f64 tl = tg_dfma(v, S1H, tg_dneg(th));                           // v S1H = th + tl
    const tg_f64 sh = tg_dadd(r, th);
    const tg_f64 se = tg_dsub(th, tg_dsub(sh, r));                            // r + th = sh + se
    // rl cos(r) as rl (1 - z/2 + z^2/24): the error, rl z^3/720, is below 2^-64 |r|
    const tg_f64 C2 = tg_dk(0.041666666666666664, 0x3fa5555555555555ul);      // 1/4!
    const tg_f64 cr = tg_dfma(z, C2, tg_dk(-0.5, 0xbfe0000000000000ul));
    const tg_f64 rc = tg_dmul(rl, tg_dfma(cr, z, tg_dk(1.0, 0x3ff0000000000000ul)));
    tg_f64 lo = tg_dfma(tg_dmul(v, z), q, rc);
    lo = tg_dadd(lo, tg_dfma(vl, S1H, tg_dmul(v, S1L)));
    lo = tg_dadd(lo, tl);
    return tg_dadd(sh, tg_dadd(se, lo));
}

// cos(r + rl) for |r| <= pi/4 + 2^-20 (as tg_dm_sin_small's) and |rl| <= ulp(r)/2: 1 - r^2/2 +
// r^4 C(r^2) - rl sin(r), C Taylor's from 1/4! to 1/18!: the first term left out, r^20/20!, is
// below 2^-67 of the result.
//   Exact: r^2/2 = hz + hzl (fma; halving is exact), 1 - hz = w + we (Fast2Sum). Rounded, in units
//   of 2^-53, the ulp of a result in [0.707, 1) (1 is reached only from within 2^-54): r^4 C <=
//   0.0157, with r^4's one rounding and C's Horner (1.14 2^-53 relative), 0.034; the fma adding
//   it to the rest, a value below 2^-5, 0.016; rl sin(r) to 2^-62; the final addition, 0.5. Below
//   0.55 ulp.
static inline tg_f64 tg_dm_cos_small(tg_f64 r, tg_f64 rl) {
    const tg_f64 ONE = tg_dk(1.0, 0x3ff0000000000000ul);
    const tg_f64 HALF = tg_dk(0.5, 0x3fe0000000000000ul);
    const tg_f64 z = tg_dmul(r, r);
    const tg_f64 hz = tg_dmul(z, HALF);
    const tg_f64 zl = tg_dfma(r, r, tg_dneg(z));
    const tg_f64 hzl = tg_dmul(zl, HALF);
    tg_f64 p = tg_dk(-1.5619206968586225e-16, 0xbca6827863b97d97ul);         // -1/18!
    p = tg_dfma(p, z, tg_dk(4.779477332387385e-14, 0x3d2ae7f3e733b81ful));    // 1/16!
    p = tg_dfma(p, z, tg_dk(-1.1470745597729725e-11, 0xbda93974a8c07c9dul));  // -1/14!
    p = tg_dfma(p, z, tg_dk(2.08767569878681e-09, 0x3e21eed8eff8d898ul));     // 1/12!
    p = tg_dfma(p, z, tg_dk(-2.755731922398589e-07, 0xbe927e4fb7789f5cul));   // -1/10!
    p = tg_dfma(p, z, tg_dk(2.48015873015873e-05, 0x3efa01a01a01a01aul));     // 1/8!
    p = tg_dfma(p, z, tg_dk(-0.001388888888888889, 0xbf56c16c16c16c17ul));    // -1/6!
    p = tg_dfma(p, z, tg_dk(0.041666666666666664, 0x3fa5555555555555ul));     // 1/4!
    const tg_f64 w = tg_dsub(ONE, hz);
    const tg_f64 we = tg_dsub(tg_dsub(ONE, w), hz);                           // 1 - hz = w + we
    // rl sin(r) as rl r (1 - z/6): the error, rl r^5/120, is below 2^-62
    const tg_f64 S1 = tg_dk(-0.16666666666666666, 0xbfc5555555555555ul);      // -1/3!
    const tg_f64 rs = tg_dmul(tg_dmul(rl, r), tg_dfma(z, S1, ONE));
    const tg_f64 zz = tg_dfma(z, z, tg_dmul(tg_dadd(z, z), zl));              // r^4, one rounding
    return tg_dadd(w, tg_dfma(zz, p, tg_dsub(tg_dsub(we, hzl), rs)));
}

// sin(x) (quarter == 0u) or cos(x) = sin(x + pi/2) (quarter == 1u). Below 2^-27 in magnitude
// sin(x) is x rounded and cos(x) is 1 rounded (x^2/6, x^2/2 below a quarter of their ulp), up to
// pi/4 the kernels take r = x. Beyond, to 2^32: x = kd pi/2 + r + rl with kd the integer nearest
// x 2/pi (|kd| < 2^32; x 2/pi is rounded, by at most 2^-20) and pi/2 = P1 + Q1 + Q2 within
// 2^-130. P1 has 21 bits, so kd P1 is exact, and so is r1 = x - kd P1 (a multiple of ulp(x)
// below 2^53 ulp(x)); kd Q1 = p + pe (fma) and r1 - p = h + he (TwoSum) exactly; the rest, below
// 2^-42, takes three roundings (2^-95) and h + rest = r + rl (TwoSum): r + rl is within 2^-94 of
// x - kd pi/2, and |r| <= pi/4 + 2^-20. The quarter kd + quarter picks the kernel and the sign.
// Absolute error: the kernels' 0.55 ulp of a value at most 1, below 0.55 2^-53, and the
// reduction's 2^-94. On |x| <= 0.8, |r| > 0.77 where reduced: the kernels' relative error.
static inline tg_f64 tg_dm_sincos(tg_f64 x, uint quarter) {
    const tg_f64 ax = tg_dabs(x);
    if (!tg_dle(ax, tg_dk(4294967296.0, 0x41f0000000000000ul)))              // 2^32, inf, NaN
        return tg_dm_nan();
    if (tg_dlt(ax, tg_dk(7.450580596923828e-09, 0x3e40000000000000ul)))      // 2^-27
        return quarter == 0u ? x : tg_dk(1.0, 0x3ff0000000000000ul);          // within 2^-55 relative
    tg_f64 r = x;
    tg_f64 rl = tg_dk(0.0, 0x0000000000000000ul);
    uint q = quarter;
    if (tg_dgt(ax, tg_dk(0.7853981633974483, 0x3fe921fb54442d18ul))) {       // pi/4
        const tg_f64 SHIFT = tg_dk(6755399441055744.0, 0x4338000000000000ul); // 1.5 2^52
        const tg_f64 P1 = tg_dk(1.570796012878418, 0x3ff921fb00000000ul);
        const tg_f64 Q1 = tg_dk(3.139164786504813e-07, 0x3e95110b4611a626ul);
        const tg_f64 Q2 = tg_dk(1.0562999066987428e-23, 0x3b298a2e03707345ul);
        const tg_f64 t = tg_dmul(x, tg_dk(0.6366197723675814, 0x3fe45f306dc9c883ul)); // 2/pi
        const tg_f64 kd = tg_dsub(tg_dadd(t, SHIFT), SHIFT);
        const tg_f64 r1 = tg_dsub(x, tg_dmul(kd, P1));
        const tg_f64 p = tg_dmul(kd, Q1);
        const tg_f64 pe = tg_dfma(kd, Q1, tg_dneg(p));
        const tg_f64 h = tg_dsub(r1, p);
        const tg_f64 hv = tg_dsub(r1, h);                                     // TwoSum r1 - p
        const tg_f64 he = tg_dadd(tg_dsub(r1, tg_dadd(h, hv)), tg_dsub(hv, p));
        const tg_f64 rest = tg_dsub(tg_dsub(he, pe), tg_dmul(kd, Q2));
        r = tg_dadd(h, rest);
        const tg_f64 rv = tg_dsub(r, h);                                      // TwoSum h + rest
        rl = tg_dadd(tg_dsub(h, tg_dsub(r, rv)), tg_dsub(rest, rv));
        q += (uint)(tg_u64)tg_i64_d(kd);
    }
    const tg_f64 v = (q & 1u) != 0u ? tg_dm_cos_small(r, rl) : tg_dm_sin_small(r, rl);
    return (q & 2u) != 0u ? tg_dneg(v) : v;
}

static inline tg_f64 tg_dm_sin(tg_f64 x) {
    return tg_dm_sincos(x, 0u);
}

static inline tg_f64 tg_dm_cos(tg_f64 x) {
    return tg_dm_sincos(x, 1u);
}
