// The softmax kind's fast path (softmax, log_softmax, logsumexp), as every GPU kernel libtgrad
// renders for it computes it. A device prelude: the renderer (libtgrad/src/gen/render_softmax.c)
// copies this text, verbatim, into each softmax kernel (OpenCL C, CUDA and MSL).
//
// The same doubles as the CPU's row loops (kernels/cpu/softmax_rows.h): the exp polynomial, the
// eight lanes (j mod 8) of the scan and of the sum, and the error bounds of libtgrad/src/ops/
// softmax.c. An output is written only where its bound decides its rounding; otherwise the element
// is undecided (bit 32 of the tg_u64 these return) and the kernel flags its row, which the host
// recomputes with the CPU's own exact row code (tg_softmax_rows_on_host). So the bytes are the
// CPU's whatever the device's doubles: every decided element is the correctly rounded value.
//
// The common subset of OpenCL C 1.2 (cl_khr_fp64), CUDA and MSL: binary64 arithmetic in the
// function-call form over tg_f64 (tg_dadd, tg_dfma, tg_dlt, tg_dk(literal, bits), ...: the API of
// kernels/gpu/softdouble.h, which the renderer maps to native doubles in OpenCL C and CUDA and to
// that software double in MSL, which has none; both give the IEEE bits); uint, tg_u64 and tg_i64
// (64-bit integers the renderer typedefs); no floating literal outside tg_dk, no pointers.

// +inf (no language-neutral spelling of the constant in double).
static inline tg_f64 tg_sm_inf(void) {
    return tg_d_of((tg_u64)0x7ff00000u << 32);
}

// exp(d) for d <= 0 (0 below -708): the Cody-Waite reduction d = k ln2 + r, |r| < 0.3466, e^r by
// its Taylor polynomial of degree 13 (Horner by fma, the coefficients 1/13! .. 1/2!, 1, 1), 2^k
// through the exponent bits. Relative error below TG_SM_EXP_REL = 2^-48 (kernels/cpu/
// softmax_rows.h has the proof).
static inline tg_f64 tg_sm_exp_neg(tg_f64 d) {
    const tg_f64 L2E = tg_dk(1.4426950408889634, 0x3ff71547652b82feul);
    const tg_f64 SHIFT = tg_dk(6755399441055744.0, 0x4338000000000000ul);
    const tg_f64 C1 = tg_dk(0.6931471803691238, 0x3fe62e42fee00000ul);
    const tg_f64 C2 = tg_dk(1.9082149292705877e-10, 0x3dea39ef35793c76ul);
    const tg_f64 LOW = tg_dk(-708.0, 0xc086200000000000ul);
    const tg_f64 dd = tg_dlt(d, LOW) ? LOW : d;
    const tg_f64 t = tg_dadd(tg_dmul(dd, L2E), SHIFT);
    const tg_f64 k = tg_dsub(t, SHIFT);
    const tg_f64 r = tg_dsub(tg_dsub(dd, tg_dmul(k, C1)), tg_dmul(k, C2));
    tg_f64 p = tg_dk(1.6059043836821613e-10, 0x3de6124613a86d09ul);
    p = tg_dfma(p, r, tg_dk(2.08767569878681e-09, 0x3e21eed8eff8d898ul));
    p = tg_dfma(p, r, tg_dk(2.505210838544172e-08, 0x3e5ae64567f544e4ul));
    p = tg_dfma(p, r, tg_dk(2.755731922398589e-07, 0x3e927e4fb7789f5cul));
    p = tg_dfma(p, r, tg_dk(2.7557319223985893e-06, 0x3ec71de3a556c734ul));
    p = tg_dfma(p, r, tg_dk(2.48015873015873e-05, 0x3efa01a01a01a01aul));
    p = tg_dfma(p, r, tg_dk(0.0001984126984126984, 0x3f2a01a01a01a01aul));
    p = tg_dfma(p, r, tg_dk(0.001388888888888889, 0x3f56c16c16c16c17ul));
    p = tg_dfma(p, r, tg_dk(0.008333333333333333, 0x3f81111111111111ul));
    p = tg_dfma(p, r, tg_dk(0.041666666666666664, 0x3fa5555555555555ul));
    p = tg_dfma(p, r, tg_dk(0.16666666666666666, 0x3fc5555555555555ul));
    p = tg_dfma(p, r, tg_dk(0.5, 0x3fe0000000000000ul));
    p = tg_dfma(p, r, tg_dk(1.0, 0x3ff0000000000000ul));
    p = tg_dfma(p, r, tg_dk(1.0, 0x3ff0000000000000ul));
    const tg_i64 ki = (tg_i64)(tg_d_bits(t) - tg_d_bits(SHIFT));
    const tg_f64 scale = tg_d_of((tg_u64)(ki + 1023) << 52);
    return tg_dlt(d, LOW) ? tg_dk(0.0, 0x0000000000000000ul) : tg_dmul(p, scale);
}

