// The softmax kind's fast path (softmax, log_softmax, logsumexp), as every GPU kernel libtgrad
// renders for it computes it. A device prelude: the renderer (libtgrad/src/gen/render_softmax.c)
// copies this text, verbatim, into each softmax kernel (OpenCL C and CUDA; MSL has no double).
//
// The same doubles as the CPU's row loops (kernels/cpu/softmax_rows.h): the exp polynomial, the
// eight lanes (j mod 8) of the scan and of the sum, and the error bounds of libtgrad/src/ops/
// softmax.c. An output is written only where its bound decides its rounding; otherwise the element
// is undecided (bit 32 of the tg_u64 these return) and the kernel flags its row, which the host
// recomputes with the CPU's own exact row code (tg_softmax_rows_on_host). So the bytes are the
// CPU's whatever the device's doubles: every decided element is the correctly rounded value.
//
// The common subset of OpenCL C 1.2 (cl_khr_fp64) and CUDA: double, uint, tg_u64 and tg_i64 (64-bit
// integers the renderer typedefs), and tg_d_bits, tg_d_of, tg_f_bits, tg_f_of (bit casts the
// renderer defines per language), fma, fabs, fmin and log1p on double; no pointers.

// +inf (no language-neutral spelling of the constant in double).
static inline double tg_sm_inf(void) {
    return tg_d_of((tg_u64)0x7ff00000u << 32);
}

// exp(d) for d <= 0 (0 below -708): the Cody-Waite reduction d = k ln2 + r, |r| < 0.3466, e^r by
// its Taylor polynomial of degree 13 (Horner by fma), 2^k through the exponent bits. Relative
// error below TG_SM_EXP_REL = 2^-48 (kernels/cpu/softmax_rows.h has the proof).
static inline double tg_sm_exp_neg(double d) {
    const double L2E = 1.4426950408889634, SHIFT = 6755399441055744.0;
    const double C1 = 0.6931471803691238, C2 = 1.9082149292705877e-10;
    double dd = d < -708.0 ? -708.0 : d;
    double t = dd * L2E + SHIFT;
    double k = t - SHIFT;
    double r = (dd - k * C1) - k * C2;
    double p = 1.0 / 6227020800.0;
    p = fma(p, r, 1.0 / 479001600.0);
    p = fma(p, r, 1.0 / 39916800.0);
    p = fma(p, r, 1.0 / 3628800.0);
    p = fma(p, r, 1.0 / 362880.0);
    p = fma(p, r, 1.0 / 40320.0);
    p = fma(p, r, 1.0 / 5040.0);
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    tg_i64 ki = (tg_i64)(tg_d_bits(t) - tg_d_bits(SHIFT));
    double scale = tg_d_of((tg_u64)(ki + 1023) << 52);
    return d < -708.0 ? 0.0 : p * scale;
}

// v rounded once to float32 (bf16 == 0u) or bfloat16 bits (round to nearest even): float32 by the
// conversion, bfloat16 through it, corrected at a false midpoint (kernels/cpu/softmax_round.h).
static inline uint tg_sm_round(double v, uint bf16) {
    float f = (float)v;
    uint u = tg_f_bits(f);
    if (bf16 == 0u)
        return u;
    uint fix = ((u & 0xffffu) == 0x8000u && (double)f != v) ? 1u : 0u;
    uint up = (((double)f < v) == (v > 0.0)) ? 1u : 0u;
    u += fix * (2u * up - 1u);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// q's rounding straight from its bits when q -+ thr double ulps of its binade hold no rounding
// boundary and q is in the output's normal range (or 0); else bit 32 set (softmax_rows.h, SM_FAST).
static inline tg_u64 tg_sm_fast(double q, tg_i64 thr, uint bf16) {
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
static inline tg_u64 tg_sm_decide(double q, double w, tg_i64 thr, uint bf16) {
    const tg_u64 f = tg_sm_fast(q, thr, bf16);
    if ((f >> 32) == (tg_u64)0)
        return f;
    const double aq = fabs(q);
    const double e = aq <= 1.7976931348623157e308 ? aq * w : 0.0;
    const uint lo = tg_sm_round(q - e, bf16), hi = tg_sm_round(q + e, bf16);
    return lo == hi ? (tg_u64)lo : f;
}

// T's relative bound (T = the sum of exp(x_j - m) over x_j < m, plus the maxima's count less one):
// the sum's roundings (h per term), each difference's rounding through exp, exp's own.
static inline double tg_sm_bound_T(double h, double spread) {
    const double U = 1.1102230246251565e-16; // 2^-53
    return ((h + spread + 2.0) * U) * 1.02 + 3.552713678800501e-15 * 1.02 + 1.499696813895631e-241;
}

// The loops' window in double ulps of the value's binade for a relative bound w.
static inline tg_i64 tg_sm_thr(double w) {
    return (tg_i64)(w * 9007199254740992.0) + 2;
}