// v rounded once to float32 (bf16 == 0u) or bfloat16 bits (round to nearest even): float32 by the
// conversion, bfloat16 through it, corrected at a false midpoint (kernels/cpu/softmax_round.h).
static inline uint tg_sm_round(tg_f64 v, uint bf16) {
    uint u = tg_f32_d(v);
    if (bf16 == 0u)
        return u;
    const tg_f64 f = tg_d_f32(u);
    uint fix = ((u & 0xffffu) == 0x8000u && tg_dne(f, v)) ? 1u : 0u;
    uint up = (tg_dlt(f, v) == tg_dgt(v, tg_dk(0.0, 0x0000000000000000ul))) ? 1u : 0u;
    u += fix * (2u * up - 1u);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// q's rounding straight from its bits when q -+ thr double ulps of its binade hold no rounding
// boundary and q is in the output's normal range (or 0); else bit 32 set (softmax_rows.h, SM_FAST).
static inline tg_u64 tg_sm_fast(tg_f64 q, tg_i64 thr, uint bf16) {
    const uint bits = bf16 != 0u ? 45u : 29u;
    const tg_u64 one = (tg_u64)1;
    const tg_u64 b = tg_d_bits(q), mb = b & (~(tg_u64)0 >> 1), ex = mb >> 52;
    const tg_i64 low = (tg_i64)(mb & ((one << bits) - one)) - (tg_i64)(one << (bits - 1u));
    const tg_i64 dist = low < 0 ? -low : low;
    const tg_u64 rebias = bf16 != 0u ? (tg_u64)(1023 - 127) << 7 : (tg_u64)(1023 - 127) << 23;
    const tg_u64 r = ((mb + (one << (bits - 1u)) - one + ((mb >> bits) & one)) >> bits) - rebias;
    const bool zero = mb == (tg_u64)0;
    const bool ok = (ex >= (tg_u64)(1023 - 126) && ex <= (tg_u64)(1023 + 127) && dist > thr) || zero;
    uint out = zero ? 0u : (uint)r;
    out |= (uint)(b >> 63) << (bf16 != 0u ? 15u : 31u);
    return ok ? (tg_u64)out : ((tg_u64)out | (one << 32));
}

// An element q within relative bound w of the exact value: the fast decision, else the rounding
// of q's interval q -+ |q| w when both ends agree, else undecided (bit 32).
static inline tg_u64 tg_sm_decide(tg_f64 q, tg_f64 w, tg_i64 thr, uint bf16) {
    const tg_u64 f = tg_sm_fast(q, thr, bf16);
    if ((f >> 32) == (tg_u64)0)
        return f;
    const tg_f64 aq = tg_dabs(q);
    const tg_f64 big = tg_dk(1.7976931348623157e+308, 0x7feffffffffffffful);
    const tg_f64 e = tg_dle(aq, big) ? tg_dmul(aq, w) : tg_dk(0.0, 0x0000000000000000ul);
    const uint lo = tg_sm_round(tg_dsub(q, e), bf16), hi = tg_sm_round(tg_dadd(q, e), bf16);
    return lo == hi ? (tg_u64)lo : f;
}

// T's relative bound (T = the sum of exp(x_j - m) over x_j < m, plus the maxima's count less one):
// the sum's roundings (h per term), each difference's rounding through exp, exp's own.
static inline tg_f64 tg_sm_bound_T(tg_f64 h, tg_f64 spread) {
    const tg_f64 U = tg_dk(1.1102230246251565e-16, 0x3ca0000000000000ul); // 2^-53
    const tg_f64 M = tg_dk(1.02, 0x3ff051eb851eb852ul);
    const tg_f64 two = tg_dk(2.0, 0x4000000000000000ul);
    const tg_f64 exp_rel = tg_dk(3.552713678800501e-15, 0x3cf0000000000000ul); // 2^-48 (tg_sm_exp_neg)
    const tg_f64 tiny = tg_dk(1.499696813895631e-241, 0x0df0000000000000ul);  // 2^-800
    return tg_dadd(tg_dadd(tg_dmul(tg_dmul(tg_dadd(tg_dadd(h, spread), two), U), M), tg_dmul(exp_rel, M)), tiny);
}

// The loops' window in double ulps of the value's binade for a relative bound w.
static inline tg_i64 tg_sm_thr(tg_f64 w) {
    return tg_i64_d(tg_dmul(w, tg_dk(9007199254740992.0, 0x4340000000000000ul))) + 2; // w 2^53
}
